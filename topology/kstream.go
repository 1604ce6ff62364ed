package topology

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
)

// KeyValue is a key and a value, as FlatMap returns them.
type KeyValue[K, V any] struct {
	Key   K
	Value V
}

// KV returns a KeyValue.
func KV[K, V any](k K, v V) KeyValue[K, V] { return KeyValue[K, V]{k, v} }

// KStream is a stream of records of type Record[K, V]: each record an
// independent event. Methods keep the record types; package functions
// (Map, MapValues, GroupBy, …) change them.
type KStream[K, V any] struct {
	b          *Builder
	node       *rt.NodeSpec
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	// repartitionRequired: the key may have changed since the last
	// partitioning, so a stateful operation first writes to a repartition
	// topic, as Kafka Streams does.
	repartitionRequired bool
}

func newStream[K, V any](b *Builder, n *rt.NodeSpec, ks serde.Serde[K], vs serde.Serde[V], repart bool) *KStream[K, V] {
	return &KStream[K, V]{b: b, node: n, keySerde: ks, valueSerde: vs, repartitionRequired: repart}
}

// Stream reads topic as a stream.
func Stream[K, V any](b *Builder, topic string, c ConsumedOptions[K, V]) *KStream[K, V] {
	return StreamTopics(b, []string{topic}, c)
}

// StreamTopics reads several topics as one stream.
func StreamTopics[K, V any](b *Builder, topics []string, c ConsumedOptions[K, V]) *KStream[K, V] {
	n := sourceNode(b, b.nameOr(c.name, "KSTREAM-SOURCE-"), topics, c.keySerde, c.valueSerde, false)
	setExtractor(n, c.extractor)
	n.OffsetReset = string(c.reset)
	return newStream(b, n, c.keySerde, c.valueSerde, false)
}

// setExtractor gives a source node its timestamp extractor.
func setExtractor[K, V any](n *rt.NodeSpec, e TimestampExtractor[K, V]) {
	if e == nil {
		return
	}
	build := n.Build
	n.Build = func(bc *rt.BuildCtx) (rt.Node, error) {
		node, err := build(bc)
		if src, ok := node.(*rt.SourceNodeOf[K, V]); ok {
			src.Extract = e
		}
		return node, err
	}
}

func sourceNode[K, V any](b *Builder, name string, topics []string, ks serde.Serde[K], vs serde.Serde[V], internal bool) *rt.NodeSpec {
	ks, vs = pickSerde(ks), pickSerde(vs)
	if ks == nil || vs == nil {
		b.errorf("source %q of %v has no serde for Record[%s, %s]: pass them in Consumed", name, topics, rt.TypeOf[K](), rt.TypeOf[V]())
	}
	return b.add(&rt.NodeSpec{
		Name: name, Kind: rt.KindSource, Topics: topics, Internal: internal,
		OutKey: rt.TypeOf[K](), OutValue: rt.TypeOf[V](),
		Build: func(bc *rt.BuildCtx) (rt.Node, error) { return rt.NewSourceNode(bc, ks, vs) },
	})
}

func sinkNode[K, V any](b *Builder, name string, parent *rt.NodeSpec, topic string, chooser rt.TopicChooser[K, V], ks serde.Serde[K], vs serde.Serde[V], internal bool) *rt.NodeSpec {
	return partitionedSink(b, name, parent, topic, chooser, nil, ks, vs, internal)
}

