package streamstest_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// The oracle: random keyed input with updates and tombstones, streamed
// through Count, Aggregate and a table GroupBy, must end where a plain batch
// computation over the same input ends — with caching on or off, and
// commits at random points.
func TestOracleAggregations(t *testing.T) {
	for _, cache := range []int64{-1, 512, 1 << 20} {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("cache=%d/seed=%d", cache, seed), func(t *testing.T) {
				oracleRun(t, cache, seed)
			})
		}
	}
}

func oracleRun(t *testing.T, cache int64, seed uint64) {
	i64 := serde.Int64()
	b := topology.NewBuilder()
	events := topology.Stream(b, "events", topology.Consumed(str, i64))
	g := events.GroupByKey()
	topology.Count(g, topology.Materialized[string, int64]("count")).ToStream().To("counts", topology.Produced(str, i64))
	topology.Aggregate(g, func() int64 { return 0 }, func(_ string, v, sum int64) int64 { return sum + v },
		topology.Materialized[string, int64]("sum")).ToStream().To("sums", topology.Produced(str, i64))
	// The same events read as a table (latest value per key, tombstones
	// delete), grouped by value modulo 5.
	table := topology.Table(b, "rows", topology.Consumed(str, i64), topology.Materialized[string, int64]("rows"))
	byGroup := topology.TableGroupBy(table, func(_ string, v int64) (string, int64) { return "g" + strconv.FormatInt(v%5, 10), v },
		topology.Grouped(str, i64))
	topology.TableCount(byGroup, topology.Materialized[string, int64]("group-count")).ToStream().
		To("group-counts", topology.Produced(str, i64))
	topology.TableAggregate(byGroup, func() int64 { return 0 },
		func(_ string, v, s int64) int64 { return s + v }, func(_ string, v, s int64) int64 { return s - v },
		topology.Materialized[string, int64]("group-sum").WithSerdes(str, i64)).ToStream().
		To("group-sums", topology.Produced(str, i64))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: cache, ManualCommit: true})
	evIn := streamstest.Input(d, "events", str, i64)
	rowIn := streamstest.Input(d, "rows", str, i64)

	rng := rand.New(rand.NewPCG(seed, 99))
	wantCount, wantSum := map[string]int64{}, map[string]int64{}
	rows := map[string]int64{}
	for i := range 3000 {
		k := "k" + strconv.Itoa(rng.IntN(40))
		v := rng.Int64N(1000)
		ts := 1000 + int64(i*10) - rng.Int64N(500) // out of order
		if rng.IntN(10) == 0 {
			evIn.PipeRecord(processor.Record[string, int64]{Key: k, NullValue: true, Timestamp: ts})
			rowIn.PipeRecord(processor.Record[string, int64]{Key: k, NullValue: true, Timestamp: ts})
			delete(rows, k)
		} else {
			evIn.PipeAt(k, v, ts)
			rowIn.PipeAt(k, v, ts)
			wantCount[k]++
			wantSum[k] += v
			rows[k] = v
		}
		if rng.IntN(50) == 0 {
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	wantGroupCount, wantGroupSum := map[string]int64{}, map[string]int64{}
	for _, v := range rows {
		g := "g" + strconv.FormatInt(v%5, 10)
		wantGroupCount[g]++
		wantGroupSum[g] += v
	}
	check := func(topic string, want map[string]int64) {
		t.Helper()
		got := streamstest.ReadKeyValueMap(streamstest.Output(d, topic, str, i64))
		// Groups emptied by deletions stay as rows of 0, as in Kafka Streams.
		for k, v := range got {
			if _, ok := want[k]; !ok && v == 0 {
				delete(got, k)
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: streaming result differs from the batch computation\n got  %v\n want %v", topic, got, want)
		}
	}
	check("counts", wantCount)
	check("sums", wantSum)
	check("group-counts", wantGroupCount)
	check("group-sums", wantGroupSum)
	// The stores agree with the outputs.
	for k, v := range streamstest.KeyValueStore[string, int64](d, "count").All().Seq() {
		if wantCount[k] != v {
			t.Fatalf("store count[%s] = %d, want %d", k, v, wantCount[k])
		}
	}
}
