package engine

import (
	"github.com/eddy-go/eddy/internal/kclient"
)

// onRebalance runs inside Consumer.Poll. Under a cooperative assignor a
// rebalance revokes only the partitions that move and assigns only the
// ones that come: the thread's other tasks go on processing. The task
// manager moves the tasks; the thread keeps what ends its session.
func (th *Thread) onRebalance(rb kclient.Rebalance) error {
	defer th.watch.mark(th.watch.mark(doingRebalance))
	th.Stats.Rebalances.Add(1)
	if len(rb.Revoked) > 0 {
		lost := rb.Lost
		if th.closing {
			// Closing the consumer: a clean shutdown committed and closed
			// the tasks already; after an error nothing may be committed.
			if !th.dirty && !th.guarantee.pending() {
				th.tm.forgetClosed()
				return nil
			}
			lost = true
		}
		all, err := th.tm.revoke(rb.Revoked, lost)
		if all {
			th.dirty = false
		}
		if err != nil && th.cbErr == nil {
			th.cbErr = err
		}
	}
	// An assignment, possibly of nothing new (the thread then runs what it
	// has, or idles).
	if (len(rb.Assigned) > 0 || len(rb.Revoked) == 0) && th.cbErr == nil {
		th.setState(ThreadRebalancing)
		if err := th.tm.assign(rb.Assigned, rb.Standby, rb.Warmup); err != nil {
			// Some new task's stores were never restored (or even looked
			// at): no task of this assignment may process or commit.
			if derr := th.tm.dropAssignment(); derr != nil && th.cbErr == nil {
				th.cbErr = derr
			}
			if th.ctx.Err() != nil {
				return nil // shutting down: the loop stops cleanly
			}
			th.cbErr = err
			return err
		}
	}
	return nil
}