// partitionedSink is sinkNode placing records with sp (nil: the default
// partitioner).
func partitionedSink[K, V any](b *Builder, name string, parent *rt.NodeSpec, topic string, chooser rt.TopicChooser[K, V], sp StreamPartitioner[K, V], ks serde.Serde[K], vs serde.Serde[V], internal bool) *rt.NodeSpec {
	if ks == nil || vs == nil {
		b.errorf("sink %q to %q has no serde for Record[%s, %s]: pass them in Produced", name, topic, rt.TypeOf[K](), rt.TypeOf[V]())
	}
	spec := &rt.NodeSpec{
		Name: name, Kind: rt.KindSink, Topic: topic, DynamicSink: chooser != nil, Internal: internal,
		InKey: rt.TypeOf[K](), InValue: rt.TypeOf[V](),
		Build: func(bc *rt.BuildCtx) (rt.Node, error) {
			return rt.NewSinkNode(bc, ks, vs, chooser, rt.Partitioner[K, V](sp)), nil
		},
	}
	if sp != nil && ks != nil {
		spec.KeyPartitions = func(kb []byte, n int32) ([]int32, bool, error) {
			key, err := ks.Deserialize(topic, kb)
			if err != nil {
				return nil, false, err
			}
			return rt.CheckPartitions(name, topic, n, func() ([]int32, bool) { return sp(topic, key, nil, n) })
		}
	}
	return b.add(spec, parent)
}

// simple adds a processor whose node is made by mk from its children.
func simple[KIn, VIn, KOut, VOut any](b *Builder, name string, parent *rt.NodeSpec,
	mk func(base rt.Base, ch []rt.Receiver[KOut, VOut]) rt.Node) *rt.NodeSpec {
	return b.add(processorSpec[KIn, VIn, KOut, VOut](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[KOut, VOut](bc)
		if err != nil {
			return nil, err
		}
		return mk(rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, ch), nil
	}), parent)
}

// Filter keeps the records for which pred holds. Tombstones (records with
// a null value, as a table's ToStream carries) pass through without
// calling pred, so a deletion is never judged by a zero value nor dropped
// unseen; FilterNullable sees them.
func (s *KStream[K, V]) Filter(pred func(K, V) bool, name ...Named) *KStream[K, V] {
	return s.filter(func(k K, v *V) bool { return v == nil || pred(k, *v) }, false, name)
}

// FilterNot drops the records for which pred holds. Tombstones pass
// through without calling pred (see Filter).
func (s *KStream[K, V]) FilterNot(pred func(K, V) bool, name ...Named) *KStream[K, V] {
	return s.filter(func(k K, v *V) bool { return v != nil && pred(k, *v) }, true, name)
}

// FilterNullable keeps the records for which pred holds; pred gets nil for
// a tombstone — Kafka Streams' filter((k, v) -> v != null && …). To drop
// deletions: s.FilterNullable(func(_ K, v *V) bool { return v != nil }).
func (s *KStream[K, V]) FilterNullable(pred func(key K, value *V) bool, name ...Named) *KStream[K, V] {
	return s.filter(pred, false, name)
}

func (s *KStream[K, V]) filter(pred func(K, *V) bool, not bool, name []Named) *KStream[K, V] {
	n := simple[K, V, K, V](s.b, s.b.nameOr(nameOf(name), "KSTREAM-FILTER-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K, V]) rt.Node {
			return &filterNode[K, V]{base, rt.Forwarder[K, V]{Children: ch}, pred, not}
		})
	return newStream(s.b, n, s.keySerde, s.valueSerde, s.repartitionRequired)
}

// Map turns each record into a record with a new key and value. A stateful
// operation after it repartitions. A tombstone (a record with a null value,
// as a table's ToStream carries) stays a tombstone: f is called with the
// zero value for the new key, and the value it returns is dropped.
func Map[K, V, K2, V2 any](s *KStream[K, V], f func(K, V) (K2, V2), name ...Named) *KStream[K2, V2] {
	n := simple[K, V, K2, V2](s.b, s.b.nameOr(nameOf(name), "KSTREAM-MAP-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K2, V2]) rt.Node {
			return &mapNode[K, V, K2, V2]{base, rt.Forwarder[K2, V2]{Children: ch}, f}
		})
	return newStream[K2, V2](s.b, n, nil, nil, true)
}

