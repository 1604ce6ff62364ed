package engine

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/stores"
)

// errRejoin ends a thread's group session so it starts a new one with new
// clients: what a fenced producer or a fatal client error needs.
var errRejoin = errors.New("engine: rejoining the group with new clients")

// Thread is one stream thread: one goroutine owning a consumer, a producer,
// its tasks, their record buffers and a write set per backend.
type Thread struct {
	idx int
	cfg *Config
	log *zap.Logger
	ctx context.Context

	consumer kclient.Consumer
	producer kclient.Producer
	restorer kclient.Consumer

	wsP, wsM *stores.WriteSet
	cache    *stores.Cache

	tasks     map[processor.TaskID]*task
	order     []*task // tasks in id order, for fair processing
	parts     map[kclient.TP]*partition
	committed map[kclient.TP]int64
	// committedTime: the stream time committed with each partition's
	// offset, restored into tasks (re)built for it.
	committedTime map[kclient.TP]int64

	txnOpen bool
	dirty   bool
	// changelogs written since the last commit: their end offsets are
	// stored with the stores' writes.
	written    map[kclient.TP]changelogRef
	lastCommit time.Time
	lastPurge  time.Time
	state      ThreadState
	cbErr      error // an error inside the rebalance callback

	// closing: the consumer is being closed; the rebalance it triggers must
	// not commit (librdkafka discards queued records then and moves its
	// positions past them).
	closing bool

	restoring      map[kclient.TP]*restoreTarget
	restoreAssign  bool
	restoreLogTime time.Time

	Stats     ThreadStats
	snapshots snapshotter
	produced  map[string]prometheus.Counter // by topic, when metrics are on
}

type changelogRef struct {
	task  processor.TaskID
	store string
}

type task struct {
	t         *rt.Task
	id        processor.TaskID
	parts     []*partition
	restoring int // changelog partitions still restoring
	idleSince time.Time
}

type partition struct {
	tp       kclient.TP
	consumed prometheus.Counter // nil without metrics
	task     *task
	buf      []*rt.RawRecord
	head     int
	paused   bool
	next     int64 // offset after the last processed record, -1 none yet
}

func (p *partition) size() int { return len(p.buf) - p.head }

func (p *partition) pop() *rt.RawRecord {
	r := p.buf[p.head]
	p.buf[p.head] = nil
	p.head++
	if p.head == len(p.buf) {
		p.buf, p.head = p.buf[:0], 0
	}
	return r
}

// NewThread returns stream thread idx.
func NewThread(idx int, cfg *Config) *Thread {
	th := &Thread{idx: idx, cfg: cfg, log: cfg.Log.With(zap.Int("thread", idx))}
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
	th.ctx = ctx
	th.setState(ThreadStarting)
	for {
		err := th.session(ctx)
		switch {
		case errors.Is(err, errRejoin):
			th.log.Warn("rejoining the group with a new consumer and producer", zap.Error(err))
			continue
		case err != nil:
			th.setState(ThreadFailed)
			return err
		}
		th.setState(ThreadStopped)
		return nil
	}
}

func (th *Thread) transactionalID() string {
	return fmt.Sprintf("%s-%s-%d", th.cfg.AppID, th.cfg.ProcessID, th.idx)
}

