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
	"github.com/eddy-go/eddy/processor"
)

// onRebalance runs inside Consumer.Poll. Under a cooperative assignor a
// rebalance revokes only the partitions that move and assigns only the
// ones that come: the thread's other tasks go on processing.
func (th *Thread) onRebalance(rb kclient.Rebalance) error {
	defer th.watch.mark(th.watch.mark(doingRebalance))
	th.Stats.Rebalances.Add(1)
	if len(rb.Revoked) > 0 {
		th.revoke(rb.Revoked, rb.Lost)
	}
	// An assignment, possibly of nothing new (the thread then runs what it
	// has, or idles).
	if (len(rb.Assigned) > 0 || len(rb.Revoked) == 0) && th.cbErr == nil {
		th.setState(ThreadRebalancing)
		if err := th.assign(rb.Assigned, rb.Standby, rb.Warmup); err != nil {
			// Some new task's stores were never restored (or even looked
			// at): no task of this assignment may process or commit.
			th.dropAssignment()
			if th.ctx.Err() != nil {
				return nil // shutting down: the loop stops cleanly
			}
			th.cbErr = err
			return err
		}
	}
	return nil
}

// memberState is what the thread's group member tells the assignor at
// each join (kclient.MemberState): the instance, and how far its local
// state of each task has read the task's changelogs, so that a task goes
// where its restore reads least. It runs on the client's goroutine.
func (th *Thread) memberState() kclient.MemberState {
	s := kclient.MemberState{Process: th.cfg.ProcessID, Offsets: map[processor.TaskID]int64{}}
	if th.cfg.Program.HasLoggedStores() {
		s.Standbys = th.cfg.NumStandbyReplicas
		s.AcceptableRecoveryLag, s.MaxWarmups = th.cfg.AcceptableRecoveryLag, th.cfg.MaxWarmupReplicas
		s.Tags = th.cfg.ClientTags
	}
	if f := th.tm.following.Load(); f != nil {
		s.Standby, s.Warmup = f.standby, f.claims
	}
	sums, err := th.cfg.StateDirectory.OffsetSums()
	if err != nil {
		th.log.Warn("reading the local state's changelog offsets for the group's assignor; joining without them", zap.Error(err))
		return s
	}
	for task, sum := range sums {
		if id, err := processor.ParseTaskID(task); err == nil {
			s.Offsets[id] = sum
		}
	}
	return s
}

// revoke gives up partitions: it commits everything first (unless they
// were lost), then closes the tasks that have none of their partitions
// left. When every partition goes, or they were lost, every task is closed
// (lost: without committing).
func (th *Thread) revoke(tps []kclient.TP, lost bool) {
	all := true
	for tp := range th.tm.parts {
		if !slices.Contains(tps, tp) {
			all = false
		}
	}
	if th.closing {
		// Closing the consumer: a clean shutdown committed already; after
		// an error there is nothing that may be committed.
		if th.dirty || th.guarantee.pending() {
			lost = true
		} else {
			th.tm.clear()
			return
		}
	}
	th.setState(ThreadRebalancing)
	if !lost {
		if err := th.commit(true); err != nil {
			if errors.Is(err, errRejoin) {
				th.cbErr = err
			}
			th.log.Warn("commit on revocation failed; closing tasks without committing", zap.Error(err))
			if !all && th.cbErr == nil {
				// The tasks it keeps go back to the last commit.
				if err := th.abortAndRewind(err); err != nil {
					th.cbErr = err
				}
			} else {
				lost = true
			}
		}
	}
	if lost || all {
		if lost {
			th.log.Warn("partitions lost; dropping uncommitted work")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if err := th.dropUncommitted(ctx); err != nil && th.cbErr == nil {
				// The transaction could not be aborted: start over with a
				// new producer (its InitTransactions aborts it).
				th.cbErr = fmt.Errorf("%w: aborting the transaction of lost partitions: %v", errRejoin, err)
			}
			cancel()
			th.closeTasksDirty()
		} else {
			th.closeTasks(th.tm.order)
		}
		th.dirty = false
		th.forgetAssignment()
		th.log.Info("partitions revoked", zap.Bool("lost", lost))
		return
	}
	// A cooperative revocation: only the moved partitions' tasks close,
	// once the commit's writes are in their stores.
	th.waitStores()
	closed := th.tm.revokePartitions(tps)
	th.closeTasks(closed)
	ids := make([]string, len(closed))
	for i, tk := range closed {
		if err := th.restore.drop(tk.id); err != nil {
			th.log.Warn("closing the restore of a revoked task", zap.Stringer("task", tk.id), zap.Error(err))
		}
		th.tm.removeTask(tk)
		ids[i] = tk.id.String()
	}
	th.cfg.StateDirectory.ReleaseTasks(th.idx, ids)
	th.snapshot(true)
	th.log.Info("partitions revoked", zap.Int("partitions", len(tps)), zap.Strings("tasks", ids))
}

