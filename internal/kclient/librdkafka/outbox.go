//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/rt"
)

// outbox is where Produce leaves records for the producer's sender
// goroutine, which enqueues them in librdkafka in the order given.
// Enqueuing a record is a cgo call of about half a microsecond (librdkafka
// allocates and copies the message, picks the partition, queues it under
// the partition's lock); made on the stream thread it was a quarter of that
// thread's time in a count over 10M keys, and the stream thread is what
// bounds a topology's rate. Produce copies the record into the batch being
// filled; the sender takes the whole batch at a time, so the two goroutines
// meet once a batch, not once a record, and a batch is as large as the
// records that came while the sender enqueued the last one.
//
// Every record queued counts in the producer's inflight until its delivery
// report (or until it is dropped or refused; a transactional producer's,
// until librdkafka has it), so WaitDelivered covers it.
// Calls whose order with the records matters (beginning a transaction,
// committing it; not sending its offsets, which may go out while the
// records still do) first wait for the sender to be idle; a record
// librdkafka refuses fails them, every later Produce and the next
// WaitDelivered (the first such failure stays: the records after it were
// not enqueued, so nothing may be committed past it).
type outbox struct {
	mu     sync.Mutex
	fill   *outBatch     // Produce appends here
	spare  *outBatch     // the empty batch the sender swaps in; nil while it holds one
	busy   bool          // the sender was woken and is not idle yet
	idle   chan struct{} // closed when the sender goes idle (made when awaited)
	room   chan struct{} // closed when the sender takes a full batch (made when awaited)
	err    error         // the first record librdkafka refused; stays
	closed bool
	kick   chan struct{} // wakes the sender (capacity 1: sent only when not busy)
	drop   atomic.Bool   // the sender stops enqueuing its batch (Purge, abort, Close)
	// maxRecords: a batch being filled holds at most this many records.
	maxRecords int
}

// Limits of the batch being filled: Produce waits for the sender beyond
// them (one record larger than the byte limit goes alone). A transactional
// producer's batches are smaller: with no delivery reports, what bounds
// its unacknowledged records is librdkafka's queue, which the sender waits
// on, and the two batches (the one the sender holds, the one filled) come
// on top of it at a commit. Word count under exactly-once, commit p50:
// 12.7-19.3 ms with 16,384, 10.5-12.1 with 8,192, 6.8-8.1 with 4,096,
// 7.3-8.5 with 2,048; windowed's rate fell a tenth from 8,192 to 4,096
// and again to 2,048.
const (
	outboxRecords    = 16384
	outboxTxnRecords = 4096
	outboxBytes      = 4 << 20
)

// outBatch holds records with their bytes copied into one buffer.
type outBatch struct {
	recs []outRecord
	data []byte
}

type outRecord struct {
	topic      string
	key, value []byte // in data; nil stays nil (a null key, a tombstone)
	headers    []kafka.Header
	timestamp  int64
	partition  int32
}

func newOutbox(maxRecords int) *outbox {
	return &outbox{fill: newOutBatch(), spare: newOutBatch(), kick: make(chan struct{}, 1), maxRecords: maxRecords}
}

func newOutBatch() *outBatch { return &outBatch{data: make([]byte, 0, 64<<10)} }

// copyBytes appends b to the batch's buffer and returns the copy, nil for
// nil (data is never nil, so an empty b gives an empty non-nil slice).
func (b *outBatch) copyBytes(v []byte) []byte {
	if v == nil {
		return nil
	}
	start := len(b.data)
	b.data = append(b.data, v...)
	return b.data[start:len(b.data):len(b.data)]
}

func (b *outBatch) add(rec *rt.OutRecord) {
	r := outRecord{topic: rec.Topic, partition: rec.Partition, timestamp: rec.Timestamp,
		key: b.copyBytes(rec.Key), value: b.copyBytes(rec.Value)}
	if len(rec.Headers) > 0 {
		r.headers = make([]kafka.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			r.headers[i] = kafka.Header{Key: h.Key, Value: b.copyBytes(h.Value)}
		}
	}
	b.recs = append(b.recs, r)
}

func (b *outBatch) reset() {
	clear(b.recs) // let go of the topics' strings and headers
	b.recs = b.recs[:0]
	b.data = b.data[:0]
}

// full tells whether rec must wait for the sender to take the batch.
func (b *outBatch) full(rec *rt.OutRecord, maxRecords int) bool {
	if len(b.recs) == 0 {
		return false
	}
	return len(b.recs) >= maxRecords || len(b.data)+len(rec.Key)+len(rec.Value) > outboxBytes
}

