package engine

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
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

// restoreTarget is one changelog partition being read into a store.
type restoreTarget struct {
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
}

const restoreBatch = 10_000

// startRestore decides, for every logged store of the new tasks, what to
// read from its changelog: from the offset the store holds to the
// changelog's end (its last stable offset). A store whose offset is outside
// the changelog (the topic was truncated or recreated), or whose state is
// older than its changelog keeps deletes (staleness), is wiped and read in
// full. Tasks with something to read keep their input partitions paused
// until done.
func (th *Thread) startRestore(ctx context.Context) error {
	type want struct {
		tk   *task
		spec storage.Spec
	}
	wants := map[kclient.TP]want{}
	var tps []kclient.TP
	for _, tk := range th.order {
		st := th.cfg.Program.Subtopologies[tk.id.Subtopology]
		for _, s := range st.Stores {
			spec := s.Builder.Spec()
			if !spec.Logged {
				continue
			}
			tp := kclient.TP{Topic: rt.ChangelogTopic(th.cfg.AppID, spec.Name), Partition: tk.id.Partition}
			wants[tp] = want{tk, spec}
			tps = append(tps, tp)
		}
	}
	if len(tps) == 0 {
		return nil
	}
	began := th.cfg.WallClock()
	start, end, err := th.stableEnds(ctx, tps)
	if err != nil {
		return err
	}
	th.guarantee.knowEnds(end)
	// The changelogs' retention of deletes, for the stores that would
	// resume kept state.
	var resuming []string
	for tp, w := range wants {
		stored, ok, err := storage.StoredOffset(th.backend(w.spec.Name), w.tk.id.String(), w.spec.Name)
		if err != nil {
			return err
		}
		if ok && stored >= start[tp] && stored < end[tp] && !slices.Contains(resuming, tp.Topic) {
			resuming = append(resuming, tp.Topic)
		}
	}
	var retention map[string]tombstoneRetention
	if len(resuming) > 0 {
		if retention, err = readRetentions(ctx, &th.Health, th.log, th.admin, th.resetAdmin, resuming); err != nil {
			return err
		}
	}
	var paused []kclient.TP
	for tp, w := range wants {
		b := th.backend(w.spec.Name)
		task := w.tk.id.String()
		stored, ok, err := storage.StoredOffset(b, task, w.spec.Name)
		if err != nil {
			return err
		}
		lo, hi := start[tp], end[tp]
		from, deadline := stored, int64(0)
		wipe := ""
		switch {
		case ok && stored == hi:
			// Up to date (a clean shutdown or hand-over), and nothing was
			// written since: nothing can be missing.
			if err := storage.SetSyncedAt(b, task, w.spec.Name, began); err != nil {
				return err
			}
			continue
		case !ok:
		case stored < lo || stored > hi:
			wipe = "its offset is outside its changelog"
			th.log.Warn("store offset outside its changelog; wiping and restoring in full",
				zap.String("task", task), zap.String("store", w.spec.Name), zap.Int64("stored", stored),
				zap.Int64("changelog_start", lo), zap.Int64("changelog_end", hi))
		default:
			synced, sok, err := storage.SyncedAt(b, task, w.spec.Name)
			if err != nil {
				return err
			}
			r := retention[tp.Topic]
			if wipe = staleness(began, synced, sok, r); wipe != "" {
				th.cfg.StateDirectory.Rebuilt.Add(1)
				th.log.Info("wiping a store's local state and restoring it in full: "+wipe,
					zap.String("task", task), zap.String("store", w.spec.Name), zap.Int64("stored", stored),
					zap.Int64("changelog_end", hi), zap.Duration("delete_retention", r.keep), zap.Bool("delete_retention_assumed", r.assumed))
			} else {
				deadline = resumeDeadline(synced, r)
			}
		}
		if !ok || wipe != "" {
			if err := th.restoreFromStart(b, task, w.spec.Name, began); err != nil {
				return err
			}
			from = lo
			if hi == lo {
				// An empty changelog: remember where it ends.
				if err := storage.Restore(b, task, w.spec, nil, hi); err != nil {
					return err
				}
				continue
			}
		}
		th.restoring[tp] = &restoreTarget{task: w.tk, store: w.spec.Name, spec: w.spec, backend: b, start: lo, from: from, end: hi, last: -1,
			durable: from, writer: storage.NewRestorer(b, task, w.spec), began: began, deadline: deadline}
		w.tk.restoring++
		th.Stats.RestoreRemaining.Add(hi - from)
		th.Stats.RestoringChangelogParts.Add(1)
		th.log.Info("restoring store", zap.String("task", task), zap.String("store", w.spec.Name),
			zap.Int64("from", from), zap.Int64("to", hi), zap.Int64("records", hi-from))
	}
	for _, tk := range th.order {
		if tk.restoring > 0 {
			for _, p := range tk.parts {
				paused = append(paused, p.tp)
				p.paused = true
			}
		}
	}
	if len(paused) > 0 {
		if err := th.consumer.Pause(paused); err != nil {
			return err
		}
	}
	th.restoreAssign = false
	return nil
}

