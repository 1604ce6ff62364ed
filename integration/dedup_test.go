package integration_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// Deduplicate under exactly-once, on the real broker: payments with ids in
// their values, duplicated under other keys (other partitions) seconds
// apart, are fed while one of three workers is SIGKILLed twice mid-stream.
// Every id comes out exactly once. Then a new instance restores the
// seen-set from its changelog and drops a second copy of every id; then
// stream time jumps three hours (past the one-hour retention), the ids
// expire, and each passes once more.
func TestDeduplicateUnderCrashes(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 6)
	a.internal = []string{a.app + "-dedup-repartition"}
	args := []string{"-guarantee", "exactly_once", "-topology", "dedup"}

	// 12,000 ids; each sent once, half of them again 1–4 times up to
	// 15,000 records (up to about 17 s of feed) later, each copy under its own
	// key.
	const ids = 12_000
	slots := make([][]string, ids*3)
	copies := 0
	for i := range ids {
		id := fmt.Sprintf("pay%05d", i)
		pos := i * 2
		slots[pos] = append(slots[pos], id)
		if a.rng.IntN(2) == 0 {
			for range 1 + a.rng.IntN(4) {
				d := min(len(slots)-1, pos+2_000+a.rng.IntN(13_000))
				slots[d] = append(slots[d], id)
				copies++
			}
		}
	}
	// Timestamps three hours back, a millisecond apart (the broker refuses
	// timestamps more than an hour ahead, so the jump past the retention at
	// the end is back to the present).
	base := time.Now().Add(-3 * time.Hour)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
	var recs []kafkatest.Record
	for _, s := range slots {
		for _, id := range s {
			r := kafkatest.KV(fmt.Sprintf("k%d", a.rng.IntN(1_000_000)), id+":"+fmt.Sprint(len(recs)))
			r.Timestamp = at(len(recs))
			recs = append(recs, r)
		}
	}
	t.Logf("%d records: %d ids and %d duplicates", len(recs), ids, copies)

	w := []*worker{a.start("p0", args...), a.start("p1", args...), a.start("p2", args...)}
	a.feedRecords(900, recs...) // about 30 s: a stall after a kill then backs up only a small part of the input
	a.strike("SIGKILL of p1, restarted", 0.15, 0.45, func() {
		w[1].kill(t)
		w[1] = a.start("p1", args...)
	})
	a.strike("second SIGKILL of p1, restarted", 0.55, 0.85, func() {
		w[1].kill(t)
		w[1] = a.start("p1", args...)
	})
	a.waitDone(5 * time.Minute)
	for _, x := range w {
		x.stop(t)
	}
	forwarded := func() map[string]int {
		n := map[string]int{}
		for _, r := range kafkatest.ConsumeAll(t, brokers, a.output) {
			id, _, _ := strings.Cut(string(r.Value), ":")
			n[id]++
		}
		return n
	}
	checkEach := func(phase string, want int) {
		t.Helper()
		got := forwarded()
		bad := 0
		for i := range ids {
			id := fmt.Sprintf("pay%05d", i)
			if got[id] != want {
				bad++
				if bad <= 5 {
					t.Errorf("%s: id %s forwarded %d times, want %d", phase, id, got[id], want)
				}
			}
			delete(got, id)
		}
		if len(got) > 0 {
			t.Errorf("%s: forwarded ids that were never sent: %v", phase, slices.Collect(maps.Keys(got))[:min(5, len(got))])
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d ids not forwarded exactly %d times", phase, bad, ids, want)
		}
	}
	checkEach("under crashes", 1)

	// A new instance, empty state directory: it restores the seen-set from
	// the changelog and drops one more copy of every id.
	p9 := a.start("p9", args...)
	again := make([]kafkatest.Record, 0, ids)
	for i := range ids {
		r := kafkatest.KV(fmt.Sprintf("again%d", i), fmt.Sprintf("pay%05d:again", i))
		r.Timestamp = at(len(recs) + i)
		again = append(again, r)
	}
	a.feedRecords(20_000, again...)
	a.waitDone(3 * time.Minute)
	if p9.restored() == 0 {
		t.Fatal("the new instance restored nothing from the seen-set's changelog")
	}
	t.Logf("new instance restored %d changelog records", p9.restored())
	checkEach("after a full restore", 1)

	// Stream time jumps past the retention: every dedup task first sees new
	// ids three hours ahead, then the old ids come again and pass once more.
	later := time.Now()
	ahead := make([]kafkatest.Record, 0, 300)
	for i := range 300 {
		r := kafkatest.KV(fmt.Sprintf("ahead%d", i), fmt.Sprintf("new%03d:ahead", i))
		r.Timestamp = later
		ahead = append(ahead, r)
	}
	a.feedRecords(20_000, ahead...)
	a.waitDone(3 * time.Minute)
	for i := range again {
		again[i].Timestamp = later.Add(time.Second)
	}
	a.feedRecords(20_000, again...)
	a.waitDone(3 * time.Minute)
	p9.stop(t)
	got := forwarded()
	for i := range 300 {
		delete(got, fmt.Sprintf("new%03d", i))
	}
	bad := 0
	for id, n := range got {
		if n != 2 {
			bad++
			if bad <= 5 {
				t.Errorf("after expiry: id %s forwarded %d times in all, want 2", id, n)
			}
		}
	}
	if bad > 0 || len(got) != ids {
		t.Fatalf("after expiry: %d of %d ids not forwarded exactly twice (%d ids seen)", bad, ids, len(got))
	}
}