// MapValues turns each record's value into a new value; the key stays, so no
// repartition follows. Tombstones (records with a null value, as a table's
// ToStream carries) pass through without calling f, as in Kafka Streams'
// KTable.mapValues, so a deletion never turns into a zero value; use
// MapValuesNullable to see or make them.
func MapValues[K, V, V2 any](s *KStream[K, V], f func(V) V2, name ...Named) *KStream[K, V2] {
	return MapValuesWithKey(s, func(_ K, v V) V2 { return f(v) }, name...)
}

// MapValuesWithKey is MapValues with the key passed to f (read-only).
func MapValuesWithKey[K, V, V2 any](s *KStream[K, V], f func(K, V) V2, name ...Named) *KStream[K, V2] {
	n := simple[K, V, K, V2](s.b, s.b.nameOr(nameOf(name), "KSTREAM-MAPVALUES-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K, V2]) rt.Node {
			return &mapValuesNode[K, V, V2]{base, rt.Forwarder[K, V2]{Children: ch}, f}
		})
	return newStream[K, V2](s.b, n, s.keySerde, nil, s.repartitionRequired)
}

// MapValuesNullable is MapValues for streams that carry tombstones: f gets
// nil for a tombstone and the value otherwise, and returns nil to forward a
// tombstone — Kafka Streams' mapValues(v -> v == null ? … : …).
func MapValuesNullable[K, V, V2 any](s *KStream[K, V], f func(key K, value *V) *V2, name ...Named) *KStream[K, V2] {
	n := simple[K, V, K, V2](s.b, s.b.nameOr(nameOf(name), "KSTREAM-MAPVALUES-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K, V2]) rt.Node {
			return &mapNullableNode[K, V, V2]{base, rt.Forwarder[K, V2]{Children: ch}, f}
		})
	return newStream[K, V2](s.b, n, s.keySerde, nil, s.repartitionRequired)
}

// FlatMap turns each record into zero or more records, each with the input's
// timestamp and headers. For a tombstone, f is called with the zero value
// and each record it returns is forwarded as a tombstone of its key.
func FlatMap[K, V, K2, V2 any](s *KStream[K, V], f func(K, V) []KeyValue[K2, V2], name ...Named) *KStream[K2, V2] {
	n := simple[K, V, K2, V2](s.b, s.b.nameOr(nameOf(name), "KSTREAM-FLATMAP-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K2, V2]) rt.Node {
			return &flatMapNode[K, V, K2, V2]{base, rt.Forwarder[K2, V2]{Children: ch}, f}
		})
	return newStream[K2, V2](s.b, n, nil, nil, true)
}

// FlatMapValues turns each value into zero or more values under the same key.
// A tombstone passes through once, without calling f.
func FlatMapValues[K, V, V2 any](s *KStream[K, V], f func(V) []V2, name ...Named) *KStream[K, V2] {
	return FlatMapValuesWithKey(s, func(_ K, v V) []V2 { return f(v) }, name...)
}

// FlatMapValuesWithKey is FlatMapValues with the key passed to f.
func FlatMapValuesWithKey[K, V, V2 any](s *KStream[K, V], f func(K, V) []V2, name ...Named) *KStream[K, V2] {
	n := simple[K, V, K, V2](s.b, s.b.nameOr(nameOf(name), "KSTREAM-FLATMAPVALUES-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K, V2]) rt.Node {
			return &flatMapValuesNode[K, V, V2]{base, rt.Forwarder[K, V2]{Children: ch}, f}
		})
	return newStream[K, V2](s.b, n, s.keySerde, nil, s.repartitionRequired)
}

