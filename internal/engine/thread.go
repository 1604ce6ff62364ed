package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Thread is one stream thread: one goroutine owning a consumer, a
// producer, the state writes of its tasks (storeWrites) and its task
// manager (tm: the tasks' lifecycle, their registry, the restorer that
// reads changelogs for restores and standbys).
//
// The thread's own work, one concern a file:
//
//   - thread.go: the session (clients, subscription) and the loop (step);
//   - input.go: polling into bounded partition buffers, choosing the next
//     record by timestamp, processing and wall-clock punctuation;
//   - commit.go: the commit sequence and the offsets it commits;
//     guarantee.go: the one place exactly-once and at-least-once differ;
//     storewrites.go: what the tasks wrote, applied at each commit;
//   - rebalance.go: the rebalance callback, handing the assignment to the
//     task manager (taskmanager.go, tasks.go, standby.go, restore.go);
//   - failure.go: what the thread does about each kind of error;
//   - metrics.go: counters and snapshots for /state and interactive
//     queries; watch.go: what the thread waits for.
type Thread struct {
	idx int
	cfg *Config
	log *zap.Logger
	ctx context.Context

	consumer kclient.Consumer
	producer kclient.Producer
	adm      *lazyAdmin // the thread's own
	// guarantee wraps the producer and consumer in what the processing
	// guarantee does around the records sent between commits.
	guarantee guarantee

	// stores: what the tasks wrote since the last commit; cache: the
	// tasks' record cache. Both the session's.
	stores *storeWrites
	cache  *storage.Cache

	// tm owns the tasks: assignment, start, restore, standbys, close.
	tm *taskManager

	// dirty: records were processed or sent since the last commit.
	dirty bool
	// behind: the last process round left a task waiting for a partition
	// known to have records not fetched yet (poll then fetches even with
	// full buffers, and waits for them instead of spinning).
	behind     bool
	lastCommit time.Time
	lastPurge  time.Time
	lastProbe  time.Time
	state      ThreadState
	cbErr      error // an error inside the rebalance callback

	// closing: the consumer is being closed; the rebalance it triggers must
	// not commit (librdkafka discards queued records then and moves its
	// positions past them).
	closing bool

	Stats ThreadStats
	// Health says whether the brokers answer this thread (health.go).
	Health    Health
	snapshots snapshotter
	produced  map[string]prometheus.Counter // by topic, when metrics are on
	// sinks: partition counts for the sinks' stream partitioners.
	sinks sinkTopics
	// async: waiting for the tasks' async calls.
	async *asyncWaits
	// watch: what the thread does now, for its watcher to say when a
	// step lasts long (watch.go).
	watch watch
}

// NewThread returns stream thread idx.
func NewThread(idx int, cfg *Config) *Thread {
	th := &Thread{idx: idx, cfg: cfg, log: cfg.Log.With(zap.Int("thread", idx)), async: newAsyncWaits(cfg)}
	th.adm = &lazyAdmin{newAdmin: func() (kclient.Admin, error) { return cfg.NewAdmin() }, log: th.log}
	th.tm = newTaskManager(idx, cfg, th.log, th, &th.Stats, &th.Health, th.adm, th.async)
	return th
}

func (th *Thread) setState(s ThreadState) {
	if th.state == s {
		return
	}
	th.state = s
	th.log.Debug("thread state", zap.Stringer("state", s))
	if th.cfg.OnState != nil {
		th.cfg.OnState(th.idx, s)
	}
}

