//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
)

type producer struct {
	p    *kafka.Producer
	done chan struct{}
	// inflight counts records produced whose delivery report has not been
	// read yet.
	inflight atomic.Int64
	// down: librdkafka reported all brokers down and no delivery has
	// succeeded since (WaitDelivered then checks whether they are back).
	down atomic.Bool
	// w keeps a refused login, reported in the client's events.
	w *watch
	// txnID is the transactional id ("" when not transactional), for
	// naming it in an authorization failure.
	txnID string
	// out holds the records produced until the sender goroutine enqueues
	// them in librdkafka (outbox.go).
	out *outbox
	// txnTopics are the topics written in the current transaction (by
	// the sender goroutine, under topicsMu: a failed SendOffsets reads
	// them while the sender may still enqueue), lastTopic the latest of
	// them (the sender's own): to find which one the ACLs deny when the
	// transaction fails for it.
	topicsMu  sync.Mutex
	txnTopics map[string]bool
	lastTopic string
	// msg and topic are the message the sender hands to librdkafka, reused.
	msg   kafka.Message
	topic string

	// sendOffsets is librdkafka's SendOffsetsToTransaction (a test stands
	// in for it).
	sendOffsets func(ctx context.Context, offsets []kafka.TopicPartition, group *kafka.ConsumerGroupMetadata) error

	mu sync.Mutex // guards the fields below
	// stuck, once a call to librdkafka was given up while still running,
	// yields when it returns: Close waits for it before destroying the
	// client.
	stuck <-chan error

	err  error                // the first delivery failure not yet reported
	last map[kclient.TP]int64 // offset of the last record delivered, by partition
	wake chan struct{}        // closed when inflight reaches 0, for WaitDelivered
	room chan struct{}        // closed when inflight falls to roomAt, for Produce

	// maxInflight and roomAt: Produce waits at maxInflight records in
	// flight until they fall to roomAt (MaxUnacked, RoomUnacked).
	maxInflight, roomAt int64
}

// NewProducer returns a librdkafka producer; a goroutine drains its
// events. Built without a transactional id, it asks for a delivery report
// per record (without keys, values or headers), and the goroutine keeps the
// first failure for DeliveryErr and the last offset delivered to each
// partition for LastOffsets. (librdkafka's delivery.report.only.error
// would spare the reports of successes, but the Go client refuses it.)
//
// A transactional producer asks for none: CommitTransaction waits for
// every record itself and fails if one was not delivered, and the caller
// counts where its changelogs end (engine's changelogEnds). Measured on the
// windowed count under exactly-once, the reports were an eighth of the
// process's CPU, and a commit waited for the client to hand over one Go
// message per record. Its records count in flight only until librdkafka
// has them; librdkafka's own queue is what bounds them (to MaxUnacked,
// unless configured).
func NewProducer(cfg kclient.Config) (kclient.Producer, error) {
	cfg = maps.Clone(cfg)
	id, txn := cfg["transactional.id"].(string)
	txn = txn && id != ""
	cfg["go.delivery.reports"] = !txn
	cfg["go.delivery.report.fields"] = "none"
	if _, set := cfg["queue.buffering.max.messages"]; txn && !set {
		cfg["queue.buffering.max.messages"] = kclient.MaxUnacked
	}
	// The Go client makes both channels with a million slots (16 MiB
	// each) by default: the produce channel is never used (Produce is),
	// and delivery reports are drained as they come.
	cfg["go.produce.channel.size"] = 1
	cfg["go.events.channel.size"] = 100_000
	p, err := kafka.NewProducer(configMap(cfg))
	if err != nil {
		return nil, err
	}
	pr := &producer{p: p, done: make(chan struct{}), last: map[kclient.TP]int64{}, w: newWatch(), txnTopics: map[string]bool{}, out: newOutbox(outboxRecords),
		maxInflight: kclient.MaxUnacked, roomAt: kclient.RoomUnacked}
	if txn {
		pr.txnID = id
		pr.out.maxRecords = outboxTxnRecords
	}
	pr.sendOffsets = func(ctx context.Context, offsets []kafka.TopicPartition, group *kafka.ConsumerGroupMetadata) error {
		return p.SendOffsetsToTransaction(ctx, offsets, group)
	}
	go pr.drain()
	go pr.send()
	return pr, nil
}

