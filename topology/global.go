package topology

import (
	"fmt"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/stores"
)

// GlobalKTable is a table every instance holds in full: all partitions of
// its topic are read into a local store before the instance processes
// anything, and the store follows the topic from then on. Streams join it
// by any key they compute (JoinGlobal, LeftJoinGlobal), with no
// co-partitioning and no repartitioning. The topic is the store's
// changelog; it should be compacted.
type GlobalKTable[K, V any] struct {
	b     *Builder
	store string
}

// StoreName is the name of the table's store.
func (g *GlobalKTable[K, V]) StoreName() string { return g.store }

// GlobalTable reads topic as a global table. Materialized may name the
// store and choose its backend; caching and logging do not apply.
func GlobalTable[K, V any](b *Builder, topic string, c ConsumedOptions[K, V], m ...MaterializedOptions[K, V]) *GlobalKTable[K, V] {
	mo := materializedOr(m)
	ks, vs := pickSerde(mo.keySerde, c.keySerde), pickSerde(mo.valueSerde, c.valueSerde)
	storeName := mo.name
	if storeName == "" {
		storeName = b.newStoreName(topic + "-")
	}
	src := b.nameOr(c.name, "KSTREAM-SOURCE-")
	proc := b.newName("KTABLE-SOURCE-")
	if c.name != "" {
		proc = c.name + "-table-source"
	}
	if topic == "" {
		b.errorf("global table %q reads no topic", storeName)
	}
	if c.reset != "" {
		b.errorf("global table %q reads %q in full at every start: an offset reset policy (%s) does not apply", storeName, topic, c.reset)
	}
	if ks == nil || vs == nil {
		b.errorf("global table %q on %q needs serdes for [%s, %s]: pass them in Consumed", storeName, topic, rt.TypeOf[K](), rt.TypeOf[V]())
		return &GlobalKTable[K, V]{b: b, store: storeName}
	}
	if _, dup := b.stores[storeName]; dup || b.globalStore(storeName) != nil {
		b.errorf("state store %q is defined twice", storeName)
	}
	view, _ := storage.FromPublic(stores.TimestampedKeyValue(storeName, ks, vs))
	b.globals = append(b.globals, &rt.GlobalStore{
		Name: storeName, Topic: topic, SourceName: src, ProcessorName: proc, InMemory: mo.backend == InMemory,
		Check: func(key, value []byte) error {
			if _, err := ks.Deserialize(topic, key); err != nil {
				return fmt.Errorf("key: %w", err)
			}
			if value == nil {
				return nil
			}
			if _, err := vs.Deserialize(topic, value); err != nil {
				return fmt.Errorf("value: %w", err)
			}
			return nil
		},
		View: func(be storage.Backend) any {
			return view.ReadOnly(storage.CommittedView(be, storage.GlobalTask, storeName), topic)
		},
	})
	return &GlobalKTable[K, V]{b: b, store: storeName}
}

func (b *Builder) globalStore(name string) *rt.GlobalStore {
	for _, g := range b.globals {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// JoinGlobal joins each stream record with the global table's row under
// the key keySelector computes from the record; records with no row are
// dropped. The result keeps the stream record's key.
func JoinGlobal[K, V, GK, GV, VR any](s *KStream[K, V], g *GlobalKTable[GK, GV], keySelector func(K, V) GK, joiner func(V, GV) VR, name ...Named) *KStream[K, VR] {
	return streamGlobalJoin(s, g, keySelector, func(v V, gv *GV) (VR, bool) {
		var zero VR
		if gv == nil {
			return zero, false
		}
		return joiner(v, *gv), true
	}, nameOf(name), "KSTREAM-LEFTJOIN-") // sic: Kafka Streams names both kinds so
}

// LeftJoinGlobal joins each stream record with the global table's row
// under the key keySelector computes, nil when there is none.
func LeftJoinGlobal[K, V, GK, GV, VR any](s *KStream[K, V], g *GlobalKTable[GK, GV], keySelector func(K, V) GK, joiner func(V, *GV) VR, name ...Named) *KStream[K, VR] {
	return streamGlobalJoin(s, g, keySelector, func(v V, gv *GV) (VR, bool) { return joiner(v, gv), true }, nameOf(name), "KSTREAM-LEFTJOIN-")
}

func streamGlobalJoin[K, V, GK, GV, VR any](s *KStream[K, V], g *GlobalKTable[GK, GV], keySelector func(K, V) GK,
	join func(V, *GV) (VR, bool), name, prefix string) *KStream[K, VR] {
	b := s.b
	if g.b != b {
		b.errorf("join with global table %q from another builder", g.store)
	}
	store := g.store
	n := b.add(processorSpec[K, V, K, VR](b.nameOr(name, prefix), func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, VR](bc)
		if err != nil {
			return nil, err
		}
		gs, err := rt.Store[stores.ReadOnlyKeyValueStore[GK, stores.ValueAndTimestamp[GV]]](bc.Task, store)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bc.Spec.Name, err)
		}
		return &globalJoinNode[K, V, GK, GV, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, VR]{Children: ch},
			store: gs, key: keySelector, join: join}, nil
	}), s.node)
	// The key is unchanged: no repartition is needed downstream because of
	// the join.
	return newStream[K, VR](b, n, s.keySerde, nil, s.repartitionRequired)
}

type globalJoinNode[K, V, GK, GV, VR any] struct {
	rt.Base
	rt.Forwarder[K, VR]
	store stores.ReadOnlyKeyValueStore[GK, stores.ValueAndTimestamp[GV]]
	key   func(K, V) GK
	join  func(V, *GV) (VR, bool)
}

func (n *globalJoinNode[K, V, GK, GV, VR]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1) // as Kafka Streams, stream records without a value are dropped
		return
	}
	gv, ok, err := n.store.Get(n.key(r.Key, r.Value))
	if err != nil {
		n.Fail(err)
		return
	}
	var p *GV
	if ok {
		p = &gv.Value
	}
	out, ok := n.join(r.Value, p)
	if !ok {
		return
	}
	n.Forward(processor.Record[K, VR]{Key: r.Key, Value: out, Timestamp: r.Timestamp, Headers: r.Headers})
}

// describeGlobal writes a global store's sub-topology as Kafka Streams
// describes it.
func describeGlobal(g *rt.GlobalStore, id int) string {
	return "  Sub-topology: " + itoa(id) + " for global store (will not generate tasks)\n" +
		"    Source: " + g.SourceName + " (topics: [" + g.Topic + "])\n" +
		"      --> " + g.ProcessorName + "\n" +
		"    Processor: " + g.ProcessorName + " (stores: [" + g.Name + "])\n" +
		"      --> none\n" +
		"      <-- " + g.SourceName + "\n"
}
