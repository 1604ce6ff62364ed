package engine

import (
	"time"

	"github.com/eddy-go/eddy/internal/rt"
)

// asyncWaits is how a thread waits for its tasks' async calls: a call that
// completes wakes the thread, which then applies its result (Task.Pump in
// process) instead of sleeping in a poll.
type asyncWaits struct {
	wake chan struct{}
	env  *rt.AsyncEnv
}

func newAsyncWaits(cfg *Config) *asyncWaits {
	w := &asyncWaits{wake: make(chan struct{}, 1)}
	w.env = &rt.AsyncEnv{Limit: cfg.AsyncLimit, Wake: w.notify}
	if m := cfg.Metrics; m != nil {
		w.env.Observe = m.observeAsync
	}
	return w
}

// notify wakes the thread (from a call's goroutine); never blocks.
func (w *asyncWaits) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// wait blocks until a call completes or max passed.
func (w *asyncWaits) wait(max time.Duration) {
	if max <= 0 {
		return
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	}
}

// asyncWaitMax is the longest a thread waits for an async call before it
// polls again.
const asyncWaitMax = 10 * time.Millisecond

// waitForCalls, after a round that processed nothing while tasks wait for
// calls, waits for one to complete (at most until the next commit is due).
func (th *Thread) waitForCalls(processed bool) {
	if processed || !th.tm.reg.asyncHeld() {
		return
	}
	th.async.wait(min(asyncWaitMax, th.cfg.CommitInterval-time.Since(th.lastCommit)))
}

// drainCalls waits until no running task holds records in async calls,
// applying results as they complete: the commit's flush then finds the
// calls done. Every task's calls run meanwhile (a task-by-task drain
// would leave all but one task's slots idle).
func (th *Thread) drainCalls() error {
	for th.tm.reg.asyncHeld() {
		for _, tk := range th.tm.reg.order {
			if tk.state != taskRunning {
				continue
			}
			if err := tk.t.Pump(); err != nil {
				return err
			}
		}
		if th.tm.reg.asyncHeld() {
			th.async.wait(asyncWaitMax)
		}
	}
	return nil
}
