package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A Restorer writes one store's changelog of one task into its backend, a
// batch of records at a time, each batch followed by the changelog offset
// after it. What Write was given becomes durable, with its offset stored,
// at the latest at Finish (Durable says how far it is); a restore that stops
// before (Close) keeps the stored offset of what did, and reading the
// changelog again from it restores the rest.
type Restorer interface {
	// Write adds recs, next being the changelog offset after them. recs
	// are the restorer's from then on: it may still be writing them when
	// it returns. It returns an empty slice (possibly with room, possibly
	// nil) for the caller to fill with the next batch. An error may be
	// that of an earlier Write.
	Write(recs []ChangelogRecord, next int64) ([]ChangelogRecord, error)
	// Finish makes everything written durable and stores next, the
	// changelog offset the store is now restored to.
	Finish(next int64) error
	// Durable returns the changelog offset stored so far (-1 none yet) and
	// how many of the records written are durable with it.
	Durable() (next, records int64)
	// Close discards what Finish did not make durable.
	Close()
}

// durable is what a Restorer made durable (Durable).
type durable struct{ next, records int64 }

func (d *durable) Durable() (next, records int64) { return d.next, d.records }

// NewRestorer returns the Restorer of one store of one task. On Pebble, a
// store without a time to live restores runs of records in key order
// (a changelog written in key order, as a bulk load writes it) straight
// into tables it ingests: no write-ahead log, no memtable, no flush, and
// tables that overlap nothing go to the bottom level with no compaction.
// Anything else is written as Restore writes it, one atomic batch per Write.
func NewRestorer(b Backend, task string, spec Spec) Restorer {
	if p, ok := b.(*Pebble); ok && spec.TTL <= 0 {
		return &tableRestorer{p: p, prefix: DataPrefix(task, spec.Name), offKey: offsetKey(task, spec.Name),
			timestamped: spec.Timestamped, durable: durable{next: -1}}
	}
	return &batchRestorer{b: b, task: task, spec: spec, durable: durable{next: -1}}
}

// NewFollower returns the Restorer of a standby's store: one that follows
// its changelog as it grows, a few records at a time in no key order, each
// Write durable at once (as Restore writes it).
func NewFollower(b Backend, task string, spec Spec) Restorer {
	return &batchRestorer{b: b, task: task, spec: spec, durable: durable{next: -1}}
}

// batchRestorer is Restore, one batch per Write: durable at once.
type batchRestorer struct {
	b    Backend
	task string
	spec Spec
	durable
}

func (r *batchRestorer) Write(recs []ChangelogRecord, next int64) ([]ChangelogRecord, error) {
	if err := Restore(r.b, r.task, r.spec, recs, next); err != nil {
		return recs[:0], err
	}
	r.next, r.records = next, r.records+int64(len(recs))
	return recs[:0], nil
}

func (r *batchRestorer) Finish(next int64) error {
	_, err := r.Write(nil, next)
	return err
}

func (*batchRestorer) Close() {}

// restoreTableBytes is the size at which a table being restored into is
// ingested: large enough that a 10M-key restore ingests a few dozen tables,
// small enough that an interrupted restore reads little again and that
// progress (Durable, the restore metrics) moves often.
const restoreTableBytes = 8 << 20

// restoreTablePrefix names the files of tables not yet ingested, in the
// database's directory; OpenPebble removes any a crash left behind.
const restoreTablePrefix = "eddy-restore-"

// restoreQueue is how many batches of one store wait for its writer while
// it writes another: the restore reads on meanwhile, and a store's writer
// works while the others' wait (measured, 10M-record cold restore over 4
// tasks: with one batch in hand the thread spent 60% of its time waiting
// for the writer of the partition it had just read).
const restoreQueue = 4

// tableRestorer writes records into an sstable while they come in strictly
// increasing key order, and ingests it when it is large, when a batch out of
// order comes, and at Finish; then it stores the offset after the table's
// last record. Once one batch came out of order, every later batch goes
// through the memtable (mixing both would have each ingest overlap the
// memtable and force a flush). The writing is a goroutine's of its own,
// fed up to restoreQueue batches ahead.
//
// The offset is stored after the ingest, not with it: a crash in between
// leaves the table's records in the store and the offset before them, and
// restoring again from that offset writes the same records over them, in
// changelog order, ending in the same state (a store without a time to live
// holds nothing but the last value per key).
type tableRestorer struct {
	p           *Pebble
	prefix      []byte
	offKey      []byte
	timestamped bool

	// The writer's: its goroutine's while it runs, the caller's once it
	// ended (stop).
	w         *sstable.Writer
	path      string
	last      []byte // the last user key added to w
	tableNext int64  // the changelog offset after w's last record
	inTable   int64  // records added to w
	key       []byte // scratch: prefix + user key
	val       []byte // scratch: timestamped value
	batched   bool   // a batch came out of order: the memtable from now on
	durable          // what the writer made durable

	// The caller's: the writer's queue (nil before the first Write), the
	// batches it is done with, its end, and whether it was stopped.
	jobs    chan restoreJob
	free    chan []ChangelogRecord
	exited  chan struct{}
	stopped bool

	mu   sync.Mutex // guards seen and err, set by the writer
	seen durable    // durable as of the last batch written
	err  error      // the writer's first error
}

// restoreJob is a batch for the writer, or (fn set, by the tests' do)
// something to run on its goroutine, whose result goes to done.
type restoreJob struct {
	recs []ChangelogRecord
	next int64
	fn   func() error
	done chan error
}

// inOrder reports whether recs' keys increase strictly, from after last
// (nil: no bound).
func inOrder(last []byte, recs []ChangelogRecord) bool {
	for _, r := range recs {
		if last != nil && bytes.Compare(r.Key, last) <= 0 {
			return false
		}
		last = r.Key
	}
	return true
}

