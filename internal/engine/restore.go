package engine

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// ThreadStats are a thread's counters, readable from any goroutine.
type ThreadStats struct {
	Consumed, Produced      atomic.Int64
	Commits, CommitNanos    atomic.Int64
	Aborts, Rebalances      atomic.Int64
	RestoredRecords         atomic.Int64
	RestoreRemaining        atomic.Int64
	RestoringChangelogParts atomic.Int64
}

// restoreTarget is one changelog partition being read into a store: a
// restore, which ends at the changelog's end as it was when the restore
// began, or a standby's, which follows the changelog as it grows.
type restoreTarget struct {
	id processor.TaskID
	// task is the restoring task; nil for a standby.
	task      *task
	store     string
	spec      storage.Spec
	backend   storage.Backend
	start     int64 // the changelog's start offset
	from, end int64
	last      int64 // offset of the last record read, -1 none
	pending   []storage.ChangelogRecord
	restored  int64 // records durable in the store (the writer's)
	durable   int64 // the changelog offset durable in the store
	writer    storage.Restorer
	// began is when the restore read the changelog's end (wall-clock ms):
	// the store's synced time once it is done (storage.SyncedAt).
	began int64
	// deadline: a restore that resumes kept state must read the changelog
	// to its end before then, or it starts again from the changelog's
	// start (resumeDeadline; 0: no limit).
	deadline int64
	// lastApply: when a standby's records were last written to its store.
	lastApply time.Time
}

// standby reports whether the target follows a standby task's changelog.
func (t *restoreTarget) standby() bool { return t.task == nil }

const restoreBatch = 10_000

// startRestore decides, for every logged store of tasks (starting), what
// to read from its changelog: from the offset the store holds to the
// changelog's end (its last stable offset); see changelogStarts. It waits
// for nothing: while a transaction is pending on the changelogs (pendingOn
// names them) or the brokers do not answer, it returns no task and the
// next call tries again. Otherwise it returns the tasks it started (those
// with changelogs to read count them in restoring; their input partitions
// stay paused until done) and the changelogs' ends it read (nil when it
// read none).
func (r *restorer) startRestore(ctx context.Context, tasks []*task) (started []*task, ends map[kclient.TP]int64, pendingOn []kclient.TP, err error) {
	wants := map[kclient.TP]storeWant{}
	for _, tk := range tasks {
		loggedStores(r.cfg, tk.id, func(tp kclient.TP, spec storage.Spec) { wants[tp] = storeWant{tk.id, spec} })
	}
	if len(wants) == 0 {
		return tasks, nil, nil, nil
	}
	began := r.cfg.WallClock()
	start, end, pendingOn, err := r.stableEnds(ctx, slices.Collect(maps.Keys(wants)))
	if err != nil || end == nil {
		return nil, nil, pendingOn, err
	}
	starts, err := r.changelogStarts(ctx, wants, start, end, began)
	if err != nil || starts == nil {
		return nil, end, nil, err
	}
	byID := map[processor.TaskID]*task{}
	for _, tk := range tasks {
		byID[tk.id] = tk
	}
	for tp, st := range starts {
		if st.done {
			continue
		}
		w := wants[tp]
		b := storeBackend(r.cfg, w.spec.Name)
		r.add(tp, &restoreTarget{id: w.id, task: byID[w.id], store: w.spec.Name, spec: w.spec, backend: b, start: start[tp],
			from: st.from, end: end[tp], last: -1, durable: st.from, writer: storage.NewRestorer(b, w.id.String(), w.spec), began: began, deadline: st.deadline})
	}
	return tasks, end, nil, nil
}

// storeWant is a logged store of a task whose changelog is to be read.
type storeWant struct {
	id   processor.TaskID
	spec storage.Spec
}

// loggedStores calls f with the changelog partition and spec of each
// logged store of task id.
func loggedStores(cfg *Config, id processor.TaskID, f func(kclient.TP, storage.Spec)) {
	for _, s := range cfg.Program.Subtopologies[id.Subtopology].Stores {
		if spec := s.Builder.Spec(); spec.Logged {
			f(kclient.TP{Topic: rt.ChangelogTopic(cfg.AppID, spec.Name), Partition: id.Partition}, spec)
		}
	}
}

