package streamstest_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

func records[V any](d *streamstest.Driver, topic string, vs serde.Serde[V]) []string {
	var out []string
	for _, r := range streamstest.Output(d, topic, serde.String(), vs).ReadRecords() {
		v := fmt.Sprint(r.Value)
		if r.NullValue {
			v = "<tombstone>"
		}
		out = append(out, fmt.Sprintf("%s=%s@%d", r.Key, v, r.Timestamp))
	}
	return out
}

// An aggregation with a time to live forgets a key not updated for the
// TTL of stream time: a tombstone downstream, the store no longer holds it,
// and its next record starts afresh. Cached or not, the output is the same
// when every record commits.
func TestAggregationTTLExpiresByStreamTime(t *testing.T) {
	str, i64 := serde.String(), serde.Int64()
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			b := topology.NewBuilder()
			topology.Count(topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey(),
				topology.Materialized[string, int64]("counts").WithTTL(10*time.Second).WithCaching(cached)).
				ToStream().To("out", topology.Produced(str, i64))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(top.Describe(), "counts (TTL 10s of stream time)") {
				t.Fatalf("Describe does not show the TTL:\n%s", top.Describe())
			}
			d := streamstest.New(t, top)
			in := streamstest.Input(d, "in", str, str)
			in.PipeAt("a", "x", 0)
			in.PipeAt("b", "x", 1000)
			in.PipeAt("a", "x", 5000)
			in.PipeAt("b", "x", 4000)   // out of order: b's count now has timestamp 4000
			in.PipeAt("c", "x", 14_999) // b (4000) is 10 s old
			in.PipeAt("c", "x", 15_000) // a (5000) is
			in.PipeAt("a", "x", 16_000)
			want := []string{
				"a=1@0", "b=1@1000", "a=2@5000", "b=2@4000", "b=<tombstone>@14999", "c=1@14999",
				"a=<tombstone>@15000", "c=2@15000", "a=1@16000",
			}
			if got := records(d, "out", i64); !slices.Equal(got, want) {
				t.Fatalf("output\n got %v\nwant %v", got, want)
			}
			kv := streamstest.KeyValueStore[string, int64](d, "counts")
			var live []string
			for k, v := range kv.All().Seq() {
				live = append(live, fmt.Sprintf("%s=%d", k, v))
			}
			if !slices.Equal(live, []string{"a=1", "c=2"}) {
				t.Fatalf("store holds %v, want [a=1 c=2]", live)
			}
		})
	}
}

// With silent expiry the store forgets, but nothing goes downstream.
func TestAggregationSilentExpiry(t *testing.T) {
	str, i64 := serde.String(), serde.Int64()
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			b := topology.NewBuilder()
			topology.Count(topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey(),
				topology.Materialized[string, int64]("counts").WithTTL(10*time.Second).WithSilentExpiry().WithCaching(cached)).
				ToStream().To("out", topology.Produced(str, i64))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := streamstest.New(t, top)
			in := streamstest.Input(d, "in", str, str)
			in.PipeAt("a", "x", 0)
			in.PipeAt("b", "x", 5000)
			in.PipeAt("b", "x", 10_000) // a expires, silently
			in.PipeAt("a", "x", 11_000) // and starts over
			if got, want := records(d, "out", i64), []string{"a=1@0", "b=1@5000", "b=2@10000", "a=1@11000"}; !slices.Equal(got, want) {
				t.Fatalf("output %v, want %v", got, want)
			}
		})
	}
}

