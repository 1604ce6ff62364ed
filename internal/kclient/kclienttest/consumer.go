package kclienttest

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

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
	// only: a cooperative rebalance's partitions (revoked, or assigned
	// besides what the member keeps); nil: the whole assignment.
	only []kclient.TP
	// standby: an assignment's standby tasks, warmup the warm-ups among
	// them.
	standby, warmup []processor.TaskID
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

// ReportState implements kclient.StateReporter: the cluster keeps state,
// the member's state function (Cluster.MemberState calls it).
func (k *Consumer) ReportState(state func() kclient.MemberState) {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	k.c.state = state
}

// Rebalancing implements kclient.RebalanceWatcher (Cluster.SetRebalancing).
func (k *Consumer) Rebalancing() bool {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	return k.c.rebalancing
}

// Rejoin implements kclient.StateReporter: it counts the request
// (Cluster.Rejoins).
func (k *Consumer) Rejoin() {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	k.c.rejoins++
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
// runs here, as librdkafka runs it inside poll), then the next readable
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
		// librdkafka's poll goes on waiting for a record after the
		// callback: the new partitions' first records come back from the
		// same call.
		k.mu.Lock()
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
	if k.c.held[tp] {
		return nil
	}
	limit := p.end()
	if k.readCommitted {
		limit = p.stable()
	}
	pos.next = max(pos.next, p.start)
	for pos.next < limit {
		r := p.records[pos.next]
		pos.next++
		if r.Control || r.compacted || (r.txn != nil && r.txn.state == txnAborted && k.readCommitted) {
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
		if ev.only != nil {
			tps = ev.only
		}
		k.mu.Unlock()
		if len(tps) > 0 && cb != nil {
			cb(kclient.Rebalance{Revoked: tps, Lost: ev.lost})
		}
		k.mu.Lock()
		for _, tp := range tps {
			delete(k.assigned, tp)
		}
		k.mu.Unlock()
		return
	}
	if ev.only != nil {
		k.mu.Unlock()
		k.c.mu.Lock()
		starts := map[kclient.TP]int64{}
		for _, tp := range ev.only {
			starts[tp] = 0
			if om, ok := k.c.committed[tp]; ok {
				starts[tp] = max(om.off, 0)
			}
		}
		k.c.mu.Unlock()
		k.mu.Lock()
		for _, tp := range ev.only {
			k.assigned[tp] = &position{next: starts[tp]}
		}
		k.mu.Unlock()
		if cb != nil {
			cb(kclient.Rebalance{Assigned: ev.only, Standby: ev.standby, Warmup: ev.warmup})
		}
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

// Position implements kclient.Consumer: asking for a partition not
// assigned is an error, as eddy's fetcher says.
func (k *Consumer) Position(tps []kclient.TP) (map[kclient.TP]int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[kclient.TP]int64{}
	for _, tp := range tps {
		p := k.assigned[tp]
		if p == nil {
			return nil, errorf("Position", "%s: not assigned", tp)
		}
		out[tp] = p.next
	}
	return out, nil
}

// CaughtUp implements kclient.Consumer: true when the reader has every
// record of the partition it may read (under read_committed, up to the
// last stable offset), as a fetcher knows from the high watermarks of its
// fetch responses.
func (k *Consumer) CaughtUp(tp kclient.TP) bool {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	pos := k.assigned[tp]
	if pos == nil {
		return true
	}
	p := k.c.topics[tp.Topic][tp.Partition]
	end := p.end()
	if k.readCommitted {
		end = p.stable()
	}
	return pos.next >= end
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
