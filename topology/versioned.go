package topology

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// asOfGetter reads a table's value of a key as of a time, and the time it
// became valid.
type asOfGetter[K, V any] func(k K, asOf int64) (V, int64, bool, error)

// toVersionedTable is toTable for a table materialized WithVersioned.
func toVersionedTable[K, V any](b *Builder, parent *rt.NodeSpec, name, storeName string, mo MaterializedOptions[K, V], ks serde.Serde[K], vs serde.Serde[V]) *KTable[K, V] {
	ks, vs = pickSerde(mo.keySerde, ks), pickSerde(mo.valueSerde, vs)
	switch {
	case ks == nil || vs == nil:
		b.errorf("versioned store %q needs serdes for [%s, %s]: pass them with Materialized(...).WithSerdes",
			storeName, rt.TypeOf[K](), rt.TypeOf[V]())
	case mo.history < 0:
		b.errorf("versioned store %q: the history retention must not be negative, got %v", storeName, mo.history)
	case mo.ttl > 0:
		b.errorf("versioned store %q takes no time to live: its history retention bounds it", storeName)
	default:
		b.addStore(stores.VersionedKeyValue(storeName, ks, vs, mo.history).
			WithLogging(mo.logging, mo.logConfig).InMemory(mo.backend == InMemory))
	}
	info := &tableInfo{}
	n := b.add(processorSpec[K, V, K, change[V]](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[V]](bc)
		return &versionedSourceNode[K, V]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[K, V]{Children: ch},
			storeName: storeName, sendOld: &info.sendOld}, err
	}), parent)
	b.connect(n, storeName)
	return &KTable[K, V]{b: b, node: n, keySerde: ks, valueSerde: vs, store: storeName, info: info,
		getter: versionedGetter[K, V](storeName)}
}

// versionedGetter reads a versioned table: its latest values, and its
// values as of a time.
func versionedGetter[K, V any](store string) *getterSpec[K, V] {
	open := func(t *rt.Task) (stores.VersionedKeyValueStore[K, V], error) {
		return rt.Store[stores.VersionedKeyValueStore[K, V]](t, store)
	}
	return &getterSpec[K, V]{store: store,
		build: func(t *rt.Task) (valueGetter[K, V], error) {
			s, err := open(t)
			if err != nil {
				return nil, err
			}
			return func(k K) (V, int64, bool, error) {
				r, ok, err := s.Get(k)
				return r.Value, r.Timestamp, ok, err
			}, nil
		},
		asOf: func(t *rt.Task) (asOfGetter[K, V], error) {
			s, err := open(t)
			if err != nil {
				return nil, err
			}
			return func(k K, asOf int64) (V, int64, bool, error) {
				r, ok, err := s.GetAsOf(k, asOf)
				return r.Value, r.Timestamp, ok, err
			}, nil
		}}
}

// versionedSourceNode materializes a table's updates into a versioned
// store: an update is forwarded unless the store refused it (older than
// its history), marked NotLatest when it is older than the key's latest
// value.
type versionedSourceNode[K, V any] struct {
	rt.Base
	fw        fwd[K, V]
	storeName string
	store     stores.VersionedKeyValueStore[K, V]
	sendOld   *bool
}

func (n *versionedSourceNode[K, V]) Init() (err error) {
	n.store, err = rt.Store[stores.VersionedKeyValueStore[K, V]](n.T, n.storeName)
	if err != nil {
		return fmt.Errorf("%s: %w", n.NodeName, err)
	}
	return nil
}

func (n *versionedSourceNode[K, V]) Process(r processor.Record[K, V]) {
	old, hadOld, err := n.store.Get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	var validTo int64
	var put bool
	if r.NullValue {
		validTo, put, err = n.store.Delete(r.Key, r.Timestamp)
	} else {
		validTo, put, err = n.store.Put(r.Key, r.Value, r.Timestamp)
	}
	if err != nil {
		n.Fail(err)
		return
	}
	if !put {
		n.T.Counters.Skipped.Add(1) // older than the store's history: dropped, as Kafka Streams
		return
	}
	c := change[V]{New: r.Value, HasNew: !r.NullValue, NotLatest: validTo != stores.NoValidTo}
	if hadOld && *n.sendOld {
		c.Old, c.HasOld = old.Value, true
	}
	n.fw.Forward(processor.Record[K, change[V]]{Key: r.Key, Value: c, Timestamp: r.Timestamp, Headers: r.Headers})
}

