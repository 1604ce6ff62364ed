package engine

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// Send implements rt.Collector: records go to the producer, inside the
// open transaction under exactly-once.
func (th *Thread) Send(t *rt.Task, rec *rt.OutRecord) error {
	if err := th.guarantee.beforeSend(th.ctx); err != nil {
		return err
	}
	th.dirty = true
	if rec.Store != "" {
		th.stores.sent(t.ID(), rec)
	}
	if err := th.producer.Produce(rec); err != nil {
		return err // a refused record (rt.ErrRecordRefused) goes to the handler
	}
	th.Stats.Produced.Add(1)
	if m := th.cfg.Metrics; m != nil {
		c := th.produced[rec.Topic]
		if c == nil {
			c = m.Produced.WithLabelValues(rec.Topic)
			th.produced[rec.Topic] = c
		}
		c.Inc()
	}
	return nil
}

// Partitions implements rt.Collector.
func (th *Thread) Partitions(topic string) (int32, error) { return th.sinks.partitions(th, topic) }

// dropUncommitted forgets everything since the last commit: the open
// transaction (aborted), delivery failures, the changelog ends to store,
// the write sets, and what each task's caches held. An error means the
// producer could not abort: it is unusable.
func (th *Thread) dropUncommitted(ctx context.Context) error {
	err := th.guarantee.abort(ctx)
	th.stores.discard()
	th.tm.discardUncommitted()
	th.dirty = false
	return err
}

// commit makes everything processed since the last commit durable: flush
// the stores' caches (forwarding what they held back) while the input
// offsets go out, commit the records sent and the offsets together
// (guarantee.go), then apply the stores' writes with their changelog
// offsets in one atomic write per backend. final: the thread is about to
// let its tasks go (revocation, shutdown): their stores' synced times are
// written whatever markSynced's pace.
func (th *Thread) commit(final bool) error {
	start := time.Now()
	at := th.cfg.WallClock()
	th.lastCommit = start
	// A commit runs in the loop, in a rebalance's callback and at a stop:
	// what the thread did before it is what it does after.
	defer th.watch.mark(th.watch.mark(doingCommitOffsets))
	// What the stores' reads hold in Pebble is let go every interval, so
	// that an idle thread does not keep old memtables and tables alive.
	defer th.stores.pebble.ReleaseReads()
	// The offsets do not depend on the flush (it forwards what the caches
	// held back; no input is read), so they go out first and the two
	// overlap.
	offsets, err := th.commitOffsets()
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(th.ctx)
	defer cancel()
	meta := th.tm.reg.offsetMeta(offsets)
	if err := th.guarantee.sendOffsets(ctx, offsets, meta); err != nil {
		return th.commitFailed(err)
	}
	defer th.guarantee.offsetsSent() //nolint:errcheck // never left running, whatever the path out
	th.watch.mark(doingDrainCalls)
	if err := th.drainCalls(); err != nil {
		th.guarantee.offsetsSent() //nolint:errcheck // no commit follows: the failure decides
		return rejoinIfFatal(err)
	}
	th.watch.mark(doingFlushCaches)
	for _, tk := range th.tm.reg.order {
		if tk.state != taskRunning {
			continue
		}
		if err := tk.t.Flush(); err != nil {
			th.guarantee.offsetsSent() //nolint:errcheck // no commit follows: the failure decides
			return rejoinIfFatal(err)
		}
	}
	if !th.dirty && !th.guarantee.pending() && len(offsets) == 0 {
		// Nothing new; positions past transaction markers are committed
		// too. The stores are still in step with their changelogs.
		th.tm.reg.committedAt(nil)
		if th.stores.markSynced(th.tm.reg.runningIDs(), at, final) {
			return th.stores.apply()
		}
		return nil
	}
	ends, err := th.guarantee.commit(ctx, offsets, meta, th.stores.written)
	if err != nil {
		return th.commitFailed(err)
	}
	th.stores.storeEnds(ends, th.log)
	th.stores.markSynced(th.tm.reg.runningIDs(), at, final)
	th.watch.mark(doingApplyStores)
	if err := th.stores.apply(); err != nil {
		return err
	}
	th.tm.reg.committedAt(offsets)
	th.dirty = false
	th.Health.up(th.log)
	th.Stats.Commits.Add(1)
	th.Stats.CommitNanos.Add(time.Since(start).Nanoseconds())
	if m := th.cfg.Metrics; m != nil {
		m.CommitDuration.Observe(time.Since(start).Seconds())
	}
	th.watch.mark(doingPurge)
	return th.maybePurge()
}

