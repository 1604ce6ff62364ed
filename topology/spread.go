package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/eddy-go/eddy/serde"
)

// Hot keys: a key with far more records than the others saturates the one
// task (partition) that aggregates it. The spread aggregations do it in
// two phases: each record's key is salted (one of n salts, in turn), the
// salted keys are aggregated across the partitions, and the partial
// aggregates of a key are merged, per key, by one more, light
// aggregation (one update per partial update, instead of one per record).

// CountSpread counts each key's records as Count does, spreading a hot
// key's records over salts partial counts (see AggregateSpread).
func CountSpread[K, V any](g *KGroupedStream[K, V], salts int32, m ...MaterializedOptions[K, int64]) *KTable[K, int64] {
	mo := materializedOr(m)
	if mo.valueSerde == nil {
		mo.valueSerde = serde.Int64()
	}
	return spread(g, salts, mo, "KSTREAM-COUNT-SPREAD-",
		func(K, V) int64 { return 1 },
		func(_ K, _ V, n int64) int64 { return n + 1 },
		func(a, b int64) int64 { return a + b })
}

// ReduceSpread reduces each key's values as KGroupedStream.Reduce does,
// spreading a hot key's records over salts partial reductions merged with
// reducer itself, which must be associative and commutative (the partials
// are merged in salt order, not in record order).
func ReduceSpread[K, V any](g *KGroupedStream[K, V], salts int32, reducer func(agg, v V) V, m ...MaterializedOptions[K, V]) *KTable[K, V] {
	mo := materializedOr(m)
	if mo.valueSerde == nil {
		mo.valueSerde = g.valueSerde
	}
	return spread(g, salts, mo, "KSTREAM-REDUCE-SPREAD-",
		func(_ K, v V) V { return v },
		func(_ K, v V, agg V) V { return reducer(agg, v) },
		reducer)
}

// AggregateSpread aggregates each key's values as Aggregate does, in two
// phases for keys too hot for one task: phase one aggregates the records
// under salted keys (the key and one of salts salts, given in turn), which
// a repartition topic spreads over the partitions; phase two merges each
// key's partial aggregates with merge, in salt order, so merge must be
// associative and commutative, and merge(init(), a) must be a. The result
// is the table the plain aggregation gives (on any input), materialized
// with m, which must carry the aggregate's serde
// (Materialized(name).WithSerdes). What it costs: two repartition topics
// and three stores instead of one each (the partials by salted key, the
// partials by key, the result), an update of a key's result per update of
// one of its partials, and salts times the keys in the first store.
func AggregateSpread[K, V, VA any](g *KGroupedStream[K, V], salts int32, init func() VA, aggregator func(K, V, VA) VA, merge func(a, b VA) VA, m MaterializedOptions[K, VA]) *KTable[K, VA] {
	return spread(g, salts, m, "KSTREAM-AGGREGATE-SPREAD-",
		func(k K, v V) VA { return aggregator(k, v, init()) }, aggregator,
		func(a, b VA) VA { return merge(a, b) })
}

// salted is a key with its salt.
type salted[K any] struct {
	Key  K
	Salt int32
}

func spread[K, V, VA any](g *KGroupedStream[K, V], salts int32, m MaterializedOptions[K, VA], prefix string,
	first func(K, V) VA, next func(K, V, VA) VA, merge func(a, b VA) VA) *KTable[K, VA] {
	b := g.s.b
	name := m.name
	if name == "" {
		name = b.newStoreName(prefix)
	}
	ks, vas := pickSerde(m.keySerde, g.keySerde), m.valueSerde
	switch {
	case salts < 1:
		b.errorf("spread aggregation %q: salts must be at least 1, got %d", name, salts)
		salts = 1
	case ks == nil || vas == nil || g.valueSerde == nil:
		b.errorf("spread aggregation %q needs the key, value and aggregate serdes (Grouped, and Materialized(...).WithSerdes)", name)
	}
	// Phase one: salted keys, in turn (every task shares the counter:
	// the spread, not the order, matters).
	var turn atomic.Uint32
	saltedKeys := SelectKey(g.s, func(k K, _ V) salted[K] {
		return salted[K]{Key: k, Salt: int32(turn.Add(1) % uint32(salts))}
	}, Named(name+"-salt"))
	sks := serde.Serde[salted[K]](saltedSerde[K]{ks})
	// A key's salts go to consecutive partitions from one its bytes pick,
	// so that they never share one (up to as many salts as partitions).
	spreadOut := func(topic string, sk salted[K], _ *V, n int32) ([]int32, bool) {
		kb, err := ks.Serialize(topic, sk.Key)
		if err != nil {
			return nil, false // the sink reports the serde's error
		}
		h := fnv.New32a()
		h.Write(kb)
		return []int32{int32((h.Sum32()%uint32(n) + uint32(sk.Salt)) % uint32(n))}, true
	}
	saltedKeys = saltedKeys.Repartition(Repartitioned(sks, g.valueSerde).WithName(name + "-salted").WithStreamPartitioner(spreadOut))
	partial := streamAggregate(saltedKeys.GroupByKey(Grouped(sks, g.valueSerde)),
		Materialized[salted[K], VA](name+"-partial").WithSerdes(sks, vas), vas,
		func(sk salted[K], v V) VA { return first(sk.Key, v) },
		func(sk salted[K], v V, agg VA) VA { return next(sk.Key, v, agg) }, prefix)
	// Phase two: each key's partials, merged.
	byKey := TableGroupBy(partial, func(sk salted[K], va VA) (K, salted[VA]) { return sk.Key, salted[VA]{Key: va, Salt: sk.Salt} },
		Grouped(ks, serde.Serde[salted[VA]](saltedSerde[VA]{vas})).WithName(name+"-merge"))
	ps := serde.Serde[partials[VA]](partialsSerde[VA]{vas})
	parts := tableAggregate(byKey, Materialized[K, partials[VA]](name+"-partials").WithSerdes(ks, ps), ps,
		func(_ K, p salted[VA]) partials[VA] { return partials[VA]{p.Salt: p.Key} },
		func(_ K, p salted[VA], agg partials[VA]) partials[VA] {
			out := maps.Clone(agg)
			out[p.Salt] = p.Key
			return out
		},
		func(_ K, p salted[VA], agg partials[VA]) partials[VA] {
			out := maps.Clone(agg)
			delete(out, p.Salt)
			return out
		}, prefix)
	merged := TableMapValues(parts, func(p partials[VA]) VA {
		var out VA
		for i, s := range slices.Sorted(maps.Keys(p)) {
			if i == 0 {
				out = p[s]
			} else {
				out = merge(out, p[s])
			}
		}
		return out
	}, Named(name+"-merged"))
	mo := m
	mo.name, mo.keySerde, mo.valueSerde = name, ks, vas
	return merged.ToStream(Named(name + "-updates")).ToTable(mo)
}

