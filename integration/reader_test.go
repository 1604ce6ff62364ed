package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/internal/kclient"
)

// TestChangelogReaderSkipsAbortedRecordsAndMarkers: the reader a restore
// uses (its own fetch requests, not librdkafka's consumer) returns, read
// committed, exactly the committed records in offset order and reports a
// position past the transaction markers and aborted records — a restore
// ends when the position reaches the changelog's end, which is a marker.
// Read uncommitted it returns the aborted records too; assigned again from
// a middle offset it starts there.
func TestChangelogReaderSkipsAbortedRecordsAndMarkers(t *testing.T) {
	brokers := realBroker(t)
	topic := kafkatest.UniqueName(t, "reader")
	kafkatest.CreateTopic(t, brokers, topic, 2, map[string]string{"cleanup.policy": "compact"})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.TransactionalID(topic+"-txn"), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	type want struct{ committed, all []string }
	wants := map[int32]*want{0: {}, 1: {}}
	txn := func(tag string, n int, commit bool) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			p := int32(i % 2)
			v := fmt.Sprintf("%s-%d", tag, i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			wants[p].all = append(wants[p].all, v)
			if commit {
				wants[p].committed = append(wants[p].committed, v)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn("a", 2000, true)
	txn("b", 500, false)
	txn("c", 100, true)
	txn("d", 40, false) // the last one aborted: the end is an abort marker
	ends := kafkatest.EndOffsets(t, brokers, topic)

	read := func(iso string, from map[int32]int64) (map[int32][]string, map[int32]int64) {
		t.Helper()
		r, err := kclient.NewReader(kclient.Config{"bootstrap.servers": brokers, "isolation.level": iso})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		offsets := map[kclient.TP]int64{}
		var tps []kclient.TP
		for p, off := range from {
			tp := kclient.TP{Topic: topic, Partition: p}
			offsets[tp] = off
			tps = append(tps, tp)
		}
		if err := r.Assign(offsets); err != nil {
			t.Fatal(err)
		}
		got := map[int32][]string{}
		last := map[int32]int64{0: -1, 1: -1}
		deadline := time.Now().Add(60 * time.Second)
		for {
			rec, err := r.Poll(50 * time.Millisecond)
			if err != nil {
				t.Fatalf("Poll: %v", err)
			}
			if rec != nil {
				if rec.Offset <= last[rec.Partition] {
					t.Fatalf("partition %d: offset %d after %d", rec.Partition, rec.Offset, last[rec.Partition])
				}
				last[rec.Partition] = rec.Offset
				got[rec.Partition] = append(got[rec.Partition], string(rec.Value))
				continue
			}
			pos, err := r.Position(tps)
			if err != nil {
				t.Fatal(err)
			}
			done := true
			for _, tp := range tps {
				if pos[tp] > ends[tp.Partition] {
					t.Fatalf("%s: position %d past the end %d", tp, pos[tp], ends[tp.Partition])
				}
				done = done && pos[tp] == ends[tp.Partition]
			}
			if done {
				return got, last
			}
			if time.Now().After(deadline) {
				t.Fatalf("position %v, end %v after 60s", pos, ends)
			}
		}
	}
	got, last := read("read_committed", map[int32]int64{0: 0, 1: 0})
	for p, w := range wants {
		if fmt.Sprint(got[p]) != fmt.Sprint(w.committed) {
			t.Errorf("read_committed partition %d: %d records, want the %d committed", p, len(got[p]), len(w.committed))
		}
		if last[p] >= ends[p]-1 {
			t.Errorf("partition %d: last record at %d, end %d: the end should be past markers", p, last[p], ends[p])
		}
	}
	got, _ = read("read_uncommitted", map[int32]int64{0: 0, 1: 0})
	for p, w := range wants {
		if fmt.Sprint(got[p]) != fmt.Sprint(w.all) {
			t.Errorf("read_uncommitted partition %d: %d records, want all %d", p, len(got[p]), len(w.all))
		}
	}
	// From the middle of the first transaction: the rest of it and the third.
	got, _ = read("read_committed", map[int32]int64{0: 700})
	if w := wants[0].committed[700:]; fmt.Sprint(got[0]) != fmt.Sprint(w) {
		t.Errorf("from offset 700: %d records, want %d", len(got[0]), len(w))
	}
}