// logEnds returns a function that reads partitions' high watermarks with
// adm, asking the brokers once for at most five seconds (exactly-once's
// commit, for changelogs whose end it does not know: during an outage they
// stay unknown a while longer).
func logEnds(adm *lazyAdmin) logEndsFunc {
	return func(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, error) {
		a, err := adm.get()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, ends, err := a.Offsets(ctx, tps, false)
		return ends, err
	}
}

// commitOffsets returns the offsets to commit: after the last processed
// record, or — for a partition whose buffer is empty — the consumer's
// position, which moves past transaction markers, as Kafka Streams commits
// (so the group's lag can reach zero on transactional input).
func (th *Thread) commitOffsets() (map[kclient.TP]int64, error) {
	offsets := map[kclient.TP]int64{}
	var drained []kclient.TP
	for tp, p := range th.tm.reg.parts {
		if p.task.state != taskRunning {
			continue
		}
		if p.size() == 0 {
			drained = append(drained, tp)
		}
		if p.next >= 0 {
			offsets[tp] = p.next
		}
	}
	if len(drained) > 0 {
		pos, err := th.consumer.Position(drained)
		if err != nil {
			return nil, fmt.Errorf("reading consumer positions: %w", err)
		}
		for tp, off := range pos {
			if off > offsets[tp] && (th.tm.reg.parts[tp].next >= 0 || off > th.tm.reg.committed[tp]) {
				offsets[tp] = off
			}
		}
	}
	for tp, off := range offsets {
		if c, ok := th.tm.reg.committed[tp]; ok && off <= c {
			delete(offsets, tp)
		}
	}
	return offsets, nil
}

// maybePurge deletes repartition records below the committed offsets,
// every 30 seconds. A failure is logged and tried again next time, unless
// the ACLs deny it: that stops the app (the topics would grow for ever).
func (th *Thread) maybePurge() error {
	if time.Since(th.lastPurge) < 30*time.Second {
		return nil
	}
	before := map[kclient.TP]int64{}
	for tp := range th.tm.reg.parts {
		if off, ok := th.tm.reg.committed[tp]; ok && off > 0 && isRepartition(th.cfg, tp.Topic) {
			before[tp] = off
		}
	}
	if len(before) == 0 {
		return nil
	}
	th.lastPurge = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm, err := th.adm.get()
	if err == nil {
		err = adm.DeleteRecords(ctx, before)
	}
	if kclient.IsSecurity(err) {
		return fmt.Errorf("purging repartition topics: %w", err)
	}
	if err != nil {
		th.log.Warn("purging repartition topics", zap.Error(err))
	}
	return nil
}

// isRepartition reports whether topic is one of the app's repartition
// topics.
func isRepartition(cfg *Config, topic string) bool {
	for _, t := range cfg.Program.InternalTopics {
		if t.Repartition && rt.InternalTopicName(cfg.AppID, t.Name) == topic {
			return true
		}
	}
	return false
}

// callCtx bounds a call to the brokers of the thread whose context is
// thread: while the thread runs, only by the
// thread stopping (an outage is waited out), and then only stopGrace later,
// so that a commit under way when the app is told to stop completes rather
// than aborting (the tasks' next owner would process its interval again);
// once the thread stops, by a minute.
func callCtx(thread context.Context) (context.Context, context.CancelFunc) {
	if thread.Err() != nil {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(thread))
	stop := context.AfterFunc(thread, func() {
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			cancel()
		}
	})
	return ctx, func() { stop(); cancel() }
}

// stopGrace is how long a call under way when the thread is told to stop
// may still take: a commit takes milliseconds while the brokers answer;
// through an outage the stop goes on after it.
const stopGrace = 10 * time.Second
