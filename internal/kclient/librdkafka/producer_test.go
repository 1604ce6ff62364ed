//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// A SendOffsetsToTransaction that never returns (librdkafka 5456/5511,
// after the group coordinator moved) is given up after its timeout and a
// grace: a fatal error naming ErrStuck, so the thread replaces its clients,
// every later transactional call fails at once the same way (librdkafka
// would refuse it as "Simultaneous … calls", a retriable error, for as long
// as the stuck call runs), and the client is destroyed only once the call
// returns.
func TestStuckSendOffsetsIsFatalAndCloseWaitsForIt(t *testing.T) {
	defer func(g time.Duration) { stuckGrace = g }(stuckGrace)
	stuckGrace = 20 * time.Millisecond
	pr, err := NewProducer(kclient.Config{"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.(*producer)
	release, entered := make(chan struct{}), make(chan struct{})
	calls := 0
	p.sendOffsets = func(ctx context.Context, _ []kafka.TopicPartition, _ *kafka.ConsumerGroupMetadata) error {
		calls++
		close(entered)
		<-release // blocks past any deadline, as the bug does
		return errors.New("returned at last")
	}
	gm, err := kafka.NewTestConsumerGroupMetadata("g")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err = p.SendOffsets(ctx, map[kclient.TP]int64{{Topic: "t", Partition: 0}: 5}, nil, gm)
	<-entered
	var te *kclient.TxnError
	if !errors.As(err, &te) || !te.Fatal || !errors.Is(err, ErrStuck) {
		t.Fatalf("SendOffsets = %v, want a fatal TxnError wrapping ErrStuck", err)
	}
	for name, call := range map[string]func() error{
		"SendOffsets again": func() error {
			return p.SendOffsets(context.Background(), map[kclient.TP]int64{{Topic: "t", Partition: 0}: 5}, nil, gm)
		},
		"CommitTransaction": func() error { return p.CommitTransaction(context.Background()) },
		"AbortTransaction":  func() error { return p.AbortTransaction(context.Background()) },
		"BeginTransaction":  p.BeginTransaction,
	} {
		if err := call(); !errors.As(err, &te) || !te.Fatal || !errors.Is(err, ErrStuck) {
			t.Errorf("%s after a stuck call = %v, want a fatal TxnError wrapping ErrStuck", name, err)
		}
	}
	if calls != 1 {
		t.Errorf("librdkafka's SendOffsetsToTransaction called %d times, want 1", calls)
	}
	p.Close() // must not destroy the client under the running call
	select {
	case <-p.done:
		t.Fatal("the client was destroyed while the stuck call still ran")
	default:
	}
	close(release)
	<-p.done // destroyed once the call returned
}

// A call that answers in time is classified as usual.
func TestSendOffsetsAnswerPassesThrough(t *testing.T) {
	pr, err := NewProducer(kclient.Config{"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.(*producer)
	defer p.Close()
	p.sendOffsets = func(context.Context, []kafka.TopicPartition, *kafka.ConsumerGroupMetadata) error {
		return kafka.NewError(kafka.ErrTimedOut, "timed out", false)
	}
	gm, err := kafka.NewTestConsumerGroupMetadata("g")
	if err != nil {
		t.Fatal(err)
	}
	err = p.SendOffsets(context.Background(), map[kclient.TP]int64{{Topic: "t", Partition: 0}: 5}, nil, gm)
	var te *kclient.TxnError
	if !errors.As(err, &te) || te.Fatal || !te.Retriable || errors.Is(err, ErrStuck) {
		t.Fatalf("SendOffsets = %#v, want a retriable TxnError", err)
	}
}

// With the brokers away and librdkafka's queue full, the sender waits for
// room; a transaction's commit waits for it no longer than its context,
// and Purge must still drop what is queued (in the outbox and in
// librdkafka) and leave nothing in flight, so that an at-least-once thread
// can rewind after an outage instead of waiting on its own records.
func TestPurgeDropsRecordsTheSenderCannotEnqueue(t *testing.T) {
	pr, err := NewProducer(kclient.Config{"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
		"queue.buffering.max.messages": 100, "message.timeout.ms": 600_000})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.(*producer)
	defer p.Close()
	rec := rt.OutRecord{Topic: "t", Partition: 0, Key: []byte("k"), Value: []byte("v"), Timestamp: -1}
	for i := 0; i < 1000; i++ {
		if err := p.Produce(&rec); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
	// The sender is stuck waiting for room in librdkafka's queue.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = p.WaitDelivered(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitDelivered with no broker = %v, want it to time out", err)
	}
	// A transaction's commit waits for the records to be in librdkafka;
	// out of time, it is a retriable TxnError, as librdkafka's own timeout.
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = p.CommitTransaction(ctx)
	cancel()
	var te *kclient.TxnError
	if !errors.As(err, &te) || !te.Retriable || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CommitTransaction with records the sender cannot enqueue = %v, want a retriable TxnError", err)
	}
	if err := p.Purge(); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.WaitDelivered(ctx) // the purged records' failures
	if n := p.inflight.Load(); n != 0 {
		t.Fatalf("%d records still in flight after Purge", n)
	}
	if err := p.out.waitIdle(ctx); err != nil {
		t.Fatalf("the sender is not idle after Purge: %v", err)
	}
}

// Produce waits while maxInflight records are unacknowledged and goes on
// once they fall to roomAt; while every broker is down it does not wait
// (the commit's WaitDelivered deals with the outage).
func TestProduceWaitsForRoomWhileTooManyRecordsAreUnacknowledged(t *testing.T) {
	// A broker that accepts connections and never answers: librdkafka
	// holds the records, and does not report the brokers down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var connsMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, c)
			connsMu.Unlock()
		}
	}()
	defer func() {
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
	}()
	pr, err := NewProducer(kclient.Config{"bootstrap.servers": ln.Addr().String(), "log_level": 0, "message.timeout.ms": 600_000})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.(*producer)
	defer p.Close()
	defer p.Purge()
	p.maxInflight, p.roomAt = 10, 6
	rec := rt.OutRecord{Topic: "t", Partition: 0, Key: []byte("k"), Value: []byte("v"), Timestamp: -1}
	for i := 0; i < 10; i++ {
		if err := p.Produce(&rec); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
	returned := make(chan error, 1)
	go func() { returned <- p.Produce(&rec) }()
	// Not yet: 10 records wait for acknowledgements. (This check cannot
	// fail falsely: a slow machine only waits longer.)
	select {
	case err := <-returned:
		t.Fatalf("Produce returned (%v) with %d records unacknowledged, want it to wait", err, p.inflight.Load())
	case <-time.After(50 * time.Millisecond):
	}
	p.settle(3) // three acknowledged: 7 left, still above roomAt
	select {
	case err := <-returned:
		t.Fatalf("Produce returned (%v) with %d records unacknowledged, want it to wait for %d", err, p.inflight.Load(), p.roomAt)
	case <-time.After(50 * time.Millisecond):
	}
	p.settle(1) // 6 left: room
	if err := <-returned; err != nil {
		t.Fatalf("Produce after room was made: %v", err)
	}
	if n := p.inflight.Load(); n != 7 {
		t.Fatalf("%d records in flight, want 7", n)
	}
	// Every broker down: no waiting, however many are unacknowledged.
	p.mu.Lock()
	p.down.Store(true)
	p.mu.Unlock()
	for i := 0; i < 20; i++ {
		if err := p.Produce(&rec); err != nil {
			t.Fatalf("Produce %d with the brokers down: %v", i, err)
		}
	}
}
