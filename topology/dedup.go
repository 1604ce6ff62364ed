package topology

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// DeduplicatedOptions are the parameters of a deduplication: the name of
// its seen-set store (and of its repartition topic), the serde of the ids,
// and the clock its retention is measured in.
type DeduplicatedOptions[I any] struct {
	name     string
	idSerde  serde.Serde[I]
	ttlClock stores.TTLClock
}

// Deduplicated returns deduplication parameters naming its store ("" for a
// generated name; name it to keep the store and topic stable as the
// topology changes).
func Deduplicated[I any](name string) DeduplicatedOptions[I] {
	return DeduplicatedOptions[I]{name: name}
}

// WithIDSerde sets the serde of the ids (default: the built-in serde of the
// type; for DeduplicateByKey, the stream's key serde).
func (d DeduplicatedOptions[I]) WithIDSerde(s serde.Serde[I]) DeduplicatedOptions[I] {
	d.idSerde = s
	return d
}

// WithWallClock measures the retention against the wall clock instead of
// stream time: ids are forgotten even while no records arrive, but a replay
// after a crash may decide differently. Stream time is the default.
func (d DeduplicatedOptions[I]) WithWallClock() DeduplicatedOptions[I] {
	d.ttlClock = stores.WallClockTime
	return d
}

// DeduplicateByKey forwards a record only if no record with the same key
// was forwarded within the last `within` of stream time: the first record
// of a key passes, later ones are dropped (and counted in
// eddy_records_deduplicated_total) until stream time passes the first
// one's timestamp plus within; then the next one passes and starts a new
// period. Records with a null value pass untouched. The keys seen are kept
// in a changelogged key-value store with that time to live, so its size is
// bounded by the retention, and under exactly-once a record is forwarded
// once even across crashes and rebalances. If the key may have changed
// upstream the stream is repartitioned by key first.
func (s *KStream[K, V]) DeduplicateByKey(within time.Duration, d ...DeduplicatedOptions[K]) *KStream[K, V] {
	var do DeduplicatedOptions[K]
	if len(d) > 0 {
		do = d[0]
	}
	b := s.b
	name := b.nameOr(do.name, "KSTREAM-DEDUPLICATE-")
	ks := pickSerde(do.idSerde, s.keySerde)
	parent := s.node
	if s.repartitionRequired {
		parent = repartition(b, parent, name, s.keySerde, s.valueSerde, 0)
	}
	n := addDedup(b, name, parent, within, ks, do.ttlClock, func(k K, _ V) K { return k })
	return newStream(b, n, s.keySerde, s.valueSerde, false)
}

// Deduplicate forwards a record only if no record with the same id — a
// function of its key and value, such as an event id in the value — was
// forwarded within the last `within` of stream time, as DeduplicateByKey
// does for keys. Records with equal ids may sit on different partitions, so
// the stream is repartitioned by id first (through a topic named after the
// operation), carrying the records' keys and values unchanged; the result
// keeps its keys but is partitioned by id, so a stateful operation after it
// repartitions by key. Records with a null value pass untouched.
func Deduplicate[K, V, I any](s *KStream[K, V], id func(K, V) I, within time.Duration, d ...DeduplicatedOptions[I]) *KStream[K, V] {
	var do DeduplicatedOptions[I]
	if len(d) > 0 {
		do = d[0]
	}
	b := s.b
	name := b.nameOr(do.name, "KSTREAM-DEDUPLICATE-")
	ids := pickSerde(do.idSerde)
	ks, vs := pickSerde(s.keySerde), pickSerde(s.valueSerde)
	if ids == nil || ks == nil || vs == nil {
		b.errorf("deduplication %q needs serdes for the id (%s), key (%s) and value (%s): pass them with Deduplicated(...).WithIDSerde and the stream's Consumed/Produced",
			name, rt.TypeOf[I](), rt.TypeOf[K](), rt.TypeOf[V]())
		return s
	}
	// Key by id, carrying the record's key and value, through a repartition
	// topic; deduplicate by id; back to the record's own key.
	byID := simple[K, V, I, keyed[K, V]](b, name+"-by-id", s.node, func(base rt.Base, ch []rt.Receiver[I, keyed[K, V]]) rt.Node {
		return &toKeyedNode[K, V, I]{base, rt.Forwarder[I, keyed[K, V]]{Children: ch}, id}
	})
	src := repartition(b, byID, name, ids, serde.Serde[keyed[K, V]](keyedSerde[K, V]{ks, vs}), 0)
	dd := addDedup(b, name, src, within, ids, do.ttlClock, func(i I, _ keyed[K, V]) I { return i })
	back := simple[I, keyed[K, V], K, V](b, name+"-restore-key", dd, func(base rt.Base, ch []rt.Receiver[K, V]) rt.Node {
		return &fromKeyedNode[K, V, I]{base, rt.Forwarder[K, V]{Children: ch}}
	})
	return newStream(b, back, s.keySerde, s.valueSerde, true)
}

