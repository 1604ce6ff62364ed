// Package kclienttest is a scripted, in-memory fake of the kclient seam
// (consumer, producer, admin) for unit tests of the runtime: topics with
// offsets, transactions with commit markers and read_committed isolation,
// one consumer group with committed offsets, and the faults a test scripts —
// an error on the next call of an operation, a fenced producer, a revoked or
// lost assignment. Everything happens at once: no call waits on a network,
// so engine tests run in milliseconds.
//
// It models what the engine relies on, not all of Kafka: a group has at most
// one member at a time (the newest subscriber; an older one is told its
// assignment was lost), every partition of the subscribed topics goes to
// it, and a producer that begins a transaction writes into the log at once
// (records are invisible to read_committed readers until the commit).
package kclienttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
)

// Cluster is the fake broker: topics, the group and the scripted faults.
// Its methods are safe for concurrent use.
type Cluster struct {
	mu sync.Mutex // guards everything below

	topics    map[string][]*partLog
	configs   map[string]map[string]string // by topic: what it was created with, or set
	held      map[kclient.TP]bool          // partitions whose records readers do not get yet (Hold)
	committed map[kclient.TP]offsetMeta
	member    *Consumer            // the group's member, nil when none
	producers []*Producer          // every producer made, for SetDown
	txns      map[string]*txnState // by transactional id
	faults    map[string][]error   // by operation name, in order
	hooks     map[string][]func()  // by operation name, in order (OnNext)
	calls     map[string]int       // by operation name
	nextPID   int64
	// down: the brokers are unreachable; every call fails transiently.
	down bool
	// state: the member's state function (ReportState); rejoins: how
	// often it asked for a rebalance (Rejoin).
	state   func() kclient.MemberState
	rejoins int
	// rebalancing: the group is completing a rebalance (SetRebalancing):
	// the member says so, and offset commits are refused.
	rebalancing bool
}

type offsetMeta struct {
	off  int64
	meta string
}

// Record is a record in a partition's log.
type Record struct {
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp int64
	Headers   processor.Headers
	// Control: a transaction marker (it takes an offset; readers skip it).
	Control bool
	// compacted: the log cleaner removed the record (Compact); its offset
	// stays taken.
	compacted bool
	// state of the transaction the record was written in: committed
	// records and non-transactional ones are visible to every reader.
	txn *txnRecords
}

// Visible reports whether a read_committed reader may see the record.
func (r *Record) committed() bool { return r.txn == nil || r.txn.state == txnCommitted }

type partLog struct {
	records []*Record
	start   int64 // log start offset (DeleteRecords moves it)
}

func (p *partLog) end() int64 { return int64(len(p.records)) }

// stable returns the last stable offset: the first offset of a transaction
// still open, else the end.
func (p *partLog) stable() int64 {
	for _, r := range p.records[p.start:] {
		if r.txn != nil && r.txn.state == txnOpen {
			return r.Offset
		}
	}
	return p.end()
}

const (
	txnOpen = iota
	txnCommitted
	txnAborted
)

// txnRecords is one transaction's records, all in one state.
type txnRecords struct {
	state int
}

// txnState is a transactional id's producer epoch and open transaction.
type txnState struct {
	epoch   int64
	open    *txnRecords
	parts   map[kclient.TP]bool
	offsets map[kclient.TP]offsetMeta
}

// NewCluster returns an empty cluster.
func NewCluster() *Cluster {
	return &Cluster{topics: map[string][]*partLog{}, configs: map[string]map[string]string{}, held: map[kclient.TP]bool{}, committed: map[kclient.TP]offsetMeta{},
		txns: map[string]*txnState{}, faults: map[string][]error{}, hooks: map[string][]func(){}, calls: map[string]int{}}
}

// CreateTopic creates topic with n partitions (no-op if it exists).
func (c *Cluster) CreateTopic(topic string, n int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.createLocked(topic, n)
}

func (c *Cluster) createLocked(topic string, n int32) {
	if _, ok := c.topics[topic]; ok {
		return
	}
	ps := make([]*partLog, n)
	for i := range ps {
		ps[i] = &partLog{}
	}
	c.topics[topic] = ps
}

// Produce appends non-transactional records to a partition of topic (a
// test's input), returning the offset of the first.
func (c *Cluster) Produce(topic string, partition int32, recs ...Record) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.topics[topic][partition]
	first := p.end()
	for _, r := range recs {
		r := r
		r.Offset, r.txn = p.end(), nil
		p.records = append(p.records, &r)
	}
	return first
}

// Records returns the records of a partition a reader sees: with
// readCommitted, only committed ones; never markers.
func (c *Cluster) Records(topic string, partition int32, readCommitted bool) []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Record
	p := c.topics[topic][partition]
	for _, r := range p.records[p.start:] {
		if r.Control || r.compacted || (readCommitted && !r.committed()) {
			continue
		}
		out = append(out, *r)
	}
	return out
}

