package kclienttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// ErrFenced is the cause of the fatal error a fenced producer gets.
var ErrFenced = errors.New("kclienttest: producer fenced by a newer instance with the same transactional id")

// Consumer is a fake kclient.Consumer: a group member when it subscribes,
// an assign-only reader otherwise.
type Consumer struct {
	c             *Cluster
	readCommitted bool

	mu sync.Mutex // guards everything below
	// pending rebalances, delivered one per Poll: a revocation (revoke)
	// or an assignment of every partition of the subscribed topics.
	pending     []rebalanceEvent
	onRebalance func(kclient.Rebalance) error
	topics      []string
	assigned    map[kclient.TP]*position
	rr          int
	closed      bool
}

type rebalanceEvent struct {
	revoke bool
	lost   bool
}

type position struct {
	next   int64
	paused bool
}

// NewConsumer returns a consumer of the cluster; it reads committed
// records only when cfg has isolation.level read_committed. Its signature
// is engine.Config.NewConsumer's.
func (c *Cluster) NewConsumer(cfg kclient.Config) (kclient.Consumer, error) {
	c.mu.Lock()
	err := c.call("NewConsumer")
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &Consumer{c: c, readCommitted: configString(cfg, "isolation.level") == "read_committed",
		assigned: map[kclient.TP]*position{}}, nil
}

