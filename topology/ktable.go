package topology

import (
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// KTable is a changelog stream read as a table: the latest value per key.
// A null value deletes the key.
type KTable[K, V any] struct {
	b          *Builder
	node       *rt.NodeSpec
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	// store is the table's materialized store ("" for derived tables that
	// are not materialized).
	store string
	info  *tableInfo
	// getter reads the table's current value of a key, for joins; nil when
	// the table cannot be read (a join result: materialize it first).
	getter *getterSpec[K, V]
	// windowing is set on the table of a time, sliding or session windowed
	// aggregation (and a suppression of it), for Suppress(UntilWindowCloses).
	windowing *windowing[K]
}

// valueGetter returns a table's current value and timestamp of a key.
type valueGetter[K, V any] func(k K) (V, int64, bool, error)

// getterSpec is how a task builds a table's value getter: from the store
// the table (or the table it derives from) is materialized in.
type getterSpec[K, V any] struct {
	store string
	build func(t *rt.Task) (valueGetter[K, V], error)
	// asOf, for a versioned table (and tables derived from one without a
	// store of their own), reads values as of a time.
	asOf func(t *rt.Task) (asOfGetter[K, V], error)
}

func storeGetter[K, V any](store string) *getterSpec[K, V] {
	return &getterSpec[K, V]{store: store, build: func(t *rt.Task) (valueGetter[K, V], error) {
		s, err := rt.Store[timestampedStore[K, V]](t, store)
		if err != nil {
			return nil, err
		}
		return func(k K) (V, int64, bool, error) {
			v, ok, err := s.Get(k)
			return v.Value, v.Timestamp, ok, err
		}, nil
	}}
}

// lookup builds the table's reader for a stream–table join: as of the
// record's time for a versioned table, the latest value otherwise (nil
// when the table cannot be read: Build reports that).
func (g *getterSpec[K, V]) lookup(t *rt.Task) (asOfGetter[K, V], error) {
	switch {
	case g == nil:
		return nil, nil
	case g.asOf != nil:
		return g.asOf(t)
	}
	get, err := g.build(t)
	if err != nil {
		return nil, err
	}
	return func(k K, _ int64) (V, int64, bool, error) { return get(k) }, nil
}

// deriveGetter composes a parent's getter with a table operator.
func deriveGetter[K, V, V2 any](p *getterSpec[K, V], f func(k K, v V) (V2, bool)) *getterSpec[K, V2] {
	if p == nil {
		return nil
	}
	d := &getterSpec[K, V2]{store: p.store, build: func(t *rt.Task) (valueGetter[K, V2], error) {
		g, err := p.build(t)
		if err != nil {
			return nil, err
		}
		return func(k K) (V2, int64, bool, error) {
			var zero V2
			v, ts, ok, err := g(k)
			if err != nil || !ok {
				return zero, ts, false, err
			}
			v2, ok := f(k, v)
			return v2, ts, ok, nil
		}, nil
	}}
	if p.asOf != nil {
		d.asOf = func(t *rt.Task) (asOfGetter[K, V2], error) {
			g, err := p.asOf(t)
			if err != nil {
				return nil, err
			}
			return func(k K, asOf int64) (V2, int64, bool, error) {
				var zero V2
				v, ts, ok, err := g(k, asOf)
				if err != nil || !ok {
					return zero, ts, false, err
				}
				v2, ok := f(k, v)
				return v2, ts, ok, nil
			}, nil
		}
	}
	return d
}

// tableInfo records whether downstream operators need a table's old values
// (to retract them): asked for while the topology is built, read by the
// nodes when they are built.
type tableInfo struct {
	sendOld bool
	parents []*tableInfo // the tables this one derives from without a store
}

func (i *tableInfo) enableSendOld() {
	i.sendOld = true
	for _, p := range i.parents {
		p.enableSendOld()
	}
}

// StoreName is the name of the table's state store, "" when the table is
// not materialized.
func (t *KTable[K, V]) StoreName() string { return t.store }

// materialize adds the timestamped key-value store described by m, with
// prefix for a generated name (taken before the processor's name, as Kafka
// Streams counts).
func materialize[K, V any](b *Builder, m MaterializedOptions[K, V], name string, ks serde.Serde[K], vs serde.Serde[V]) string {
	ks, vs = pickSerde(m.keySerde, ks), pickSerde(m.valueSerde, vs)
	if ks == nil || vs == nil {
		b.errorf("state store %q needs serdes for [%s, %s]: pass them with Materialized(...).WithSerdes",
			name, rt.TypeOf[K](), rt.TypeOf[V]())
		return name
	}
	if m.versioned {
		b.errorf("state store %q: WithVersioned materializes source tables (Table, KStream.ToTable) only", name)
		return name
	}
	sb := stores.TimestampedKeyValue(name, ks, vs).
		WithCaching(m.caching).
		WithLogging(m.logging, m.logConfig).
		InMemory(m.backend == InMemory).
		WithTTL(m.ttl, m.ttlClock)
	if m.ttlSilent {
		sb = sb.ExpireSilently()
	}
	b.addStore(sb)
	return name
}

// Table reads topic as a table, materialized in a state store: each record
// upserts its key, a null value deletes it.
func Table[K, V any](b *Builder, topic string, c ConsumedOptions[K, V], m ...MaterializedOptions[K, V]) *KTable[K, V] {
	mo := materializedOr(m)
	ks, vs := pickSerde(mo.keySerde, c.keySerde), pickSerde(mo.valueSerde, c.valueSerde)
	storeName := mo.name
	if storeName == "" {
		storeName = b.newStoreName(topic + "-")
	}
	src := sourceNode(b, b.nameOr(c.name, "KSTREAM-SOURCE-"), []string{topic}, ks, vs, false)
	setExtractor(src, c.extractor)
	src.OffsetReset = string(c.reset)
	name := "KTABLE-SOURCE-"
	if c.name != "" {
		name = c.name + "-table-source"
	} else {
		name = b.newName(name)
	}
	return toTable(b, src, name, storeName, mo, ks, vs)
}

func toTable[K, V any](b *Builder, parent *rt.NodeSpec, name, storeName string, mo MaterializedOptions[K, V], ks serde.Serde[K], vs serde.Serde[V]) *KTable[K, V] {
	if mo.versioned {
		return toVersionedTable(b, parent, name, storeName, mo, ks, vs)
	}
	materialize(b, mo, storeName, ks, vs)
	info := &tableInfo{}
	n := b.add(processorSpec[K, V, K, change[V]](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[V]](bc)
		return &tableSourceNode[K, V]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task},
			table: table[K, V]{fw: fwd[K, V]{Children: ch}, storeName: storeName, sendOld: &info.sendOld}}, err
	}), parent)
	b.connect(n, storeName)
	return &KTable[K, V]{b: b, node: n, keySerde: pickSerde(mo.keySerde, ks), valueSerde: pickSerde(mo.valueSerde, vs), store: storeName, info: info,
		getter: storeGetter[K, V](storeName)}
}