// Hold keeps the records of a partition from every reader until Release,
// as records a consumer has not fetched yet: readers get none of them, and
// CaughtUp is false while the partition has records past the reader's
// position.
func (c *Cluster) Hold(topic string, partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held[kclient.TP{Topic: topic, Partition: partition}] = true
}

// Release ends Hold.
func (c *Cluster) Release(topic string, partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, kclient.TP{Topic: topic, Partition: partition})
}

// SetTopicConfig sets a config of topic, as TopicConfigs reports it.
func (c *Cluster) SetTopicConfig(topic, name, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.configs[topic] == nil {
		c.configs[topic] = map[string]string{}
	}
	c.configs[topic][name] = value
}

// Compact does what the log cleaner of a compacted topic does once
// delete.retention.ms has passed: in every partition of topic, each
// committed record with a key is removed when a later committed record has
// the same key, and tombstones are removed too. Offsets stay where they
// were (the log start does not move).
func (c *Cluster) Compact(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.topics[topic] {
		last := map[string]int64{}
		for _, r := range p.records[p.start:] {
			if !r.Control && r.committed() && r.Key != nil {
				last[string(r.Key)] = r.Offset
			}
		}
		for _, r := range p.records[p.start:] {
			if r.Control || !r.committed() || r.Key == nil {
				continue
			}
			if last[string(r.Key)] != r.Offset || r.Value == nil {
				r.compacted = true
			}
		}
	}
}

// End returns a partition's end offset (the high watermark).
func (c *Cluster) End(topic string, partition int32) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topics[topic][partition].end()
}

// Committed returns the group's committed offset of a partition (-1: none)
// and its metadata.
func (c *Cluster) Committed(topic string, partition int32) (int64, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	om, ok := c.committed[kclient.TP{Topic: topic, Partition: partition}]
	if !ok {
		return -1, ""
	}
	return om.off, om.meta
}

// FailNext makes the next call of op (a method name: "CommitTransaction",
// "SendOffsets", "Commit", "Offsets", "Poll", …) return err; calling it
// again queues more failures for the calls after.
func (c *Cluster) FailNext(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[op] = append(c.faults[op], err)
}

// OnNext makes the next call of op run f first (with the cluster locked:
// f must not call the cluster), to place an event exactly at a call, such
// as a stop while a rebalance reads committed offsets.
func (c *Cluster) OnNext(op string, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks[op] = append(c.hooks[op], f)
}

// ClearFaults drops the failures still queued for op.
func (c *Cluster) ClearFaults(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.faults, op)
}

// Calls returns how often op was called.
func (c *Cluster) Calls(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

// SetDown makes the brokers unreachable (true) or reachable again: while
// they are down, every call fails transiently, as librdkafka reports an
// outage (Poll: kclient.ErrBrokersDown; transactional calls: retriable),
// and records produced without a transaction wait in their producer's
// queue; when the brokers are back, the queued records are delivered.
func (c *Cluster) SetDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
	if !down {
		for _, p := range c.producers {
			p.deliverQueuedLocked()
		}
	}
}

// SetRebalancing makes the group complete a rebalance (true) or be done
// with it: meanwhile the member's Rebalancing says so, and offset commits
// are refused as the coordinator refuses them (SendOffsets: an abortable
// transaction error; Commit: an error).
func (c *Cluster) SetRebalancing(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebalancing = on
}

// ErrUnreachable is the transient error calls fail with while the cluster
// is down.
var ErrUnreachable = fmt.Errorf("%w: kclienttest: brokers unreachable", kclient.ErrTransient)

// call counts a call of op and returns its scripted failure, if any.
// Called with c.mu held.
func (c *Cluster) call(op string) error {
	c.calls[op]++
	if hs := c.hooks[op]; len(hs) > 0 {
		c.hooks[op] = hs[1:]
		hs[0]()
	}
	if c.down {
		switch op {
		case "Poll":
			return kclient.ErrBrokersDown
		case "BeginTransaction", "SendOffsets", "CommitTransaction", "AbortTransaction", "InitTransactions":
			return &kclient.TxnError{Op: op, Retriable: true, Err: ErrUnreachable}
		case "Produce", "Position", "Seek", "Pause", "Resume", "Assign", "Subscribe", "NewConsumer", "NewProducer":
			// Local calls: librdkafka queues or answers them itself.
		default:
			return ErrUnreachable
		}
	}
	if c.rebalancing {
		switch op {
		case "SendOffsets":
			return &kclient.TxnError{Op: op, Abortable: true, Err: errRebalancing}
		case "Commit":
			return errRebalancing
		}
	}
	if fs := c.faults[op]; len(fs) > 0 {
		c.faults[op] = fs[1:]
		return fs[0]
	}
	return nil
}

var errRebalancing = errors.New("kclienttest: the group is rebalancing (REBALANCE_IN_PROGRESS)")