// Run runs the thread until ctx is cancelled (then it commits and closes
// cleanly and returns nil) or a fatal error.
func (th *Thread) Run(ctx context.Context) error {
	th.ctx, th.tm.ctx = ctx, ctx
	th.setState(ThreadStarting)
	defer th.adm.close()
	// The watcher outlives ctx: a stop's last commit is watched too.
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go th.watch.run(wctx, th.log)
	defer th.watch.mark(doingNothing)
	var rejoins, refusals []time.Time
	for {
		err := th.session(ctx)
		switch {
		case errors.Is(err, errRejoin) && ctx.Err() == nil && errors.Is(err, kclient.ErrRefusedLate):
			// New clients learn the topics afresh and refuse such records
			// up front, for the error handler; a refusal they cannot
			// foresee (the ACLs hide the topic's config) would come back
			// every time: stop rather than loop.
			refusals = append(refusals, time.Now())
			for len(refusals) > 0 && time.Since(refusals[0]) > 5*time.Minute {
				refusals = refusals[1:]
			}
			if len(refusals) >= 3 {
				th.setState(ThreadFailed)
				return fmt.Errorf("engine: stream thread %d: the brokers refused records the producer's checks allowed %d times in 5 minutes (can the app describe the topic's configs?): %w",
					th.idx, len(refusals), err)
			}
			th.log.Warn("the brokers refused a record the producer's checks allowed; starting over with new clients, which learn the topic afresh", zap.Error(err))
			continue
		case errors.Is(err, errRejoin) && ctx.Err() == nil:
			// A producer fenced again and again means another instance
			// uses this one's transactional ids: stop rather than fight.
			// (Outages make the thread start over too; they do not count.)
			fenced := errors.Is(err, kclient.ErrFenced)
			if fenced {
				rejoins = append(rejoins, time.Now())
			}
			for len(rejoins) > 0 && time.Since(rejoins[0]) > 5*time.Minute {
				rejoins = rejoins[1:]
			}
			if len(rejoins) >= 10 {
				th.setState(ThreadFailed)
				return fmt.Errorf("engine: stream thread %d's producer was fenced %d times in 5 minutes (is another instance running with process id %q?): %w",
					th.idx, len(rejoins), th.cfg.ProcessID, err)
			}
			if fenced {
				wait := th.fenceBackoff(len(rejoins))
				th.log.Warn("producer fenced by another with the same transactional id; waiting before claiming it again",
					zap.String("transactional_id", th.transactionalID()), zap.Duration("wait", wait), zap.Int("fences_in_5m", len(rejoins)))
				select {
				case <-ctx.Done():
					th.setState(ThreadStopped)
					return nil
				case <-time.After(wait):
				}
			}
			th.log.Warn("rejoining the group with a new consumer and producer", zap.Error(err))
			continue
		case errors.Is(err, errRejoin):
			th.setState(ThreadStopped)
			return nil
		case err != nil:
			th.setState(ThreadFailed)
			return err
		}
		th.setState(ThreadStopped)
		return nil
	}
}

// fenceBackoff is the wait before a new producer after the n-th fence
// within five minutes (see Config.FenceBackoff).
func (th *Thread) fenceBackoff(n int) time.Duration {
	base := th.cfg.FenceBackoff
	if base <= 0 {
		base = time.Second
	}
	return base << min(max(n-1, 0), 4)
}

func (th *Thread) transactionalID() string {
	return fmt.Sprintf("%s-%s-%d", th.cfg.AppID, th.cfg.ProcessID, th.idx)
}

// reset forgets everything of the previous session.
func (th *Thread) reset() {
	th.dirty, th.cbErr, th.closing = false, nil, false
	th.stores = newStoreWrites(th.cfg)
	th.retireCache()
	th.cache = storage.NewCache(th.cfg.CacheBytes)
	th.produced = map[string]prometheus.Counter{}
}