func (p *producer) drain() {
	defer close(p.done)
	for ev := range p.p.Events() {
		var err error
		switch e := ev.(type) {
		case *kafka.Message:
			// (A transactional producer asked for no reports; the Go
			// client still passes on the first of each batch.)
			if e.TopicPartition.Error != nil {
				tp := fromKTP(e.TopicPartition)
				cause := security(e.TopicPartition.Error, fmt.Sprintf("WRITE on topic %q", tp.Topic))
				if cause == nil {
					cause = classify(e.TopicPartition.Error)
					if errors.Is(cause, kclient.ErrFatal) || (p.txnID != "" && isFenced(e.TopicPartition.Error)) {
						cause = p.fatal(e.TopicPartition.Error)
					}
				}
				err = fmt.Errorf("delivery to %s failed: %w", tp, cause)
			}
			if err == nil {
				p.down.Store(false)
			}
			if p.txnID != "" {
				break // its records left inflight when librdkafka took them
			}
			p.mu.Lock()
			if err == nil {
				tp := fromKTP(e.TopicPartition)
				if off, ok := p.last[tp]; !ok || int64(e.TopicPartition.Offset) > off {
					p.last[tp] = int64(e.TopicPartition.Offset)
				}
			}
			p.settledLocked(1)
			p.mu.Unlock()
		case kafka.Error:
			p.w.see(e)
			if e.IsFatal() {
				err = p.fatal(e)
			}
			if e.Code() == kafka.ErrAllBrokersDown {
				p.down.Store(true)
				p.mu.Lock()
				p.openRoomLocked()
				p.mu.Unlock()
			}
		}
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
		}
	}
}

// fatal wraps err, which made the producer unusable, in ErrFatal, and in
// ErrFenced too when the cause was a newer producer with the same
// transactional id: a record refused for that reason fails with a plain
// "Local: Fatal error" (librdkafka keeps the cause as its fatal error).
func (p *producer) fatal(err error) error {
	fenced := isFenced(err)
	if !fenced {
		if f := p.p.GetFatalError(); f != nil && isFenced(f) {
			fenced = true
			err = fmt.Errorf("%v (%v)", err, f)
		}
	}
	if fenced {
		return fmt.Errorf("%w: %w: %v", kclient.ErrFatal, kclient.ErrFenced, err)
	}
	return fmt.Errorf("%w: %v", kclient.ErrFatal, err)
}

func isFenced(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && fencedCode(kerr.Code())
}

// fencedCode tells whether code means a newer producer with the same
// transactional id took over.
func fencedCode(code kafka.ErrorCode) bool {
	return code == kafka.ErrFenced || code == kafka.ErrProducerFenced || code == kafka.ErrInvalidProducerEpoch
}