// Fence bumps transactional id's epoch, as a new producer's
// InitTransactions would: the open transaction is aborted and the old
// producer's next transactional call fails as fenced.
func (c *Cluster) Fence(transactionalID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.initTxnLocked(transactionalID)
}

func (c *Cluster) initTxnLocked(id string) int64 {
	st := c.txns[id]
	if st == nil {
		st = &txnState{}
		c.txns[id] = st
	}
	if st.open != nil {
		c.endTxnLocked(st, txnAborted)
	}
	st.epoch++
	return st.epoch
}

// endTxnLocked commits or aborts st's open transaction: a marker on every
// partition it wrote, and (on commit) its offsets into the group.
func (c *Cluster) endTxnLocked(st *txnState, state int) {
	st.open.state = state
	tps := make([]kclient.TP, 0, len(st.parts))
	for tp := range st.parts {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool { return tps[i].String() < tps[j].String() })
	for _, tp := range tps {
		p := c.topics[tp.Topic][tp.Partition]
		p.records = append(p.records, &Record{Offset: p.end(), Control: true, txn: st.open})
	}
	if state == txnCommitted {
		for tp, om := range st.offsets {
			c.committed[tp] = om
		}
	}
	st.open, st.parts, st.offsets = nil, nil, nil
}

// Revoke takes the member's assignment away at its next poll and gives it
// back right after, as a rebalance does; lost says whether the member may
// still commit (a clean revocation) or not (a session timeout, fencing).
func (c *Cluster) Revoke(lost bool) {
	c.push(rebalanceEvent{revoke: true, lost: lost}, rebalanceEvent{})
}

// RevokePartitions takes tps from the member at its next poll, as a
// cooperative rebalance does (the member keeps its other partitions).
func (c *Cluster) RevokePartitions(tps ...kclient.TP) {
	c.push(rebalanceEvent{revoke: true, only: tps})
}

// AssignPartitions gives tps to the member at its next poll, besides what
// it has, as a cooperative rebalance's follow-up does.
func (c *Cluster) AssignPartitions(tps ...kclient.TP) {
	c.push(rebalanceEvent{only: tps})
}

// AssignWithStandbys gives tps to the member at its next poll, besides what
// it has, in an assignment whose standby tasks are standby.
func (c *Cluster) AssignWithStandbys(tps []kclient.TP, standby []processor.TaskID) {
	c.push(rebalanceEvent{only: tps, standby: standby})
}

// AssignStandbys gives the member, at its next poll, an assignment of no
// new partition whose standby tasks are ids (none when empty), as eddy's
// assignor sends the whole standby set with every assignment
// (AssignPartitions and Revoke's reassignment give none).
func (c *Cluster) AssignStandbys(ids ...processor.TaskID) {
	c.push(rebalanceEvent{only: []kclient.TP{}, standby: ids})
}

// AssignWarmups gives the member, at its next poll, an assignment of no
// new partition whose standby tasks are standby and warmup, warmup
// being its warm-ups (tasks the assignor would move to it once caught up).
func (c *Cluster) AssignWarmups(standby, warmup []processor.TaskID) {
	c.push(rebalanceEvent{only: []kclient.TP{}, standby: append(slices.Clone(standby), warmup...), warmup: warmup})
}

// Rejoins returns how many times the member asked the group for a
// rebalance (kclient.StateReporter.Rejoin).
func (c *Cluster) Rejoins() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rejoins
}

// MemberState returns what the member would tell the group's assignor
// now (kclient.StateReporter.ReportState); false before it reported.
func (c *Cluster) MemberState() (kclient.MemberState, bool) {
	c.mu.Lock()
	state := c.state
	c.mu.Unlock()
	if state == nil {
		return kclient.MemberState{}, false
	}
	return state(), true
}

// push queues rebalance events for the member's next poll.
func (c *Cluster) push(evs ...rebalanceEvent) {
	c.mu.Lock()
	m := c.member
	c.mu.Unlock()
	if m != nil {
		m.mu.Lock()
		m.pending = append(m.pending, evs...)
		m.mu.Unlock()
	}
}

// errorf returns a failure for op as the fake reports it.
func errorf(op, format string, args ...any) error {
	return fmt.Errorf("kclienttest: %s: %s", op, fmt.Sprintf(format, args...))
}

// ErrBroker is a transient broker error a test can script with FailNext.
var ErrBroker = errors.New("kclienttest: broker unavailable")

// Abortable returns an abortable transaction error for op, as librdkafka
// reports one (the transaction must be aborted, the producer stays usable).
func Abortable(op string) error {
	return &kclient.TxnError{Op: op, Abortable: true, Err: ErrBroker}
}

// Config options the fake reads from the client configs it is given.
func configString(cfg kclient.Config, key string) string {
	if v, ok := cfg[key]; ok {
		if s, ok := v.(string); ok {
			return s
		}
		return fmt.Sprint(v)
	}
	return ""
}

// ctxErr reports a cancelled context as an operation's error.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return errorf(op, "%v", err)
	}
	return nil
}
