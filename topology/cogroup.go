package topology

import (
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/serde"
)

// CogroupedKStream is several grouped streams, each with its own value type
// and aggregator, folded into one aggregate per key: Kafka Streams'
// CogroupedKStream. Start one with Cogroup, add streams with CogroupWith,
// end with Aggregate.
type CogroupedKStream[K, VA any] struct {
	b        *Builder
	keySerde serde.Serde[K]
	inputs   []cogroupInput[K, VA]
}

// cogroupInput is one grouped stream of a co-grouped aggregation:
// parent repartitions it when needed (Kafka Streams repartitions every
// input before it names the aggregation nodes); aggregate adds its node,
// which reads and writes the shared store.
type cogroupInput[K, VA any] struct {
	parent    func(storeName string) *rt.NodeSpec
	aggregate func(parent *rt.NodeSpec, storeName string, init func() VA, info *tableInfo) *rt.NodeSpec
	windowed  func(parent *rt.NodeSpec, storeName string, w Windows, init func() VA, info *tableInfo) *rt.NodeSpec
}

// Cogroup starts a co-grouped aggregation with g: each record of g is
// folded into its key's aggregate by aggregator. Add more grouped streams
// (of any value type, the same key type) with CogroupWith, then call
// Aggregate. As Kafka Streams' KGroupedStream.cogroup.
func Cogroup[K, V, VA any](g *KGroupedStream[K, V], aggregator func(K, V, VA) VA) *CogroupedKStream[K, VA] {
	c := &CogroupedKStream[K, VA]{b: g.s.b, keySerde: g.keySerde}
	return CogroupWith(c, g, aggregator)
}

// CogroupWith adds g to the co-grouped aggregation c, with its own
// aggregator. As Kafka Streams' CogroupedKStream.cogroup.
func CogroupWith[K, V, VA any](c *CogroupedKStream[K, VA], g *KGroupedStream[K, V], aggregator func(K, V, VA) VA) *CogroupedKStream[K, VA] {
	if c.keySerde == nil {
		c.keySerde = g.keySerde
	}
	b := g.s.b
	c.inputs = append(c.inputs, cogroupInput[K, VA]{
		parent: g.parentFor, // named by Grouped, else by the store, as Kafka Streams
		aggregate: func(parent *rt.NodeSpec, storeName string, init func() VA, info *tableInfo) *rt.NodeSpec {
			first := func(k K, v V) VA { return aggregator(k, v, init()) }
			n := b.add(processorSpec[K, V, K, change[VA]](b.newName("COGROUPKSTREAM-AGGREGATE-"), func(bc *rt.BuildCtx) (rt.Node, error) {
				ch, err := rt.Children[K, change[VA]](bc)
				return &aggregateNode[K, V, VA]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task},
					table: table[K, VA]{fw: fwd[K, VA]{Children: ch}, storeName: storeName, sendOld: &info.sendOld}, first: first, next: aggregator}, err
			}), parent)
			b.connect(n, storeName)
			return n
		},
		windowed: func(parent *rt.NodeSpec, storeName string, w Windows, init func() VA, info *tableInfo) *rt.NodeSpec {
			first := func(k K, v V) VA { return aggregator(k, v, init()) }
			return addTimeWindowNode(b, b.newName("COGROUPKSTREAM-AGGREGATE-"), parent, storeName, w, false, "", info, first, aggregator)
		},
	})
	return c
}

// Aggregate folds the records of every co-grouped stream into one
// aggregate per key, starting at init(), in one store (pass Materialized
// with a value serde to name it and to read it back). The grouped streams
// must be co-partitioned; those whose key may have changed are
// repartitioned first. As Kafka Streams' CogroupedKStream.aggregate.
func (c *CogroupedKStream[K, VA]) Aggregate(init func() VA, m ...MaterializedOptions[K, VA]) *KTable[K, VA] {
	b := c.b
	mo := materializedOr(m)
	storeName := mo.name
	if storeName == "" {
		storeName = b.newStoreName("COGROUPKSTREAM-AGGREGATE-")
	}
	materialize(b, mo, storeName, c.keySerde, nil)
	info := &tableInfo{}
	aggs := c.build(storeName, func(in cogroupInput[K, VA], parent *rt.NodeSpec) *rt.NodeSpec {
		return in.aggregate(parent, storeName, init, info)
	})
	merge := b.add(processorSpec[K, change[VA], K, change[VA]](b.newName("COGROUPKSTREAM-MERGE-"), buildPass[K, change[VA]]), aggs...)
	return &KTable[K, VA]{b: b, node: merge, keySerde: pickSerde(mo.keySerde, c.keySerde), valueSerde: mo.valueSerde,
		store: storeName, info: info, getter: storeGetter[K, VA](storeName)}
}

// build repartitions the inputs that need it, then adds each input's
// aggregation node (in Kafka Streams' order, so generated names match),
// and checks they are co-partitioned.
func (c *CogroupedKStream[K, VA]) build(storeName string, add func(in cogroupInput[K, VA], parent *rt.NodeSpec) *rt.NodeSpec) []*rt.NodeSpec {
	parents := make([]*rt.NodeSpec, len(c.inputs))
	for i, in := range c.inputs {
		parents[i] = in.parent(storeName)
	}
	aggs := make([]*rt.NodeSpec, len(c.inputs))
	for i, in := range c.inputs {
		aggs[i] = add(in, parents[i])
	}
	c.b.copartition(aggs...)
	return aggs
}

// TimeWindowedCogroupedKStream is a co-grouped aggregation over time
// windows (tumbling, hopping or sliding), as Kafka Streams'
// TimeWindowedCogroupedKStream.
type TimeWindowedCogroupedKStream[K, VA any] struct {
	c *CogroupedKStream[K, VA]
	w Windows
}

// WindowedBy aggregates per time window: TumblingWindows, HoppingWindows
// or SlidingWindows. Results are emitted on every update (Kafka Streams'
// co-grouping has no other emit strategy); records later than their
// window's grace are counted as late and dropped.
func (c *CogroupedKStream[K, VA]) WindowedBy(w Windows) *TimeWindowedCogroupedKStream[K, VA] {
	return &TimeWindowedCogroupedKStream[K, VA]{c: c, w: w}
}

// Aggregate folds the records of every co-grouped stream into one
// aggregate per key and window, starting at init(), in one window store.
func (t *TimeWindowedCogroupedKStream[K, VA]) Aggregate(init func() VA, m ...MaterializedOptions[K, VA]) *KTable[serde.Windowed[K], VA] {
	c, b := t.c, t.c.b
	if t.w.kind == countWindows {
		b.errorf("co-grouped aggregation: count windows are not supported; use TumblingWindows, HoppingWindows or SlidingWindows")
		return &KTable[serde.Windowed[K], VA]{b: b, info: &tableInfo{}}
	}
	mo := materializedOr(m)
	storeName := mo.name
	if storeName == "" {
		storeName = b.newStoreName("COGROUPKSTREAM-AGGREGATE-")
	}
	ks, vs := addTimeWindowStore(b, storeName, mo, c.keySerde, nil, t.w, false)
	info := &tableInfo{}
	aggs := c.build(storeName, func(in cogroupInput[K, VA], parent *rt.NodeSpec) *rt.NodeSpec {
		return in.windowed(parent, storeName, t.w, init, info)
	})
	merge := b.add(processorSpec[serde.Windowed[K], change[VA], serde.Windowed[K], change[VA]](b.newName("COGROUPKSTREAM-MERGE-"),
		buildPass[serde.Windowed[K], change[VA]]), aggs...)
	return windowedTable(b, merge, storeName, ks, vs, t.w, info)
}