// session is one group membership: new clients, subscribe, loop.
func (th *Thread) session(ctx context.Context) (err error) {
	th.tasks = map[processor.TaskID]*task{}
	th.order = nil
	th.parts = map[kclient.TP]*partition{}
	th.committed = map[kclient.TP]int64{}
	th.committedTime = map[kclient.TP]int64{}
	th.restoring = map[kclient.TP]*restoreTarget{}
	th.txnOpen, th.dirty, th.cbErr, th.closing = false, false, nil, false
	th.written = map[kclient.TP]changelogRef{}
	th.wsP = stores.NewWriteSet(th.cfg.Pebble)
	th.wsM = stores.NewWriteSet(th.cfg.Memory)
	th.retireCache()
	th.cache = stores.NewCache(th.cfg.CacheBytes)
	th.produced = map[string]prometheus.Counter{}

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
	if th.consumer, err = th.cfg.NewConsumer(ccfg); err != nil {
		th.producer.Close()
		return fmt.Errorf("creating consumer: %w", err)
	}
	clean := false
	defer func() {
		if !clean {
			th.closeTasksDirty()
		}
		if th.restorer != nil {
			th.restorer.Close()
			th.restorer = nil
		}
		th.closing = true
		if cerr := th.consumer.Close(); cerr != nil && err == nil && clean {
			th.log.Warn("closing consumer", zap.Error(cerr))
		}
		th.producer.Close()
	}()
	if th.cfg.ExactlyOnce {
		ictx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := th.producer.InitTransactions(ictx)
		cancel()
		if err != nil {
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
			err := th.shutdown()
			clean = err == nil
			return err
		}
		if err := th.step(); err != nil {
			return err
		}
	}
}

// step is one turn of the loop: poll, restore, process, punctuate, commit.
func (th *Thread) step() error {
	if err := th.poll(); err != nil {
		return err
	}
	if th.cbErr != nil {
		return th.cbErr
	}
	if len(th.restoring) > 0 {
		if err := th.restoreStep(); err != nil {
			return err
		}
	}
	if err := th.process(); err != nil {
		return rejoinIfFatal(err)
	}
	if err := th.punctuateWallClock(); err != nil {
		return rejoinIfFatal(err)
	}
	th.snapshot(false)
	if time.Since(th.lastCommit) >= th.cfg.CommitInterval {
		return th.commit()
	}
	return nil
}

// rejoinIfFatal turns a failure of an unusable client (a fenced producer)
// into a rejoin with new clients; other errors stay fatal to the app.
func rejoinIfFatal(err error) error {
	if err != nil && errors.Is(err, kclient.ErrFatal) && !errors.Is(err, errRejoin) {
		return fmt.Errorf("%w: %w", errRejoin, err)
	}
	return err
}

func cloneCfg(c kclient.Config) kclient.Config {
	out := make(kclient.Config, len(c)+2)
	for k, v := range c {
		out[k] = v
	}
	return out
}

// poll moves records from the consumer into the partition buffers. The
// buffers are bounded as a whole (MaxBufferedRecords per partition): while
// they are full the thread does not poll, and librdkafka, whose own queue
// is bounded (queued.max.messages.kbytes), stops fetching. Pausing single
// partitions would make librdkafka drop what it prefetched for them and
// fetch it again on resume — measured: it cut throughput by an order of
// magnitude — so partitions are paused only while their task restores.
func (th *Thread) poll() error {
	buffered := 0
	for _, p := range th.parts {
		if p.task.restoring == 0 {
			buffered += p.size()
		}
	}
	limit := th.cfg.MaxBufferedRecords * max(len(th.parts), 1)
	if buffered >= limit {
		return nil
	}
	timeout := 50 * time.Millisecond
	if buffered > 0 || len(th.restoring) > 0 {
		timeout = 0
	}
	for ; buffered < limit; buffered++ {
		r, err := th.consumer.Poll(timeout)
		timeout = 0
		if err != nil {
			if errors.Is(err, kclient.ErrFatal) {
				return fmt.Errorf("%w: %v", errRejoin, err)
			}
			th.log.Warn("consumer error", zap.Error(err))
			return nil
		}
		if r == nil || th.cbErr != nil {
			return nil
		}
		p := th.parts[kclient.TP{Topic: r.Topic, Partition: r.Partition}]
		if p == nil {
			continue // a partition no longer ours
		}
		p.task.t.Prepare(r) // timestamps from extractors, for ordering
		p.buf = append(p.buf, r)
		th.Stats.Consumed.Add(1)
		if p.consumed != nil {
			p.consumed.Inc()
		}
	}
	return nil
}

