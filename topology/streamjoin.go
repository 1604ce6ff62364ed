package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// JoinWindows say which records of two streams join: those whose
// timestamps differ by at most the time difference (before: the other
// record may be this much older; after: this much newer). Left and outer
// joins emit an unmatched record only once its window closed (window end
// plus grace), as Kafka Streams 3.1+.
type JoinWindows struct {
	before, after, grace int64
}

// JoinTimeDifference returns join windows of ±diff with a grace period.
func JoinTimeDifference(diff, grace time.Duration) JoinWindows {
	return JoinWindows{diff.Milliseconds(), diff.Milliseconds(), grace.Milliseconds()}
}

// Before sets how much older the other record may be.
func (w JoinWindows) Before(d time.Duration) JoinWindows {
	w.before = d.Milliseconds()
	return w
}

// After sets how much newer the other record may be.
func (w JoinWindows) After(d time.Duration) JoinWindows {
	w.after = d.Milliseconds()
	return w
}

// JoinedOptions give a stream–stream join the serdes of its window stores
// (default: the streams' own, or the built-in serde of the type).
type JoinedOptions[K, V, VO any] struct {
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	otherSerde serde.Serde[VO]
}

// Joined returns stream–stream join parameters with serdes.
func Joined[K, V, VO any](ks serde.Serde[K], vs serde.Serde[V], vos serde.Serde[VO]) JoinedOptions[K, V, VO] {
	return JoinedOptions[K, V, VO]{ks, vs, vos}
}

// JoinStream joins the records of two streams with equal keys whose
// timestamps are within the join windows.
func JoinStream[K, V, VO, VR any](s *KStream[K, V], other *KStream[K, VO], joiner func(V, VO) VR, w JoinWindows, opts ...JoinedOptions[K, V, VO]) *KStream[K, VR] {
	return streamStreamJoin(s, other, func(a *V, b *VO) VR { return joiner(*a, *b) }, w, innerJoin, opts)
}

// LeftJoinStream is JoinStream keeping every record of s: one that found
// no match by the time its window closed is emitted with nil.
func LeftJoinStream[K, V, VO, VR any](s *KStream[K, V], other *KStream[K, VO], joiner func(V, *VO) VR, w JoinWindows, opts ...JoinedOptions[K, V, VO]) *KStream[K, VR] {
	return streamStreamJoin(s, other, func(a *V, b *VO) VR { return joiner(*a, b) }, w, leftJoin, opts)
}

// OuterJoinStream keeps every record of either stream, unmatched ones
// emitted with nil once their window closed.
func OuterJoinStream[K, V, VO, VR any](s *KStream[K, V], other *KStream[K, VO], joiner func(*V, *VO) VR, w JoinWindows, opts ...JoinedOptions[K, V, VO]) *KStream[K, VR] {
	return streamStreamJoin(s, other, joiner, w, outerJoin, opts)
}

// listSerde stores several values under one window-store key (records of
// a stream with equal key and timestamp): a uvarint count, then each value
// as a uvarint length and its bytes.
type listSerde[V any] struct{ s serde.Serde[V] }