// closeTasks closes tasks whose work is committed.
func (th *Thread) closeTasks(tasks []*task) {
	for _, tk := range tasks {
		th.retireTask(tk.t)
		if err := tk.t.Close(); err != nil {
			th.log.Warn("closing task", zap.Stringer("task", tk.id), zap.Error(err))
		}
	}
}

// dropUncommitted forgets everything since the last commit: the open
// transaction (aborted), delivery failures, the changelog ends to store,
// the write sets, and what each task's caches held. An error means the
// producer could not abort: it is unusable.
func (th *Thread) dropUncommitted(ctx context.Context) error {
	err := th.guarantee.abort(ctx)
	clear(th.written)
	th.wsP.Discard()
	th.wsM.Discard()
	for _, tk := range th.tm.order {
		tk.t.Discard()
	}
	th.dirty = false
	return err
}

// dropAssignment forgets an assignment that was cut short: what every task
// did since the last commit is dropped (the open transaction aborted: the
// tasks' output must not be published without their input offsets), the
// tasks are closed and their partitions are no longer read (records polled
// for them are skipped), so a thread stopping now commits nothing. A
// transaction that cannot be aborted makes the thread start over (its new
// producer's InitTransactions aborts it).
func (th *Thread) dropAssignment() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	if err := th.dropUncommitted(ctx); err != nil && th.cbErr == nil {
		th.cbErr = fmt.Errorf("%w: aborting the transaction of an assignment cut short: %v", errRejoin, err)
	}
	cancel()
	th.closeTasksDirty()
	th.forgetAssignment()
}

// forgetAssignment empties the thread's view of its assignment (its tasks
// already closed): tasks, partitions, committed offsets, restores.
func (th *Thread) forgetAssignment() {
	th.tm.clear()
	th.restore.clear()
	th.guarantee.forgetEnds()
	th.waitStores()
	th.cfg.StateDirectory.Release(th.idx)
	th.snapshot(true)
}

// waitStores waits until the last commit's writes are in the stores
// (WriteSet.ApplyInBackground): the tasks' stores may be restored or
// written by their next owner, on this thread or another. A failed apply
// only leaves a store behind its changelog, which its next restore reads.
func (th *Thread) waitStores() {
	if err := th.wsP.Wait(); err != nil {
		th.log.Warn("applying the last commit's writes to the stores failed; they are restored from the changelogs", zap.Error(err))
	}
}

// closeTasksDirty closes every task without committing: what they wrote
// since the last commit is dropped.
func (th *Thread) closeTasksDirty() {
	th.wsP.Discard()
	th.wsM.Discard()
	for _, tk := range th.tm.order {
		tk.t.Discard()
		th.retireTask(tk.t)
		tk.t.Close()
	}
	th.tm.dropTasks()
}