// Subscribe implements kclient.Consumer: the consumer becomes the group's
// member; the member it replaces loses its assignment at its next poll.
func (k *Consumer) Subscribe(topics []string, onRebalance func(kclient.Rebalance) error) error {
	k.c.mu.Lock()
	if err := k.c.call("Subscribe"); err != nil {
		k.c.mu.Unlock()
		return err
	}
	old := k.c.member
	k.c.member = k
	k.c.mu.Unlock()
	if old != nil && old != k {
		old.mu.Lock()
		old.pending = append(old.pending, rebalanceEvent{revoke: true, lost: true})
		old.mu.Unlock()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.topics, k.onRebalance = append([]string(nil), topics...), onRebalance
	k.pending = append(k.pending, rebalanceEvent{})
	return nil
}

// Poll implements kclient.Consumer: a pending rebalance first (its callback
// runs here, as librdkafka runs it inside poll), else the next readable
// record of an assigned, unpaused partition.
func (k *Consumer) Poll(timeout time.Duration) (*rt.RawRecord, error) {
	k.c.mu.Lock()
	err := k.c.call("Poll")
	k.c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if len(k.pending) > 0 {
		ev := k.pending[0]
		k.pending = k.pending[1:]
		k.mu.Unlock()
		k.rebalance(ev)
		return nil, nil
	}
	tps := k.sortedAssignment()
	k.mu.Unlock()
	for range tps {
		k.mu.Lock()
		tp := tps[k.rr%len(tps)]
		k.rr++
		pos := k.assigned[tp]
		k.mu.Unlock()
		if pos == nil || pos.paused {
			continue
		}
		if r := k.read(tp, pos); r != nil {
			return r, nil
		}
	}
	time.Sleep(min(timeout, time.Millisecond))
	return nil, nil
}

// read returns the next record of tp a reader with this isolation sees, and
// moves the position past it (and past markers and aborted records).
func (k *Consumer) read(tp kclient.TP, pos *position) *rt.RawRecord {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.c.topics[tp.Topic][tp.Partition]
	limit := p.end()
	if k.readCommitted {
		limit = p.stable()
	}
	pos.next = max(pos.next, p.start)
	for pos.next < limit {
		r := p.records[pos.next]
		pos.next++
		if r.Control || (r.txn != nil && r.txn.state == txnAborted && k.readCommitted) {
			continue
		}
		return &rt.RawRecord{Topic: tp.Topic, Partition: tp.Partition, Offset: r.Offset,
			Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Timestamp: r.Timestamp, Headers: r.Headers}
	}
	return nil
}

func (k *Consumer) sortedAssignment() []kclient.TP {
	tps := make([]kclient.TP, 0, len(k.assigned))
	for tp := range k.assigned {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool { return tps[i].String() < tps[j].String() })
	return tps
}

func (k *Consumer) rebalance(ev rebalanceEvent) {
	k.mu.Lock()
	cb := k.onRebalance
	if ev.revoke {
		tps := k.sortedAssignment()
		k.mu.Unlock()
		if len(tps) > 0 && cb != nil {
			cb(kclient.Rebalance{Revoked: tps, Lost: ev.lost})
		}
		k.mu.Lock()
		k.assigned = map[kclient.TP]*position{}
		k.mu.Unlock()
		return
	}
	topics := k.topics
	k.mu.Unlock()
	k.c.mu.Lock()
	if k.c.member != k {
		k.c.mu.Unlock()
		return // replaced meanwhile
	}
	var tps []kclient.TP
	starts := map[kclient.TP]int64{}
	for _, t := range topics {
		for i := range k.c.topics[t] {
			tp := kclient.TP{Topic: t, Partition: int32(i)}
			tps = append(tps, tp)
			starts[tp] = -1
			if om, ok := k.c.committed[tp]; ok {
				starts[tp] = om.off
			}
		}
	}
	k.c.mu.Unlock()
	k.mu.Lock()
	for _, tp := range tps {
		k.assigned[tp] = &position{next: max(starts[tp], 0)}
	}
	k.mu.Unlock()
	if len(tps) > 0 && cb != nil {
		cb(kclient.Rebalance{Assigned: tps})
	}
}

// Assign implements kclient.Consumer (assign-only readers).
func (k *Consumer) Assign(offsets map[kclient.TP]int64) error {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if err := k.c.call("Assign"); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.assigned = map[kclient.TP]*position{}
	for tp, off := range offsets {
		if off < 0 {
			off = 0
			if om, ok := k.c.committed[tp]; ok {
				off = om.off
			}
		}
		k.assigned[tp] = &position{next: off}
	}
	return nil
}

func (k *Consumer) setPaused(tps []kclient.TP, paused bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, tp := range tps {
		if p := k.assigned[tp]; p != nil {
			p.paused = paused
		}
	}
	return nil
}

// Pause implements kclient.Consumer.
func (k *Consumer) Pause(tps []kclient.TP) error { return k.setPaused(tps, true) }

// Resume implements kclient.Consumer.
func (k *Consumer) Resume(tps []kclient.TP) error { return k.setPaused(tps, false) }

// Seek implements kclient.Consumer; -2 is the beginning, -1 the end.
func (k *Consumer) Seek(tp kclient.TP, offset int64) error {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	pos := k.assigned[tp]
	if pos == nil {
		return errorf("Seek", "%s is not assigned", tp)
	}
	switch offset {
	case -2:
		offset = k.c.topics[tp.Topic][tp.Partition].start
	case -1:
		offset = k.c.topics[tp.Topic][tp.Partition].end()
	}
	pos.next = offset
	return nil
}

// Committed implements kclient.Consumer.
func (k *Consumer) Committed(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, map[kclient.TP]string, error) {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if err := k.c.call("Committed"); err != nil {
		return nil, nil, err
	}
	if err := ctxErr(ctx, "Committed"); err != nil {
		return nil, nil, err
	}
	offs, meta := map[kclient.TP]int64{}, map[kclient.TP]string{}
	for _, tp := range tps {
		offs[tp] = -1
		if om, ok := k.c.committed[tp]; ok {
			offs[tp] = om.off
			if om.meta != "" {
				meta[tp] = om.meta
			}
		}
	}
	return offs, meta, nil
}

// Position implements kclient.Consumer.
func (k *Consumer) Position(tps []kclient.TP) (map[kclient.TP]int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[kclient.TP]int64{}
	for _, tp := range tps {
		if p := k.assigned[tp]; p != nil {
			out[tp] = p.next
		}
	}
	return out, nil
}

// HighWatermark implements kclient.Consumer.
func (k *Consumer) HighWatermark(tp kclient.TP) int64 {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	ps, ok := k.c.topics[tp.Topic]
	if !ok || int(tp.Partition) >= len(ps) {
		return -1
	}
	return ps[tp.Partition].end()
}

// Commit implements kclient.Consumer: only the group's member may commit.
func (k *Consumer) Commit(offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if err := k.c.call("Commit"); err != nil {
		return err
	}
	if k.c.member != k {
		return errorf("Commit", "not a member of the group (fenced or rebalanced away)")
	}
	for tp, off := range offsets {
		k.c.committed[tp] = offsetMeta{off, meta[tp]}
	}
	return nil
}

// groupMetadata is what GroupMetadata hands to SendOffsets.
type groupMetadata struct{ member *Consumer }

// GroupMetadata implements kclient.Consumer.
func (k *Consumer) GroupMetadata() (any, error) { return groupMetadata{k}, nil }

// Close implements kclient.Consumer: a member's assignment is revoked
// first, inside Close, as librdkafka does.
func (k *Consumer) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	tps := k.sortedAssignment()
	cb := k.onRebalance
	k.mu.Unlock()
	k.c.mu.Lock()
	member := k.c.member == k
	k.c.mu.Unlock()
	// Still a member while the callback runs: a clean revocation may
	// commit.
	if member && cb != nil && len(tps) > 0 {
		cb(kclient.Rebalance{Revoked: tps})
	}
	k.c.mu.Lock()
	if k.c.member == k {
		k.c.member = nil
	}
	k.c.mu.Unlock()
	return nil
}

