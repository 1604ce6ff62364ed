package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/processor"
)

// taskManager owns a stream thread's tasks through their lifecycle, as
// Kafka Streams' TaskManager does: assignment (new tasks paused), start
// (committed offsets, then changelog ends), the hand-off to the restorer
// and back, running, revocation (cooperative: the moving tasks only),
// loss, rewind to the last commit, standby and warm-up tasks, and one
// close path, clean or dirty. The registry of tasks (taskRegistry) and the
// restorer are its own; it asks the thread (taskHost) to commit or drop
// what was processed since the last commit, and tells it its state.
type taskManager struct {
	idx  int
	cfg  *Config
	log  *zap.Logger
	host taskHost
	// ctx is the thread's: a stop cuts the manager's waits short.
	ctx   context.Context
	reg   taskRegistry
	stats *ThreadStats
	// health: whether the brokers answer (the thread's).
	health *Health
	adm    *lazyAdmin
	async  *asyncWaits
	// restore reads the changelogs of new tasks and standbys into their
	// stores (a session's own, newRestorer).
	restore *restorer
	// departed ends the transactions departed instances left open on the
	// changelogs of tasks the thread takes over.
	departed *departed
	// The session's clients and state writes (use).
	consumer  kclient.Consumer
	guarantee guarantee
	stores    *storeWrites
	cache     *storage.Cache
	// lastStart: the last attempt to start tasks not running yet;
	// lastWaitLog: when it last said what they wait for.
	lastStart, lastWaitLog time.Time
}

// taskHost is what the task manager needs of its stream thread.
type taskHost interface {
	// rt.Collector takes what the tasks write.
	rt.Collector
	// commit commits everything processed (final: the tasks are about to
	// go).
	commit(final bool) error
	// dropUncommitted forgets what was processed since the last commit
	// (the transaction aborted, the write sets and the tasks' caches
	// dropped); an error means the producer could not abort.
	dropUncommitted(ctx context.Context) error
	setState(ThreadState)
	// snapshot refreshes what /state and queries see (force: now).
	snapshot(force bool)
	// retireTask keeps a closing task's counts.
	retireTask(t *rt.Task)
}

func newTaskManager(idx int, cfg *Config, log *zap.Logger, host taskHost, stats *ThreadStats, health *Health, adm *lazyAdmin, async *asyncWaits) *taskManager {
	return &taskManager{idx: idx, cfg: cfg, log: log, host: host, stats: stats, health: health, adm: adm, async: async,
		departed: &departed{cfg: cfg, log: log}}
}

// reset forgets everything of the previous session (its tasks already
// closed) and starts a new one with its clients and state writes.
func (m *taskManager) reset(consumer kclient.Consumer, g guarantee, stores *storeWrites, cache *storage.Cache) {
	m.reg.clear()
	m.restore = newRestorer(m.cfg, m.log, m.stats, m.health, m.adm)
	m.consumer, m.guarantee, m.stores, m.cache = consumer, g, stores, cache
}

// endSession stops what the session's tasks had under way: restores (what
// they stored stays) and the search for departed transactions.
func (m *taskManager) endSession() {
	m.restore.clear()
	m.departed.stop()
}

// restoring reports whether a task restores.
func (m *taskManager) restoring() bool { return m.restore.active() }

// newRTTask makes the runtime task of id.
func (m *taskManager) newRTTask(id processor.TaskID) (*rt.Task, error) {
	return rt.NewTask(rt.TaskConfig{
		ID:           id,
		AppID:        m.cfg.AppID,
		Program:      m.cfg.Program,
		Subtopology:  m.cfg.Program.Subtopologies[id.Subtopology],
		WriteSet:     m.stores.backend,
		Cache:        m.cache,
		Collector:    m.host,
		WallClock:    m.cfg.WallClock,
		Handlers:     m.cfg.Handlers,
		Log:          m.log.With(zap.Stringer("task", id)),
		EmitInterval: 1000,
		Async:        m.async.env,
		Globals:      rt.GlobalViews(m.cfg.Program, m.cfg.Pebble, m.cfg.Memory),
	})
}