// session is one group membership: new clients, subscribe, loop.
func (th *Thread) session(ctx context.Context) (err error) {
	th.watch.mark(doingStarting)
	th.reset()
	pcfg := cloneCfg(th.cfg.Producer)
	if th.cfg.ExactlyOnce {
		pcfg["transactional.id"] = th.transactionalID()
	}
	if th.producer, err = th.cfg.NewProducer(pcfg); err != nil {
		return fmt.Errorf("creating producer: %w", err)
	}
	ccfg := cloneCfg(th.cfg.Consumer)
	if th.cfg.InstanceID != "" {
		ccfg["group.instance.id"] = fmt.Sprintf("%s-%d", th.cfg.InstanceID, th.idx)
	}
	newConsumer := th.cfg.NewConsumer
	if th.cfg.NewGroupConsumer != nil {
		newConsumer = th.cfg.NewGroupConsumer
	}
	if th.consumer, err = newConsumer(ccfg); err != nil {
		th.producer.Close()
		return fmt.Errorf("creating consumer: %w", err)
	}
	if r, ok := th.consumer.(kclient.StateReporter); ok {
		r.ReportState(th.tm.memberState)
	}
	if u, ok := th.consumer.(kclient.NoticeUser); ok && th.cfg.Notices != nil {
		u.UseNotices(th.cfg.Notices)
	}
	th.guarantee = newGuarantee(th.cfg.ExactlyOnce, th.producer, th.consumer, th.retry, logEnds(th.adm), &th.watch)
	th.tm.reset(th.consumer, th.guarantee, th.stores, th.cache)
	clean := false
	defer func() {
		if !clean {
			th.tm.closeAll(false)
		}
		th.tm.endSession() // a restore cut short keeps what it stored
		th.closing = true
		if cerr := th.consumer.Close(); cerr != nil && err == nil && clean {
			th.log.Warn("closing consumer", zap.Error(cerr))
		}
		th.producer.Close()
		th.stores.wait(th.log)
		th.cfg.StateDirectory.Release(th.idx)
		th.stores.releaseReads()
	}()
	if th.cfg.ExactlyOnce {
		th.watch.mark(doingInitTransactions)
		err := th.retry(ctx, "initializing transactions", func() error {
			ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return th.producer.InitTransactions(ictx)
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("initializing transactions for %s: %w", th.transactionalID(), err)
		}
	}
	if err := th.consumer.Subscribe(th.cfg.Subscription, th.onRebalance); err != nil {
		return fmt.Errorf("subscribing to %v: %w", th.cfg.Subscription, err)
	}
	th.log.Info("stream thread started", zap.Strings("topics", th.cfg.Subscription), zap.Bool("exactly_once", th.cfg.ExactlyOnce))
	th.setState(ThreadRebalancing)
	th.lastCommit = time.Now()
	for {
		if ctx.Err() != nil {
			// Commit, then close the tasks cleanly.
			th.watch.mark(doingShutdown)
			th.log.Info("stream thread shutting down")
			if err := th.commit(true); err != nil {
				th.log.Warn("final commit failed", zap.Error(err))
				return err
			}
			th.tm.shutdown()
			clean = true
			return nil
		}
		if err := th.step(); err != nil {
			return err
		}
	}
}

// step is one turn of the loop: poll, restore, process, punctuate, commit.
func (th *Thread) step() error {
	th.watch.mark(doingPoll)
	if err := th.poll(); err != nil {
		return err
	}
	if th.cbErr != nil {
		return th.cbErr
	}
	// Starting tasks and standbys and looking at the standbys ask the
	// brokers, bounded by the thread's context: one cut short by a stop
	// is no failure (the next turn shuts down).
	stopping := func(err error) error {
		if th.ctx.Err() != nil {
			return nil
		}
		return err
	}
	th.watch.mark(doingStartTasks)
	if err := th.tm.startTasks(false); err != nil {
		return stopping(err)
	}
	th.watch.mark(doingStartStandbys)
	if err := th.tm.startStandbys(); err != nil {
		return stopping(err)
	}
	th.watch.mark(doingRestore)
	if err := th.tm.restoreStep(); err != nil {
		return err
	}
	th.watch.mark(doingLookAtStandbys)
	if err := th.tm.lookAtStandbys(); err != nil {
		return stopping(err)
	}
	th.watch.mark(doingProcess)
	processed, err := th.process()
	if err != nil {
		return rejoinIfFatal(err)
	}
	th.watch.mark(doingPunctuate)
	if err := th.punctuateWallClock(); err != nil {
		return rejoinIfFatal(err)
	}
	th.watch.mark(doingAsyncCalls)
	th.waitForCalls(processed)
	th.snapshot(false)
	probe(&th.Health, th.log, &th.lastProbe, th.adm.get, th.cfg.Subscription)
	due := time.Since(th.lastCommit) >= th.cfg.CommitInterval || th.tm.reg.movedOutput()
	if due && !th.rebalancing() {
		if err := th.commit(false); err != nil {
			if th.ctx.Err() != nil {
				return nil // stopping while the commit waited: shutdown decides
			}
			return err
		}
	}
	return nil
}

// commitPostponeMax bounds how long past its interval a commit waits for
// a rebalance to complete (rebalancing).
const commitPostponeMax = 2 * time.Second

// rebalancing reports whether the group is completing a rebalance the
// thread's member takes part in (its SyncGroup under way: every member
// joined, the leader's assignment awaited): the coordinator refuses
// offset commits then, and a refused
// commit aborts the transaction (exactly-once) or rewinds (at-least-once),
// so the thread's every task would process its last interval again. The
// commit waits, as Kafka Streams' does during a rebalance, processing
// going on, for at most commitPostponeMax past its interval.
func (th *Thread) rebalancing() bool {
	w, ok := th.consumer.(kclient.RebalanceWatcher)
	return ok && w.Rebalancing() && time.Since(th.lastCommit) < th.cfg.CommitInterval+commitPostponeMax
}

func cloneCfg(c kclient.Config) kclient.Config {
	out := make(kclient.Config, len(c)+2)
	for k, v := range c {
		out[k] = v
	}
	return out
}