// storeBackend is the backend holding a store's state.
func storeBackend(cfg *Config, store string) storage.Backend {
	return storage.Pick(cfg.Program.Stores[store].Builder.Spec().InMemory, cfg.Pebble, cfg.Memory)
}

// changelogStart is where the read of a store's changelog starts: from,
// and the deadline by which a read that resumes kept state must reach the
// changelog's end (resumeDeadline; 0: none). done: the store holds the
// changelog to its end, nothing to read.
type changelogStart struct {
	from, deadline int64
	done           bool
}

// changelogStarts decides where each wanted store's changelog read starts,
// given the changelogs' start and end offsets: from the offset the store
// holds; a store whose offset is outside the changelog (the topic was
// truncated or recreated), or whose state is older than its changelog
// keeps deletes (staleness), is wiped and read in full. began is when the
// ends were read, the synced time of a store found up to date. nil, nil:
// the brokers did not say how long the changelogs keep deletes; try again.
func (r *restorer) changelogStarts(ctx context.Context, wants map[kclient.TP]storeWant, start, end map[kclient.TP]int64, began int64) (map[kclient.TP]changelogStart, error) {
	// The changelogs' retention of deletes, for the stores that would
	// resume kept state.
	var resuming []string
	for tp, w := range wants {
		stored, ok, err := storage.StoredOffset(storeBackend(r.cfg, w.spec.Name), w.id.String(), w.spec.Name)
		if err != nil {
			return nil, err
		}
		if ok && stored >= start[tp] && stored < end[tp] && !slices.Contains(resuming, tp.Topic) {
			resuming = append(resuming, tp.Topic)
		}
	}
	var retention map[string]tombstoneRetention
	if len(resuming) > 0 {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		var err error
		retention, err = readRetentions(rctx, r.health, r.log, r.adm.get, r.adm.reset, resuming)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, nil // the brokers do not answer: next time
		}
	}
	out := make(map[kclient.TP]changelogStart, len(wants))
	for tp, w := range wants {
		b := storeBackend(r.cfg, w.spec.Name)
		task := w.id.String()
		stored, ok, err := storage.StoredOffset(b, task, w.spec.Name)
		if err != nil {
			return nil, err
		}
		lo, hi := start[tp], end[tp]
		st := changelogStart{from: stored}
		wipe := ""
		switch {
		case ok && stored == hi:
			// Up to date (a clean shutdown or hand-over), and nothing was
			// written since: nothing can be missing.
			if err := storage.SetSyncedAt(b, task, w.spec.Name, began); err != nil {
				return nil, err
			}
			st.done = true
		case !ok:
		case stored < lo || stored > hi:
			wipe = "its offset is outside its changelog"
			r.log.Warn("store offset outside its changelog; wiping and restoring in full",
				zap.String("task", task), zap.String("store", w.spec.Name), zap.Int64("stored", stored),
				zap.Int64("changelog_start", lo), zap.Int64("changelog_end", hi))
			r.cfg.Resets.add(r.log, ResetChangelog, kclient.OffsetReset{TP: tp, From: stored, To: lo, Earliest: lo})
		default:
			synced, sok, err := storage.SyncedAt(b, task, w.spec.Name)
			if err != nil {
				return nil, err
			}
			keep := retention[tp.Topic]
			if wipe = staleness(began, synced, sok, keep); wipe != "" {
				r.cfg.StateDirectory.Rebuilt.Add(1)
				r.log.Info("wiping a store's local state and restoring it in full: "+wipe,
					zap.String("task", task), zap.String("store", w.spec.Name), zap.Int64("stored", stored),
					zap.Int64("changelog_end", hi), zap.Duration("delete_retention", keep.keep), zap.Bool("delete_retention_assumed", keep.assumed))
			} else {
				st.deadline = resumeDeadline(synced, keep)
			}
		}
		if !ok || wipe != "" {
			if err := restoreFromStart(b, task, w.spec.Name, began); err != nil {
				return nil, err
			}
			st.from = lo
			if hi == lo {
				// An empty changelog: remember where it ends.
				if err := storage.Restore(b, task, w.spec, nil, hi); err != nil {
					return nil, err
				}
				st.done = true
			}
		}
		out[tp] = st
	}
	return out, nil
}

