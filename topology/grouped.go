package topology

import (
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/serde"
)

// KGroupedStream is a stream grouped by key for aggregation.
type KGroupedStream[K, V any] struct {
	s          *KStream[K, V]
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	name       string
}

func groupedOf[K, V any](g []GroupedOptions[K, V]) GroupedOptions[K, V] {
	if len(g) > 0 {
		return g[0]
	}
	return GroupedOptions[K, V]{}
}

// GroupByKey groups the stream by its current key. When the key may have
// changed upstream (Map, SelectKey, FlatMap, Process), the aggregation that
// follows repartitions first.
func (s *KStream[K, V]) GroupByKey(g ...GroupedOptions[K, V]) *KGroupedStream[K, V] {
	gr := groupedOf(g)
	return &KGroupedStream[K, V]{s: s, keySerde: pickSerde(gr.keySerde, s.keySerde), valueSerde: pickSerde(gr.valueSerde, s.valueSerde), name: gr.name}
}

// GroupBy groups the stream by a key computed from each record; the
// aggregation that follows repartitions by it.
func GroupBy[K, V, K2 any](s *KStream[K, V], f func(K, V) K2, g ...GroupedOptions[K2, V]) *KGroupedStream[K2, V] {
	gr := groupedOf(g)
	sel := SelectKey(s, f, Named(gr.name))
	return &KGroupedStream[K2, V]{s: sel, keySerde: pickSerde(gr.keySerde), valueSerde: pickSerde(gr.valueSerde, s.valueSerde), name: gr.name}
}

// aggregate adds the aggregation node, after a repartition topic when the
// stream needs one.
func streamAggregate[K, V, VA any](g *KGroupedStream[K, V], m MaterializedOptions[K, VA], vaSerde serde.Serde[VA],
	first func(K, V) VA, next func(K, V, VA) VA, prefix string) *KTable[K, VA] {
	b := g.s.b
	storeName, funcName, parent := g.aggregation(m.name, prefix)
	materialize(b, m, storeName, g.keySerde, vaSerde)
	info := &tableInfo{}
	n := b.add(processorSpec[K, V, K, change[VA]](funcName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[VA]](bc)
		return &aggregateNode[K, V, VA]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task},
			table: table[K, VA]{fw: fwd[K, VA]{Children: ch}, storeName: storeName, sendOld: &info.sendOld}, first: first, next: next}, err
	}), parent)
	b.connect(n, storeName)
	return &KTable[K, VA]{b: b, node: n, keySerde: pickSerde(m.keySerde, g.keySerde), valueSerde: pickSerde(m.valueSerde, vaSerde), store: storeName, info: info,
		getter: storeGetter[K, VA](storeName)}
}

// Count counts the records of each key. Records with a null value are not
// counted, as in Kafka Streams.
func Count[K, V any](g *KGroupedStream[K, V], m ...MaterializedOptions[K, int64]) *KTable[K, int64] {
	return streamAggregate(g, materializedOr(m), serde.Int64(),
		func(K, V) int64 { return 1 },
		func(_ K, _ V, n int64) int64 { return n + 1 }, "KSTREAM-AGGREGATE-")
}

// Reduce combines each key's values: the first value is the aggregate, each
// later one is folded in with reducer.
func (g *KGroupedStream[K, V]) Reduce(reducer func(agg, v V) V, m ...MaterializedOptions[K, V]) *KTable[K, V] {
	return streamAggregate(g, materializedOr(m), g.valueSerde,
		func(_ K, v V) V { return v },
		func(_ K, v V, agg V) V { return reducer(agg, v) }, "KSTREAM-REDUCE-")
}

// Aggregate folds each key's values into an aggregate that starts at init().
func Aggregate[K, V, VA any](g *KGroupedStream[K, V], init func() VA, aggregator func(K, V, VA) VA, m ...MaterializedOptions[K, VA]) *KTable[K, VA] {
	return streamAggregate(g, materializedOr(m), nil,
		func(k K, v V) VA { return aggregator(k, v, init()) }, aggregator, "KSTREAM-AGGREGATE-")
}