// assign adds the tasks of newly assigned partitions, paused: they start
// (startTasks) once their committed offsets and changelog ends can be
// read, without holding back the thread's other tasks. standby and warmup
// are the assignment's standby tasks and the warm-ups among them.
func (m *taskManager) assign(tps []kclient.TP, standby, warmup []processor.TaskID) error {
	var added []*task
	for _, tp := range tps {
		for _, id := range tasksOf(m.cfg, tp) {
			tk := m.reg.tasks[id]
			if tk == nil {
				if m.reg.standby[id] != nil {
					// A standby of the thread's becomes active: its
					// restore reads on from where the standby is.
					m.dropStandby(id)
				}
				t, err := m.newRTTask(id)
				if err != nil {
					return err
				}
				tk = m.reg.addTask(id, t)
				added = append(added, tk)
			} else if tk.state == taskRunning {
				// A running task gets a partition more: it starts again.
				m.reg.restart(tk)
				added = append(added, tk)
			}
			var consumed prometheus.Counter
			if mt := m.cfg.Metrics; mt != nil {
				consumed = mt.Consumed.WithLabelValues(tp.Topic)
			}
			m.reg.addPartition(tk, tp, consumed)
		}
	}
	ids := make([]string, len(added))
	for i, tk := range added {
		ids[i] = tk.id.String()
	}
	if paused := m.reg.pause(added); len(paused) > 0 {
		if err := m.consumer.Pause(paused); err != nil {
			return err
		}
	}
	// From here on the instance's cleaner leaves the tasks' state alone.
	m.cfg.StateDirectory.Own(m.idx, ids)
	m.log.Info("partitions assigned", zap.Int("partitions", len(tps)), zap.Strings("tasks", ids))
	m.setStandbys(standby, warmup)
	m.host.snapshot(true) // interactive queries see the new assignment at once
	err := m.startTasks(true)
	m.reg.assignedOnce = true
	return err
}

// revoke gives up partitions: it commits everything first (unless they
// were lost), then closes the tasks that have none of their partitions
// left. When every partition goes, or they were lost, every task is closed
// (lost: without committing) and all reports so. An error is one that
// must end the thread's group session.
func (m *taskManager) revoke(tps []kclient.TP, lost bool) (all bool, err error) {
	all = true
	for tp := range m.reg.parts {
		if !slices.Contains(tps, tp) {
			all = false
		}
	}
	m.host.setState(ThreadRebalancing)
	if !lost {
		if cerr := m.host.commit(true); cerr != nil {
			if errors.Is(cerr, errRejoin) {
				err = cerr
			}
			m.log.Warn("commit on revocation failed; closing tasks without committing", zap.Error(cerr))
			if !all && err == nil {
				// The tasks it keeps go back to the last commit.
				err = m.rewind(cerr)
			} else {
				lost = true
			}
		}
	}
	if lost || all {
		if lost {
			m.log.Warn("partitions lost; dropping uncommitted work")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if derr := m.host.dropUncommitted(ctx); derr != nil && err == nil {
				// The transaction could not be aborted: start over with a
				// new producer (its InitTransactions aborts it).
				err = fmt.Errorf("%w: aborting the transaction of lost partitions: %v", errRejoin, derr)
			}
			cancel()
		}
		m.closeAll(!lost)
		m.forget()
		m.log.Info("partitions revoked", zap.Bool("lost", lost))
		return true, err
	}
	// A cooperative revocation: only the moved partitions' tasks close,
	// once the commit's writes are in their stores.
	m.stores.wait(m.log)
	closed := m.reg.revokePartitions(tps)
	ids := make([]string, len(closed))
	for i, tk := range closed {
		m.closeTask(tk, true)
		if derr := m.restore.drop(tk.id); derr != nil {
			m.log.Warn("closing the restore of a revoked task", zap.Stringer("task", tk.id), zap.Error(derr))
		}
		m.reg.removeTask(tk)
		ids[i] = tk.id.String()
	}
	m.cfg.StateDirectory.ReleaseTasks(m.idx, ids)
	m.host.snapshot(true)
	m.log.Info("partitions revoked", zap.Int("partitions", len(tps)), zap.Strings("tasks", ids))
	return false, err
}

// closeTask is the one way a task closes: clean after a commit carried its
// work, dirty (its caches dropped first) when what it did since the last
// commit must not count.
func (m *taskManager) closeTask(tk *task, clean bool) {
	if !clean {
		tk.t.Discard()
	}
	m.host.retireTask(tk.t)
	if err := tk.t.Close(); err != nil && clean {
		m.log.Warn("closing task", zap.Stringer("task", tk.id), zap.Error(err))
	}
}

// closeAll closes every task (dirty: what they wrote since the last commit
// is dropped first) and forgets them, keeping what was read of their
// partitions.
func (m *taskManager) closeAll(clean bool) {
	if !clean {
		m.stores.discard()
	}
	for _, tk := range m.reg.order {
		m.closeTask(tk, clean)
	}
	m.reg.dropTasks()
}

// discardUncommitted drops what every task's caches hold (the thread drops
// the rest of what was processed since the last commit).
func (m *taskManager) discardUncommitted() {
	for _, tk := range m.reg.order {
		tk.t.Discard()
	}
}