// restoreFromStart empties a store that is about to be restored from its
// changelog's start, with the time that restore began as its synced time:
// whatever part of the changelog it holds was read no earlier, and a
// delete it has not read yet outlives the value it replaced by
// delete.retention.ms (storage.SyncedAt).
func restoreFromStart(b storage.Backend, task, store string, began int64) error {
	if err := storage.DropStore(b, task, store); err != nil {
		return err
	}
	return storage.SetSyncedAt(b, task, store, began)
}

// stableEnds returns the changelogs' start and end offsets once no
// transaction is pending on them: a previous owner's commit markers can
// land on a changelog after its offset commit became visible, and a
// crashed owner's open transaction is aborted only when it times out.
// Until then the last stable offset would stop short of committed state,
// and stableEnds returns no offsets but the partitions with a pending
// transaction. One attempt: a broker that does not answer within a second
// counts as not stable yet (no offsets, no error).
func (r *restorer) stableEnds(ctx context.Context, tps []kclient.TP) (start, end map[kclient.TP]int64, pendingOn []kclient.TP, err error) {
	adm, err := r.adm.get()
	if err != nil {
		return nil, nil, nil, err
	}
	octx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start, end, err = adm.Offsets(octx, tps, true)
	var hwm map[kclient.TP]int64
	if err == nil {
		_, hwm, err = adm.Offsets(octx, tps, false)
	}
	if err != nil {
		if kclient.IsTransient(err) || (octx.Err() != nil && ctx.Err() == nil) {
			r.health.down(r.log, "reading changelog end offsets", err)
			r.adm.failed()
			return nil, nil, nil, nil
		}
		return nil, nil, nil, fmt.Errorf("reading changelog end offsets: %w", err)
	}
	r.adm.ok()
	for _, tp := range tps {
		if end[tp] < hwm[tp] {
			pendingOn = append(pendingOn, tp)
		}
	}
	if len(pendingOn) > 0 {
		return nil, nil, pendingOn, nil
	}
	return start, end, nil, nil
}

// restorer reads changelogs into stores: the restores of a thread's new
// tasks and its standby tasks' changelogs as they grow, as Kafka Streams'
// StoreChangelogReader. It owns its reader client, its targets, and the
// planning of each: where a store's read starts (changelogStarts: kept
// state resumed, or wiped when stale), when a restore may begin
// (stableEnds: no transaction pending on the changelog), when standbys
// start and how far behind they are (standby.go). The thread hands it the
// tasks to restore (startRestore) and the standbys to follow, and resumes
// the tasks whose restores it finished.
type restorer struct {
	cfg    *Config
	log    *zap.Logger
	stats  *ThreadStats
	health *Health
	// adm reads the changelogs' offsets and configs (the thread's).
	adm    *lazyAdmin
	reader kclient.Reader // made when first needed
	// targets: every changelog partition still being read.
	targets map[kclient.TP]*restoreTarget
	// assigned: the reader reads every target from its from (or, with
	// activesOnly, every active task's target: while a task restores, its
	// changelogs are read alone and the standbys' wait, as Kafka Streams'
	// changelog reader pauses them; a warm-up still reading its whole
	// changelog held a moved task's restore of a few hundred records for
	// over 100 ms); an added target or a restart from the start clears it.
	assigned, activesOnly bool
	logTime               time.Time
	// standbys: how many of the targets are standbys'.
	standbys int
	// lastStandbyStart, lastStandbyLook: the last attempt to start
	// standbys, the last look at their changelogs' ends (standby.go).
	lastStandbyStart, lastStandbyLook time.Time
}

func newRestorer(cfg *Config, log *zap.Logger, stats *ThreadStats, health *Health, adm *lazyAdmin) *restorer {
	return &restorer{cfg: cfg, log: log, stats: stats, health: health, adm: adm, targets: map[kclient.TP]*restoreTarget{}}
}

