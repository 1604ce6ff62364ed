package integration_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/topology"
)

// A windowed count that emits each window once, on close, is killed with
// SIGKILL mid-stream under exactly-once and restarted: every window's final
// count must be in the output exactly once, and every late record in the
// late-records topic exactly once, with its headers.
func TestEmitOnWindowCloseExactlyOnceAcrossCrash(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 3)
	late := a.app + "-late"
	kafkatest.CreateTopic(t, brokers, late, 3, nil)

	const keys = 60
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Second).UnixMilli()
	rng := rand.New(rand.NewPCG(1, uint64(base)))
	want := map[string]int64{} // "key@start" → count
	lateWant := map[string]bool{}
	now := base
	seq := 0
	batch := func(n int) []kafkatest.Record {
		recs := make([]kafkatest.Record, 0, n)
		for range n {
			now += 3
			key := fmt.Sprintf("k%02d", rng.IntN(keys))
			ts := now
			value := strconv.Itoa(seq)
			seq++
			// Every so often a record 5s behind: its window closed long ago
			// (size 1s + grace 500ms) on every partition.
			if now-base > 10_000 && rng.IntN(200) == 0 {
				ts = now - 5_000
				lateWant[key+"/"+value] = true
			} else {
				want[fmt.Sprintf("%s@%d", key, ts/1000*1000)]++
			}
			recs = append(recs, kafkatest.Record{Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ts)})
		}
		return recs
	}
	args := []string{"-topology", "windowed", "-late", late, "-commit", "200ms"}
	w := a.start("w1", args...)
	// Kill it mid-stream, placed by committed progress while input flows,
	// and start another instance (its own, empty state directory: it
	// restores the windows from the changelog).
	a.feedRecords(2_000, batch(40_000)...)
	a.strike("SIGKILL of w1, restarted as w2", 0.2, 0.6, func() {
		w.kill(t)
		w = a.start("w2", args...)
	})
	for _, f := range a.feeds {
		f.Wait()
	}
	// One record per partition far ahead closes every window.
	var ends []kafkatest.Record
	for p := range int32(3) {
		ends = append(ends, kafkatest.Record{Partition: p, Key: []byte("zz-end"), Value: []byte("end"), Timestamp: time.UnixMilli(now + 60_000)})
	}
	kafkatest.ProduceToPartitions(t, brokers, a.input, ends...)
	kafkatest.WaitCaughtUp(t, brokers, a.app, 3*time.Minute, a.input)
	// The look for closed windows is throttled to once a second (as Kafka
	// Streams); the last one is retried on the wall clock, so the final
	// windows follow within about a second of catching up.
	for end := time.Now().Add(30 * time.Second); len(kafkatest.ConsumeAll(t, brokers, a.output)) < len(want) && time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
	}
	w.stop(t)

	i64 := serde.Int64()
	seen := map[string]int{}
	got := map[string]int64{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, a.output) {
		n, err := i64.Deserialize(a.output, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(r.Key)]++
		got[string(r.Key)] = n
	}
	bad := 0
	for k, n := range want {
		if seen[k] != 1 || got[k] != n {
			if bad++; bad <= 5 {
				t.Errorf("window %s: emitted %d times, last %d; want once, %d", k, seen[k], got[k], n)
			}
		}
	}
	for k := range seen {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected window %s in the output", k)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d windows wrong", bad, len(want))
	}

	lateSeen := map[string]int{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, late) {
		id := string(r.Key) + "/" + string(r.Value)
		lateSeen[id]++
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		start, _ := strconv.ParseInt(h[topology.HeaderLateWindowStart], 10, 64)
		end, _ := strconv.ParseInt(h[topology.HeaderLateWindowEnd], 10, 64)
		st, _ := strconv.ParseInt(h[topology.HeaderLateStreamTime], 10, 64)
		ts := r.Timestamp.UnixMilli()
		if h[topology.HeaderLateReason] == "" || start > ts || end <= ts || end-start != 1000 || st < end+500 {
			t.Errorf("late record %s at %d has headers %v", id, ts, h)
		}
	}
	for id := range lateWant {
		if lateSeen[id] != 1 {
			t.Errorf("late record %s written %d times to the late topic, want once", id, lateSeen[id])
		}
	}
	if len(lateSeen) != len(lateWant) {
		t.Errorf("late topic holds %d records, want %d", len(lateSeen), len(lateWant))
	}
	t.Logf("%d windows emitted once each; %d late records routed once each", len(want), len(lateWant))
}
