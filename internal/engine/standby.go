package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/processor"
)

// standbyTask is a task the thread follows as a standby replica (Kafka
// Streams' standby task): the changelogs of its logged stores are read
// into local state as they grow, so that when the task comes to this
// instance (its active's instance died or left) its restore reads only
// what the standby lagged. The group's assignor places standbys
// (kclient.Rebalance.Standby), never on the instance of the task's active.
// A warm-up (KIP-441) is a standby of a task the assignor holds for this
// thread: once it is caught up (within Config.AcceptableRecoveryLag), the
// thread asks the group for a rebalance and the task moves here.
type standbyTask struct {
	id processor.TaskID
	// warmup: the task is held for this thread (kclient.Rebalance.Warmup).
	warmup bool
	// askedAt: when the thread last asked for a rebalance because this
	// warm-up was caught up.
	askedAt time.Time
	// started: its changelogs are being read (the restorer's standby
	// targets); else their offsets are still to be read (startStandbys).
	started bool
	// lag: records its changelogs held beyond what it had read at the last
	// look (lookAtStandbys); -1 before the first.
	lag int64
	// caughtUp: a look found it within the acceptable recovery lag (said
	// once, in the log).
	caughtUp bool
}

// setStandbys makes an assignment's standby tasks (ids) with logged
// stores the thread's standbys, those of its warm-ups (the tasks held for
// it) marked as warm-ups: new ones start (startStandbys), ones no longer
// wanted stop, their state kept (it is the instance's, left to the
// cleaner's delay like any task's it no longer owns).
func (m *taskManager) setStandbys(ids, warmups []processor.TaskID) {
	claims := map[processor.TaskID]bool{}
	for _, id := range warmups {
		claims[id] = true
	}
	want := map[processor.TaskID]bool{}
	for _, id := range ids {
		if id.Subtopology < 0 || id.Subtopology >= len(m.cfg.Program.Subtopologies) {
			continue
		}
		logged := false
		loggedStores(m.cfg, id, func(kclient.TP, storage.Spec) { logged = true })
		if logged && m.reg.tasks[id] == nil {
			want[id] = true
		}
	}
	added, gone, warm := m.reg.setStandbys(want, claims)
	for _, id := range gone {
		m.stopFollowing(id)
	}
	m.cfg.StateDirectory.ReleaseTasks(m.idx, names(gone))
	// A standby's state is owned like an active's: the cleaner leaves it.
	m.cfg.StateDirectory.Own(m.idx, names(added))
	if len(added)+len(gone)+len(warm) > 0 {
		all := slices.SortedFunc(maps.Keys(m.reg.standby), compareTaskIDs)
		m.log.Info("standby tasks", zap.Strings("added", names(added)), zap.Strings("removed", names(gone)), zap.Strings("warmups", names(warm)),
			zap.Strings("standbys", names(all)), zap.Int("standby_tasks", len(all)), zap.Int("held_for_this_thread", len(claims)))
	}
}

// dropStandby stops following a standby task: an active task of the
// thread takes it over (its restore reads on from where the standby is).
func (m *taskManager) dropStandby(id processor.TaskID) {
	m.stopFollowing(id)
	m.reg.removeStandby(id)
}

// stopFollowing stops reading a standby task's changelogs; what it read is
// written first.
func (m *taskManager) stopFollowing(id processor.TaskID) {
	if err := m.restore.drop(id); err != nil {
		m.log.Warn("writing a standby task's last records; its next restore reads them again", zap.Stringer("task", id), zap.Error(err))
	}
}

// startStandbys starts reading the changelogs of standby tasks not started
// yet, each store from the offset it holds (changelogStarts: state outside
// its changelog or older than the changelog keeps deletes is wiped first).
// One attempt a second at most; brokers that do not answer are asked again.
func (r *restorer) startStandbys(ctx context.Context, standby map[processor.TaskID]*standbyTask) error {
	var waiting []*standbyTask
	for _, sb := range standby {
		if !sb.started {
			waiting = append(waiting, sb)
		}
	}
	if len(waiting) == 0 || time.Since(r.lastStandbyStart) < time.Second {
		return nil
	}
	r.lastStandbyStart = time.Now()
	wants := map[kclient.TP]storeWant{}
	for _, sb := range waiting {
		loggedStores(r.cfg, sb.id, func(tp kclient.TP, spec storage.Spec) { wants[tp] = storeWant{sb.id, spec} })
	}
	began := r.cfg.WallClock()
	start, end, ok, err := r.changelogOffsets(ctx, slices.Collect(maps.Keys(wants)))
	if err != nil || !ok {
		return err
	}
	starts, err := r.changelogStarts(ctx, wants, start, end, began)
	if err != nil || starts == nil {
		return err
	}
	for tp, st := range starts {
		w := wants[tp]
		b := storeBackend(r.cfg, w.spec.Name)
		from := st.from
		if st.done {
			from = end[tp]
		}
		r.add(tp, &restoreTarget{id: w.id, store: w.spec.Name, spec: w.spec, backend: b, start: start[tp], from: from, last: -1,
			durable: from, writer: storage.NewFollower(b, w.id.String(), w.spec), began: began, deadline: st.deadline})
	}
	for _, sb := range waiting {
		sb.started = true
	}
	return nil
}