// ToTable reads the stream as a table: each record upserts its key, a
// NullValue record deletes it.
func (s *KStream[K, V]) ToTable(m ...MaterializedOptions[K, V]) *KTable[K, V] {
	mo := materializedOr(m)
	storeName := mo.name
	if storeName == "" {
		storeName = s.b.newStoreName("KSTREAM-TOTABLE-")
	}
	name := s.b.newName("KSTREAM-TOTABLE-")
	parent := s.node
	ks, vs := pickSerde(mo.keySerde, s.keySerde), pickSerde(mo.valueSerde, s.valueSerde)
	if s.repartitionRequired {
		parent = repartition(s.b, parent, storeName, ks, vs, 0)
	}
	return toTable(s.b, parent, name, storeName, mo, ks, vs)
}

// derive adds a table operator without a store.
func deriveTable[K, V, K2, V2 any](t *KTable[K, V], name string, mk func(base rt.Base, fw fwd[K2, V2], sendOld *bool) rt.Node,
	ks serde.Serde[K2], vs serde.Serde[V2]) *KTable[K2, V2] {
	info := &tableInfo{parents: []*tableInfo{t.info}}
	n := t.b.add(processorSpec[K, change[V], K2, change[V2]](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K2, change[V2]](bc)
		return mk(rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fwd[K2, V2]{Children: ch}, &info.sendOld), err
	}), t.node)
	return &KTable[K2, V2]{b: t.b, node: n, keySerde: ks, valueSerde: vs, info: info}
}