// A table with a time to live: a stream-table join stops finding a row
// once it expired.
func TestTableTTLJoinForgets(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	users := topology.Table(b, "users", topology.Consumed(str, str),
		topology.Materialized[string, string]("users").WithTTL(time.Minute).WithCaching(false))
	clicks := topology.Stream(b, "clicks", topology.Consumed(str, str))
	topology.JoinTable(clicks, users, func(c, u string) string { return c + "|" + u }).To("joined", topology.Produced(str, str))
	users.ToStream().To("users-changes", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	u := streamstest.Input(d, "users", str, str)
	c := streamstest.Input(d, "clicks", str, str)
	u.PipeAt("u1", "ann", 0)
	u.PipeAt("u2", "bob", 30_000)
	c.PipeAt("u1", "home", 59_999)
	c.PipeAt("u1", "cart", 60_000) // u1 (written at 0) expired
	c.PipeAt("u2", "cart", 60_001)
	if got, want := records(d, "joined", str), []string{"u1=home|ann@59999", "u2=cart|bob@60001"}; !slices.Equal(got, want) {
		t.Fatalf("joined %v, want %v", got, want)
	}
	if got, want := records(d, "users-changes", str), []string{"u1=ann@0", "u2=bob@30000", "u1=<tombstone>@60000"}; !slices.Equal(got, want) {
		t.Fatalf("table changes %v, want %v", got, want)
	}
}

// DeduplicateByKey forwards the first record of a key and drops the
// others until stream time passes the first one's timestamp plus the
// retention.
func TestDeduplicateByKey(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(str, str)).
		DeduplicateByKey(10*time.Second, topology.Deduplicated[string]("dedup")).
		To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	in := streamstest.Input(d, "in", str, str)
	in.PipeAt("a", "1", 0)
	in.PipeAt("a", "2", 1000) // duplicate
	in.PipeAt("b", "3", 2000)
	in.PipeAt("a", "4", 9999)   // duplicate
	in.PipeAt("a", "5", 10_000) // a's first was 10 s ago: passes, a new period
	in.PipeAt("a", "6", 19_999) // duplicate of the second period
	if got, want := records(d, "out", str), []string{"a=1@0", "b=3@2000", "a=5@10000"}; !slices.Equal(got, want) {
		t.Fatalf("output %v, want %v", got, want)
	}
	if n := d.Deduplicated(); n != 3 {
		t.Fatalf("Deduplicated() = %d, want 3", n)
	}
}

// Deduplicate by an id in the value: the records keep their keys, and
// tombstones pass through.
func TestDeduplicateByValueID(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	s := topology.Stream(b, "payments", topology.Consumed(str, str))
	topology.Deduplicate(s, func(_, v string) string { id, _, _ := strings.Cut(v, ":"); return id }, time.Hour,
		topology.Deduplicated[string]("payments-dedup")).To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(top.Describe(), "payments-dedup-repartition") {
		t.Fatalf("no repartition by id:\n%s", top.Describe())
	}
	d := streamstest.New(t, top)
	in := streamstest.Input(d, "payments", str, str)
	in.PipeAt("alice", "p1:10", 0)
	in.PipeAt("bob", "p1:10", 5) // the same payment under another key
	in.PipeAt("bob", "p2:7", 6)
	in.PipeRecord(processor.Record[string, string]{Key: "bob", NullValue: true, Timestamp: 7})
	if got, want := records(d, "out", str), []string{"alice=p1:10@0", "bob=p2:7@6", "bob=<tombstone>@7"}; !slices.Equal(got, want) {
		t.Fatalf("output %v, want %v", got, want)
	}
}

// TestDeduplicateMatchesOracle: random ids at random times (gaps, out of
// order records); a record is forwarded iff no forwarded record with its
// id has a timestamp older than the retention of stream time.
func TestDeduplicateMatchesOracle(t *testing.T) {
	str := serde.String()
	const within = 100 // ms
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			b := topology.NewBuilder()
			topology.Stream(b, "in", topology.Consumed(str, str)).
				DeduplicateByKey(within*time.Millisecond).To("out", topology.Produced(str, str))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := streamstest.New(t, top, streamstest.Options{ManualCommit: true})
			in := streamstest.Input(d, "in", str, str)
			rng := rand.New(rand.NewPCG(seed, 3))
			first := map[string]int64{} // id -> timestamp of its forwarded record
			stream := int64(-1)
			var want []string
			dropped := 0
			for i := range 2000 {
				ts := max(stream, 0) + int64(rng.IntN(8)) - 2
				if rng.IntN(30) == 0 {
					ts += int64(rng.IntN(400))
				}
				ts = max(ts, 0)
				stream = max(stream, ts)
				id := fmt.Sprintf("id%d", rng.IntN(30))
				if f, ok := first[id]; ok && f > stream-within {
					dropped++
				} else {
					first[id] = ts
					want = append(want, fmt.Sprintf("%s=%d@%d", id, i, ts))
				}
				in.PipeAt(id, fmt.Sprint(i), ts)
				if rng.IntN(10) == 0 {
					if err := d.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := records(d, "out", str); !slices.Equal(got, want) {
				t.Fatalf("forwarded %d records, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
			}
			if n := d.Deduplicated(); n != int64(dropped) {
				t.Fatalf("Deduplicated() = %d, want %d", n, dropped)
			}
		})
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