// assign adds the tasks of newly assigned partitions, paused: they start
// (startTasks) once their committed offsets and changelog ends can be
// read, without holding back the thread's other tasks.
func (th *Thread) assign(tps []kclient.TP, standby, warmup []processor.TaskID) error {
	var added []*task
	for _, tp := range tps {
		for _, id := range tasksOf(th.cfg, tp) {
			tk := th.tm.tasks[id]
			if tk == nil {
				if th.tm.standby[id] != nil {
					// A standby of the thread's becomes active: its
					// restore reads on from where the standby is.
					th.dropStandby(id)
				}
				t, err := th.newRTTask(id)
				if err != nil {
					return err
				}
				tk = th.tm.addTask(id, t)
				added = append(added, tk)
			} else if tk.state == taskRunning {
				// A running task gets a partition more: it starts again.
				th.tm.restart(tk)
				added = append(added, tk)
			}
			var consumed prometheus.Counter
			if m := th.cfg.Metrics; m != nil {
				consumed = m.Consumed.WithLabelValues(tp.Topic)
			}
			th.tm.addPartition(tk, tp, consumed)
		}
	}
	ids := make([]string, len(added))
	for i, tk := range added {
		ids[i] = tk.id.String()
	}
	if paused := th.tm.pause(added); len(paused) > 0 {
		if err := th.consumer.Pause(paused); err != nil {
			return err
		}
	}
	// From here on the instance's cleaner leaves the tasks' state alone.
	th.cfg.StateDirectory.Own(th.idx, ids)
	th.log.Info("partitions assigned", zap.Int("partitions", len(tps)), zap.Strings("tasks", ids))
	th.setStandbys(standby, warmup)
	th.snapshot(true) // interactive queries see the new assignment at once
	err := th.startTasks(true)
	th.tm.assignedOnce = true
	return err
}

// startTasks moves the tasks not running yet along, without waiting: a
// pending task's partitions' committed offsets are read (under
// read_committed they cannot be while a transaction of their previous
// owner is pending, KIP-447: a dead member's until it times out), a
// starting task's changelogs' ends are read once no transaction is pending
// on them, and then it restores (restore.go) or, with nothing to restore,
// runs. Each call makes one attempt of each (every 50 ms at most, unless
// now): a task that waits holds back none of the others.
func (th *Thread) startTasks(now bool) error {
	pending, starting := th.tm.toStart()
	if len(pending) == 0 && len(starting) == 0 {
		if now && !th.restore.active() {
			th.setState(ThreadRunning) // an assignment of nothing to start
		}
		return nil
	}
	if !now && time.Since(th.lastStart) < 50*time.Millisecond {
		return nil
	}
	th.lastStart = time.Now()
	if len(pending) > 0 {
		var tps []kclient.TP
		for _, tk := range pending {
			for _, p := range tk.parts {
				tps = append(tps, p.tp)
			}
		}
		ctx, cancel := context.WithTimeout(th.ctx, 200*time.Millisecond)
		committed, meta, err := th.consumer.Committed(ctx, tps)
		cancel()
		switch {
		case err == nil:
			th.tm.readFor(pending, committed, meta)
			starting = append(starting, pending...)
			th.Health.up(th.log)
		case kclient.IsSecurity(err) || th.ctx.Err() != nil:
			return fmt.Errorf("reading committed offsets: %w", err)
		case kclient.IsTransient(err) || errors.Is(err, context.DeadlineExceeded):
			th.waitingFor(pending, "reading the committed offsets (a transaction of the partitions' previous owner may be pending)", err)
			th.departed.look(th.ctx, th.adm, pending)
		default:
			return fmt.Errorf("reading committed offsets: %w", err)
		}
	}
	if len(starting) == 0 {
		return nil
	}
	started, ends, pendingOn, err := th.restore.startRestore(th.ctx, starting)
	if err != nil {
		return err
	}
	ready := th.tm.restoring(started)
	if ends != nil {
		th.guarantee.knowEnds(ends)
	}
	if len(pendingOn) > 0 {
		var waiting []*task
		for _, tk := range starting {
			if slices.ContainsFunc(pendingOn, func(tp kclient.TP) bool { return tp.Partition == tk.id.Partition }) {
				waiting = append(waiting, tk)
			}
		}
		th.waitingFor(waiting, "transactions on their changelogs to complete", nil)
		th.departed.look(th.ctx, th.adm, waiting)
	}
	return th.resumeTasks(ready)
}

