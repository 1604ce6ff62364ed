package streamstest_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// routeByKey places "pN" keys in partition N, "all" in every partition,
// drops "none", sends "bad" out of range, and leaves the rest to the
// default partitioner.
func routeByKey(_ string, key string, _ *string, n int32) ([]int32, bool) {
	switch {
	case key == "all":
		all := make([]int32, n)
		for i := range n {
			all[i] = i
		}
		return append(all, 0), true // a repeat is written once
	case key == "none":
		return []int32{}, true
	case key == "bad":
		return []int32{n}, true
	case strings.HasPrefix(key, "p"):
		p, _ := strconv.Atoi(key[1:])
		return []int32{int32(p)}, true
	}
	return nil, false
}

// A sink's stream partitioner places each record (Kafka Streams'
// Produced.withStreamPartitioner, with KIP-837's multicast and drop): a
// partition of its own, every partition, none, or the default
// partitioner's choice (murmur2 of the key); a partition out of range is
// a production error for the handler.
func TestStreamPartitionerPlacesMulticastsAndDrops(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(str, str)).
		To("out", topology.Produced(str, str).WithStreamPartitioner(routeByKey))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var refused []*processor.RecordError
	d := streamstest.New(t, top, streamstest.Options{Partitions: map[string]int32{"out": 4},
		OnError: func(e *processor.RecordError) processor.ErrorAction {
			refused = append(refused, e)
			return processor.Continue
		}})
	in := streamstest.Input(d, "in", str, str)
	for _, k := range []string{"p3", "all", "none", "bad", "p0", "free", "p3"} {
		in.Pipe(k, "v-"+k)
	}
	got := map[int32][]string{}
	for p, recs := range streamstest.Output(d, "out", str, str).ReadRecordsByPartition() {
		for _, r := range recs {
			got[p] = append(got[p], r.Key)
		}
	}
	free := kclient.KeyPartition([]byte("free"), 4)
	want := map[int32][]string{0: {"all", "p0"}, 1: {"all"}, 2: {"all"}, 3: {"p3", "all", "p3"}}
	want[free] = append(want[free], "free")
	if free == 0 {
		want[0] = []string{"all", "p0", "free"}
	}
	for p := range int32(4) {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("partition %d holds %v, want %v", p, got[p], want[p])
		}
	}
	if len(refused) != 1 || refused[0].Kind != processor.ProductionError || !strings.Contains(refused[0].Err.Error(), "chose partition 4 of topic \"out\", which has 4 partitions") {
		t.Errorf("handler saw %v, want one production error for the partition out of range", refused)
	}
}

// A hot key's aggregation spread over salted partials equals the plain
// aggregation, whatever the input: counts, sums (AggregateSpread) and
// maxima (ReduceSpread) of random records where one key has half of them;
// the hot key's records, all in one partition for the plain aggregations,
// are spread over every partition of the salted repartition topic.
func TestSpreadAggregationsEqualThePlainOnes(t *testing.T) {
	str, i64 := serde.String(), serde.Int64()
	b := topology.NewBuilder()
	in := topology.Stream(b, "in", topology.Consumed(str, i64))
	byValue := in.GroupByKey(topology.Grouped(str, i64))
	topology.Count(byValue, topology.Materialized[string, int64]("count"))
	topology.CountSpread(byValue, 4, topology.Materialized[string, int64]("count-spread"))
	sum := func(_ string, v, agg int64) int64 { return agg + v }
	topology.Aggregate(byValue, func() int64 { return 0 }, sum, topology.Materialized[string, int64]("sum").WithSerdes(str, i64))
	topology.AggregateSpread(byValue, 4, func() int64 { return 0 }, sum, func(a, b int64) int64 { return a + b },
		topology.Materialized[string, int64]("sum-spread").WithSerdes(str, i64))
	maxOf := func(a, b int64) int64 { return max(a, b) }
	byValue.Reduce(maxOf, topology.Materialized[string, int64]("max"))
	topology.ReduceSpread(byValue, 4, maxOf, topology.Materialized[string, int64]("max-spread"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	salted := "streamstest-count-spread-salted-repartition"
	for seed := range uint64(20) {
		d := streamstest.New(t, top, streamstest.Options{ManualCommit: seed%2 == 0,
			Partitions: map[string]int32{salted: 4}})
		rng := rand.New(rand.NewPCG(seed, 7))
		input := streamstest.Input(d, "in", str, i64)
		for i := range 400 + rng.IntN(400) {
			key := "hot"
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("k%d", rng.IntN(30))
			}
			input.PipeAt(key, rng.Int64N(1000)-500, int64(i))
			if seed%2 == 0 && rng.IntN(50) == 0 {
				if err := d.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, pair := range [][2]string{{"count", "count-spread"}, {"sum", "sum-spread"}, {"max", "max-spread"}} {
			want, got := storeContents(t, d, pair[0]), storeContents(t, d, pair[1])
			if want != got {
				t.Fatalf("seed %d: %s is\n%s\nwant (%s)\n%s", seed, pair[1], got, pair[0], want)
			}
		}
		hot := map[int32]int{}
		for p, recs := range streamstest.Output(d, salted, serde.Bytes(), serde.Bytes()).ReadRecordsByPartition() {
			for _, r := range recs {
				if strings.HasPrefix(string(r.Key), "hot") {
					hot[p]++
				}
			}
		}
		if len(hot) != 4 {
			t.Fatalf("seed %d: the hot key's records went to partitions %v of the salted topic; want all 4", seed, hot)
		}
	}
}

// storeContents lists a key-value store of counts, one key a line.
func storeContents(t *testing.T, d *streamstest.Driver, name string) string {
	t.Helper()
	it := streamstest.KeyValueStore[string, int64](d, name).All()
	defer it.Close()
	var b strings.Builder
	for it.Next() {
		fmt.Fprintf(&b, "%s=%d\n", it.Key(), it.Value())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