// SelectKey gives each record a new key computed from it.
func SelectKey[K, V, K2 any](s *KStream[K, V], f func(K, V) K2, name ...Named) *KStream[K2, V] {
	// Kafka Streams counts a key selector in its generated names even when
	// it is named.
	nodeName := s.b.newName("KSTREAM-KEY-SELECT-")
	if n := nameOf(name); n != "" {
		nodeName = n
	}
	n := simple[K, V, K2, V](s.b, nodeName, s.node,
		func(base rt.Base, ch []rt.Receiver[K2, V]) rt.Node {
			return &selectKeyNode[K, V, K2]{base, rt.Forwarder[K2, V]{Children: ch}, f}
		})
	return newStream[K2, V](s.b, n, nil, s.valueSerde, true)
}

// Peek calls f for each record and passes the record on. Tombstones pass
// on without calling f; PeekNullable sees them.
func (s *KStream[K, V]) Peek(f func(K, V), name ...Named) *KStream[K, V] {
	return s.PeekNullable(skipTombstones(f), name...)
}

// PeekNullable calls f for each record, with nil for a tombstone, and
// passes the record on.
func (s *KStream[K, V]) PeekNullable(f func(key K, value *V), name ...Named) *KStream[K, V] {
	n := simple[K, V, K, V](s.b, s.b.nameOr(nameOf(name), "KSTREAM-PEEK-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K, V]) rt.Node {
			return &peekNode[K, V]{base, rt.Forwarder[K, V]{Children: ch}, f}
		})
	return newStream(s.b, n, s.keySerde, s.valueSerde, s.repartitionRequired)
}

// Foreach calls f for each record that is not a tombstone; the stream ends
// there. ForeachNullable sees tombstones too (a side effect that must
// follow deletions, such as writing to another store, needs it).
func (s *KStream[K, V]) Foreach(f func(K, V), name ...Named) {
	s.ForeachNullable(skipTombstones(f), name...)
}

// ForeachNullable calls f for each record, with nil for a tombstone; the
// stream ends there.
func (s *KStream[K, V]) ForeachNullable(f func(key K, value *V), name ...Named) {
	simple[K, V, K, V](s.b, s.b.nameOr(nameOf(name), "KSTREAM-FOREACH-"), s.node,
		func(base rt.Base, ch []rt.Receiver[K, V]) rt.Node {
			return &peekNode[K, V]{base, rt.Forwarder[K, V]{Children: ch}, f}
		})
}

// skipTombstones calls f for the records that are not tombstones.
func skipTombstones[K, V any](f func(K, V)) func(K, *V) {
	return func(k K, v *V) {
		if v != nil {
			f(k, *v)
		}
	}
}

// Merge combines this stream and others into one.
func (s *KStream[K, V]) Merge(other *KStream[K, V], name ...Named) *KStream[K, V] {
	spec := processorSpec[K, V, K, V](s.b.nameOr(nameOf(name), "KSTREAM-MERGE-"), buildPass[K, V])
	n := s.b.add(spec, s.node, other.node)
	ks, vs := s.keySerde, s.valueSerde
	if ks == nil {
		ks = other.keySerde
	}
	if vs == nil {
		vs = other.valueSerde
	}
	return newStream(s.b, n, ks, vs, s.repartitionRequired || other.repartitionRequired)
}

// To writes the stream to topic.
func (s *KStream[K, V]) To(topic string, p ...ProducedOptions[K, V]) {
	var po ProducedOptions[K, V]
	if len(p) > 0 {
		po = p[0]
	}
	if topic == "" {
		s.b.errorf("To after %q: empty topic name", s.node.Name)
	}
	partitionedSink(s.b, s.b.nameOr(po.name, "KSTREAM-SINK-"), s.node, topic, nil, po.partitioner,
		pickSerde(po.keySerde, s.keySerde), pickSerde(po.valueSerde, s.valueSerde), false)
}

// ToTopicFunc writes each record to the topic choose returns for it.
func (s *KStream[K, V]) ToTopicFunc(choose func(processor.Record[K, V]) string, p ...ProducedOptions[K, V]) {
	var po ProducedOptions[K, V]
	if len(p) > 0 {
		po = p[0]
	}
	if choose == nil {
		s.b.errorf("ToTopicFunc after %q: nil topic chooser", s.node.Name)
		return
	}
	partitionedSink(s.b, s.b.nameOr(po.name, "KSTREAM-SINK-"), s.node, "", rt.TopicChooser[K, V](choose), po.partitioner,
		pickSerde(po.keySerde, s.keySerde), pickSerde(po.valueSerde, s.valueSerde), false)
}