// next picks the task's partition whose head record has the lowest
// timestamp; with MaxTaskIdle, a task with an empty partition waits for it
// that long first.
func (th *Thread) next(tk *task, now time.Time) *partition {
	var best *partition
	empty := false
	for _, p := range tk.parts {
		if p.size() == 0 {
			empty = true
			continue
		}
		if best == nil || p.buf[p.head].Timestamp < best.buf[best.head].Timestamp {
			best = p
		}
	}
	if best == nil {
		tk.idleSince = time.Time{}
		return nil
	}
	if empty && th.cfg.MaxTaskIdle > 0 {
		if tk.idleSince.IsZero() {
			tk.idleSince = now
		}
		if now.Sub(tk.idleSince) < th.cfg.MaxTaskIdle {
			return nil
		}
	} else {
		tk.idleSince = time.Time{}
	}
	return best
}

// process runs buffered records through their tasks, round-robin, up to a
// budget so the loop keeps polling and committing on time.
func (th *Thread) process() error {
	now := time.Now()
	deadline := now.Add(100 * time.Millisecond)
	for n := 0; n < 20_000; {
		progressed := false
		for _, tk := range th.order {
			if tk.restoring > 0 {
				continue
			}
			for i := 0; i < 100; i++ {
				p := th.next(tk, now)
				if p == nil {
					break
				}
				r := p.pop()
				var err error
				if m := th.cfg.Metrics; m != nil {
					t0 := time.Now()
					err = tk.t.Process(r)
					m.ProcessLatency.Observe(time.Since(t0).Seconds())
					m.EndToEnd.Observe(float64(t0.UnixMilli()-r.Timestamp) / 1000)
				} else {
					err = tk.t.Process(r)
				}
				p.next = r.Offset + 1
				th.dirty = true
				progressed = true
				n++
				if err != nil {
					return err
				}
			}
		}
		if !progressed || time.Now().After(deadline) {
			break
		}
	}
	return nil
}

func (th *Thread) punctuateWallClock() error {
	now := th.cfg.WallClock()
	for _, tk := range th.order {
		if tk.restoring > 0 {
			continue
		}
		if err := tk.t.PunctuateWallClock(now); err != nil {
			return err
		}
	}
	return nil
}