// dropAssignment forgets an assignment that was cut short: what every task
// did since the last commit is dropped (the open transaction aborted: the
// tasks' output must not be published without their input offsets), the
// tasks are closed and their partitions are no longer read (records polled
// for them are skipped), so a thread stopping now commits nothing. An
// error (the transaction could not be aborted) makes the thread start over
// (its new producer's InitTransactions aborts it).
func (m *taskManager) dropAssignment() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	if derr := m.host.dropUncommitted(ctx); derr != nil {
		err = fmt.Errorf("%w: aborting the transaction of an assignment cut short: %v", errRejoin, derr)
	}
	m.closeAll(false)
	m.forget()
	return err
}

// forgetClosed forgets the tasks and partitions of an assignment whose
// tasks a clean shutdown closed already.
func (m *taskManager) forgetClosed() { m.reg.clear() }

// forget empties the view of the assignment (its tasks already closed):
// tasks, partitions, committed offsets, restores.
func (m *taskManager) forget() {
	m.reg.clear()
	m.restore.clear()
	m.guarantee.forgetEnds()
	m.stores.wait(m.log)
	m.cfg.StateDirectory.Release(m.idx)
	m.host.snapshot(true)
}

// startTasks moves the tasks not running yet along, without waiting: a
// pending task's partitions' committed offsets are read (under
// read_committed they cannot be while a transaction of their previous
// owner is pending, KIP-447: a dead member's until it times out), a
// starting task's changelogs' ends are read once no transaction is pending
// on them, and then it restores (restore.go) or, with nothing to restore,
// runs. Each call makes one attempt of each (every 50 ms at most, unless
// now): a task that waits holds back none of the others.
func (m *taskManager) startTasks(now bool) error {
	pending, starting := m.reg.toStart()
	if len(pending) == 0 && len(starting) == 0 {
		if now && !m.restore.active() {
			m.host.setState(ThreadRunning) // an assignment of nothing to start
		}
		return nil
	}
	if !now && time.Since(m.lastStart) < 50*time.Millisecond {
		return nil
	}
	m.lastStart = time.Now()
	if len(pending) > 0 {
		var tps []kclient.TP
		for _, tk := range pending {
			for _, p := range tk.parts {
				tps = append(tps, p.tp)
			}
		}
		ctx, cancel := context.WithTimeout(m.ctx, 200*time.Millisecond)
		committed, meta, err := m.consumer.Committed(ctx, tps)
		cancel()
		switch {
		case err == nil:
			m.reg.readFor(pending, committed, meta)
			starting = append(starting, pending...)
			m.health.up(m.log)
		case kclient.IsSecurity(err) || m.ctx.Err() != nil:
			return fmt.Errorf("reading committed offsets: %w", err)
		case kclient.IsTransient(err) || errors.Is(err, context.DeadlineExceeded):
			m.waitingFor(pending, "reading the committed offsets (a transaction of the partitions' previous owner may be pending)", err)
			m.departed.look(m.ctx, m.adm, pending)
		default:
			return fmt.Errorf("reading committed offsets: %w", err)
		}
	}
	if len(starting) == 0 {
		return nil
	}
	started, ends, pendingOn, err := m.restore.startRestore(m.ctx, starting)
	if err != nil {
		return err
	}
	ready := m.reg.restoring(started)
	if ends != nil {
		m.guarantee.knowEnds(ends)
	}
	if len(pendingOn) > 0 {
		var waiting []*task
		for _, tk := range starting {
			onIt := false
			loggedStores(m.cfg, tk.id, func(tp kclient.TP, _ storage.Spec) { onIt = onIt || slices.Contains(pendingOn, tp) })
			if onIt {
				waiting = append(waiting, tk)
			}
		}
		if len(waiting) > 0 {
			m.waitingFor(waiting, "transactions on their changelogs to complete", nil)
			m.departed.look(m.ctx, m.adm, waiting)
		}
	}
	return m.resume(ready)
}

// waitingFor says, now and then, what tasks not started yet wait for.
func (m *taskManager) waitingFor(tasks []*task, what string, err error) {
	waited := time.Since(tasks[0].since)
	switch {
	case waited > 2*time.Minute && time.Since(m.lastWaitLog) > time.Minute:
		// No transaction may last that long (transaction.max.timeout.ms
		// is 15 minutes, eddy's own time out after 10 s).
		m.lastWaitLog = time.Now()
		m.log.Warn("new tasks have waited far longer than transactions last; the brokers may hold a hanging transaction (see kafka-transactions.sh find-hanging); waiting",
			zap.String("for", what), zap.Duration("waited", waited.Round(time.Second)), zap.Error(err))
	case waited > 2*time.Second && time.Since(m.lastWaitLog) > 5*time.Second:
		m.lastWaitLog = time.Now()
		m.log.Info("new tasks waiting", zap.String("for", what), zap.Int("tasks", len(tasks)),
			zap.Duration("waited", waited.Round(time.Second)), zap.Error(err))
	}
}