// enqueue hands one record to librdkafka (the sender goroutine's part of
// Produce, see outbox).
func (p *producer) enqueue(r *outRecord) error {
	topic := r.topic
	if p.txnID != "" && topic != p.lastTopic {
		p.lastTopic = topic
		p.topicsMu.Lock()
		p.txnTopics[topic] = true
		p.topicsMu.Unlock()
	}
	// One message, reused: librdkafka copies what it keeps (no delivery
	// channel or opaque is passed).
	p.topic = topic
	msg := &p.msg
	*msg = kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &p.topic, Partition: kafka.PartitionAny},
		Key:            r.key,
		Value:          r.value,
		Headers:        r.headers,
	}
	if r.partition >= 0 {
		msg.TopicPartition.Partition = r.partition
	}
	if r.timestamp >= 0 {
		msg.Timestamp = time.UnixMilli(r.timestamp)
	}
	for {
		err := p.p.Produce(msg, nil)
		if err == nil {
			return nil
		}
		// (Only here: errors.As makes kerr escape, an allocation a record.)
		var kerr kafka.Error
		if errors.As(err, &kerr) {
			if kerr.Code() == kafka.ErrQueueFull {
				if p.out.drop.Load() {
					return errDropped
				}
				p.p.Flush(10) // wait for room in librdkafka's queue
				continue
			}
			if kerr.IsFatal() || kerr.Code() == kafka.ErrFatal || fencedCode(kerr.Code()) {
				return p.fatal(err)
			}
			if s := security(err, fmt.Sprintf("WRITE on topic %q", topic)); s != nil {
				return s
			}
			if kerr.Code() == kafka.ErrState && p.txnID != "" {
				return p.failedTxn(err)
			}
		}
		return err
	}
}

// enqueued waits until the outbox is empty, for a transactional call op:
// it returns the first record librdkafka refused (as it is: the
// transaction must not commit without it), or, out of time, a TxnError as
// the call itself would have timed out.
func (p *producer) enqueued(ctx context.Context, op string) error {
	err := p.out.waitIdle(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return txnErr(op, err)
	}
	return err
}

// settle takes n records out of inflight (refused or dropped: no delivery
// report will come for them).
func (p *producer) settle(n int64) {
	p.mu.Lock()
	p.settledLocked(n)
	p.mu.Unlock()
}

func (p *producer) settledLocked(n int64) {
	left := p.inflight.Add(-n)
	if left == 0 && p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
	if left <= p.roomAt {
		p.openRoomLocked()
	}
}

// WaitDelivered waits on the count of outstanding delivery reports rather
// than confluent-kafka-go's Flush, which polls its event queue for the whole
// of its time slice while another goroutine reads the reports: measured,
// Flush(100) returned after ~100 ms for records delivered in 12–13 ms.
//
// It does not wait out an outage: once librdkafka reported all brokers
// down, it asks every second whether a broker answers, and returns
// ErrBrokersDown while none does (the records stay queued unless the caller
// purges them).
func (p *producer) WaitDelivered(ctx context.Context) error {
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		p.mu.Lock()
		if p.inflight.Load() <= 0 {
			err := p.err
			p.mu.Unlock()
			return err
		}
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
		wake := p.wake
		p.mu.Unlock()
		if tick == nil {
			tick = time.NewTicker(time.Second)
		}
		select {
		case <-wake:
		case <-p.w.set:
			return p.w.err
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d delivery reports: %w", p.inflight.Load(), ctx.Err())
		case <-tick.C:
			if !p.down.Load() {
				continue
			}
			if _, err := p.p.GetMetadata(nil, false, 1000); err != nil {
				return fmt.Errorf("waiting for %d delivery reports: %w", p.inflight.Load(), kclient.ErrBrokersDown)
			}
			p.down.Store(false)
		}
	}
}

// Purge implements Producer: the records still in the outbox are dropped
// too.
func (p *producer) Purge() error {
	p.discard(context.Background())
	return p.p.Purge(kafka.PurgeQueue | kafka.PurgeInFlight)
}

// LastOffsets implements Producer.
func (p *producer) LastOffsets() map[kclient.TP]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.last
	p.last = make(map[kclient.TP]int64, len(out))
	return out
}

func (p *producer) DeliveryErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	p.err = nil
	return err
}