// Filter keeps the rows for which pred holds; an update that fails it
// deletes the row downstream.
func (t *KTable[K, V]) Filter(pred func(K, V) bool, name ...Named) *KTable[K, V] {
	return t.filter(pred, false, name)
}

// FilterNot drops the rows for which pred holds.
func (t *KTable[K, V]) FilterNot(pred func(K, V) bool, name ...Named) *KTable[K, V] {
	return t.filter(pred, true, name)
}

func (t *KTable[K, V]) filter(pred func(K, V) bool, not bool, name []Named) *KTable[K, V] {
	// The table is materialized upstream, so the filter can see old values
	// and, as Kafka Streams does then, skips forwarding a deletion of a row
	// that was never forwarded.
	out := deriveTable(t, t.b.nameOr(nameOf(name), "KTABLE-FILTER-"), func(base rt.Base, fw fwd[K, V], sendOld *bool) rt.Node {
		return &tableFilterNode[K, V]{Base: base, fw: fw, pred: pred, not: not, sendOld: sendOld}
	}, t.keySerde, t.valueSerde)
	out.info.enableSendOld()
	out.getter = deriveGetter(t.getter, func(k K, v V) (V, bool) { return v, pred(k, v) != not })
	return out
}

// TableMapValues maps each row's value.
func TableMapValues[K, V, V2 any](t *KTable[K, V], f func(V) V2, name ...Named) *KTable[K, V2] {
	out := deriveTable(t, t.b.nameOr(nameOf(name), "KTABLE-MAPVALUES-"), func(base rt.Base, fw fwd[K, V2], sendOld *bool) rt.Node {
		return &tableMapValuesNode[K, V, V2]{Base: base, fw: fw, f: func(_ K, v V) V2 { return f(v) }, sendOld: sendOld}
	}, t.keySerde, nil)
	out.getter = deriveGetter(t.getter, func(_ K, v V) (V2, bool) { return f(v), true })
	return out
}

// ToStream turns the table's updates into a stream: one record per update,
// a NullValue record for a deletion.
func (t *KTable[K, V]) ToStream(name ...Named) *KStream[K, V] {
	n := t.b.add(processorSpec[K, change[V], K, V](t.b.nameOr(nameOf(name), "KTABLE-TOSTREAM-"), func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, V](bc)
		return &toStreamNode[K, V]{rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, rt.Forwarder[K, V]{Children: ch}}, err
	}), t.node)
	return newStream(t.b, n, t.keySerde, t.valueSerde, false)
}

// TableToStream is ToStream with a new key for each record, computed by f
// from the table's key and value (the zero value for a deletion, which
// stays a deletion): Kafka Streams' toStream(KeyValueMapper), which is
// toStream().selectKey(mapper) and names its nodes the same way. A
// stateful operation after it repartitions.
func TableToStream[K, V, K2 any](t *KTable[K, V], f func(K, V) K2, name ...Named) *KStream[K2, V] {
	return SelectKey(t.ToStream(), f, name...)
}

// KGroupedTable is a table re-keyed for aggregation.
type KGroupedTable[K, V any] struct {
	b          *Builder
	node       *rt.NodeSpec
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	name       string
}

// TableGroupBy re-keys the table's rows with f for an aggregation. When a
// row changes, its old value is subtracted from its old group and the new
// value added to the new group.
func TableGroupBy[K, V, K2, V2 any](t *KTable[K, V], f func(K, V) (K2, V2), g ...GroupedOptions[K2, V2]) *KGroupedTable[K2, V2] {
	var go2 GroupedOptions[K2, V2]
	if len(g) > 0 {
		go2 = g[0]
	}
	t.info.enableSendOld()
	ks, vs := pickSerde(go2.keySerde), pickSerde(go2.valueSerde)
	n := t.b.add(processorSpec[K, change[V], K2, change[V2]](t.b.nameOr(go2.name, "KTABLE-SELECT-"), func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K2, change[V2]](bc)
		return &tableSelectNode[K, V, K2, V2]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[K2, V2]{Children: ch},
			f: f, keySerde: ks, topic: bc.Spec.Name}, err
	}), t.node)
	return &KGroupedTable[K2, V2]{b: t.b, node: n, keySerde: ks, valueSerde: vs, name: go2.name}
}