// Write queues recs for the writer, which writes them while the caller
// reads the next batches: a record's cost is then the larger of the two,
// not their sum.
func (r *tableRestorer) Write(recs []ChangelogRecord, next int64) ([]ChangelogRecord, error) {
	if err := r.failed(); err != nil {
		return nil, err
	}
	if r.stopped {
		return nil, errors.New("stores: restore written to after it finished")
	}
	if len(recs) == 0 {
		return recs, nil
	}
	if r.jobs == nil {
		r.jobs, r.free, r.exited = make(chan restoreJob, restoreQueue), make(chan []ChangelogRecord, restoreQueue+1), make(chan struct{})
		go r.run()
	}
	r.jobs <- restoreJob{recs: recs, next: next}
	select {
	case b := <-r.free:
		return b, nil
	default:
		return nil, nil
	}
}

// run is the writer's goroutine: it writes the batches queued, until the
// first error, and hands each batch back.
func (r *tableRestorer) run() {
	defer close(r.exited)
	for j := range r.jobs {
		if j.fn != nil {
			err := j.fn()
			r.publish(nil)
			j.done <- err
			continue
		}
		if r.failed() == nil {
			r.publish(r.write(j.recs, j.next))
		}
		select {
		case r.free <- j.recs[:0]:
		default:
		}
	}
}

// stop waits until the writer wrote every batch queued, and ends it.
func (r *tableRestorer) stop() error {
	if !r.stopped {
		r.stopped = true
		if r.jobs != nil {
			close(r.jobs)
			<-r.exited
		}
	}
	return r.failed()
}

// publish makes what the writer made durable, and its error if any, the
// caller's to see.
func (r *tableRestorer) publish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && r.err == nil {
		r.err = err
	}
	r.seen = r.durable
}

func (r *tableRestorer) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Durable implements Restorer: as of the last batch written.
func (r *tableRestorer) Durable() (next, records int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen.Durable()
}

func (r *tableRestorer) write(recs []ChangelogRecord, next int64) error {
	if !r.batched && !inOrder(r.last, recs) {
		// A new table would do if this batch alone is in order, but the
		// next one would most likely not be: a changelog in update order.
		if err := r.ingest(); err != nil {
			return err
		}
		r.batched = true
	}
	if r.batched {
		if err := r.p.writeChangelog(r.prefix, r.timestamped, recs, r.offKey, encodeOffset(next)); err != nil {
			return err
		}
		r.durable.next, r.records = next, r.records+int64(len(recs))
		return nil
	}
	if r.w == nil {
		if err := r.create(); err != nil {
			return err
		}
	}
	for _, rec := range recs {
		r.key = append(append(r.key[:0], r.prefix...), rec.Key...)
		var err error
		switch {
		case rec.Value == nil:
			err = r.w.Delete(r.key)
		case r.timestamped:
			r.val = AppendTimestamped(r.val[:0], rec.Timestamp, rec.Value)
			err = r.w.Set(r.key, r.val)
		default:
			err = r.w.Set(r.key, rec.Value)
		}
		if err != nil {
			return fmt.Errorf("stores: writing restored records to %s: %w", r.path, err)
		}
	}
	r.last = append(r.last[:0], recs[len(recs)-1].Key...)
	r.tableNext = next
	r.inTable += int64(len(recs))
	if r.w.Raw().EstimatedSize() >= restoreTableBytes {
		return r.ingest()
	}
	return nil
}

func (r *tableRestorer) create() error {
	r.path = r.p.fs.PathJoin(r.p.dir, fmt.Sprintf("%s%d.sst", restoreTablePrefix, r.p.tables.Add(1)))
	f, err := r.p.fs.Create(r.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("stores: creating a table to restore into: %w", err)
	}
	r.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), r.p.tableOpts)
	return nil
}

// ingest adds the table being written, if any, to the database and stores
// the offset after its last record.
func (r *tableRestorer) ingest() error {
	if r.w == nil {
		return nil
	}
	w, path := r.w, r.path
	r.w = nil
	if err := w.Close(); err != nil {
		r.p.fs.Remove(path)
		return fmt.Errorf("stores: finishing restored table %s: %w", path, err)
	}
	if err := r.p.db.Ingest(context.Background(), []string{path}); err != nil {
		r.p.fs.Remove(path)
		return fmt.Errorf("stores: ingesting restored table %s: %w", path, err)
	}
	r.p.gen.Add(1)
	r.records += r.inTable
	r.inTable = 0
	return r.storeOffset(r.tableNext)
}

func (r *tableRestorer) storeOffset(next int64) error {
	if err := r.p.db.Set(r.offKey, encodeOffset(next), pebble.Sync); err != nil {
		return err
	}
	r.p.gen.Add(1)
	r.durable.next = next
	return nil
}

func (r *tableRestorer) Finish(next int64) error {
	if err := r.stop(); err != nil {
		return err
	}
	r.tableNext = next
	var err error
	if r.w != nil {
		err = r.ingest()
	} else {
		err = r.storeOffset(next)
	}
	r.publish(err)
	return err
}

func (r *tableRestorer) Close() {
	r.stop()
	if r.w != nil {
		r.w.Close()
		r.p.fs.Remove(r.path)
		r.w, r.inTable = nil, 0
	}
}

// removeRestoreTables removes from dir the tables a restore was writing when
// the process ended.
func removeRestoreTables(fsys vfs.FS, dir string) error {
	names, err := fsys.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		if strings.HasPrefix(n, restoreTablePrefix) {
			if err := fsys.Remove(fsys.PathJoin(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}