// txnErr classifies the failure of a transactional call: a refused login
// or an operation the ACLs deny (not a TxnError: no retry, abort or new
// producer cures them), else a TxnError.
func (p *producer) txnErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if a := p.w.failed(); a != nil {
		return a
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		what := "the operation"
		switch kerr.Code() {
		case kafka.ErrTransactionalIDAuthorizationFailed:
			what = fmt.Sprintf("WRITE on transactional id %q", p.txnID)
		case kafka.ErrGroupAuthorizationFailed:
			what = "READ on the consumer group (committing offsets in a transaction)"
		case kafka.ErrTopicAuthorizationFailed:
			what = "WRITE on a topic the transaction wrote to"
			if ts := p.unwritable(); len(ts) > 0 {
				what = "WRITE on topic " + strings.Join(ts, " and on topic ")
			}
		case kafka.ErrClusterAuthorizationFailed:
			what = "IDEMPOTENT_WRITE on the cluster"
		}
		if s := security(err, what); s != nil {
			return fmt.Errorf("%s: %w", op, s)
		}
	}
	return txnErr(op, err)
}

// failedTxn explains a record refused because the transaction failed
// (librdkafka's "erroneous state"): any transactional call then returns the
// transaction's own error, whose cause may be a denied WRITE (the
// transaction could not add a partition of a topic the ACLs do not let it
// write). librdkafka refuses records so only while the transaction is in
// its abortable error state, where CommitTransaction commits nothing and
// answers with that error.
//
// Another transactional call may be under way (the thread sends a
// commit's offsets on a goroutine while its caches flush records), and
// librdkafka then refuses this one as conflicting: it is asked again,
// for up to 10 s, until the other has returned.
func (p *producer) failedTxn(err error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cause := p.p.CommitTransaction(ctx)
		cancel()
		var kerr kafka.Error
		switch {
		case errors.As(cause, &kerr) && kerr.Code() == kafka.ErrTopicAuthorizationFailed:
			return p.txnErr("Produce", cause)
		case errors.As(cause, &kerr) && (kerr.Code() == kafka.ErrConflict || kerr.Code() == kafka.ErrTimedOut) && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
			continue
		case cause != nil:
			return fmt.Errorf("%w (the transaction: %v)", err, cause)
		}
		return err
	}
}

func txnErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		// Abortable and fatal errors are never retried: the transaction
		// (or the producer) is done for, whatever the cause.
		abortable, fatal := kerr.TxnRequiresAbort(), kerr.IsFatal()
		fenced := fencedCode(kerr.Code())
		return &kclient.TxnError{Op: op, Abortable: abortable, Fatal: fatal, Fenced: fenced,
			Retriable: !abortable && !fatal && (kerr.IsRetriable() || kerr.IsTimeout() || transientCodes[kerr.Code()]), Err: err}
	}
	return &kclient.TxnError{Op: op, Retriable: errors.Is(err, context.DeadlineExceeded), Err: err}
}

func (p *producer) InitTransactions(ctx context.Context) error {
	ctx, end := p.w.bind(ctx)
	return p.txnErr("InitTransactions", end(p.p.InitTransactions(ctx)))
}

// unwritable returns, quoted, the topics of the current transaction this
// principal may not write.
func (p *producer) unwritable() []string {
	a, err := kafka.NewAdminClientFromProducer(p.p)
	if err != nil {
		return nil
	}
	defer a.Close()
	p.topicsMu.Lock()
	topics := slices.Collect(maps.Keys(p.txnTopics))
	p.topicsMu.Unlock()
	return deniedTopics(a, topics, kafka.ACLOperationWrite)
}

// gaveUp returns the fatal error of a producer with a call given up as
// stuck (nil if none): librdkafka refuses any transactional call while one
// still runs ("Simultaneous … API calls not allowed", a retriable error a
// retry loop would meet for as long as the stuck call blocks), so every
// later call fails at once and the thread replaces the producer.
func (p *producer) gaveUp(op string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stuck == nil {
		return nil
	}
	return &kclient.TxnError{Op: op, Fatal: true, Err: fmt.Errorf("%w: an earlier call was given up and still runs; the producer is replaced", ErrStuck)}
}