// tableAggregate repartitions the grouped table and aggregates it.
func tableAggregate[K, V, VA any](g *KGroupedTable[K, V], m MaterializedOptions[K, VA], vaSerde serde.Serde[VA],
	first func(K, V) VA, add, sub func(K, V, VA) VA, prefix string) *KTable[K, VA] {
	b := g.b
	storeName := m.name
	if storeName == "" {
		storeName = b.newStoreName(prefix)
	}
	topic := storeName
	if g.name != "" {
		topic = g.name
	}
	topic += "-repartition"
	sinkName, sourceName := b.newName("KSTREAM-SINK-"), b.newName("KSTREAM-SOURCE-")
	funcName := b.newName(prefix)
	var cs serde.Serde[change[V]]
	if g.keySerde == nil || g.valueSerde == nil {
		b.errorf("GroupBy of table before %s needs serdes for Record[%s, %s]: pass them in Grouped", funcName, rt.TypeOf[K](), rt.TypeOf[V]())
	} else {
		cs = changeSerde(g.valueSerde)
	}
	sinkNode(b, sinkName, g.node, topic, nil, g.keySerde, cs, true)
	b.repart = append(b.repart, &rt.InternalTopic{Name: topic, Repartition: true,
		Config: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}})
	src := sourceNode(b, sourceName, []string{topic}, g.keySerde, cs, true)
	materialize(b, m, storeName, g.keySerde, vaSerde)
	info := &tableInfo{}
	n := b.add(processorSpec[K, change[V], K, change[VA]](funcName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[VA]](bc)
		return &tableAggregateNode[K, V, VA]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task},
			table: table[K, VA]{fw: fwd[K, VA]{Children: ch}, storeName: storeName, sendOld: &info.sendOld}, first: first, add: add, sub: sub}, err
	}), src)
	b.connect(n, storeName)
	return &KTable[K, VA]{b: b, node: n, keySerde: pickSerde(m.keySerde, g.keySerde), valueSerde: pickSerde(m.valueSerde, vaSerde), store: storeName, info: info,
		getter: storeGetter[K, VA](storeName)}
}

// TableCount counts the rows of each group.
func TableCount[K, V any](g *KGroupedTable[K, V], m ...MaterializedOptions[K, int64]) *KTable[K, int64] {
	return tableAggregate(g, materializedOr(m), serde.Int64(),
		func(K, V) int64 { return 1 },
		func(_ K, _ V, n int64) int64 { return n + 1 },
		func(_ K, _ V, n int64) int64 { return n - 1 }, "KTABLE-AGGREGATE-")
}

// Reduce combines the rows of each group: adder adds a new value, subtractor
// removes an old one.
func (g *KGroupedTable[K, V]) Reduce(adder, subtractor func(agg, v V) V, m ...MaterializedOptions[K, V]) *KTable[K, V] {
	return tableAggregate(g, materializedOr(m), g.valueSerde,
		func(_ K, v V) V { return v },
		func(_ K, v V, agg V) V { return adder(agg, v) },
		func(_ K, v V, agg V) V { return subtractor(agg, v) }, "KTABLE-REDUCE-")
}

// TableAggregate aggregates the rows of each group from init: adder folds a
// new value in, subtractor takes an old one out.
func TableAggregate[K, V, VA any](g *KGroupedTable[K, V], init func() VA, adder, subtractor func(K, V, VA) VA, m ...MaterializedOptions[K, VA]) *KTable[K, VA] {
	return tableAggregate(g, materializedOr(m), nil,
		func(k K, v V) VA { return adder(k, v, init()) }, adder, subtractor, "KTABLE-AGGREGATE-")
}