// restoreFromStart empties a store that is about to be restored from its
// changelog's start, with the time that restore began as its synced time:
// whatever part of the changelog it holds was read no earlier, and a
// delete it has not read yet outlives the value it replaced by
// delete.retention.ms (storage.SyncedAt).
func (th *Thread) restoreFromStart(b storage.Backend, task, store string, began int64) error {
	if err := storage.DropStore(b, task, store); err != nil {
		return err
	}
	return storage.SetSyncedAt(b, task, store, began)
}

// stableEnds returns the changelogs' start and end offsets once no
// transaction is pending on them: a previous owner's commit markers can
// land on a changelog after its offset commit became visible, and a
// crashed owner's open transaction is aborted only when it times out. Until
// then the last stable offset would stop short of committed state.
func (th *Thread) stableEnds(ctx context.Context, tps []kclient.TP) (start, end map[kclient.TP]int64, err error) {
	began, lastLog := time.Now(), time.Now()
	for {
		var hwm map[kclient.TP]int64
		err = retry(ctx, &th.Health, th.log, "reading changelog end offsets", func() error {
			adm, err := th.admin()
			if err != nil {
				return err
			}
			// Short attempts: a call stuck on a dead leader's metadata
			// ends soon, and a client that keeps failing is replaced.
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start, end, err = adm.Offsets(octx, tps, true)
			if err == nil {
				_, hwm, err = adm.Offsets(octx, tps, false)
			}
			return err
		}, th.resetAdmin)
		if err != nil {
			return nil, nil, fmt.Errorf("reading changelog end offsets: %w", err)
		}
		pending := 0
		for _, tp := range tps {
			if end[tp] < hwm[tp] {
				pending++
			}
		}
		if pending == 0 {
			return start, end, nil
		}
		switch waited := time.Since(began); {
		case waited > 2*time.Minute && time.Since(lastLog) > 30*time.Second:
			// No transaction may last that long (transaction.max.timeout.ms
			// is 15 minutes, eddy's own transactions time out after 10 s):
			// say what the operator can look at.
			lastLog = time.Now()
			th.log.Warn("a transaction on changelogs stays open far longer than transactions last; the brokers may hold a hanging transaction (see kafka-transactions.sh find-hanging); waiting",
				zap.Int("partitions", pending), zap.Duration("for", waited.Round(time.Second)))
		case waited <= 2*time.Minute && time.Since(lastLog) > 2*time.Second:
			lastLog = time.Now()
			th.log.Info("waiting for transactions on changelogs to complete", zap.Int("partitions", pending))
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("reading changelog end offsets: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// restoreStep reads changelog records for up to 200ms, applying them in
// batches; a changelog partition is done when the reader's position reaches
// its end — by offset, since transaction markers and aborted records take
// offsets but are never returned.
func (th *Thread) restoreStep() error {
	if th.restorer == nil {
		c, err := th.newReader(cloneCfg(th.cfg.Restore))
		if err != nil {
			return fmt.Errorf("creating restore consumer: %w", err)
		}
		th.restorer = c
	}
	if !th.restoreAssign {
		offsets := map[kclient.TP]int64{}
		for tp, t := range th.restoring {
			offsets[tp] = t.from
		}
		if err := th.restorer.Assign(offsets); err != nil {
			return fmt.Errorf("assigning changelogs to the restore consumer: %w", err)
		}
		th.restoreAssign = true
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	var t *restoreTarget // the last record's, and its partition
	var ttp kclient.TP
	for i := 0; i&255 != 0 || time.Now().Before(deadline); i++ {
		r, err := th.restorer.Poll(20 * time.Millisecond)
		if err != nil {
			if kclient.IsTransient(err) {
				th.Health.down(th.log, "reading changelogs", err)
				break
			}
			return fmt.Errorf("restoring: %w", err)
		}
		if r == nil {
			break
		}
		if tp := (kclient.TP{Topic: r.Topic, Partition: r.Partition}); t == nil || tp != ttp {
			t, ttp = th.restoring[tp], tp
		}
		if t == nil || r.Offset >= t.end {
			continue
		}
		t.pending = append(t.pending, storage.ChangelogRecord{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
		t.last = r.Offset
		if len(t.pending) >= restoreBatch {
			if err := th.applyRestore(t, t.last+1); err != nil {
				return err
			}
		}
	}
	tps := make([]kclient.TP, 0, len(th.restoring))
	for tp := range th.restoring {
		tps = append(tps, tp)
	}
	pos, err := th.restorer.Position(tps)
	if err != nil {
		return fmt.Errorf("restore positions: %w", err)
	}
	var resume []kclient.TP
	for tp, t := range th.restoring {
		if pos[tp] < t.end {
			continue
		}
		if now := th.cfg.WallClock(); t.deadline > 0 && now >= t.deadline {
			// Deletes written after the kept state may have been compacted
			// away before this restore read them.
			if err := th.restoreAgainInFull(tp, t, now); err != nil {
				return err
			}
			continue
		}
		if err := th.applyRestore(t, t.end); err != nil {
			return err
		}
		if err := t.writer.Finish(t.end); err != nil {
			return fmt.Errorf("restoring store %s of task %s: %w", t.store, t.task.id, err)
		}
		if err := storage.SetSyncedAt(t.backend, t.task.id.String(), t.store, t.began); err != nil {
			return fmt.Errorf("restoring store %s of task %s: %w", t.store, t.task.id, err)
		}
		th.countRestored(t)
		t.writer.Close()
		delete(th.restoring, tp)
		th.Stats.RestoringChangelogParts.Add(-1)
		t.task.restoring--
		th.log.Info("store restored", zap.String("task", t.task.id.String()), zap.String("store", t.store),
			zap.Int64("records", t.restored))
		if t.task.restoring == 0 {
			for _, p := range t.task.parts {
				resume = append(resume, p.tp)
				p.paused = false
			}
		}
	}
	if time.Since(th.restoreLogTime) > 5*time.Second && len(th.restoring) > 0 {
		th.restoreLogTime = time.Now()
		th.log.Info("restoring", zap.Int("changelog_partitions", len(th.restoring)),
			zap.Int64("remaining_records", th.Stats.RestoreRemaining.Load()))
	}
	if len(resume) > 0 {
		if err := th.consumer.Resume(resume); err != nil {
			return err
		}
		// librdkafka drops what it prefetched for a partition paused
		// before the application consumed from it, and resumes after
		// that: start again from the committed offset explicitly.
		for _, tp := range resume {
			p := th.parts[tp]
			off, ok := th.committed[tp]
			if !ok || off < 0 {
				off = -2 // nothing committed: the beginning
			}
			if err := th.consumer.Seek(tp, off); err != nil {
				return fmt.Errorf("positioning %s at %d after restore: %w", tp, off, err)
			}
			clear(p.buf)
			p.buf, p.head, p.next = p.buf[:0], 0, -1
		}
	}
	if len(th.restoring) == 0 {
		th.clearRestore()
		th.snapshot(true)
		th.setState(ThreadRunning)
	}
	return nil
}

// restoreAgainInFull starts the restore of a store that resumed kept state
// again from its changelog's start: it read the changelog's tail too late
// (past the target's deadline). The other targets' pending records are
// written first, since every target is read again from where it stands.
func (th *Thread) restoreAgainInFull(tp kclient.TP, t *restoreTarget, now int64) error {
	task := t.task.id.String()
	th.cfg.StateDirectory.Rebuilt.Add(1)
	th.log.Info("restoring a store again in full: reading its changelog took longer than the changelog keeps deletes past the state's last sync",
		zap.String("task", task), zap.String("store", t.store), zap.Duration("late_by", time.Duration(now-t.deadline)*time.Millisecond))
	for otp, o := range th.restoring {
		if otp != tp && len(o.pending) > 0 {
			if err := th.applyRestore(o, o.last+1); err != nil {
				return err
			}
		}
	}
	t.writer.Close()
	if err := th.restoreFromStart(t.backend, task, t.store, now); err != nil {
		return fmt.Errorf("restoring store %s of task %s: %w", t.store, task, err)
	}
	th.Stats.RestoreRemaining.Add(t.durable - t.start) // what it had restored is to read again
	t.from, t.durable, t.last, t.restored = t.start, t.start, -1, 0
	t.pending = t.pending[:0]
	t.began, t.deadline = now, 0
	t.writer = storage.NewRestorer(t.backend, task, t.spec)
	th.restoreAssign = false
	return nil
}

// newReader makes a changelog reader: cfg.NewReader's, else a consumer.
func (th *Thread) newReader(c kclient.Config) (kclient.Reader, error) {
	if th.cfg.NewReader != nil {
		return th.cfg.NewReader(c)
	}
	return th.cfg.NewConsumer(c)
}

// applyRestore writes a target's pending records, next being the changelog
// offset after them (durable, with next stored, at the latest when the
// target's writer finishes).
func (th *Thread) applyRestore(t *restoreTarget, next int64) error {
	buf, err := t.writer.Write(t.pending, next)
	if err != nil {
		return fmt.Errorf("restoring store %s of task %s: %w", t.store, t.task.id, err)
	}
	t.from = next
	if cap(buf) < restoreBatch {
		buf = make([]storage.ChangelogRecord, 0, restoreBatch)
	}
	t.pending = buf[:0]
	th.countRestored(t)
	return nil
}

// countRestored moves the restore metrics by what became durable: a record
// counts as restored once a crash would not make the restore read it again.
func (th *Thread) countRestored(t *restoreTarget) {
	next, n := t.writer.Durable()
	if n > t.restored {
		th.Stats.RestoredRecords.Add(n - t.restored)
		t.restored = n
	}
	if next > t.durable {
		th.Stats.RestoreRemaining.Add(-(next - t.durable))
		t.durable = next
	}
}

func (th *Thread) clearRestore() {
	for _, t := range th.restoring {
		t.writer.Close()
		th.Stats.RestoringChangelogParts.Add(-1)
	}
	th.restoring = map[kclient.TP]*restoreTarget{}
	th.Stats.RestoreRemaining.Store(0)
	if th.restorer != nil {
		th.restorer.Close()
		th.restorer = nil
	}
	th.restoreAssign = false
}