// active reports whether a task is restoring.
func (r *restorer) active() bool { return len(r.targets) > r.standbys }

// busy reports whether any changelog is being read (a standby's too).
func (r *restorer) busy() bool { return len(r.targets) > 0 }

// add starts reading a changelog partition into a store.
func (r *restorer) add(tp kclient.TP, t *restoreTarget) {
	r.targets[tp] = t
	r.assigned = false
	if t.standby() {
		r.standbys++
		t.end, t.lastApply = math.MaxInt64, time.Now()
		r.log.Info("following changelog for a standby task", zap.Stringer("task", t.id), zap.String("store", t.store),
			zap.Int64("from", t.from))
		return
	}
	t.task.restoring++
	r.stats.RestoreRemaining.Add(t.end - t.from)
	r.stats.RestoringChangelogParts.Add(1)
	r.log.Info("restoring store", zap.Stringer("task", t.id), zap.String("store", t.store),
		zap.Int64("from", t.from), zap.Int64("to", t.end), zap.Int64("records", t.end-t.from))
}

// forget stops reading a target's changelog (what it stored stays, to be
// read on from its offset).
func (r *restorer) forget(tp kclient.TP, t *restoreTarget) {
	t.writer.Close()
	if t.standby() {
		r.standbys--
	} else {
		r.stats.RestoringChangelogParts.Add(-1)
		r.stats.RestoreRemaining.Add(-(t.end - t.durable))
	}
	delete(r.targets, tp)
	r.assigned = false
}

// step reads changelog records for up to 200ms, applying them in batches,
// and returns the tasks whose restores are now all done. A changelog
// partition is done when the reader's position reaches its end — by
// offset, since transaction markers and aborted records take offsets but
// are never returned.
func (r *restorer) step() ([]*task, error) {
	if r.reader == nil {
		var c kclient.Reader
		var err error
		if r.cfg.NewReader != nil {
			c, err = r.cfg.NewReader(cloneCfg(r.cfg.Restore))
		} else {
			c, err = r.cfg.NewConsumer(cloneCfg(r.cfg.Restore))
		}
		if err != nil {
			return nil, fmt.Errorf("creating restore consumer: %w", err)
		}
		r.reader = c
	}
	if actives := r.active(); !r.assigned || r.activesOnly != actives {
		offsets := map[kclient.TP]int64{}
		for tp, t := range r.targets {
			if actives && t.standby() {
				continue
			}
			offsets[tp] = t.from
			if len(t.pending) > 0 {
				offsets[tp] = t.last + 1 // read, not yet written
			}
		}
		if err := r.reader.Assign(offsets); err != nil {
			return nil, fmt.Errorf("assigning changelogs to the restore consumer: %w", err)
		}
		r.assigned, r.activesOnly = true, actives
	}
	// Restores read for up to 200ms a turn; standbys alone take what the
	// reader has (their tasks are not waiting: processing comes first).
	read, wait := 200*time.Millisecond, 20*time.Millisecond
	if !r.active() {
		read, wait = 5*time.Millisecond, 0
	}
	deadline := time.Now().Add(read)
	var t *restoreTarget // the last record's, and its partition
	var ttp kclient.TP
	for i := 0; i&255 != 0 || time.Now().Before(deadline); i++ {
		rec, err := r.reader.Poll(0)
		if err == nil && rec == nil && wait > 0 && !r.activesRead() {
			rec, err = r.reader.Poll(wait) // more is on its way
		}
		if err != nil {
			if kclient.IsTransient(err) {
				r.health.down(r.log, "reading changelogs", err)
				break
			}
			return nil, fmt.Errorf("restoring: %w", err)
		}
		if rec == nil {
			break
		}
		if tp := (kclient.TP{Topic: rec.Topic, Partition: rec.Partition}); t == nil || tp != ttp {
			t, ttp = r.targets[tp], tp
		}
		if t == nil || rec.Offset >= t.end {
			continue
		}
		t.pending = append(t.pending, storage.ChangelogRecord{Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp})
		t.last = rec.Offset
		if len(t.pending) >= restoreBatch {
			if err := r.apply(t, t.last+1); err != nil {
				return nil, err
			}
		}
	}
	// A standby's records go to its store at least once a second.
	for _, t := range r.targets {
		if t.standby() && len(t.pending) > 0 && time.Since(t.lastApply) >= time.Second {
			if err := r.apply(t, t.last+1); err != nil {
				return nil, err
			}
		}
	}
	if !r.active() {
		return nil, nil
	}
	tps := make([]kclient.TP, 0, len(r.targets))
	for tp, t := range r.targets {
		if !t.standby() || !r.activesOnly {
			tps = append(tps, tp)
		}
	}
	pos, err := r.reader.Position(tps)
	if err != nil {
		return nil, fmt.Errorf("restore positions: %w", err)
	}
	var done []*task
	for tp, t := range r.targets {
		if t.standby() || pos[tp] < t.end {
			continue
		}
		if now := r.cfg.WallClock(); t.deadline > 0 && now >= t.deadline {
			// Deletes written after the kept state may have been compacted
			// away before this restore read them.
			if err := r.againInFull(tp, t, now); err != nil {
				return nil, err
			}
			continue
		}
		if err := r.finish(t); err != nil {
			return nil, err
		}
		delete(r.targets, tp)
		r.assigned = false
		if t.task.restoring == 0 {
			done = append(done, t.task)
		}
	}
	if time.Since(r.logTime) > 5*time.Second && r.active() {
		r.logTime = time.Now()
		r.log.Info("restoring", zap.Int("changelog_partitions", len(r.targets)-r.standbys),
			zap.Int64("remaining_records", r.stats.RestoreRemaining.Load()))
	}
	if len(r.targets) == 0 {
		r.clear()
	}
	return done, nil
}

