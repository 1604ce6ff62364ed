package topology

import (
	"encoding/binary"
	"fmt"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Count windows keep, per key, the number of records seen and the
// aggregates of the windows still open, in one key-value store entry
// (changelogged like any store). A window is removed once full.

// countState is a key's count-window progress.
type countState[VA any] struct {
	next int64 // the number the key's next record gets
	open []countWindow[VA]
}

type countWindow[VA any] struct {
	start, ts int64
	agg       VA
}

// countStateSerde encodes a countState: varint next, uvarint window
// count, then per window varint start, varint timestamp, uvarint length
// and the aggregate as vs writes it.
func countStateSerde[VA any](vs serde.Serde[VA]) serde.Serde[countState[VA]] {
	return serde.Func(func(topic string, s countState[VA]) ([]byte, error) {
		out := binary.AppendVarint(nil, s.next)
		out = binary.AppendUvarint(out, uint64(len(s.open)))
		for _, w := range s.open {
			b, err := vs.Serialize(topic, w.agg)
			if err != nil {
				return nil, err
			}
			out = binary.AppendVarint(out, w.start)
			out = binary.AppendVarint(out, w.ts)
			out = binary.AppendUvarint(out, uint64(len(b)))
			out = append(out, b...)
		}
		return out, nil
	}, func(topic string, data []byte) (countState[VA], error) {
		var s countState[VA]
		bad := func() (countState[VA], error) {
			return countState[VA]{}, fmt.Errorf("count window state: %w", serde.ErrSize)
		}
		next, n := binary.Varint(data)
		if n <= 0 {
			return bad()
		}
		s.next, data = next, data[n:]
		count, n := binary.Uvarint(data)
		if n <= 0 || count > uint64(len(data)) {
			return bad()
		}
		data = data[n:]
		s.open = make([]countWindow[VA], 0, count)
		for range count {
			var w countWindow[VA]
			if w.start, n = binary.Varint(data); n <= 0 {
				return bad()
			}
			data = data[n:]
			if w.ts, n = binary.Varint(data); n <= 0 {
				return bad()
			}
			data = data[n:]
			l, n := binary.Uvarint(data)
			if n <= 0 || l > uint64(len(data)-n) {
				return bad()
			}
			agg, err := vs.Deserialize(topic, data[n:n+int(l)])
			if err != nil {
				return countState[VA]{}, err
			}
			w.agg, data = agg, data[n+int(l):]
			s.open = append(s.open, w)
		}
		return s, nil
	})
}

func countWindowAggregate[K, V, VA any](s *WindowedStream[K, V], m MaterializedOptions[K, VA], vaSerde serde.Serde[VA],
	first func(K, V) VA, next func(K, V, VA) VA, prefix string) *KTable[serde.Windowed[K], VA] {
	g := s.g
	b := g.s.b
	if s.lateTopic != "" {
		b.errorf("LateRecords(%q) on count windows: count windows never close by time, so no record is late", s.lateTopic)
	}
	storeName, funcName, parent := g.aggregation(m.name, prefix)
	ks, vs := pickSerde(m.keySerde, g.keySerde), pickSerde(m.valueSerde, vaSerde)
	if ks == nil || vs == nil {
		b.errorf("count-window store %q needs serdes for [%s, %s]: pass them with Materialized(...).WithSerdes", storeName, rt.TypeOf[K](), rt.TypeOf[VA]())
	} else {
		// Not cached: each update is forwarded as it happens.
		b.addStore(stores.KeyValue(storeName, ks, countStateSerde(vs)).
			WithCaching(false).WithLogging(m.logging, m.logConfig).InMemory(m.backend == InMemory))
	}
	w := s.w
	emitOnClose := s.emitOnClose
	info := &tableInfo{}
	n := b.add(processorSpec[K, V, serde.Windowed[K], change[VA]](funcName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[serde.Windowed[K], change[VA]](bc)
		return &countWindowNode[K, V, VA]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[serde.Windowed[K], VA]{Children: ch},
			storeName: storeName, emitOnClose: emitOnClose, sendOld: &info.sendOld, windows: w, first: first, next: next}, err
	}), parent)
	b.connect(n, storeName)
	var wks serde.Serde[serde.Windowed[K]]
	if ks != nil {
		wks = serde.TimeWindowed(ks, w.size)
	}
	return &KTable[serde.Windowed[K], VA]{b: b, node: n, keySerde: wks, valueSerde: vs, store: storeName, info: info}
}

// countWindowNode aggregates each key's records into windows of record
// numbers.
type countWindowNode[K, V, VA any] struct {
	rt.Base
	fw          fwd[serde.Windowed[K], VA]
	storeName   string
	store       stores.KeyValueStore[K, countState[VA]]
	emitOnClose bool
	sendOld     *bool
	windows     Windows
	first       func(K, V) VA
	next        func(K, V, VA) VA
}

func (n *countWindowNode[K, V, VA]) Init() (err error) {
	n.store, err = rt.Store[stores.KeyValueStore[K, countState[VA]]](n.T, n.storeName)
	if err != nil {
		return fmt.Errorf("%s: %w", n.NodeName, err)
	}
	return nil
}

func (n *countWindowNode[K, V, VA]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1)
		return
	}
	st, _, err := n.store.Get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	seq := st.next
	st.next++
	size := n.windows.size
	open := st.open[:0:0]
	i := 0
	for _, start := range n.windows.windowsFor(seq) {
		// (Every open window contains the next record; kept for safety.)
		for i < len(st.open) && st.open[i].start < start {
			open = append(open, st.open[i])
			i++
		}
		w := countWindow[VA]{start: start, ts: r.Timestamp}
		var old *VA
		if i < len(st.open) && st.open[i].start == start {
			prev := st.open[i]
			old = &prev.agg
			w.agg, w.ts = n.next(r.Key, r.Value, prev.agg), max(r.Timestamp, prev.ts)
			i++
		} else {
			w.agg = n.first(r.Key, r.Value)
		}
		full := seq == start+size-1
		if !n.emitOnClose || full {
			c := change[VA]{New: w.agg, HasNew: true}
			if old != nil && *n.sendOld && !n.emitOnClose {
				c.Old, c.HasOld = *old, true
			}
			n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
				Key:   serde.Windowed[K]{Key: r.Key, Window: serde.Window{Start: start, End: start + size}},
				Value: c, Timestamp: w.ts, Headers: r.Headers})
		}
		if !full {
			open = append(open, w)
		}
	}
	st.open = append(open, st.open[i:]...)
	if err := n.store.Put(r.Key, st); err != nil {
		n.Fail(err)
	}
}