// addDedup adds the deduplicating node and its seen-set store: ids (as
// dedup keys) with no value but their timestamp, expiring after within.
func addDedup[K, V, D any](b *Builder, name string, parent *rt.NodeSpec, within time.Duration, ds serde.Serde[D], clock stores.TTLClock, key func(K, V) D) *rt.NodeSpec {
	if within <= 0 {
		b.errorf("deduplication %q needs a positive retention, got %v", name, within)
	}
	if ds == nil {
		b.errorf("deduplication %q needs a serde for its ids (%s): pass it with Deduplicated(...).WithIDSerde", name, rt.TypeOf[D]())
		return parent
	}
	storeName := name + "-store"
	b.addStore(stores.KeyValue(storeName, ds, serde.Bytes()).WithCaching(true).WithTTL(within, clock))
	n := b.add(processorSpec[K, V, K, V](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, V](bc)
		return &dedupNode[K, V, D]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: rt.Forwarder[K, V]{Children: ch},
			storeName: storeName, key: key}, err
	}), parent)
	b.connect(n, storeName)
	return n
}

// dedupNode forwards a record unless its dedup key is in the seen-set.
type dedupNode[K, V, D any] struct {
	rt.Base
	fw        rt.Forwarder[K, V]
	storeName string
	store     stores.KeyValueStore[D, []byte]
	key       func(K, V) D
}

func (n *dedupNode[K, V, D]) Init() (err error) {
	n.store, err = rt.Store[stores.KeyValueStore[D, []byte]](n.T, n.storeName)
	if err != nil {
		return fmt.Errorf("%s: %w", n.NodeName, err)
	}
	return nil
}

func (n *dedupNode[K, V, D]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.fw.Forward(r)
		return
	}
	d := n.key(r.Key, r.Value)
	_, seen, err := n.store.Get(d)
	if err != nil {
		n.Fail(err)
		return
	}
	if seen {
		n.T.Counters.Deduplicated.Add(1)
		return
	}
	if err := n.store.Put(d, []byte{}); err != nil {
		n.Fail(err)
		return
	}
	n.fw.Forward(r)
}

// keyed is a record's key and value carried as the value of a record
// keyed by something else (Deduplicate's repartition by id).
type keyed[K, V any] struct {
	Key       K
	Value     V
	NullValue bool
}

type toKeyedNode[K, V, I any] struct {
	rt.Base
	fw rt.Forwarder[I, keyed[K, V]]
	id func(K, V) I
}

func (n *toKeyedNode[K, V, I]) Process(r processor.Record[K, V]) {
	out := processor.Record[I, keyed[K, V]]{Value: keyed[K, V]{Key: r.Key, Value: r.Value, NullValue: r.NullValue},
		Timestamp: r.Timestamp, Headers: r.Headers}
	if !r.NullValue {
		out.Key = n.id(r.Key, r.Value)
	}
	n.fw.Forward(out)
}

type fromKeyedNode[K, V, I any] struct {
	rt.Base
	fw rt.Forwarder[K, V]
}

func (n *fromKeyedNode[K, V, I]) Process(r processor.Record[I, keyed[K, V]]) {
	n.fw.Forward(processor.Record[K, V]{Key: r.Value.Key, Value: r.Value.Value, NullValue: r.Value.NullValue,
		Timestamp: r.Timestamp, Headers: r.Headers})
}

// keyedSerde writes a keyed pair as: the key's length (uvarint), the key,
// a null-value flag byte, the value.
type keyedSerde[K, V any] struct {
	ks serde.Serde[K]
	vs serde.Serde[V]
}

func (s keyedSerde[K, V]) Serialize(topic string, p keyed[K, V]) ([]byte, error) {
	kb, err := s.ks.Serialize(topic, p.Key)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	out := binary.AppendUvarint(nil, uint64(len(kb)))
	out = append(out, kb...)
	if p.NullValue {
		return append(out, 1), nil
	}
	vb, err := s.vs.Serialize(topic, p.Value)
	if err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	return append(append(out, 0), vb...), nil
}

func (s keyedSerde[K, V]) Deserialize(topic string, b []byte) (keyed[K, V], error) {
	var p keyed[K, V]
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n+1 {
		return p, fmt.Errorf("%w: a deduplication record of %d bytes is cut short", serde.ErrSize, len(b))
	}
	kb, rest := b[w:w+int(n)], b[w+int(n):]
	var err error
	if p.Key, err = s.ks.Deserialize(topic, kb); err != nil {
		return p, fmt.Errorf("key: %w", err)
	}
	if rest[0] == 1 {
		p.NullValue = true
		return p, nil
	}
	if p.Value, err = s.vs.Deserialize(topic, rest[1:]); err != nil {
		return p, fmt.Errorf("value: %w", err)
	}
	return p, nil
}