// restoreStep advances the restores and runs the tasks they finished.
func (m *taskManager) restoreStep() error {
	if !m.restore.busy() {
		return nil
	}
	done, err := m.restore.step()
	if err != nil {
		return err
	}
	return m.resume(done)
}

// resume runs tasks whose stores are ready: their input partitions read
// from the committed offsets.
func (m *taskManager) resume(tasks []*task) error {
	resume := m.reg.run(tasks)
	if len(resume) == 0 {
		return nil
	}
	if err := m.consumer.Resume(resume); err != nil {
		return err
	}
	// librdkafka drops what it prefetched for a partition paused before
	// the application consumed from it, and resumes after that: start
	// again from the committed offset explicitly.
	for _, tp := range resume {
		off := m.reg.from(tp)
		if err := m.consumer.Seek(tp, off); err != nil {
			return fmt.Errorf("positioning %s at %d: %w", tp, off, err)
		}
	}
	m.host.snapshot(true)
	if !m.restore.active() && !m.reg.starting() {
		m.host.setState(ThreadRunning)
	}
	return nil
}

// rewind puts the tasks back at the last commit, after cause: what was
// processed since is dropped (the open transaction aborted), each task is
// rebuilt from its committed stores and stream time, and its partitions
// are read again from the committed offsets.
func (m *taskManager) rewind(cause error) error {
	m.stats.Aborts.Add(1)
	ctx, cancel := callCtx(m.ctx)
	err := m.host.dropUncommitted(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: aborting after %v: %w", errRejoin, cause, err)
	}
	for _, tk := range m.reg.order {
		m.closeTask(tk, false)
		nt, err := m.newRTTask(tk.id)
		if err != nil {
			return err
		}
		m.reg.rebuilt(tk, nt)
	}
	for tp, p := range m.reg.parts {
		if p.task.state != taskRunning {
			continue // positioned when it starts
		}
		off := m.reg.from(tp)
		if err := m.consumer.Seek(tp, off); err != nil {
			return fmt.Errorf("rewinding %s to %d: %w", tp, off, err)
		}
		held := p.held
		p.reset()
		if p.paused || held {
			if err := m.consumer.Resume([]kclient.TP{tp}); err == nil {
				p.paused = false
			} else {
				p.held = held
			}
		}
	}
	m.log.Info("transaction aborted; rewound to the last commit", zap.Error(cause))
	return nil
}

// shutdown closes the tasks cleanly once the thread's final commit carried
// their work.
func (m *taskManager) shutdown() {
	m.host.snapshot(true)
	for _, tk := range m.reg.order {
		m.closeTask(tk, true)
	}
	m.reg.dropTasks()
}

// memberState is what the thread's group member tells the assignor at
// each join (kclient.MemberState): the instance, and how far its local
// state of each task has read the task's changelogs, so that a task goes
// where its restore reads least. It runs on the client's goroutine.
func (m *taskManager) memberState() kclient.MemberState {
	s := kclient.MemberState{Process: m.cfg.ProcessID, Offsets: map[processor.TaskID]int64{}}
	if m.cfg.Program.HasLoggedStores() {
		s.Standbys = m.cfg.NumStandbyReplicas
		s.AcceptableRecoveryLag, s.MaxWarmups = m.cfg.AcceptableRecoveryLag, m.cfg.MaxWarmupReplicas
		s.Tags = m.cfg.ClientTags
	}
	if f := m.reg.following.Load(); f != nil {
		s.Standby, s.Warmup = f.standby, f.claims
	}
	sums, err := m.cfg.StateDirectory.OffsetSums()
	if err != nil {
		m.log.Warn("reading the local state's changelog offsets for the group's assignor; joining without them", zap.Error(err))
		return s
	}
	for task, sum := range sums {
		if id, err := processor.ParseTaskID(task); err == nil {
			s.Offsets[id] = sum
		}
	}
	return s
}

// tasksOf returns the tasks that read input partition tp: partition
// tp.Partition of each sub-topology with tp's topic among its sources.
func tasksOf(cfg *Config, tp kclient.TP) []processor.TaskID {
	var ids []processor.TaskID
	for _, st := range cfg.Program.Subtopologies {
		if slices.ContainsFunc(st.SourceTopics, func(t string) bool { return resolvedTopic(cfg, t) == tp.Topic }) {
			ids = append(ids, processor.TaskID{Subtopology: st.ID, Partition: tp.Partition})
		}
	}
	return ids
}

// resolvedTopic is a topology's topic's name on the brokers (internal
// topics carry the application id).
func resolvedTopic(cfg *Config, topic string) string {
	if cfg.Program.IsInternal(topic) {
		return rt.InternalTopicName(cfg.AppID, topic)
	}
	return topic
}