// Producer is a fake kclient.Producer; transactional when its config has a
// transactional.id.
type Producer struct {
	c     *Cluster
	txnID string
	epoch int64

	mu       sync.Mutex // guards delivErr and last
	delivErr error
	last     map[kclient.TP]int64

	// queued: records a non-transactional producer produced while the
	// cluster was down, delivered when it is back unless purged first.
	// Guarded by c.mu.
	queued []queuedRecord
}

type queuedRecord struct {
	tp kclient.TP
	r  *Record
}

// NewProducer returns a producer of the cluster. Its signature is
// engine.Config.NewProducer's.
func (c *Cluster) NewProducer(cfg kclient.Config) (kclient.Producer, error) {
	c.mu.Lock()
	err := c.call("NewProducer")
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	pr := &Producer{c: c, txnID: configString(cfg, "transactional.id"), last: map[kclient.TP]int64{}}
	c.mu.Lock()
	c.producers = append(c.producers, pr)
	c.mu.Unlock()
	return pr, nil
}

// FailDelivery makes the producer report a failed delivery (as a delivery
// report would) at its next WaitDelivered or DeliveryErr.
func (p *Producer) FailDelivery(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delivErr = err
}

// txn returns the producer's transaction state, or a fatal error when a
// newer producer fenced it. Called with p.c.mu held.
func (p *Producer) txn(op string) (*txnState, error) {
	st := p.c.txns[p.txnID]
	if st == nil || p.epoch == 0 {
		return nil, &kclient.TxnError{Op: op, Err: errorf(op, "transactions not initialized")}
	}
	if st.epoch != p.epoch {
		return nil, &kclient.TxnError{Op: op, Fatal: true, Fenced: true, Err: ErrFenced}
	}
	return st, nil
}

// Produce implements kclient.Producer: the record is in the log at once
// (part of the open transaction, for a transactional producer). While the
// cluster is down a non-transactional producer's records wait in its queue,
// as librdkafka's do, and are delivered when the cluster is back.
func (p *Producer) Produce(rec *rt.OutRecord) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.c.call("Produce"); err != nil {
		return err
	}
	ps, ok := p.c.topics[rec.Topic]
	if !ok {
		return errorf("Produce", "unknown topic %q", rec.Topic)
	}
	part := rec.Partition
	if part < 0 {
		part = kclient.KeyPartition(rec.Key, int32(len(ps)))
	}
	r := &Record{Key: bytes.Clone(rec.Key), Value: bytes.Clone(rec.Value), Timestamp: rec.Timestamp, Headers: rec.Headers}
	if p.txnID != "" {
		st, err := p.txn("Produce")
		if err != nil {
			if st == nil && !errors.Is(err, ErrFenced) {
				return err
			}
			return fmt.Errorf("%w: %w", kclient.ErrFatal, err)
		}
		if st.open == nil {
			return errorf("Produce", "no transaction open")
		}
		r.txn = st.open
		st.parts[kclient.TP{Topic: rec.Topic, Partition: part}] = true
	}
	tp := kclient.TP{Topic: rec.Topic, Partition: part}
	if p.c.down && p.txnID == "" {
		p.queued = append(p.queued, queuedRecord{tp, r})
		return nil
	}
	p.appendLocked(tp, r)
	return nil
}

// appendLocked writes r into tp's log: delivered. Called with p.c.mu held.
func (p *Producer) appendLocked(tp kclient.TP, r *Record) {
	l := p.c.topics[tp.Topic][tp.Partition]
	r.Offset = l.end()
	l.records = append(l.records, r)
	p.mu.Lock()
	p.last[tp] = r.Offset
	p.mu.Unlock()
}

// deliverQueuedLocked delivers the records queued while the cluster was
// down. Called with p.c.mu held.
func (p *Producer) deliverQueuedLocked() {
	for _, q := range p.queued {
		p.appendLocked(q.tp, q.r)
	}
	p.queued = nil
}

// Purge implements kclient.Producer: the queued records are dropped.
func (p *Producer) Purge() error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.c.calls["Purge"]++
	p.queued = nil
	return nil
}

// WaitDelivered implements kclient.Producer: every record is delivered at
// once; a failure set with FailDelivery is returned (and kept).
func (p *Producer) WaitDelivered(ctx context.Context) error {
	p.c.mu.Lock()
	err := p.c.call("WaitDelivered")
	p.c.mu.Unlock()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivErr
}

// LastOffsets implements kclient.Producer.
func (p *Producer) LastOffsets() map[kclient.TP]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.last
	p.last = map[kclient.TP]int64{}
	return out
}

// DeliveryErr implements kclient.Producer.
func (p *Producer) DeliveryErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.delivErr
	p.delivErr = nil
	return err
}