func (p *producer) BeginTransaction() error {
	if err := p.gaveUp("BeginTransaction"); err != nil {
		return err
	}
	if err := p.out.waitIdle(context.Background()); err != nil {
		return err
	}
	p.topicsMu.Lock()
	clear(p.txnTopics)
	p.topicsMu.Unlock()
	p.lastTopic = ""
	return p.txnErr("BeginTransaction", p.p.BeginTransaction())
}

func (p *producer) SendOffsets(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string, gm any) error {
	group, ok := gm.(*kafka.ConsumerGroupMetadata)
	if !ok {
		return &kclient.TxnError{Op: "SendOffsetsToTransaction", Err: fmt.Errorf("group metadata is %T", gm)}
	}
	if err := p.gaveUp("SendOffsetsToTransaction"); err != nil {
		return err
	}
	// The offsets need not wait for the transaction's records to be in
	// librdkafka (CommitTransaction does): they are sent while the outbox
	// drains. A record refused meanwhile fails the commit, and the
	// transaction, offsets included, is aborted.
	kofs := withOffsets(offsets, meta)
	res := make(chan error, 1)
	go func() { res <- p.sendOffsets(ctx, kofs, group) }()
	limit := stuckGrace
	if dl, ok := ctx.Deadline(); ok {
		limit += time.Until(dl)
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-res:
		return p.txnErr("SendOffsetsToTransaction", err)
	case <-t.C:
		p.mu.Lock()
		p.stuck = res
		p.mu.Unlock()
		return &kclient.TxnError{Op: "SendOffsetsToTransaction", Fatal: true,
			Err: fmt.Errorf("%w: no answer %v after the call, past its own timeout (librdkafka #5456/#5511: the group coordinator moved); the producer is replaced", ErrStuck, limit.Round(time.Second))}
	}
}

// stuckGrace is how long past its own timeout a call to librdkafka may
// block before the producer is given up. SendOffsetsToTransaction can block
// for good after the group coordinator moved (librdkafka issues 5456 and
// 5511: its coordinator request ignores its timeout, and waits for a state
// change of a broker that was decommissioned); seen here after one broker
// of three was killed: a thread stuck in it for minutes, its partitions
// idle.
var stuckGrace = 15 * time.Second

// ErrStuck is the cause of the fatal error of a producer whose call to
// librdkafka did not return long after its timeout: the thread replaces its
// clients (the new producer fences the old one's transaction).
var ErrStuck = errors.New("kafka: a call to the client never returned")

func (p *producer) CommitTransaction(ctx context.Context) error {
	if err := p.gaveUp("CommitTransaction"); err != nil {
		return err
	}
	if err := p.enqueued(ctx, "CommitTransaction"); err != nil {
		return err
	}
	ctx, end := p.w.bind(ctx)
	return p.txnErr("CommitTransaction", end(p.p.CommitTransaction(ctx)))
}

func (p *producer) AbortTransaction(ctx context.Context) error {
	if err := p.gaveUp("AbortTransaction"); err != nil {
		return err
	}
	p.discard(ctx)
	ctx, end := p.w.bind(ctx)
	return p.txnErr("AbortTransaction", end(p.p.AbortTransaction(ctx)))
}

// Close destroys the client; while a call given up as stuck still runs
// inside it, that happens when the call returns (destroying it under the
// call would free what the call uses).
func (p *producer) Close() {
	p.out.mu.Lock()
	was := p.out.closed
	p.out.closed = true
	p.out.mu.Unlock()
	if !was {
		ctx, cancel := context.WithTimeout(context.Background(), stuckGrace)
		p.discard(ctx)
		cancel()
		close(p.out.kick) // the sender returns once idle
	}
	p.mu.Lock()
	stuck := p.stuck
	p.mu.Unlock()
	if stuck != nil {
		go func() {
			<-stuck
			p.p.Close()
			<-p.done
		}()
		return
	}
	p.p.Close()
	<-p.done
}
