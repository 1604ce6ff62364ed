package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// onRebalance runs inside Consumer.Poll.
func (th *Thread) onRebalance(rb kclient.Rebalance) error {
	th.Stats.Rebalances.Add(1)
	th.setState(ThreadRebalancing)
	if len(rb.Revoked) > 0 {
		th.revoke(rb.Lost)
	}
	if len(rb.Assigned) > 0 && th.cbErr == nil {
		if err := th.assign(rb.Assigned); err != nil {
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

// revoke commits (unless the partitions were lost) and closes every task.
func (th *Thread) revoke(lost bool) {
	if th.closing {
		// Closing the consumer: a clean shutdown committed already; after
		// an error there is nothing that may be committed.
		if th.dirty || th.guarantee.pending() {
			lost = true
		} else {
			th.tasks, th.order, th.parts = map[processor.TaskID]*task{}, nil, map[kclient.TP]*partition{}
			return
		}
	}
	if !lost {
		if err := th.commit(true); err != nil {
			if errors.Is(err, errRejoin) {
				th.cbErr = err
			}
			th.log.Warn("commit on revocation failed; closing tasks without committing", zap.Error(err))
			lost = true
		}
	}
	if lost {
		th.log.Warn("partitions lost; dropping uncommitted work")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := th.dropUncommitted(ctx); err != nil && th.cbErr == nil {
			// The transaction could not be aborted: start over with a new
			// producer (its InitTransactions aborts it).
			th.cbErr = fmt.Errorf("%w: aborting the transaction of lost partitions: %v", errRejoin, err)
		}
		cancel()
		th.closeTasksDirty()
	} else {
		for _, tk := range th.order {
			th.retireTask(tk.t)
			if err := tk.t.Close(); err != nil {
				th.log.Warn("closing task", zap.Stringer("task", tk.id), zap.Error(err))
			}
		}
	}
	th.dirty = false
	th.forgetAssignment()
	th.log.Info("partitions revoked", zap.Bool("lost", lost))
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
	for _, tk := range th.order {
		tk.t.Discard()
	}
	th.dirty = false
	return err
}

// dropAssignment forgets an assignment that was cut short: its tasks are
// closed without committing and its partitions are no longer read (records
// polled for them are skipped), so a thread stopping now commits nothing
// for them.
func (th *Thread) dropAssignment() {
	th.closeTasksDirty()
	th.forgetAssignment()
}

// forgetAssignment empties the thread's view of its assignment (its tasks
// already closed): tasks, partitions, committed offsets, restores.
func (th *Thread) forgetAssignment() {
	th.tasks = map[processor.TaskID]*task{}
	th.order = nil
	th.parts = map[kclient.TP]*partition{}
	th.committed = map[kclient.TP]int64{}
	th.committedTime = map[kclient.TP]int64{}
	th.clearRestore()
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
	for _, tk := range th.order {
		tk.t.Discard()
		th.retireTask(tk.t)
		tk.t.Close()
	}
	th.tasks = map[processor.TaskID]*task{}
	th.order = nil
}

// assign creates the tasks of the assigned partitions and starts restoring
// their stores.
func (th *Thread) assign(tps []kclient.TP) error {
	// No deadline: a broker outage is waited out (retried with backoff)
	// until the thread stops.
	ctx := th.ctx
	// Committed offsets first: under read_committed this waits until any
	// transaction of the partitions' previous owner is resolved, so the
	// changelog ends read next are final (KIP-447).
	committed, meta, err := th.committedOffsets(ctx, tps)
	if err != nil {
		return fmt.Errorf("reading committed offsets: %w", err)
	}
	th.committed = committed
	for _, tp := range tps {
		if ts, ok := decodeStreamTime(meta[tp]); ok {
			th.committedTime[tp] = ts
		}
	}
	for _, tp := range tps {
		for _, st := range th.cfg.Program.Subtopologies {
			if !slices.ContainsFunc(st.SourceTopics, func(t string) bool { return th.resolved(t) == tp.Topic }) {
				continue
			}
			id := processor.TaskID{Subtopology: st.ID, Partition: tp.Partition}
			tk := th.tasks[id]
			if tk == nil {
				t, err := th.newRTTask(id)
				if err != nil {
					return err
				}
				tk = &task{t: t, id: id}
				th.tasks[id] = tk
				th.order = append(th.order, tk)
			}
			p := &partition{tp: tp, task: tk, next: -1}
			if m := th.cfg.Metrics; m != nil {
				p.consumed = m.Consumed.WithLabelValues(tp.Topic)
			}
			tk.parts = append(tk.parts, p)
			th.parts[tp] = p
		}
	}
	for _, tk := range th.order {
		th.restoreStreamTime(tk)
	}
	slices.SortFunc(th.order, func(a, b *task) int {
		if a.id.Subtopology != b.id.Subtopology {
			return a.id.Subtopology - b.id.Subtopology
		}
		return int(a.id.Partition - b.id.Partition)
	})
	ids := make([]string, len(th.order))
	for i, tk := range th.order {
		ids[i] = tk.id.String()
	}
	// From here on the instance's cleaner leaves the tasks' state alone.
	th.cfg.StateDirectory.Own(th.idx, ids)
	th.log.Info("partitions assigned", zap.Int("partitions", len(tps)), zap.Strings("tasks", ids))
	if err := th.startRestore(ctx); err != nil {
		return err
	}
	th.snapshot(true) // interactive queries see the new assignment at once
	if len(th.restoring) == 0 {
		th.setState(ThreadRunning)
	}
	return nil
}

// committedOffsets reads the group's committed offsets. Under
// read_committed the read waits for any transaction of the partitions'
// previous owner to be resolved (KIP-447), and after a broker restart the
// group coordinator may still be loading: each attempt is bounded (5 s, then
// 10 s, then 15 s) and retried until it works or the thread stops. The
// clients are kept: replacing the consumer would start another rebalance of
// the whole group (seen: a rebalance every minute for minutes).
func (th *Thread) committedOffsets(ctx context.Context, tps []kclient.TP) (c map[kclient.TP]int64, meta map[kclient.TP]string, err error) {
	attempt := 0
	began, warned := time.Now(), time.Time{}
	err = th.retry(ctx, "reading committed offsets", func() error {
		attempt++
		if waited := time.Since(began); th.cfg.ExactlyOnce && waited > 2*time.Minute && time.Since(warned) > time.Minute {
			// Under read_committed the read waits while a transaction holds
			// offsets of the group; none lasts that long.
			warned = time.Now()
			th.log.Warn("the group's committed offsets stay unstable far longer than transactions last; the brokers may hold a hanging transaction on the offsets topic (see kafka-transactions.sh find-hanging); waiting",
				zap.Duration("for", waited.Round(time.Second)))
		}
		cctx, cancel := context.WithTimeout(ctx, time.Duration(min(attempt, 3))*5*time.Second)
		defer cancel()
		c, meta, err = th.consumer.Committed(cctx, tps)
		return err
	})
	return c, meta, err
}

func (th *Thread) resolved(topic string) string {
	if th.cfg.Program.IsInternal(topic) {
		return rt.InternalTopicName(th.cfg.AppID, topic)
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
	for _, tk := range th.order {
		th.retireTask(tk.t)
		tk.t.Close()
	}
	th.tasks, th.order = map[processor.TaskID]*task{}, nil
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
	for _, tk := range th.order {
		th.retireTask(tk.t)
		tk.t.Close()
		nt, err := th.newRTTask(tk.id)
		if err != nil {
			return err
		}
		tk.t = nt
		th.restoreStreamTime(tk)
	}
	for tp, p := range th.parts {
		off, ok := th.committed[tp]
		if !ok || off < 0 {
			off = -2 // the beginning: nothing was ever committed
		}
		if err := th.consumer.Seek(tp, off); err != nil {
			return fmt.Errorf("rewinding %s to %d: %w", tp, off, err)
		}
		p.buf, p.head, p.next = p.buf[:0], 0, -1
		if p.paused && p.task.restoring == 0 {
			if err := th.consumer.Resume([]kclient.TP{tp}); err == nil {
				p.paused = false
			}
		}
	}
	th.log.Info("transaction aborted; rewound to the last commit", zap.Error(cause))
	return nil
}