// InitTransactions implements kclient.Producer: it fences every earlier
// producer with the same transactional id and aborts its open transaction.
func (p *Producer) InitTransactions(ctx context.Context) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.c.call("InitTransactions"); err != nil {
		return err
	}
	p.epoch = p.c.initTxnLocked(p.txnID)
	return nil
}

// BeginTransaction implements kclient.Producer.
func (p *Producer) BeginTransaction() error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.c.call("BeginTransaction"); err != nil {
		return err
	}
	st, err := p.txn("BeginTransaction")
	if err != nil {
		return err
	}
	if st.open != nil {
		return &kclient.TxnError{Op: "BeginTransaction", Err: errorf("BeginTransaction", "a transaction is already open")}
	}
	st.open, st.parts, st.offsets = &txnRecords{}, map[kclient.TP]bool{}, map[kclient.TP]offsetMeta{}
	return nil
}

// SendOffsets implements kclient.Producer: a consumer that is no longer the
// group's member gets an abortable error (its generation is stale).
func (p *Producer) SendOffsets(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string, gm any) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.c.call("SendOffsets"); err != nil {
		return err
	}
	st, err := p.txn("SendOffsets")
	if err != nil {
		return err
	}
	if st.open == nil {
		return &kclient.TxnError{Op: "SendOffsets", Err: errorf("SendOffsets", "no transaction open")}
	}
	if g, ok := gm.(groupMetadata); !ok || p.c.member != g.member {
		return &kclient.TxnError{Op: "SendOffsets", Abortable: true, Err: errorf("SendOffsets", "stale group generation")}
	}
	for tp, off := range offsets {
		st.offsets[tp] = offsetMeta{off, meta[tp]}
	}
	return nil
}

// CommitTransaction implements kclient.Producer: a scripted failure leaves
// the transaction open (an abortable one must then be aborted).
func (p *Producer) CommitTransaction(ctx context.Context) error {
	return p.endTxn("CommitTransaction", txnCommitted)
}

// AbortTransaction implements kclient.Producer.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	return p.endTxn("AbortTransaction", txnAborted)
}

func (p *Producer) endTxn(op string, state int) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.c.call(op); err != nil {
		return err
	}
	st, err := p.txn(op)
	if err != nil {
		return err
	}
	if st.open == nil {
		if state == txnAborted {
			return nil
		}
		return &kclient.TxnError{Op: op, Err: errorf(op, "no transaction open")}
	}
	p.c.endTxnLocked(st, state)
	return nil
}

// Close implements kclient.Producer. An open transaction stays open until
// a newer producer with the same transactional id initializes (as a
// broker keeps it until it times out or is fenced).
func (p *Producer) Close() {}

// Admin is a fake kclient.Admin.
type Admin struct{ c *Cluster }

// NewAdmin returns an admin client of the cluster.
func (c *Cluster) NewAdmin() *Admin { return &Admin{c} }

// Partitions implements kclient.Admin.
func (a *Admin) Partitions(ctx context.Context, topics []string) (map[string]int32, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("Partitions"); err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, t := range topics {
		if ps, ok := a.c.topics[t]; ok {
			out[t] = int32(len(ps))
		}
	}
	return out, nil
}

// CreateTopics implements kclient.Admin.
func (a *Admin) CreateTopics(ctx context.Context, specs []kclient.TopicSpec) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("CreateTopics"); err != nil {
		return err
	}
	for _, s := range specs {
		a.c.createLocked(s.Name, s.Partitions)
	}
	return nil
}

// Offsets implements kclient.Admin.
func (a *Admin) Offsets(ctx context.Context, tps []kclient.TP, readCommitted bool) (map[kclient.TP]int64, map[kclient.TP]int64, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("Offsets"); err != nil {
		return nil, nil, err
	}
	if err := ctxErr(ctx, "Offsets"); err != nil {
		return nil, nil, err
	}
	start, end := map[kclient.TP]int64{}, map[kclient.TP]int64{}
	for _, tp := range tps {
		ps, ok := a.c.topics[tp.Topic]
		if !ok || int(tp.Partition) >= len(ps) {
			return nil, nil, errorf("Offsets", "unknown partition %s", tp)
		}
		p := ps[tp.Partition]
		start[tp], end[tp] = p.start, p.end()
		if readCommitted {
			end[tp] = p.stable()
		}
	}
	return start, end, nil
}

// DeleteRecords implements kclient.Admin.
func (a *Admin) DeleteRecords(ctx context.Context, before map[kclient.TP]int64) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("DeleteRecords"); err != nil {
		return err
	}
	for tp, off := range before {
		p := a.c.topics[tp.Topic][tp.Partition]
		p.start = max(p.start, min(off, p.end()))
	}
	return nil
}

// Close implements kclient.Admin.
func (a *Admin) Close() {}
