package engine

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/processor"
)

// storeWrites is what a thread's tasks wrote to their stores since the
// last commit, until a commit applies it: the write set of each backend
// (Pebble's applied in the background), the changelog partitions written
// (their end offsets are stored with the writes) and when a commit last
// wrote the stores' synced times. A session makes its own
// (newStoreWrites); only its methods change it.
type storeWrites struct {
	cfg            *Config
	pebble, memory *storage.WriteSet
	// written: changelogs written since the last commit.
	written map[kclient.TP]*changelogRef
	// syncedAt: when the last commit wrote the stores' synced times
	// (wall-clock ms; markSynced).
	syncedAt int64
}

// changelogRef names the store a changelog partition belongs to, and
// counts the records sent to it since the last commit.
type changelogRef struct {
	task  processor.TaskID
	store string
	n     int64
}

func newStoreWrites(cfg *Config) *storeWrites {
	w := &storeWrites{cfg: cfg, pebble: storage.NewWriteSet(cfg.Pebble), memory: storage.NewWriteSet(cfg.Memory),
		written: map[kclient.TP]*changelogRef{}}
	w.pebble.ApplyInBackground()
	return w
}

// of returns the write set of a store's backend.
func (w *storeWrites) of(store string) *storage.WriteSet {
	return storage.Pick(w.cfg.Program.Stores[store].Builder.Spec().InMemory, w.pebble, w.memory)
}

// backend returns the write set of the Pebble or the in-memory backend.
func (w *storeWrites) backend(inMemory bool) *storage.WriteSet {
	if inMemory {
		return w.memory
	}
	return w.pebble
}

// sent counts a record sent to a changelog (rec.Store set) by task t.
func (w *storeWrites) sent(t processor.TaskID, rec *rt.OutRecord) {
	tp := kclient.TP{Topic: rec.Topic, Partition: rec.Partition}
	ref := w.written[tp]
	if ref == nil {
		ref = &changelogRef{task: t, store: rec.Store}
		w.written[tp] = ref
	}
	ref.n++
}

// syncedEvery is how often a thread's commits write its stores' synced
// times: more often only makes a crashed instance's state a little younger.
const syncedEvery = time.Second

// markSynced records, with the next apply, that the logged stores of the
// running tasks are in step with their changelogs as of at, the time the
// commit began (storage.SyncedAt): every record written to a changelog
// before then is in its store or after its stored offset. It does so once
// per syncedEvery, or when final (the thread is about to let its tasks
// go), and reports whether it did.
func (w *storeWrites) markSynced(running []processor.TaskID, at int64, final bool) bool {
	if !final && at-w.syncedAt < syncedEvery.Milliseconds() {
		return false
	}
	for _, id := range running {
		for _, s := range w.cfg.Program.Subtopologies[id.Subtopology].Stores {
			if spec := s.Builder.Spec(); spec.Logged {
				w.of(spec.Name).SetSynced(id.String(), spec.Name, at)
			}
		}
	}
	w.syncedAt = at
	return true
}

// storeEnds records, with the next apply, where each written changelog
// partition ends now that its records are committed. Only this task writes
// its changelog partition, so everything below the end is this store's
// history (or aborted records and transaction markers, which restore skips
// anyway). A partition whose end is not known keeps its older stored
// offset: a restore then replays a few records the store already has,
// which changes nothing.
func (w *storeWrites) storeEnds(ends map[kclient.TP]int64, log *zap.Logger) {
	for tp, ref := range w.written {
		if end, ok := ends[tp]; ok {
			w.of(ref.store).SetOffset(ref.task.String(), ref.store, end)
		} else {
			log.Debug("changelog end unknown after commit; the stored offset stays behind", zap.Stringer("partition", tp))
		}
	}
	clear(w.written)
}

// apply applies the write sets: what the commit's tasks wrote, with their
// changelog offsets and synced times.
func (w *storeWrites) apply() error {
	if err := w.memory.Commit(); err != nil {
		return fmt.Errorf("committing in-memory stores: %w", err)
	}
	if err := w.pebble.Commit(); err != nil {
		return fmt.Errorf("committing stores: %w", err)
	}
	return nil
}

// discard drops what was written since the last commit.
func (w *storeWrites) discard() {
	w.pebble.Discard()
	w.memory.Discard()
	clear(w.written)
}

// wait waits until the last commit's writes are in the stores
// (WriteSet.ApplyInBackground): the tasks' stores may be restored or
// written by their next owner, on this thread or another. A failed apply
// only leaves a store behind its changelog, which its next restore reads.
func (w *storeWrites) wait(log *zap.Logger) {
	if err := w.pebble.Wait(); err != nil {
		log.Warn("applying the last commit's writes to the stores failed; they are restored from the changelogs", zap.Error(err))
	}
}

// releaseReads lets go of what the stores' reads hold in the backends.
func (w *storeWrites) releaseReads() {
	w.pebble.ReleaseReads()
	w.memory.ReleaseReads()
}