// activesRead reports whether the reader has read every active target's
// changelog to its end (the step need not wait for more).
func (r *restorer) activesRead() bool {
	for tp, t := range r.targets {
		if t.standby() {
			continue
		}
		pos, err := r.reader.Position([]kclient.TP{tp})
		if err != nil || pos[tp] < t.end {
			return false
		}
	}
	return true
}

// finish makes a target's store durable at its changelog's end, with the
// synced time of its restore (storage.SyncedAt).
func (r *restorer) finish(t *restoreTarget) error {
	if err := r.apply(t, t.end); err != nil {
		return err
	}
	if err := t.writer.Finish(t.end); err != nil {
		return fmt.Errorf("restoring store %s of task %s: %w", t.store, t.id, err)
	}
	if err := storage.SetSyncedAt(t.backend, t.id.String(), t.store, t.began); err != nil {
		return fmt.Errorf("restoring store %s of task %s: %w", t.store, t.id, err)
	}
	r.count(t)
	t.writer.Close()
	r.stats.RestoringChangelogParts.Add(-1)
	t.task.restoring--
	r.log.Info("store restored", zap.Stringer("task", t.id), zap.String("store", t.store),
		zap.Int64("records", t.restored))
	return nil
}

// againInFull starts the restore of a store that resumed kept state again
// from its changelog's start: it read the changelog's tail too late (past
// the target's deadline). The other targets' pending records are written
// first, since every target is read again from where it stands.
func (r *restorer) againInFull(tp kclient.TP, t *restoreTarget, now int64) error {
	task := t.id.String()
	r.cfg.StateDirectory.Rebuilt.Add(1)
	r.log.Info("restoring a store again in full: reading its changelog took longer than the changelog keeps deletes past the state's last sync",
		zap.String("task", task), zap.String("store", t.store), zap.Duration("late_by", time.Duration(now-t.deadline)*time.Millisecond))
	for otp, o := range r.targets {
		if otp != tp && len(o.pending) > 0 {
			if err := r.apply(o, o.last+1); err != nil {
				return err
			}
		}
	}
	t.writer.Close()
	if err := restoreFromStart(t.backend, task, t.store, now); err != nil {
		return fmt.Errorf("restoring store %s of task %s: %w", t.store, task, err)
	}
	if !t.standby() {
		r.stats.RestoreRemaining.Add(t.durable - t.start) // what it had restored is to read again
	}
	t.from, t.durable, t.last, t.restored = t.start, t.start, -1, 0
	t.pending = t.pending[:0]
	t.began, t.deadline = now, 0
	t.writer = storage.NewRestorer(t.backend, task, t.spec)
	r.assigned = false
	return nil
}

