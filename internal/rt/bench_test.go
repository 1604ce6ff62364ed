package rt_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/topology"
)

// countingCollector counts what a task sends, keeping nothing.
type countingCollector struct{ n int }

func (c *countingCollector) Send(*rt.Task, *rt.OutRecord) error { c.n++; return nil }

func newTask(b *testing.B, top *topology.Topology, backend stores.Backend, cache *stores.Cache, c rt.Collector) (*rt.Task, *stores.WriteSet) {
	prog, _ := rt.ProgramOf(top)
	ws := stores.NewWriteSet(backend)
	task, err := rt.NewTask(rt.TaskConfig{
		ID: processor.TaskID{}, AppID: "bench", Program: prog, Subtopology: prog.Subtopologies[0],
		WriteSet: func(bool) *stores.WriteSet { return ws }, Cache: cache, Collector: c,
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
	task, _ := newTask(b, top, stores.NewMemory(), nil, c)
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
	p, err := stores.OpenPebble(b.TempDir(), stores.PebbleOptions{})
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
	task, ws := newTask(b, top, p, stores.NewCache(10<<20), &countingCollector{})
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
