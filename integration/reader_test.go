package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
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
	wants, ends := transactionalTopic(t, brokers, topic, map[string]string{"cleanup.policy": "compact"})

	read := func(iso string, from map[int32]int64) (map[int32][]string, map[int32]int64) {
		t.Helper()
		r, err := backend.NewReader(kclient.Config{"bootstrap.servers": brokers, "isolation.level": iso})
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

// txnRecords are the values a partition of transactionalTopic holds: all
// of them, and those of committed transactions.
type txnRecords struct{ committed, all []string }

// transactionalTopic creates a 2-partition topic (with configs) and writes four
// transactions to it, the second and the last aborted (the end of each
// partition is an abort marker); it returns each partition's records and
// its end offset.
func transactionalTopic(t *testing.T, brokers, topic string, configs map[string]string) (map[int32]*txnRecords, map[int32]int64) {
	t.Helper()
	kafkatest.CreateTopic(t, brokers, topic, 2, configs)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.TransactionalID(topic+"-txn"), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	wants := map[int32]*txnRecords{0: {}, 1: {}}
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
	// EndTransaction returns once the coordinator decided; it writes the
	// markers after. Each partition ends past its records and the four
	// transactions' markers: wait for that end, or a reader could be seen
	// going "past the end" onto the last marker.
	deadline := time.Now().Add(kafkatest.Timeout)
	for {
		ends := kafkatest.EndOffsets(t, brokers, topic)
		done := true
		for p, w := range wants {
			done = done && ends[p] == int64(len(w.all)+4)
		}
		if done {
			return wants, ends
		}
		if time.Now().After(deadline) {
			t.Fatalf("end offsets %v: the transactions' markers not all written after %v", ends, kafkatest.Timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGroupConsumerFetchesWhereTheGroupLeftOff: a stream thread's consumer
// (librdkafka keeps the group membership, eddy's fetcher reads the
// records) starts each partition at the group's committed offset, or where
// auto.offset.reset says when none is committed; reads committed records
// only, in offset order; reports positions past
// the transaction markers and the brokers' high watermarks; and follows
// Seek, Pause and Resume. An offset no longer in the partition is reset as
// auto.offset.reset says, and said.
func TestGroupConsumerFetchesWhereTheGroupLeftOff(t *testing.T) {
	brokers := realBroker(t)
	topic := kafkatest.UniqueName(t, "groupfetch")
	wants, ends := transactionalTopic(t, brokers, topic, nil) // not compacted: records get deleted below
	group := topic + "-group"
	ctx := context.Background()
	cl := kafkatest.Client(t, brokers)
	adm := kadm.NewClient(cl)
	var commit kadm.Offsets
	commit.AddOffset(topic, 0, 700, -1)
	if err := adm.CommitAllOffsets(ctx, group, commit); err != nil {
		t.Fatal(err)
	}

	g, err := backend.NewGroupConsumer(kclient.Config{
		"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": false,
		"auto.offset.reset": "earliest", "isolation.level": "read_committed",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tp0, tp1 := kclient.TP{Topic: topic, Partition: 0}, kclient.TP{Topic: topic, Partition: 1}
	tps := []kclient.TP{tp0, tp1}
	assigned := false
	err = g.Subscribe([]string{topic}, func(rb kclient.Rebalance) error {
		if len(rb.Assigned) > 0 {
			// As a stream thread does, before it processes.
			if _, _, err := g.Committed(ctx, rb.Assigned); err != nil {
				return err
			}
			assigned = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// read polls until every partition of want reached its end, returning
	// each partition's values and how many resets Poll reported.
	read := func(want map[kclient.TP]int64) (map[int32][]string, int) {
		t.Helper()
		got := map[int32][]string{}
		last := map[int32]int64{0: -1, 1: -1}
		resets := 0
		deadline := time.Now().Add(60 * time.Second)
		for {
			rec, err := g.Poll(50 * time.Millisecond)
			if err != nil {
				var reset *kclient.OffsetReset
				if !errors.As(err, &reset) {
					t.Fatalf("Poll: %v", err)
				}
				if reset.Earliest != reset.To || reset.Skipped() != reset.To-reset.From {
					t.Errorf("reset %+v: earliest or skipped offsets wrong", reset)
				}
				resets++
				continue
			}
			if rec != nil {
				if _, ok := want[kclient.TP{Topic: rec.Topic, Partition: rec.Partition}]; !ok {
					t.Fatalf("a record of partition %d, which is paused", rec.Partition)
				}
				if rec.Offset <= last[rec.Partition] {
					t.Fatalf("partition %d: offset %d after %d", rec.Partition, rec.Offset, last[rec.Partition])
				}
				last[rec.Partition] = rec.Offset
				got[rec.Partition] = append(got[rec.Partition], string(rec.Value))
				continue
			}
			if !assigned {
				if time.Now().After(deadline) {
					t.Fatal("no assignment within 60s")
				}
				continue
			}
			pos, err := g.Position(tps)
			if err != nil {
				t.Fatal(err)
			}
			done := true
			for tp, end := range want {
				if pos[tp] > end {
					t.Fatalf("%s: position %d past the end %d", tp, pos[tp], end)
				}
				done = done && pos[tp] == end
			}
			if done {
				return got, resets
			}
			if time.Now().After(deadline) {
				t.Fatalf("position %v, want %v after 60s", pos, want)
			}
		}
	}
	end := map[kclient.TP]int64{tp0: ends[0], tp1: ends[1]}
	got, _ := read(end)
	if w := wants[0].committed[700:]; fmt.Sprint(got[0]) != fmt.Sprint(w) {
		t.Errorf("partition 0 (committed at 700): %d records, want the %d committed after it", len(got[0]), len(w))
	}
	if w := wants[1].committed; fmt.Sprint(got[1]) != fmt.Sprint(w) {
		t.Errorf("partition 1 (nothing committed, earliest): %d records, want the %d committed", len(got[1]), len(w))
	}
	for _, tp := range tps {
		if hw := g.HighWatermark(tp); hw != ends[tp.Partition] {
			t.Errorf("%s: high watermark %d, want %d", tp, hw, ends[tp.Partition])
		}
	}

	// Partition 0 paused and sought back to its start, partition 1 read
	// again from its start: only partition 1 is read.
	if err := g.Pause([]kclient.TP{tp0}); err != nil {
		t.Fatal(err)
	}
	if err := g.Seek(tp0, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Seek(tp1, 0); err != nil {
		t.Fatal(err)
	}
	got, _ = read(map[kclient.TP]int64{tp1: ends[1]})
	if w := wants[1].committed; fmt.Sprint(got[1]) != fmt.Sprint(w) {
		t.Errorf("partition 1 sought to 0: %d records, want %d", len(got[1]), len(w))
	}
	if pos, _ := g.Position([]kclient.TP{tp0}); pos[tp0] != 0 {
		t.Errorf("paused partition 0 sought to 0: position %d", pos[tp0])
	}
	// Resumed, partition 0 is read from where it was sought to.
	if err := g.Resume([]kclient.TP{tp0}); err != nil {
		t.Fatal(err)
	}
	got, _ = read(end)
	if w := wants[0].committed; fmt.Sprint(got[0]) != fmt.Sprint(w) {
		t.Errorf("partition 0 resumed at 0: %d records, want %d", len(got[0]), len(w))
	}
	if len(got[1]) != 0 {
		t.Errorf("partition 1 at its end: %d more records", len(got[1]))
	}

	// Records before offset 600 deleted, partition 1 sought to 10: reset to
	// the log start, 600, and said.
	res, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {1: {Topic: topic, Partition: 1, At: 600}}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Seek(tp1, 10); err != nil {
		t.Fatal(err)
	}
	got, resets := read(end)
	if resets != 1 {
		t.Errorf("offset 10 deleted: %d resets reported, want 1", resets)
	}
	if w := wants[1].committed[600:]; fmt.Sprint(got[1]) != fmt.Sprint(w) {
		t.Errorf("partition 1 reset to 600: %d records, want the %d from there", len(got[1]), len(w))
	}
}