func (l listSerde[V]) Serialize(topic string, vs []V) ([]byte, error) {
	out := binary.AppendUvarint(nil, uint64(len(vs)))
	for _, v := range vs {
		b, err := l.s.Serialize(topic, v)
		if err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

func (l listSerde[V]) Deserialize(topic string, data []byte) ([]V, error) {
	n, used := binary.Uvarint(data)
	if used <= 0 {
		return nil, fmt.Errorf("topology: corrupt value list")
	}
	data = data[used:]
	out := make([]V, 0, n)
	for range n {
		m, used := binary.Uvarint(data)
		if used <= 0 || uint64(len(data)-used) < m {
			return nil, fmt.Errorf("topology: corrupt value list")
		}
		v, err := l.s.Deserialize(topic, data[used:used+int(m)])
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		data = data[used+int(m):]
	}
	return out, nil
}

func streamStreamJoin[K, V, VO, VR any](s *KStream[K, V], other *KStream[K, VO], joiner func(*V, *VO) VR, w JoinWindows, kind tableJoinKind, opts []JoinedOptions[K, V, VO]) *KStream[K, VR] {
	b := s.b
	var jo JoinedOptions[K, V, VO]
	if len(opts) > 0 {
		jo = opts[0]
	}
	ks := pickSerde(jo.keySerde, s.keySerde, other.keySerde)
	vs := pickSerde(jo.valueSerde, s.valueSerde)
	vos := pickSerde(jo.otherSerde, other.valueSerde)
	thisWin, otherWin := b.newName("KSTREAM-WINDOWED-"), b.newName("KSTREAM-WINDOWED-")
	thisPrefix, otherPrefix := "KSTREAM-JOINTHIS-", "KSTREAM-JOINOTHER-"
	switch kind {
	case leftJoin:
		otherPrefix = "KSTREAM-OUTEROTHER-"
	case outerJoin:
		thisPrefix, otherPrefix = "KSTREAM-OUTERTHIS-", "KSTREAM-OUTEROTHER-"
	}
	thisName, otherName := b.newName(thisPrefix), b.newName(otherPrefix)
	mergeName := b.newName("KSTREAM-MERGE-")
	thisStore, otherStore := thisName+"-store", otherName+"-store"
	shared := ""
	if kind != innerJoin {
		shared = "KSTREAM-OUTERSHARED-" + thisName[strings.LastIndex(thisName, "-")+1:] + "-store"
	}
	if ks == nil || vs == nil || vos == nil {
		b.errorf("stream join %s needs serdes for its window stores: pass topology.Joined(ks, vs, vos)", thisName)
		return newStream[K, VR](b, s.node, nil, nil, false)
	}
	retention := time.Duration(w.before+w.after+w.grace) * time.Millisecond
	b.addStore(stores.Window(thisStore, ks, serde.Serde[[]V](listSerde[V]{vs}), retention))
	b.addStore(stores.Window(otherStore, ks, serde.Serde[[]VO](listSerde[VO]{vos}), retention))
	if shared != "" {
		b.addStore(stores.KeyValue(shared, serde.Bytes(), serde.Bytes()))
	}
	left, right := streamForJoin(s, thisName), streamForJoin(other, otherName)
	tw := b.add(processorSpec[K, V, K, V](thisWin, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, V](bc)
		return &joinWindowNode[K, V]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, V]{Children: ch}, storeName: thisStore}, err
	}), left)
	ow := b.add(processorSpec[K, VO, K, VO](otherWin, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, VO](bc)
		return &joinWindowNode[K, VO]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, VO]{Children: ch}, storeName: otherStore}, err
	}), right)
	b.connect(tw, thisStore)
	b.connect(ow, otherStore)
	trackerKey := thisName
	thisOuter := kind != innerJoin
	otherOuter := kind == outerJoin
	jt := b.add(processorSpec[K, V, K, VR](thisName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, VR](bc)
		n := &streamJoinNode[K, V, VO, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, VR]{Children: ch},
			otherStore: otherStore, shared: shared, outer: thisOuter, isLeft: true, before: w.before, after: w.after, grace: w.grace,
			winBefore: w.before, winAfter: w.after, trackerKey: trackerKey, ks: ks, vs: vs, vos: vos,
			joinThis: func(t *V, o *VO) VR { return joiner(t, o) }}
		return n, err
	}), tw)
	jo2 := b.add(processorSpec[K, VO, K, VR](otherName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, VR](bc)
		n := &streamJoinNode[K, VO, V, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, VR]{Children: ch},
			otherStore: thisStore, shared: shared, outer: otherOuter, isLeft: false, before: w.after, after: w.before, grace: w.grace,
			winBefore: w.before, winAfter: w.after, trackerKey: trackerKey, ks: ks, vs: vos, vos: vs,
			joinThis: func(t *VO, o *V) VR { return joiner(o, t) }}
		return n, err
	}), ow)
	b.connect(jt, otherStore)
	b.connect(jo2, thisStore)
	if shared != "" {
		b.connect(jt, shared)
		b.connect(jo2, shared)
	}
	merge := b.add(processorSpec[K, VR, K, VR](mergeName, buildPass[K, VR]), jt, jo2)
	b.copartition(left, right)
	return newStream[K, VR](b, merge, ks, nil, false)
}