// apply writes a target's pending records, next being the changelog
// offset after them (durable, with next stored, at the latest when the
// target's writer finishes).
func (r *restorer) apply(t *restoreTarget, next int64) error {
	buf, err := t.writer.Write(t.pending, next)
	if err != nil {
		return fmt.Errorf("restoring store %s of task %s: %w", t.store, t.id, err)
	}
	t.from, t.lastApply = next, time.Now()
	if cap(buf) < restoreBatch {
		buf = make([]storage.ChangelogRecord, 0, restoreBatch)
	}
	t.pending = buf[:0]
	r.count(t)
	return nil
}

// count moves the restore metrics by what became durable: a record counts
// as restored once a crash would not make the restore read it again.
func (r *restorer) count(t *restoreTarget) {
	next, n := t.writer.Durable()
	if n > t.restored {
		if !t.standby() {
			r.stats.RestoredRecords.Add(n - t.restored)
		}
		t.restored = n
	}
	if next > t.durable {
		if !t.standby() {
			r.stats.RestoreRemaining.Add(-(next - t.durable))
		}
		t.durable = next
	}
}

// drop stops reading the changelogs of a task that goes away or of a
// standby (what they stored stays, to be read on from its offset): a
// standby's records read and not yet written are written first.
func (r *restorer) drop(id processor.TaskID) error {
	var err error
	for tp, t := range r.targets {
		if t.id != id {
			continue
		}
		if t.standby() && len(t.pending) > 0 && err == nil {
			err = r.apply(t, t.last+1)
		}
		r.forget(tp, t)
	}
	if len(r.targets) == 0 {
		r.clear()
	}
	return err
}

// clear stops every restore and standby (what each stored stays, to be
// read on from its offset) and closes the reader.
func (r *restorer) clear() {
	for tp, t := range r.targets {
		r.forget(tp, t)
	}
	r.standbys = 0
	r.stats.RestoringChangelogParts.Store(0)
	r.stats.RestoreRemaining.Store(0)
	if r.reader != nil {
		r.reader.Close()
		r.reader = nil
	}
	r.assigned = false
}

// flush writes the records read and not yet written of a standby task's
// changelogs (its stores' offsets then say how far it has read).
func (r *restorer) flush(id processor.TaskID) error {
	for _, t := range r.targets {
		if t.id == id && len(t.pending) > 0 {
			if err := r.apply(t, t.last+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// standbyTargets returns the standbys' changelog partitions.
func (r *restorer) standbyTargets() map[kclient.TP]*restoreTarget {
	out := map[kclient.TP]*restoreTarget{}
	for tp, t := range r.targets {
		if t.standby() {
			out[tp] = t
		}
	}
	return out
}

// positions returns the reader's positions in tps (none before it reads
// them, or while it reads the active tasks' changelogs only).
func (r *restorer) positions(tps []kclient.TP) (map[kclient.TP]int64, error) {
	if r.reader == nil || !r.assigned || r.activesOnly {
		return nil, nil
	}
	pos, err := r.reader.Position(tps)
	if err != nil {
		return nil, fmt.Errorf("changelog positions: %w", err)
	}
	return pos, nil
}

// sync records that a standby's store holds its changelog up to an end
// read at wall-clock ms at: its records read so far are written, and at is
// its synced time (storage.SyncedAt); a deadline it had is met.
func (r *restorer) sync(t *restoreTarget, at int64) error {
	if len(t.pending) > 0 {
		if err := r.apply(t, t.last+1); err != nil {
			return err
		}
	}
	t.deadline = 0
	if err := storage.SetSyncedAt(t.backend, t.id.String(), t.store, at); err != nil {
		return fmt.Errorf("standby store %s of task %s: %w", t.store, t.id, err)
	}
	return nil
}
