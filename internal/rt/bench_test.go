package rt_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/topology"
)

// countingCollector counts what a task sends, keeping nothing.
type countingCollector struct{ n int }

func (c *countingCollector) Send(*rt.Task, *rt.OutRecord) error { c.n++; return nil }

func (c *countingCollector) Partitions(string) (int32, error) { return 1, nil }

func newTask(b *testing.B, top *topology.Topology, backend storage.Backend, cache *storage.Cache, c rt.Collector) (*rt.Task, *storage.WriteSet) {
	prog, _ := rt.ProgramOf(top)
	ws := storage.NewWriteSet(backend)
	task, err := rt.NewTask(rt.TaskConfig{
		ID: processor.TaskID{}, AppID: "bench", Program: prog, Subtopology: prog.Subtopologies[0],
		WriteSet: func(bool) *storage.WriteSet { return ws }, Cache: cache, Collector: c,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { task.Close() })
	return task, ws
}

// A three-operator stateless chain (filter, mapValues, peek) from source to
// sink, with pass-through byte serdes so serde cost is excluded: the cost of
// eddy's node chain per record.
func BenchmarkStatelessChain(b *testing.B) {
	bs := serde.Bytes()
	bld := topology.NewBuilder()
	in := topology.Stream(bld, "in", topology.Consumed(bs, bs))
	var seen int
	out := topology.MapValues(in.Filter(func(_, v []byte) bool { return len(v) > 0 }),
		func(v []byte) []byte { return v[1:] }).Peek(func(_, _ []byte) { seen++ })
	out.To("out")
	top, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	c := &countingCollector{}
	task, _ := newTask(b, top, storage.NewMemory(), nil, c)
	recs := make([]rt.RawRecord, 1024)
	for i := range recs {
		recs[i] = rt.RawRecord{Topic: "in", Offset: int64(i), Key: []byte(fmt.Sprint(i)), Value: bytes.Repeat([]byte("x"), 100), Timestamp: int64(i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := task.Process(&recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
	if c.n == 0 || seen == 0 {
		b.Fatal("nothing reached the sink")
	}
}

// A Count update per record through the record cache and a Pebble store,
// committed (cache flushed, changelog written, write set applied to Pebble)
// every commitEvery records. "hot": 1,000 keys, commit every 10,000 records
// (each key updated ~10 times per commit, the cache absorbs repeats);
// "cold": 10,000 keys, commit every 1,000 records (every update a distinct
// key: each one reaches Pebble).
func BenchmarkCountCachedPebble(b *testing.B) {
	workloads := []struct {
		name              string
		keys, commitEvery int
	}{{"hot", 1_000, 10_000}, {"cold", 10_000, 1_000}}
	for _, w := range workloads {
		for _, cached := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/cache=%v", w.name, cached), func(b *testing.B) {
				benchCount(b, w.keys, w.commitEvery, cached)
			})
		}
	}
}

func benchCount(b *testing.B, keys, commitEvery int, cached bool) {
	p, err := storage.OpenPebble(b.TempDir(), storage.PebbleOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	s := serde.String()
	bld := topology.NewBuilder()
	in := topology.Stream(bld, "in", topology.Consumed(s, s))
	topology.Count(in.GroupByKey(), topology.Materialized[string, int64]("counts").WithCaching(cached)).
		ToStream().To("out", topology.Produced(s, serde.Int64()))
	top, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	task, ws := newTask(b, top, p, storage.NewCache(10<<20), &countingCollector{})
	recs := make([]rt.RawRecord, keys)
	for i := range recs {
		recs[i] = rt.RawRecord{Topic: "in", Offset: int64(i), Key: []byte(fmt.Sprintf("key-%05d", (i*7919)%keys)), Value: []byte("v"), Timestamp: int64(i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := task.Process(&recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i%commitEvery == commitEvery-1 {
			if err := task.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := ws.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// runBench feeds records made by rec to a task of top on Pebble, committing
// every 10,000 records, and reports the cost per record.
func runBench(b *testing.B, top *topology.Topology, rec func(i int, r *rt.RawRecord)) {
	p, err := storage.OpenPebble(b.TempDir(), storage.PebbleOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	c := &countingCollector{}
	task, ws := newTask(b, top, p, storage.NewCache(10<<20), c)
	var r rt.RawRecord
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rec(i, &r)
		r.Offset = int64(i)
		if err := task.Process(&r); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			if err := task.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := ws.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if c.n == 0 && b.N > 10_000 {
		b.Fatal("nothing reached the sink")
	}
}

// A windowed Count update per record: 1,000 keys, one record per
// millisecond of event time, on Pebble, committed every 10,000 records.
// Tumbling and hopping windows of a minute (hopping: every 10s, so each
// record updates 6 windows) and sliding windows of a minute, each updating
// on every record (cache off) or through the record cache; and tumbling
// windows emitted only on close.
func BenchmarkWindowedCount(b *testing.B) {
	s := serde.String()
	kinds := []struct {
		name    string
		w       topology.Windows
		onClose bool
	}{
		{"tumbling", topology.TumblingWindows(time.Minute, time.Second), false},
		{"hopping-6", topology.HoppingWindows(time.Minute, 10*time.Second, time.Second), false},
		{"sliding", topology.SlidingWindows(time.Minute, time.Second), false},
		{"tumbling-on-close", topology.TumblingWindows(time.Minute, time.Second), true},
	}
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%04d", (i*7919)%len(keys)))
	}
	for _, k := range kinds {
		for _, cached := range []bool{false, true} {
			if k.onClose && cached {
				continue
			}
			b.Run(fmt.Sprintf("%s/cache=%v", k.name, cached), func(b *testing.B) {
				bld := topology.NewBuilder()
				ws := topology.Stream(bld, "in", topology.Consumed(s, s)).GroupByKey().WindowedBy(k.w)
				if k.onClose {
					ws = ws.EmitOnWindowClose()
				}
				t := topology.WindowedCount(ws, topology.Materialized[string, int64]("counts").WithCaching(cached))
				topology.Map(t.ToStream(), func(k serde.Windowed[string], n int64) (string, int64) { return k.Key, n }).
					To("out", topology.Produced(s, serde.Int64()))
				top, err := bld.Build()
				if err != nil {
					b.Fatal(err)
				}
				runBench(b, top, func(i int, r *rt.RawRecord) {
					*r = rt.RawRecord{Topic: "in", Key: keys[i%len(keys)], Value: []byte("v"), Timestamp: int64(i)}
				})
			})
		}
	}
}

// A stream–stream inner join per record: two streams of 1,000 keys
// alternating, one record per millisecond, joined within ±1s (each record
// meets about two on the other side), on Pebble.
func BenchmarkStreamStreamJoin(b *testing.B) {
	s := serde.String()
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%04d", i))
	}
	for _, kind := range []string{"inner", "outer"} {
		b.Run(kind, func(b *testing.B) {
			bld := topology.NewBuilder()
			l := topology.Stream(bld, "left", topology.Consumed(s, s))
			r := topology.Stream(bld, "right", topology.Consumed(s, s))
			w := topology.JoinTimeDifference(time.Second, 100*time.Millisecond)
			if kind == "inner" {
				topology.JoinStream(l, r, func(a, c string) string { return a + c }, w).To("out")
			} else {
				topology.OuterJoinStream(l, r, func(a, c *string) string { return "" }, w).To("out")
			}
			top, err := bld.Build()
			if err != nil {
				b.Fatal(err)
			}
			runBench(b, top, func(i int, rec *rt.RawRecord) {
				topic := "left"
				if i%2 == 1 {
					topic = "right"
				}
				*rec = rt.RawRecord{Topic: topic, Key: keys[(i/2)%len(keys)], Value: []byte("v"), Timestamp: int64(i)}
			})
		})
	}
}