// JoinTableWithGrace is JoinTable with a grace period on the stream side,
// for a versioned table (WithVersioned): each stream record waits until
// stream time has passed its timestamp by grace, then is joined with the
// table's value as of its timestamp — so table updates that arrive up to
// grace late are seen. Records go out in timestamp order; a record already
// older than stream time minus grace is joined at once. The waiting records
// are kept in a changelogged store ("<name>-Buffer"). Kafka Streams'
// Joined.withGracePeriod (KIP-923).
func JoinTableWithGrace[K, V, VT, VR any](s *KStream[K, V], t *KTable[K, VT], grace time.Duration, joiner func(V, VT) VR, name ...Named) *KStream[K, VR] {
	return streamTableJoinGrace(s, t, grace, func(v V, vt *VT) (VR, bool) {
		var zero VR
		if vt == nil {
			return zero, false
		}
		return joiner(v, *vt), true
	}, nameOf(name), "KSTREAM-JOIN-")
}

// LeftJoinTableWithGrace is LeftJoinTable with a grace period on the
// stream side (see JoinTableWithGrace).
func LeftJoinTableWithGrace[K, V, VT, VR any](s *KStream[K, V], t *KTable[K, VT], grace time.Duration, joiner func(V, *VT) VR, name ...Named) *KStream[K, VR] {
	return streamTableJoinGrace(s, t, grace, func(v V, vt *VT) (VR, bool) { return joiner(v, vt), true }, nameOf(name), "KSTREAM-LEFTJOIN-")
}

func streamTableJoinGrace[K, V, VT, VR any](s *KStream[K, V], t *KTable[K, VT], grace time.Duration, join func(V, *VT) (VR, bool), name, prefix string) *KStream[K, VR] {
	b := s.b
	getter := joinable(b, t, "join")
	n := b.nameOr(name, prefix)
	if getter != nil && getter.asOf == nil {
		b.errorf("join %q: a grace period needs a versioned table (Materialized(...).WithVersioned)", n)
		return newStream[K, VR](b, s.node, s.keySerde, nil, false)
	}
	if grace < 0 {
		b.errorf("join %q: the grace period must not be negative, got %v", n, grace)
	}
	ks, vs := pickSerde(s.keySerde), pickSerde(s.valueSerde)
	if ks == nil || vs == nil {
		b.errorf("join %q with a grace period needs serdes for the stream's keys (%s) and values (%s), to buffer its records",
			n, rt.TypeOf[K](), rt.TypeOf[V]())
		return newStream[K, VR](b, s.node, s.keySerde, nil, false)
	}
	bufferName := n + "-Buffer"
	b.addStore(stores.KeyValue(bufferName, serde.Bytes(), serde.Bytes()))
	parent := streamForJoin(s, n)
	node := b.add(processorSpec[K, V, K, VR](n, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, VR](bc)
		if err != nil {
			return nil, err
		}
		j := &streamTableJoinNode[K, V, VT, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, VR]{Children: ch}, join: join}
		j.lookup, err = getter.lookup(bc.Task)
		return &graceJoinNode[K, V, VT, VR]{streamTableJoinNode: j, grace: grace.Milliseconds(), bufferName: bufferName, ks: ks, vs: vs}, err
	}), parent)
	if getter != nil {
		b.connect(node, getter.store)
	}
	b.connect(node, bufferName)
	b.copartition(parent, t.node)
	return newStream[K, VR](b, node, s.keySerde, nil, false)
}

// graceJoinNode is a stream–table join whose stream records wait for the
// grace period in a buffer store:
//
//	't' time key seq(8 bytes) -> the record's headers, then its value
//	'm'                       -> stream time, then the last sequence number
//
// with times ordered as in the suppress buffer. Records leave in time
// order, then key order, then arrival order, as Kafka Streams' buffer
// (time-first window keys) lets them out.
type graceJoinNode[K, V, VT, VR any] struct {
	*streamTableJoinNode[K, V, VT, VR] // joins a record once it leaves the buffer
	grace                              int64
	bufferName                         string
	buffer                             stores.KeyValueStore[[]byte, []byte]
	ks                                 serde.Serde[K]
	vs                                 serde.Serde[V]
	// streamTime is the buffer's time: the largest timestamp of a record
	// it took. It and seq are kept in the buffer ('m'), read at Init.
	streamTime, seq int64
}

var graceMeta = []byte{'m'}