// partials are a key's partial aggregates by salt.
type partials[VA any] map[int32]VA

// saltedSerde writes a salted value: the value's bytes, then the salt
// (4 bytes, big-endian), so that salted keys hash apart.
type saltedSerde[T any] struct{ s serde.Serde[T] }

func (s saltedSerde[T]) Serialize(topic string, v salted[T]) ([]byte, error) {
	b, err := s.s.Serialize(topic, v.Key)
	if err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint32(append(make([]byte, 0, len(b)+4), b...), uint32(v.Salt)), nil
}

func (s saltedSerde[T]) Deserialize(topic string, b []byte) (salted[T], error) {
	if len(b) < 4 {
		return salted[T]{}, fmt.Errorf("a salted value of %d bytes: want at least the 4 of its salt", len(b))
	}
	v, err := s.s.Deserialize(topic, b[:len(b)-4])
	return salted[T]{Key: v, Salt: int32(binary.BigEndian.Uint32(b[len(b)-4:]))}, err
}

// partialsSerde writes partials: their number (uvarint), then each salt
// (4 bytes) and aggregate (its length, uvarint, and bytes), in salt order.
type partialsSerde[VA any] struct{ s serde.Serde[VA] }

func (s partialsSerde[VA]) Serialize(topic string, p partials[VA]) ([]byte, error) {
	out := binary.AppendUvarint(nil, uint64(len(p)))
	for _, salt := range slices.Sorted(maps.Keys(p)) {
		b, err := s.s.Serialize(topic, p[salt])
		if err != nil {
			return nil, err
		}
		out = binary.BigEndian.AppendUint32(out, uint32(salt))
		out = append(binary.AppendUvarint(out, uint64(len(b))), b...)
	}
	return out, nil
}

var errPartials = errors.New("partial aggregates cut short or malformed")

// minimalUvarint reads a uvarint written in as few bytes as it takes (as
// Serialize writes it): a number written in more bytes is corrupt.
func minimalUvarint(b []byte) (uint64, int) {
	n, w := binary.Uvarint(b)
	if w > 0 && w != len(binary.AppendUvarint(nil, n)) {
		return 0, -1
	}
	return n, w
}

func (s partialsSerde[VA]) Deserialize(topic string, b []byte) (partials[VA], error) {
	n, w := minimalUvarint(b)
	if w <= 0 || n > uint64(len(b)) {
		return nil, errPartials
	}
	b = b[w:]
	var last int32
	p := make(partials[VA], n)
	for i := range n {
		if len(b) < 4 {
			return nil, errPartials
		}
		salt := int32(binary.BigEndian.Uint32(b))
		if i > 0 && salt <= last {
			return nil, fmt.Errorf("partial aggregates: salt %d after %d (they ascend)", salt, last)
		}
		last = salt
		l, w := minimalUvarint(b[4:])
		if w <= 0 || l > uint64(len(b)-4-w) {
			return nil, errPartials
		}
		v, err := s.s.Deserialize(topic, b[4+w:4+w+int(l)])
		if err != nil {
			return nil, err
		}
		p[salt] = v
		b = b[4+w+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("partial aggregates followed by %d bytes", len(b))
	}
	return p, nil
}