// Send implements rt.Collector: records go to the producer, inside the
// open transaction under exactly-once.
func (th *Thread) Send(t *rt.Task, rec *rt.OutRecord) error {
	if err := th.beginTxn(); err != nil {
		return err
	}
	th.dirty = true
	if rec.Store != "" {
		tp := kclient.TP{Topic: rec.Topic, Partition: rec.Partition}
		if _, ok := th.written[tp]; !ok {
			th.written[tp] = changelogRef{t.ID(), rec.Store}
		}
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
	return th.producer.Produce(rec)
}

func (th *Thread) beginTxn() error {
	if !th.cfg.ExactlyOnce || th.txnOpen {
		return nil
	}
	if err := th.producer.BeginTransaction(); err != nil {
		var te *kclient.TxnError
		if errors.As(err, &te) && te.Fatal {
			return fmt.Errorf("%w: %v", kclient.ErrFatal, err)
		}
		return err
	}
	th.txnOpen = true
	return nil
}

// commit makes everything processed since the last commit durable: flush
// the stores' caches (forwarding what they held back), flush the producer,
// commit the input offsets (in the transaction under exactly-once), then
// apply the stores' writes with their changelog offsets in one atomic write
// per backend.
func (th *Thread) commit() error {
	start := time.Now()
	th.lastCommit = start
	for _, tk := range th.order {
		if tk.restoring > 0 {
			continue
		}
		if err := tk.t.Flush(); err != nil {
			return rejoinIfFatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := th.producer.Flush(ctx); err != nil {
		if th.cfg.ExactlyOnce {
			th.log.Warn("producer flush failed; aborting the transaction", zap.Error(err))
			return th.abortAndRewind(err)
		}
		return fmt.Errorf("producing records failed: %w", err)
	}
	offsets, err := th.commitOffsets()
	if err != nil {
		return err
	}
	if !th.dirty && !th.txnOpen && len(offsets) == 0 {
		return nil // nothing new; positions past transaction markers are committed too
	}
	if th.cfg.ExactlyOnce {
		if err := th.beginTxn(); err != nil {
			return th.txnFailed(err)
		}
		if len(offsets) > 0 {
			gm, err := th.consumer.GroupMetadata()
			if err != nil {
				return th.txnFailed(err)
			}
			if err := th.producer.SendOffsets(ctx, offsets, th.offsetMeta(offsets), gm); err != nil {
				return th.txnFailed(err)
			}
		}
		if err := th.producer.CommitTransaction(ctx); err != nil {
			return th.txnFailed(err)
		}
		th.txnOpen = false
	} else if err := th.consumer.Commit(offsets, th.offsetMeta(offsets)); err != nil {
		// The records are processed again by whoever owns the partitions
		// next: at-least-once allows it.
		th.log.Warn("committing offsets failed", zap.Error(err))
	}
	if err := th.producer.DeliveryErr(); err != nil && !th.cfg.ExactlyOnce {
		return fmt.Errorf("producing records failed: %w", err)
	}
	if err := th.storeChangelogEnds(ctx); err != nil {
		return err
	}
	if err := th.wsM.Commit(); err != nil {
		return fmt.Errorf("committing in-memory stores: %w", err)
	}
	if err := th.wsP.Commit(); err != nil {
		return fmt.Errorf("committing stores: %w", err)
	}
	for tp, off := range offsets {
		th.committed[tp] = off
		if p := th.parts[tp]; p != nil && p.task.t.StreamTime() >= 0 {
			th.committedTime[tp] = p.task.t.StreamTime()
		}
	}
	th.dirty = false
	th.Stats.Commits.Add(1)
	th.Stats.CommitNanos.Add(time.Since(start).Nanoseconds())
	if m := th.cfg.Metrics; m != nil {
		m.CommitDuration.Observe(time.Since(start).Seconds())
	}
	th.maybePurge()
	return nil
}

// storeChangelogEnds records, with the stores' writes, where each written
// changelog partition ends now that its records are committed: the high
// watermark. Only this task writes its changelog partition, so everything
// below it is this store's history (or aborted records and transaction
// markers, which restore skips anyway).
func (th *Thread) storeChangelogEnds(ctx context.Context) error {
	if len(th.written) == 0 {
		return nil
	}
	tps := make([]kclient.TP, 0, len(th.written))
	for tp := range th.written {
		tps = append(tps, tp)
	}
	_, hwm, err := th.cfg.Admin.Offsets(ctx, tps, false)
	if err != nil {
		return fmt.Errorf("reading changelog ends after commit: %w", err)
	}
	for tp, ref := range th.written {
		th.writeSet(ref.store).SetOffset(ref.task.String(), ref.store, hwm[tp])
	}
	clear(th.written)
	return nil
}

// commitOffsets returns the offsets to commit: after the last processed
// record, or — for a partition whose buffer is empty — the consumer's
// position, which moves past transaction markers, as Kafka Streams commits
// (so the group's lag can reach zero on transactional input).
func (th *Thread) commitOffsets() (map[kclient.TP]int64, error) {
	offsets := map[kclient.TP]int64{}
	var drained []kclient.TP
	for tp, p := range th.parts {
		if p.task.restoring > 0 {
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
			if off > offsets[tp] && (th.parts[tp].next >= 0 || off > th.committed[tp]) {
				offsets[tp] = off
			}
		}
	}
	for tp, off := range offsets {
		if c, ok := th.committed[tp]; ok && off <= c {
			delete(offsets, tp)
		}
	}
	return offsets, nil
}

// txnFailed handles a failed transactional call: fatal errors (a fenced
// producer) end the session; others abort and rewind.
func (th *Thread) txnFailed(err error) error {
	var te *kclient.TxnError
	if errors.As(err, &te) && te.Fatal {
		return fmt.Errorf("%w: %v", errRejoin, err)
	}
	th.log.Warn("transaction failed; aborting", zap.Error(err))
	return th.abortAndRewind(err)
}

// abortAndRewind aborts the open transaction and puts the thread back at
// its last commit: write sets and caches dropped, tasks rebuilt from the
// committed stores, partitions rewound to the committed offsets.
func (th *Thread) abortAndRewind(cause error) error {
	th.Stats.Aborts.Add(1)
	if th.txnOpen {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := th.producer.AbortTransaction(ctx)
		cancel()
		th.txnOpen = false
		var te *kclient.TxnError
		if err != nil && (!errors.As(err, &te) || te.Fatal) {
			return fmt.Errorf("%w: aborting after %v: %v", errRejoin, cause, err)
		}
	}
	th.producer.DeliveryErr()
	clear(th.written)
	th.wsP.Discard()
	th.wsM.Discard()
	for _, tk := range th.order {
		tk.t.Discard()
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
	th.dirty = false
	th.log.Info("transaction aborted; rewound to the last commit", zap.Error(cause))
	return nil
}

func (th *Thread) loggedStores(tk *task) []string {
	var out []string
	st := th.cfg.Program.Subtopologies[tk.id.Subtopology]
	for _, s := range st.Stores {
		if spec := s.Builder.Spec(); spec.Logged {
			out = append(out, spec.Name)
		}
	}
	return out
}

func (th *Thread) writeSet(store string) *stores.WriteSet {
	if th.cfg.Program.Stores[store].Builder.Spec().InMemory {
		return th.wsM
	}
	return th.wsP
}

func (th *Thread) backend(store string) stores.Backend {
	if th.cfg.Program.Stores[store].Builder.Spec().InMemory {
		return th.cfg.Memory
	}
	return th.cfg.Pebble
}

func (th *Thread) newRTTask(id processor.TaskID) (*rt.Task, error) {
	return rt.NewTask(rt.TaskConfig{
		ID:          id,
		AppID:       th.cfg.AppID,
		Program:     th.cfg.Program,
		Subtopology: th.cfg.Program.Subtopologies[id.Subtopology],
		WriteSet: func(inMemory bool) *stores.WriteSet {
			if inMemory {
				return th.wsM
			}
			return th.wsP
		},
		Cache:        th.cache,
		Collector:    th,
		WallClock:    th.cfg.WallClock,
		Handlers:     th.cfg.Handlers,
		Log:          th.log.With(zap.Stringer("task", id)),
		EmitInterval: 1000,
		Globals:      rt.GlobalViews(th.cfg.Program, th.cfg.Pebble, th.cfg.Memory),
	})
}

// maybePurge deletes repartition records below the committed offsets,
// every 30 seconds.
func (th *Thread) maybePurge() {
	if time.Since(th.lastPurge) < 30*time.Second {
		return
	}
	th.lastPurge = time.Now()
	before := map[kclient.TP]int64{}
	for tp := range th.parts {
		if off, ok := th.committed[tp]; ok && off > 0 && th.isRepartition(tp.Topic) {
			before[tp] = off
		}
	}
	if len(before) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := th.cfg.Admin.DeleteRecords(ctx, before); err != nil {
		th.log.Warn("purging repartition topics", zap.Error(err))
	}
}

func (th *Thread) isRepartition(topic string) bool {
	for _, t := range th.cfg.Program.InternalTopics {
		if t.Repartition && rt.InternalTopicName(th.cfg.AppID, t.Name) == topic {
			return true
		}
	}
	return false
}

// onRebalance runs inside Consumer.Poll.
func (th *Thread) onRebalance(rb kclient.Rebalance) error {
	th.Stats.Rebalances.Add(1)
	th.setState(ThreadRebalancing)
	if len(rb.Revoked) > 0 {
		th.revoke(rb.Lost)
	}
	if len(rb.Assigned) > 0 && th.cbErr == nil {
		if err := th.assign(rb.Assigned); err != nil {
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
		if th.dirty || th.txnOpen {
			lost = true
		} else {
			th.tasks, th.order, th.parts = map[processor.TaskID]*task{}, nil, map[kclient.TP]*partition{}
			return
		}
	}
	if !lost {
		if err := th.commit(); err != nil {
			if errors.Is(err, errRejoin) {
				th.cbErr = err
			}
			th.log.Warn("commit on revocation failed; closing tasks without committing", zap.Error(err))
			lost = true
		}
	}
	if lost {
		th.log.Warn("partitions lost; dropping uncommitted work")
		if th.txnOpen {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			th.producer.AbortTransaction(ctx)
			cancel()
			th.txnOpen = false
		}
		th.producer.DeliveryErr()
		clear(th.written)
		th.closeTasksDirty()
	} else {
		for _, tk := range th.order {
			th.retireTask(tk.t)
			if err := tk.t.Close(); err != nil {
				th.log.Warn("closing task", zap.Stringer("task", tk.id), zap.Error(err))
			}
		}
	}
	th.tasks = map[processor.TaskID]*task{}
	th.order = nil
	th.parts = map[kclient.TP]*partition{}
	th.committed = map[kclient.TP]int64{}
	th.committedTime = map[kclient.TP]int64{}
	th.clearRestore()
	th.dirty = false
	th.snapshot(true)
	th.log.Info("partitions revoked", zap.Bool("lost", lost))
}

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
	ctx, cancel := context.WithTimeout(th.ctx, 120*time.Second)
	defer cancel()
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

func (th *Thread) committedOffsets(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, map[kclient.TP]string, error) {
	for {
		c, meta, err := th.consumer.Committed(ctx, tps)
		if err == nil {
			return c, meta, nil
		}
		if ctx.Err() != nil {
			return nil, nil, err
		}
		th.log.Info("committed offsets not available yet; retrying", zap.Error(err))
		time.Sleep(200 * time.Millisecond)
	}
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
	if err := th.commit(); err != nil {
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

// Stream time survives restarts and hand-overs: each committed offset
// carries its task's stream time as metadata, in Kafka Streams' encoding
// (base64 of a version byte, 1, and the 8-byte big-endian timestamp), so
// records that were late stay late after a restart.

func (th *Thread) offsetMeta(offsets map[kclient.TP]int64) map[kclient.TP]string {
	meta := make(map[kclient.TP]string, len(offsets))
	for tp := range offsets {
		if p := th.parts[tp]; p != nil {
			if ts := p.task.t.StreamTime(); ts >= 0 {
				meta[tp] = encodeStreamTime(ts)
			}
		}
	}
	return meta
}

func encodeStreamTime(ts int64) string {
	b := binary.BigEndian.AppendUint64([]byte{1}, uint64(ts))
	return base64.StdEncoding.EncodeToString(b)
}

// decodeStreamTime reads the stream time from offset metadata written by
// eddy or by Kafka Streams (versions 1 and 2 start alike).
func decodeStreamTime(meta string) (int64, bool) {
	b, err := base64.StdEncoding.DecodeString(meta)
	if err != nil || len(b) < 9 || (b[0] != 1 && b[0] != 2) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[1:9])), true
}

// restoreStreamTime starts a (re)built task at the stream time committed
// for its partitions.
func (th *Thread) restoreStreamTime(tk *task) {
	for _, p := range tk.parts {
		if ts, ok := th.committedTime[p.tp]; ok {
			tk.t.AdvanceStreamTime(ts)
		}
	}
}
