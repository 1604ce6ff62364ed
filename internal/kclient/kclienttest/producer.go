package kclienttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// ErrFenced is the cause of the fatal error a fenced producer gets.
var ErrFenced = errors.New("kclienttest: producer fenced by a newer instance with the same transactional id")

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
// the transaction open (an abortable one must then be aborted), and so does
// a ctx done by the time the call is made (after OnNext's hook), as
// franz-go's EndTxn reports a cancelled commit: abortable.
func (p *Producer) CommitTransaction(ctx context.Context) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.c.call("CommitTransaction"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &kclient.TxnError{Op: "CommitTransaction", Abortable: true, Err: fmt.Errorf("kclienttest: CommitTransaction: %w", err)}
	}
	return p.endTxnLocked("CommitTransaction", txnCommitted)
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
	return p.endTxnLocked(op, state)
}

// endTxnLocked ends the open transaction; called with c.mu held.
func (p *Producer) endTxnLocked(op string, state int) error {
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