// joinWindowNode keeps a stream's records in its join window store.
type joinWindowNode[K, V any] struct {
	rt.Base
	rt.Forwarder[K, V]
	storeName string
	store     stores.WindowStore[K, []V]
}

func (n *joinWindowNode[K, V]) Init() (err error) {
	n.store, err = rt.Store[stores.WindowStore[K, []V]](n.T, n.storeName)
	return err
}

func (n *joinWindowNode[K, V]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.Forward(r) // the join drops it, and counts it there
		return
	}
	list, _, err := n.store.Fetch(r.Key, r.Timestamp)
	if err == nil {
		err = n.store.Put(r.Key, r.Timestamp, append(list, r.Value))
	}
	if err != nil {
		n.Fail(err)
		return
	}
	n.Forward(r)
}

// joinTime is the time the two sides of one stream–stream join share in a
// task: the largest timestamp either side saw, the smallest timestamp in
// the outer-join store, and when next to look for expired records.
type joinTime struct {
	streamTime int64
	minTime    int64
	throttle
}

// streamJoinNode is one side of a stream–stream join, as Kafka Streams'
// KStreamKStreamJoin: it joins a record with the other side's records in
// the window; with outer on, an unmatched record waits in the shared
// outer-join store until its window closes, then is emitted with nil.
type streamJoinNode[K, V, VO, VR any] struct {
	rt.Base
	rt.Forwarder[K, VR]
	otherStore string
	shared     string
	other      stores.WindowStore[K, []VO]
	outerStore stores.KeyValueStore[[]byte, []byte]
	outer      bool // emit this side's unmatched records
	isLeft     bool
	before     int64 // how much older the other side's records may be
	after      int64 // how much newer
	grace      int64
	winBefore  int64
	winAfter   int64
	trackerKey string
	time       *joinTime
	ks         serde.Serde[K]
	vs         serde.Serde[V]
	vos        serde.Serde[VO]
	joinThis   func(*V, *VO) VR
}

func (n *streamJoinNode[K, V, VO, VR]) Init() (err error) {
	if n.other, err = rt.Store[stores.WindowStore[K, []VO]](n.T, n.otherStore); err != nil {
		return err
	}
	if n.shared != "" {
		if n.outerStore, err = rt.Store[stores.KeyValueStore[[]byte, []byte]](n.T, n.shared); err != nil {
			return err
		}
	}
	n.time = n.T.Shared("join-time:"+n.trackerKey, func() any { return &joinTime{streamTime: -1, minTime: 1<<63 - 1} }).(*joinTime)
	if n.outerStore == nil || !n.isLeft {
		return nil
	}
	// One side retries throttled emission for both (they share the store).
	return n.T.RetryThrottled(n.NodeName, func() {
		if n.time.streamTime >= 0 {
			n.emitNonJoined(nil)
		}
	})
}