func (n *graceJoinNode[K, V, VT, VR]) Init() (err error) {
	n.buffer, err = rt.Store[stores.KeyValueStore[[]byte, []byte]](n.T, n.bufferName)
	if err != nil {
		return fmt.Errorf("%s: %w", n.NodeName, err)
	}
	n.streamTime, n.seq = math.MinInt64, 0
	m, ok, err := n.buffer.Get(graceMeta)
	if err != nil {
		return fmt.Errorf("%s: %w", n.NodeName, err)
	}
	if ok && len(m) == 16 {
		n.streamTime, n.seq = int64(binary.BigEndian.Uint64(m)), int64(binary.BigEndian.Uint64(m[8:]))
	}
	return nil
}

// Process buffers a stream record for the grace period, or joins it at
// once when the buffer's time has passed it by more than that. The
// buffer's time, as Kafka Streams' time-ordered buffer keeps it, is the
// largest timestamp of the records it took: a stream record without a
// value (dropped) or one joined at once moves it not, nor lets anything
// out.
func (n *graceJoinNode[K, V, VT, VR]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1) // Kafka Streams drops stream records without a value
		return
	}
	if n.streamTime != math.MinInt64 && n.streamTime-n.grace > r.Timestamp {
		// Older than the grace period already: joined at once.
		n.joinOne(r)
		return
	}
	n.streamTime = max(n.streamTime, r.Timestamp)
	kb, err := n.ks.Serialize(n.bufferName, r.Key)
	if err != nil {
		n.Fail(fmt.Errorf("%s: serializing key %v: %w", n.NodeName, r.Key, err))
		return
	}
	vb, err := n.vs.Serialize(n.bufferName, r.Value)
	if err != nil {
		n.Fail(fmt.Errorf("%s: serializing the value of key %v: %w", n.NodeName, r.Key, err))
		return
	}
	n.seq++
	k := append(append([]byte{'t'}, orderedTime(r.Timestamp)...), kb...)
	k = binary.BigEndian.AppendUint64(k, uint64(n.seq))
	if err := n.buffer.Put(k, append(appendHeaders(nil, r.Headers), vb...)); err != nil {
		n.Fail(err)
		return
	}
	n.saveMeta()
	n.evict()
}

func (n *graceJoinNode[K, V, VT, VR]) saveMeta() {
	m := binary.BigEndian.AppendUint64(nil, uint64(n.streamTime))
	m = binary.BigEndian.AppendUint64(m, uint64(n.seq))
	if err := n.buffer.Put(graceMeta, m); err != nil {
		n.Fail(err)
	}
}

// evict joins, oldest first, the buffered records whose timestamp stream
// time has passed by the grace period.
func (n *graceJoinNode[K, V, VT, VR]) evict() {
	upTo := n.streamTime - n.grace
	it := n.buffer.Range([]byte{'t'}, []byte{'t' + 1})
	type due struct{ key, value []byte }
	var out []due
	for it.Next() {
		k := it.Key()
		if len(k) < 1+8+8 {
			it.Close()
			n.Fail(fmt.Errorf("%s: a corrupt buffered record", n.NodeName))
			return
		}
		if int64(binary.BigEndian.Uint64(k[1:9])^(1<<63)) > upTo {
			break
		}
		out = append(out, due{append([]byte(nil), k...), append([]byte(nil), it.Value()...)})
	}
	err := it.Err()
	it.Close()
	if err != nil {
		n.Fail(err)
		return
	}
	for _, d := range out {
		if _, _, err := n.buffer.Delete(d.key); err != nil {
			n.Fail(err)
			return
		}
		ts := int64(binary.BigEndian.Uint64(d.key[1:9]) ^ (1 << 63))
		k, err := n.ks.Deserialize(n.bufferName, d.key[9:len(d.key)-8])
		if err != nil {
			n.Fail(fmt.Errorf("%s: a buffered key: %w", n.NodeName, err))
			return
		}
		h, vb, err := readHeaders(d.value)
		if err != nil {
			n.Fail(fmt.Errorf("%s: %w", n.NodeName, err))
			return
		}
		v, err := n.vs.Deserialize(n.bufferName, vb)
		if err != nil {
			n.Fail(fmt.Errorf("%s: a buffered value: %w", n.NodeName, err))
			return
		}
		n.joinOne(processor.Record[K, V]{Key: k, Value: v, Timestamp: ts, Headers: h})
	}
}