// BranchedStream splits a stream: each record goes to the first branch whose
// predicate holds, else to the default branch (or nowhere). A tombstone
// goes to every branch and the default, without calling the predicates:
// the key's earlier values may have gone to any of them, and its deletion
// must reach them all.
type BranchedStream[K, V any] struct {
	s      *KStream[K, V]
	node   *rt.NodeSpec
	prefix string
	preds  []func(K, V) bool
	names  []string
	deflt  string
}

// Split starts splitting the stream; name prefixes the branches' names.
func (s *KStream[K, V]) Split(name ...Named) *BranchedStream[K, V] {
	bs := &BranchedStream[K, V]{s: s, prefix: nameOf(name)}
	nodeName := s.b.newName("KSTREAM-BRANCH-") // counted even when named, as Kafka Streams
	if bs.prefix == "" {
		bs.prefix = nodeName
	}
	nodeName = bs.prefix
	bs.node = s.b.add(processorSpec[K, V, K, V](nodeName, func(bc *rt.BuildCtx) (rt.Node, error) {
		n := &branchNode[K, V]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, preds: bs.preds}
		ch, err := rt.Children[K, V](bc)
		if err != nil {
			return nil, err
		}
		byName := map[string]rt.Receiver[K, V]{}
		for _, c := range ch {
			byName[c.Name()] = c
		}
		for _, name := range bs.names {
			n.branches = append(n.branches, byName[name])
		}
		if bs.deflt != "" {
			n.deflt = byName[bs.deflt]
		}
		return n, nil
	}), s.node)
	return bs
}

func (bs *BranchedStream[K, V]) child(name string) *KStream[K, V] {
	name = bs.prefix + name
	bs.s.b.index++ // each branch counts one name, as Kafka Streams
	n := bs.s.b.add(processorSpec[K, V, K, V](name, buildPass[K, V]), bs.node)
	return newStream(bs.s.b, n, bs.s.keySerde, bs.s.valueSerde, bs.s.repartitionRequired)
}

// Branch adds a branch taking the records pred holds for (and no earlier
// branch took). Its node is named the split's name followed by name, or by
// the branch's number.
func (bs *BranchedStream[K, V]) Branch(pred func(K, V) bool, name ...Named) *KStream[K, V] {
	n := nameOf(name)
	if n == "" {
		n = fmt.Sprint(len(bs.preds) + 1)
	}
	s := bs.child(n)
	bs.preds = append(bs.preds, pred)
	bs.names = append(bs.names, s.node.Name)
	return s
}

// Default adds the branch taking every record no other branch took; call it
// last.
func (bs *BranchedStream[K, V]) Default(name ...Named) *KStream[K, V] {
	n := nameOf(name)
	if n == "" {
		n = "0"
	}
	s := bs.child(n)
	bs.deflt = s.node.Name
	return s
}

var generatedName = regexp.MustCompile(`^KSTREAM.*-[0-9]{10}$`)

// repartition writes parent's records to the repartition topic
// "<prefix>-repartition" and returns the source reading it back, as Kafka
// Streams' createRepartitionedSource: sink, null-key filter and source
// nodes, named after the topic unless the prefix is a generated name.
func repartition[K, V any](b *Builder, parent *rt.NodeSpec, prefix string, ks serde.Serde[K], vs serde.Serde[V], partitions int32) *rt.NodeSpec {
	return repartitionWith(b, parent, prefix, ks, vs, partitions, nil)
}