func (n *streamJoinNode[K, V, VO, VR]) Process(r processor.Record[K, V]) {
	ts := r.Timestamp
	n.time.streamTime = max(n.time.streamTime, ts)
	if r.NullValue {
		n.T.Counters.Skipped.Add(1)
		return
	}
	if ts == n.time.streamTime && n.outerStore != nil {
		n.emitNonJoined(r.Headers)
	}
	from, to := max(0, ts-n.before), max(0, ts+n.after)
	matches, err := n.other.FetchRange(r.Key, from, to)
	if err != nil {
		n.Fail(err)
		return
	}
	for _, m := range matches {
		if n.outerStore != nil {
			if err := n.deleteOuter(m.Start, !n.isLeft, r.Key); err != nil {
				n.Fail(err)
				return
			}
		}
		for i := range m.Value {
			n.Forward(processor.Record[K, VR]{Key: r.Key, Value: n.joinThis(&r.Value, &m.Value[i]), Timestamp: max(ts, m.Start), Headers: r.Headers})
		}
	}
	if len(matches) > 0 || !n.outer {
		return
	}
	if n.outerStore == nil || to < n.time.streamTime {
		n.Forward(processor.Record[K, VR]{Key: r.Key, Value: n.joinThis(&r.Value, nil), Timestamp: ts, Headers: r.Headers})
		return
	}
	n.time.minTime = min(n.time.minTime, ts)
	key, err := n.outerKey(ts, n.isLeft, r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	md, _ := n.T.RecordMetadata()
	key = binary.BigEndian.AppendUint64(key, uint64(md.Offset))
	vb, err := n.vs.Serialize(n.shared, r.Value)
	if err != nil {
		n.Fail(err)
		return
	}
	if err := n.outerStore.Put(key, append([]byte{sideByte(n.isLeft)}, vb...)); err != nil {
		n.Fail(err)
	}
}

func sideByte(left bool) byte {
	if left {
		return 1
	}
	return 0
}

// outerKey is the outer-join store's key of a record, without the
// sequence suffix: <timestamp 8B><side 1B><key>, ordered as Kafka Streams'
// TimestampedKeyAndJoinSide (right before left at equal timestamps).
func (n *streamJoinNode[K, V, VO, VR]) outerKey(ts int64, left bool, k K) ([]byte, error) {
	kb, err := n.ks.Serialize(n.shared, k)
	if err != nil {
		return nil, err
	}
	out := binary.BigEndian.AppendUint64(make([]byte, 0, 17+len(kb)+8), uint64(ts))
	out = append(out, sideByte(left))
	return append(out, kb...), nil
}

// deleteOuter removes the other side's waiting records of k at ts: they
// found a match.
func (n *streamJoinNode[K, V, VO, VR]) deleteOuter(ts int64, left bool, k K) error {
	prefix, err := n.outerKey(ts, left, k)
	if err != nil {
		return err
	}
	it := n.outerStore.Range(prefix, append(bytes.Clone(prefix), bytes.Repeat([]byte{0xff}, 9)...))
	var doomed [][]byte
	for key := range it.Seq() {
		if len(key) == len(prefix)+8 {
			doomed = append(doomed, key)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, key := range doomed {
		if _, _, err := n.outerStore.Delete(key); err != nil {
			return err
		}
	}
	return nil
}

// windowOpen reports whether records of a side with timestamp ts may still
// find a match.
func (n *streamJoinNode[K, V, VO, VR]) windowOpen(ts int64, left bool) bool {
	lookBack := n.winBefore
	if left {
		lookBack = n.winAfter
	}
	return ts+lookBack+n.grace >= n.time.streamTime
}

// emitNonJoined emits, with nil for the missing side, the waiting records
// whose window has closed, oldest first.
func (n *streamJoinNode[K, V, VO, VR]) emitNonJoined(h processor.Headers) {
	jt := n.time
	if jt.minTime+n.after+n.grace >= jt.streamTime {
		return
	}
	if jt.wait(n.T) {
		return
	}
	jt.minTime = 1<<63 - 1
	it := n.outerStore.All()
	var doomed [][]byte
	for key, val := range it.Seq() {
		if len(key) < 17 || len(val) < 1 {
			continue
		}
		ts := int64(binary.BigEndian.Uint64(key))
		left := key[8] == 1
		jt.minTime = ts
		if n.windowOpen(ts, left) {
			// Entries are ordered by time: once both sides' windows are
			// open, no later entry can be expired.
			if n.windowOpen(ts, !left) {
				break
			}
			continue
		}
		kb := key[9 : len(key)-8]
		k, err := n.ks.Deserialize(n.shared, kb)
		if err != nil {
			n.Fail(err)
			return
		}
		var out VR
		if left == n.isLeft {
			v, err := n.vs.Deserialize(n.shared, val[1:])
			if err != nil {
				n.Fail(err)
				return
			}
			out = n.joinThis(&v, nil)
		} else {
			v, err := n.vos.Deserialize(n.shared, val[1:])
			if err != nil {
				n.Fail(err)
				return
			}
			out = n.joinThis(nil, &v)
		}
		n.Forward(processor.Record[K, VR]{Key: k, Value: out, Timestamp: ts, Headers: h})
		doomed = append(doomed, bytes.Clone(key))
	}
	if err := it.Err(); err != nil {
		n.Fail(err)
		return
	}
	for _, key := range doomed {
		if _, _, err := n.outerStore.Delete(key); err != nil {
			n.Fail(err)
			return
		}
	}
}
