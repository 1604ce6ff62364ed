package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// TestProducerWritesWhatItWasGivenInOrder: Produce queues records for a
// goroutine that hands them to librdkafka later, so it must copy them —
// the stream thread reuses its buffers the moment Produce returns — and
// keep their order. Every record is produced from one buffer overwritten
// after each call; keys and values that are null, empty or set, headers
// with null and empty values, explicit timestamps all come back as given,
// in order, from the real broker.
func TestProducerWritesWhatItWasGivenInOrder(t *testing.T) {
	brokers := realBroker(t)
	topic := kafkatest.UniqueName(t, "producer")
	kafkatest.CreateTopic(t, brokers, topic, 2, nil)
	p, err := backend.NewProducer(kclient.Config{"bootstrap.servers": brokers, "enable.idempotence": true, "linger.ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	const n = 40_000 // more than one outbox batch
	want := make([]kafkatest.Record, 0, n)
	buf := make([]byte, 0, 64)
	base := time.Now().Add(-time.Hour).UnixMilli()
	for i := range n {
		part := int32(i % 2)
		buf = append(buf[:0], fmt.Sprintf("key-%d|value-%d", i, i)...)
		sep := bytes.IndexByte(buf, '|')
		rec := rt.OutRecord{Topic: topic, Partition: part, Key: buf[:sep], Value: buf[sep+1:], Timestamp: base + int64(i)}
		w := kafkatest.Record{Partition: part, Key: []byte(string(buf[:sep])), Value: []byte(string(buf[sep+1:])), Timestamp: time.UnixMilli(base + int64(i))}
		switch i % 7 {
		case 1:
			rec.Key, w.Key = nil, nil
		case 2:
			rec.Value, w.Value = nil, nil // a tombstone
		case 3:
			rec.Value, w.Value = buf[:0], []byte{}
		case 4:
			hv := buf[sep+1:]
			rec.Headers = processor.Headers{{Key: "h", Value: hv}, {Key: "null"}, {Key: "empty", Value: buf[:0]}}
			w.Headers = []kafkatest.Header{{Key: "h", Value: []byte(string(hv))}, {Key: "null"}, {Key: "empty", Value: []byte{}}}
		}
		if err := p.Produce(&rec); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
		for j := range buf { // the caller's buffer changes at once
			buf[j] = 'X'
		}
		want = append(want, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	if err := p.WaitDelivered(ctx); err != nil {
		t.Fatalf("WaitDelivered: %v", err)
	}
	got := kafkatest.ConsumeAll(t, brokers, topic)
	if len(got) != n {
		t.Fatalf("consumed %d records, want %d", len(got), n)
	}
	byPart := map[int32][]kafkatest.Record{}
	for _, r := range got {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	next := map[int32]int{}
	for i, w := range want {
		k := next[w.Partition]
		next[w.Partition]++
		g := byPart[w.Partition][k]
		if (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Key, w.Key) ||
			(g.Value == nil) != (w.Value == nil) || !bytes.Equal(g.Value, w.Value) ||
			!g.Timestamp.Equal(w.Timestamp) || !sameHeaders(g.Headers, w.Headers) {
			t.Fatalf("record %d (partition %d, #%d): got key %q value %q ts %v headers %q, want key %q value %q ts %v headers %q",
				i, w.Partition, k, g.Key, g.Value, g.Timestamp, g.Headers, w.Key, w.Value, w.Timestamp, w.Headers)
		}
	}
}

func sameHeaders(a, b []kafkatest.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || (a[i].Value == nil) != (b[i].Value == nil) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// TestProducerRefusalStopsTheRecordsAfterIt: a record the client refuses
// (larger than the producer's message.max.bytes) is refused by eddy's
// client up front (rt.ErrRecordRefused: a bad record for the production
// error handler) and the records after it go on; librdkafka refuses it
// after the fact, and then it fails a later Produce and WaitDelivered and
// no record queued after it is written: what follows a lost record must
// not reach the topic, or a commit could pass over the gap.
func TestProducerRefusalStopsTheRecordsAfterIt(t *testing.T) {
	brokers := realBroker(t)
	topic := kafkatest.UniqueName(t, "producer-refusal")
	kafkatest.CreateTopic(t, brokers, topic, 1, nil)
	p, err := backend.NewProducer(kclient.Config{"bootstrap.servers": brokers, "message.max.bytes": 10_000, "linger.ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce := func(i, size int) error {
		v := bytes.Repeat([]byte{'v'}, size)
		return p.Produce(&rt.OutRecord{Topic: topic, Partition: 0, Key: []byte(fmt.Sprint(i)), Value: v, Timestamp: -1})
	}
	for i := range 100 {
		if err := produce(i, 10); err != nil {
			t.Fatalf("Produce %d: %v", i, err)
		}
	}
	err = produce(100, 50_000)
	if backend.Name == "franz-go" {
		// eddy's client refuses it up front, as a bad record: the
		// records after it go on.
		if !errors.Is(err, rt.ErrRecordRefused) || !isTooLarge(err) {
			t.Fatalf("Produce of the large record = %v, want a refusal (too large)", err)
		}
		for i := 101; i < 200; i++ {
			if err := produce(i, 10); err != nil {
				t.Fatalf("Produce %d after the refused record: %v", i, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
		defer cancel()
		if err := p.WaitDelivered(ctx); err != nil {
			t.Fatalf("WaitDelivered = %v", err)
		}
		got := kafkatest.ConsumeAll(t, brokers, topic)
		var keys []string
		for _, r := range got {
			keys = append(keys, string(r.Key))
		}
		var want []string
		for i := range 200 {
			if i != 100 {
				want = append(want, fmt.Sprint(i))
			}
		}
		if fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("the topic holds %v, want every record but the refused one", keys)
		}
		return
	}
	if err != nil && !isTooLarge(err) {
		t.Fatalf("Produce of the large record: %v", err)
	}
	// The refusal comes back once the sender reached the large record,
	// whenever that is: Produce waits for it when the outbox is full, so
	// at most two outboxes of records go in first.
	var refused error
	for i := 101; i < 1_000_000 && refused == nil; i++ {
		refused = produce(i, 10)
	}
	if !isTooLarge(refused) {
		t.Fatalf("Produce after the refused record = %v, want the refusal (message size too large)", refused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	if err := p.WaitDelivered(ctx); !isTooLarge(err) {
		t.Fatalf("WaitDelivered = %v, want the refusal", err)
	}
	got := kafkatest.ConsumeAll(t, brokers, topic)
	if len(got) != 100 {
		t.Fatalf("the topic holds %d records, want the 100 before the refused one", len(got))
	}
	for i, r := range got {
		if string(r.Key) != fmt.Sprint(i) {
			t.Fatalf("record %d has key %q", i, r.Key)
		}
	}
}

func isTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || isTooLargeLibrdkafka(err)
}

// TestBackToBackTransactionsNeverWaitSeconds: a batch the brokers answer
// with a retriable error — CONCURRENT_TRANSACTIONS for a transaction's
// first batch to a partition whose previous commit marker is not written
// yet (KIP-890), or an error of a topic created a moment ago — is sent
// again only after a metadata refresh, and franz-go's own interval between
// refreshes is 5 s: a transaction that met one within 5 s of the
// producer's last refresh (learning the topic) took 5 s to commit — the
// stream thread's ~5 s stall under exactly-once (issue 66). Measured
// without eddy's interval: the first transaction of every round took
// 5.0 s. Transactions committed back to back, each writing every partition
// of a new topic the moment the last one committed, as a stream thread
// does: none may take longer than 2.5 s (half of franz-go's interval; each
// takes milliseconds).
func TestBackToBackTransactionsNeverWaitSeconds(t *testing.T) {
	brokers := realBroker(t)
	ctx := context.Background()
	var worst time.Duration
	for round := range 5 { // a new topic and producer each round: a fresh metadata refresh
		topic := kafkatest.UniqueName(t, fmt.Sprintf("txn-back-to-back-%d", round))
		kafkatest.CreateTopic(t, brokers, topic, 8, nil)
		p, err := backend.NewProducer(kclient.Config{"bootstrap.servers": brokers, "enable.idempotence": true, "acks": "all",
			"linger.ms": 10, "transactional.id": topic, "retry.backoff.ms": 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.InitTransactions(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for part := range int32(8) {
				if err := p.Produce(&rt.OutRecord{Topic: topic, Partition: part, Key: []byte("k"), Value: fmt.Appendf(nil, "%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if err := p.CommitTransaction(ctx); err != nil {
				t.Fatalf("round %d, transaction %d: %v", round, i, err)
			}
			took := time.Since(start)
			worst = max(worst, took)
			if took > 2500*time.Millisecond {
				t.Errorf("round %d, transaction %d took %v to commit: a batch waited out franz-go's 5 s between metadata refreshes", round, i, took)
			}
		}
		p.Close()
	}
	t.Logf("the slowest of 500 back-to-back commits took %v", worst)
}