var errProducerClosed = errors.New("kafka: producer closed")

// errDropped ends the enqueuing of a batch being dropped.
var errDropped = errors.New("dropped")

// Produce implements Producer: it queues a copy of rec for the sender,
// first waiting for room if maxInflight records are unacknowledged.
func (p *producer) Produce(rec *rt.OutRecord) error {
	if p.inflight.Load() >= p.maxInflight {
		p.waitRoom()
	}
	o := p.out
	o.mu.Lock()
	for o.err == nil && !o.closed && o.fill.full(rec, o.maxRecords) {
		if o.room == nil {
			o.room = make(chan struct{})
		}
		room := o.room
		o.mu.Unlock()
		<-room
		o.mu.Lock()
	}
	if o.err != nil || o.closed {
		err := o.err
		o.mu.Unlock()
		if err == nil {
			err = errProducerClosed
		}
		return err
	}
	o.fill.add(rec)
	p.inflight.Add(1)
	wake := !o.busy
	o.busy = true
	o.mu.Unlock()
	if wake {
		o.kick <- struct{}{}
	}
	return nil
}

// send is the sender goroutine: it takes the filled batch, enqueues its
// records and swaps it back empty, until no record is left.
func (p *producer) send() {
	o := p.out
	for range o.kick {
		o.mu.Lock()
		for len(o.fill.recs) > 0 {
			b := o.fill
			o.fill, o.spare = o.spare, nil
			if o.room != nil {
				close(o.room)
				o.room = nil
			}
			o.mu.Unlock()
			left, err := p.enqueueAll(b)
			if p.txnID != "" {
				left = int64(len(b.recs)) // no delivery report will come
			}
			b.reset()
			if left > 0 {
				p.settle(left)
			}
			o.mu.Lock()
			o.spare = b
			if err != nil && o.err == nil {
				o.err = err
				p.mu.Lock()
				if p.err == nil {
					p.err = err
				}
				p.mu.Unlock()
			}
		}
		o.busy = false
		if o.idle != nil {
			close(o.idle)
			o.idle = nil
		}
		o.mu.Unlock()
	}
}

// enqueueAll enqueues b's records in order; it returns how many were not
// (refused, with the error, or dropped).
func (p *producer) enqueueAll(b *outBatch) (left int64, err error) {
	if p.out.err != nil { // (read by the sender only, or under mu)
		return int64(len(b.recs)), nil
	}
	for i := range b.recs {
		if p.out.drop.Load() {
			return int64(len(b.recs) - i), nil
		}
		if err := p.enqueue(&b.recs[i]); err != nil {
			if errors.Is(err, errDropped) {
				err = nil
			}
			return int64(len(b.recs) - i), err
		}
	}
	return 0, nil
}

// waitIdle waits until every record queued is enqueued in librdkafka (or
// refused); it returns the first refusal.
func (o *outbox) waitIdle(ctx context.Context) error {
	o.mu.Lock()
	for o.busy {
		if o.idle == nil {
			o.idle = make(chan struct{})
		}
		idle := o.idle
		o.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.mu.Lock()
	}
	err := o.err
	o.mu.Unlock()
	return err
}

// discard drops the records not yet enqueued (their count leaves inflight)
// and waits for the sender to stop (or for ctx); the caller is the
// goroutine that produces, so nothing is queued meanwhile.
func (p *producer) discard(ctx context.Context) {
	o := p.out
	o.drop.Store(true)
	defer o.drop.Store(false)
	o.mu.Lock()
	n := int64(len(o.fill.recs))
	o.fill.reset()
	if o.room != nil {
		close(o.room)
		o.room = nil
	}
	o.mu.Unlock()
	if n > 0 {
		p.settle(n)
	}
	o.waitIdle(ctx) //nolint:errcheck // a refusal stays for the calls that report it
}

// waitRoom waits until the producer's unacknowledged records fall to
// roomAt, unless every broker is down (then the records queue, and the
// commit's WaitDelivered deals with the outage) or the login was refused.
func (p *producer) waitRoom() {
	p.mu.Lock()
	for p.inflight.Load() > p.roomAt && !p.down.Load() {
		if p.room == nil {
			p.room = make(chan struct{})
		}
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
		case <-p.w.set:
			return
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
}

// openRoomLocked wakes Produce calls waiting for room (p.mu held).
func (p *producer) openRoomLocked() {
	if p.room != nil {
		close(p.room)
		p.room = nil
	}
}