// waitingFor says, now and then, what tasks not started yet wait for.
func (th *Thread) waitingFor(tasks []*task, what string, err error) {
	waited := time.Since(tasks[0].since)
	switch {
	case waited > 2*time.Minute && time.Since(th.lastWaitLog) > time.Minute:
		// No transaction may last that long (transaction.max.timeout.ms
		// is 15 minutes, eddy's own time out after 10 s).
		th.lastWaitLog = time.Now()
		th.log.Warn("new tasks have waited far longer than transactions last; the brokers may hold a hanging transaction (see kafka-transactions.sh find-hanging); waiting",
			zap.String("for", what), zap.Duration("waited", waited.Round(time.Second)), zap.Error(err))
	case waited > 2*time.Second && time.Since(th.lastWaitLog) > 5*time.Second:
		th.lastWaitLog = time.Now()
		th.log.Info("new tasks waiting", zap.String("for", what), zap.Int("tasks", len(tasks)),
			zap.Duration("waited", waited.Round(time.Second)), zap.Error(err))
	}
}

// resumeTasks starts tasks whose stores are ready: their input partitions
// read from the committed offsets.
func (th *Thread) resumeTasks(tasks []*task) error {
	resume := th.tm.run(tasks)
	if len(resume) == 0 {
		return nil
	}
	if err := th.consumer.Resume(resume); err != nil {
		return err
	}
	// librdkafka drops what it prefetched for a partition paused before
	// the application consumed from it, and resumes after that: start
	// again from the committed offset explicitly.
	for _, tp := range resume {
		off := th.tm.from(tp)
		if err := th.consumer.Seek(tp, off); err != nil {
			return fmt.Errorf("positioning %s at %d: %w", tp, off, err)
		}
	}
	th.snapshot(true)
	if !th.restore.active() && !th.tm.starting() {
		th.setState(ThreadRunning)
	}
	return nil
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

// shutdown commits and closes the tasks cleanly.
func (th *Thread) shutdown() error {
	th.log.Info("stream thread shutting down")
	if err := th.commit(true); err != nil {
		th.log.Warn("final commit failed", zap.Error(err))
		return err
	}
	th.snapshot(true)
	for _, tk := range th.tm.order {
		th.retireTask(tk.t)
		tk.t.Close()
	}
	th.tm.dropTasks()
	return nil
}

// abortAndRewind aborts the open transaction and puts the thread back at
// its last commit: write sets and caches dropped, tasks rebuilt from the
// committed stores, partitions rewound to the committed offsets.
func (th *Thread) abortAndRewind(cause error) error {
	th.Stats.Aborts.Add(1)
	ctx, cancel := th.callCtx()
	err := th.dropUncommitted(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: aborting after %v: %w", errRejoin, cause, err)
	}
	for _, tk := range th.tm.order {
		th.retireTask(tk.t)
		tk.t.Close()
		nt, err := th.newRTTask(tk.id)
		if err != nil {
			return err
		}
		tk.t = nt
		th.tm.restoreStreamTime(tk)
	}
	for tp, p := range th.tm.parts {
		if p.task.state != taskRunning {
			continue // positioned when it starts
		}
		off := th.tm.from(tp)
		if err := th.consumer.Seek(tp, off); err != nil {
			return fmt.Errorf("rewinding %s to %d: %w", tp, off, err)
		}
		held := p.held
		p.reset()
		if p.paused || held {
			if err := th.consumer.Resume([]kclient.TP{tp}); err == nil {
				p.paused = false
			} else {
				p.held = held
			}
		}
	}
	th.log.Info("transaction aborted; rewound to the last commit", zap.Error(cause))
	return nil
}