// repartitionWith is repartition placing the records with sp (nil: by
// key, the default partitioner).
func repartitionWith[K, V any](b *Builder, parent *rt.NodeSpec, prefix string, ks serde.Serde[K], vs serde.Serde[V], partitions int32, sp StreamPartitioner[K, V]) *rt.NodeSpec {
	topic := prefix
	if !strings.HasSuffix(topic, "-repartition") {
		topic += "-repartition"
	}
	sinkName, filterName, sourceName := b.newName("KSTREAM-SINK-"), b.newName("KSTREAM-FILTER-"), b.newName("KSTREAM-SOURCE-")
	if !generatedName.MatchString(prefix) {
		sinkName, filterName, sourceName = topic+"-sink", topic+"-filter", topic+"-source"
	}
	ks, vs = pickSerde(ks), pickSerde(vs)
	if ks == nil || vs == nil {
		b.errorf("repartition topic %q after %q needs serdes for Record[%s, %s]: pass them in Grouped or Repartitioned",
			topic, parent.Name, rt.TypeOf[K](), rt.TypeOf[V]())
	}
	filter := b.add(processorSpec[K, V, K, V](filterName, buildPass[K, V]), parent)
	partitionedSink(b, sinkName, filter, topic, nil, sp, ks, vs, true)
	for _, t := range b.repart {
		if t.Name == topic {
			b.errorf("repartition topic %q is created twice (name the operations with Grouped/Named)", topic)
		}
	}
	b.repart = append(b.repart, &rt.InternalTopic{Name: topic, Repartition: true, Partitions: partitions,
		Config: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}})
	return sourceNode(b, sourceName, []string{topic}, ks, vs, true)
}

// Repartition writes the stream through a repartition topic, so records are
// partitioned by their current key.
func (s *KStream[K, V]) Repartition(r ...RepartitionedOptions[K, V]) *KStream[K, V] {
	var ro RepartitionedOptions[K, V]
	if len(r) > 0 {
		ro = r[0]
	}
	name := s.b.nameOr(ro.name, "KSTREAM-REPARTITION-")
	ks, vs := pickSerde(ro.keySerde, s.keySerde), pickSerde(ro.valueSerde, s.valueSerde)
	src := repartitionWith(s.b, s.node, name, ks, vs, ro.partitions, ro.partitioner)
	return newStream(s.b, src, ks, vs, false)
}

// Process runs a user processor on each record. Its output may have any
// key, so a stateful operation after it repartitions. stores names the
// state stores (added with AddStateStore) the processor uses.
func Process[KIn, VIn, KOut, VOut any](s *KStream[KIn, VIn], supplier processor.Supplier[KIn, VIn, KOut, VOut], storeNames []string, name ...Named) *KStream[KOut, VOut] {
	n := s.b.add(processorSpec[KIn, VIn, KOut, VOut](s.b.nameOr(nameOf(name), "KSTREAM-PROCESSOR-"),
		func(bc *rt.BuildCtx) (rt.Node, error) { return rt.NewProcessorNode(bc, supplier()) }), s.node)
	for _, st := range storeNames {
		s.b.connect(n, st)
	}
	return newStream[KOut, VOut](s.b, n, nil, nil, true)
}

// ProcessValues runs a user processor that keeps keys: every record it
// forwards carries the key of the record being processed, so no repartition
// follows.
func ProcessValues[K, VIn, VOut any](s *KStream[K, VIn], supplier processor.Supplier[K, VIn, K, VOut], storeNames []string, name ...Named) *KStream[K, VOut] {
	n := s.b.add(processorSpec[K, VIn, K, VOut](s.b.nameOr(nameOf(name), "KSTREAM-PROCESSVALUES-"),
		func(bc *rt.BuildCtx) (rt.Node, error) { return rt.NewFixedKeyProcessorNode(bc, supplier()) }), s.node)
	for _, st := range storeNames {
		s.b.connect(n, st)
	}
	return newStream[K, VOut](s.b, n, s.keySerde, nil, s.repartitionRequired)
}