// changelogOffsets reads changelog partitions' start and end (last stable)
// offsets, in one attempt of at most a second: ok is false when the
// brokers did not answer (the caller tries again later) or ctx ended.
func (r *restorer) changelogOffsets(ctx context.Context, tps []kclient.TP) (start, end map[kclient.TP]int64, ok bool, err error) {
	adm, err := r.adm.get()
	if err != nil {
		return nil, nil, false, err
	}
	octx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start, end, err = adm.Offsets(octx, tps, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, false, nil // stopping
		}
		if kclient.IsTransient(err) || octx.Err() != nil {
			r.health.down(r.log, "reading changelog offsets", err)
			return nil, nil, false, nil
		}
		return nil, nil, false, fmt.Errorf("reading changelog offsets: %w", err)
	}
	return start, end, true, nil
}

// lookAtStandbys, every few seconds (every second while a warm-up
// reads), reads the ends of the standbys' changelogs: each standby's lag is
// what it has still to read, and a store that has read its changelog to
// the end it had when looked at is in step with it as of then (its synced
// time, storage.SyncedAt). A standby that resumed kept state and reached
// the end only after its deadline (resumeDeadline) is read again in full,
// as a restore would be. A warm-up within the acceptable recovery lag has
// what it read written (so that the instance reports it) and is returned
// in caughtUp: the thread asks the group for a rebalance, which moves the
// task here.
func (r *restorer) lookAtStandbys(ctx context.Context, standby map[processor.TaskID]*standbyTask) (caughtUp []processor.TaskID, err error) {
	every := standbyLookEvery
	for _, sb := range standby {
		if sb.warmup {
			every = warmupLookEvery
			break
		}
	}
	if len(standby) == 0 || time.Since(r.lastStandbyLook) < every {
		return nil, nil
	}
	r.lastStandbyLook = time.Now()
	targets := r.standbyTargets()
	if len(targets) == 0 {
		return nil, nil
	}
	began := r.cfg.WallClock()
	tps := slices.Collect(maps.Keys(targets))
	_, end, ok, err := r.changelogOffsets(ctx, tps)
	if err != nil || !ok {
		return nil, err
	}
	pos, err := r.positions(tps)
	if err != nil {
		return nil, err
	}
	lag := map[processor.TaskID]int64{}
	for tp, t := range targets {
		at, known := pos[tp]
		if !known {
			at = t.from
		}
		lag[t.id] += max(end[tp]-at, 0)
		if at < end[tp] {
			continue
		}
		if t.deadline > 0 && began >= t.deadline {
			if err := r.againInFull(tp, t, began); err != nil {
				return nil, err
			}
			continue
		}
		if err := r.sync(t, began); err != nil {
			return nil, err
		}
	}
	for id, sb := range standby {
		n, ok := lag[id]
		if !ok {
			continue
		}
		sb.lag = n
		if !sb.caughtUp && n <= r.cfg.AcceptableRecoveryLag {
			sb.caughtUp = true
			r.log.Info("standby task caught up", zap.Stringer("task", id), zap.Int64("lag", n), zap.Bool("warmup", sb.warmup))
		}
		if sb.warmup && n <= r.cfg.AcceptableRecoveryLag && time.Since(sb.askedAt) >= warmupAskAgain {
			if err := r.flush(id); err != nil {
				return nil, err
			}
			sb.askedAt = time.Now()
			caughtUp = append(caughtUp, id)
		}
	}
	slices.SortFunc(caughtUp, compareTaskIDs)
	return caughtUp, nil
}

// standbyLookEvery is how often lookAtStandbys reads the changelogs' ends;
// warmupLookEvery how often while a warm-up reads; warmupAskAgain how long
// a thread waits before asking again for a rebalance for a warm-up that
// is still held for it after a rebalance (normally the task moves at
// once).
const (
	standbyLookEvery = 5 * time.Second
	warmupLookEvery  = time.Second
	warmupAskAgain   = 10 * time.Second
)

// startStandbys starts reading the changelogs of standby tasks not
// started yet (restorer.startStandbys).
func (m *taskManager) startStandbys() error { return m.restore.startStandbys(m.ctx, m.reg.standby) }

// lookAtStandbys looks at the standbys' lag (restorer.lookAtStandbys) and
// asks the group for a rebalance for the warm-ups that caught up.
func (m *taskManager) lookAtStandbys() error {
	caughtUp, err := m.restore.lookAtStandbys(m.ctx, m.reg.standby)
	if err != nil || len(caughtUp) == 0 {
		return err
	}
	if r, ok := m.consumer.(kclient.StateReporter); ok {
		m.log.Info("warm-up tasks caught up; asking the group for a rebalance to move them here", zap.Strings("tasks", names(caughtUp)),
			zap.Int64("acceptable_recovery_lag", m.cfg.AcceptableRecoveryLag))
		r.Rejoin()
	}
	return nil
}

// names returns task ids as strings.
func names(ids []processor.TaskID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
