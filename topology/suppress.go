package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Suppressed says what a table's Suppress holds back and for how long:
// UntilWindowCloses or UntilTimeLimit.
type Suppressed struct {
	windowCloses bool
	limit        int64
	buffer       BufferConfig
	name         string
}

// UntilWindowCloses holds every update of a windowed table (the result of
// a windowed aggregation) until its window closes — stream time reaches the
// window's end plus the grace period (for session windows, plus the
// inactivity gap) — and then emits the window's final result once: Kafka
// Streams' Suppressed.untilWindowCloses. Final results never include
// deletions. The buffer must be strict (Unbounded, or a bound with
// ShutDownWhenFull): emitting early would not be final.
func UntilWindowCloses(buffer BufferConfig) Suppressed {
	return Suppressed{windowCloses: true, buffer: buffer}
}

// UntilTimeLimit holds a key's updates until stream time has passed the
// time of its first held update by limit, then emits the latest one (Kafka
// Streams' Suppressed.untilTimeLimit): a rate limit per key, in event time.
func UntilTimeLimit(limit time.Duration, buffer BufferConfig) Suppressed {
	return Suppressed{limit: limit.Milliseconds(), buffer: buffer}
}

// WithName names the suppression: its processor "<name>-suppress", its
// buffer store "<name>-store" (and that store's changelog topic).
func (s Suppressed) WithName(name string) Suppressed {
	s.name = name
	return s
}

// BufferConfig bounds a suppression's buffer and says what happens when it
// is full.
type BufferConfig struct {
	maxRecords int64
	emitEarly  bool
}

// Unbounded is a buffer with no bound: it holds as many keys as it must
// (in its store, on disk). Kafka Streams' BufferConfig.unbounded.
func Unbounded() BufferConfig { return BufferConfig{} }

// MaxRecords bounds the buffer to n keys; when a new key would pass the
// bound the task fails (ShutDownWhenFull, the default) or the oldest keys
// are emitted early (EmitEarlyWhenFull).
func MaxRecords(n int64) BufferConfig { return BufferConfig{maxRecords: n} }

// ShutDownWhenFull fails the task when the buffer is full: nothing is ever
// emitted before its time.
func (c BufferConfig) ShutDownWhenFull() BufferConfig {
	c.emitEarly = false
	return c
}

// EmitEarlyWhenFull emits the oldest held keys when the buffer is full.
// Not allowed with UntilWindowCloses.
func (c BufferConfig) EmitEarlyWhenFull() BufferConfig {
	c.emitEarly = true
	return c
}

// windowing is what a windowed aggregation's table tells Suppress: where a
// key's window ends and how long after that it closes.
type windowing[K any] struct {
	end   func(K) int64
	grace int64
}

// Suppress holds back the table's updates as s says and emits them later,
// the latest value per key, as Kafka Streams' suppress: each update is
// buffered under its key (a later update replaces it, keeping the time it
// was first buffered), and once stream time — the largest timestamp the
// suppression has seen — reaches that time plus the wait (the window's end
// plus grace, or the first update's timestamp plus the limit), the key's
// latest value goes downstream with its own timestamp, oldest first. The
// buffer is a changelogged key-value store, so held updates survive
// restarts and, under exactly-once, are emitted once.
func (t *KTable[K, V]) Suppress(s Suppressed) *KTable[K, V] {
	b := t.b
	var name, storeName string
	if s.name != "" {
		name, storeName = s.name+"-suppress", s.name+"-store"
	} else {
		name = b.newName("KTABLE-SUPPRESS-")
		storeName = b.newStoreName("KTABLE-SUPPRESS-")
	}
	timeOf := func(_ K, ts int64) int64 { return ts }
	wait := s.limit
	switch {
	case s.windowCloses && t.windowing == nil:
		b.errorf("suppress %q: UntilWindowCloses needs a windowed table (the result of a time, sliding or session windowed aggregation)", name)
		return t
	case s.windowCloses && s.buffer.emitEarly:
		b.errorf("suppress %q: UntilWindowCloses needs a strict buffer (Unbounded, or MaxRecords with ShutDownWhenFull): emitting early would not be final", name)
		return t
	case s.windowCloses:
		end := t.windowing.end
		timeOf = func(k K, _ int64) int64 { return end(k) }
		wait = t.windowing.grace
	case s.limit < 0:
		b.errorf("suppress %q: the time limit must not be negative, got %dms", name, s.limit)
		return t
	}
	if s.buffer.maxRecords < 0 {
		b.errorf("suppress %q: MaxRecords must be positive, got %d", name, s.buffer.maxRecords)
		return t
	}
	if t.keySerde == nil || t.valueSerde == nil {
		b.errorf("suppress %q needs serdes for the table's keys (%s) and values (%s): materialize the table with them",
			name, rt.TypeOf[K](), rt.TypeOf[V]())
		return t
	}
	b.addStore(stores.KeyValue(storeName, serde.Bytes(), serde.Bytes()))
	ks, vs := t.keySerde, t.valueSerde
	info := &tableInfo{parents: []*tableInfo{t.info}}
	n := b.add(processorSpec[K, change[V], K, change[V]](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[V]](bc)
		return &suppressNode[K, V]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[K, V]{Children: ch},
			storeName: storeName, ks: ks, vs: vs, timeOf: timeOf, wait: wait, final: s.windowCloses,
			maxRecords: s.buffer.maxRecords, emitEarly: s.buffer.emitEarly, sendOld: &info.sendOld,
			streamTime: math.MinInt64}, err
	}), t.node)
	b.connect(n, storeName)
	// The buffer keeps the value a key had before its first held update,
	// to emit it as the old value: the upstream table must send it.
	t.info.enableSendOld()
	return &KTable[K, V]{b: b, node: n, keySerde: ks, valueSerde: vs, info: info, windowing: t.windowing}
}

// ErrSuppressBufferFull is the error a task fails with when a suppression
// whose buffer is bounded with ShutDownWhenFull would pass its bound.
var ErrSuppressBufferFull = errors.New("suppress buffer full")

// The buffer store holds two entries per key:
//
//	'k' key                 -> the time it is held until minus the wait (8 bytes)
//	't' time(8 bytes) key   -> timestamp (8 bytes), headers, then the
//	                           change (flags, the new value's length and
//	                           bytes, the old value's bytes)
//
// with times as big-endian uint64 of the time xor the sign bit, so byte
// order is time order.
const (
	suppressIndex = 'k'
	suppressEntry = 't'
)

func orderedTime(t int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t)^(1<<63))
}

// suppressNode is a table's Suppress: it buffers each key's latest update
// and emits it once stream time passes its time plus the wait.
type suppressNode[K, V any] struct {
	rt.Base
	fw         fwd[K, V]
	storeName  string
	store      stores.KeyValueStore[[]byte, []byte]
	ks         serde.Serde[K]
	vs         serde.Serde[V]
	timeOf     func(K, int64) int64
	wait       int64
	final      bool
	maxRecords int64
	emitEarly  bool
	sendOld    *bool
	// streamTime is the largest timestamp this node has seen since the
	// task started (as Kafka Streams, it is not kept across restarts).
	streamTime int64
	// held is the number of keys in the buffer, counted at Init.
	held int64
}

func (n *suppressNode[K, V]) Init() (err error) {
	n.store, err = rt.Store[stores.KeyValueStore[[]byte, []byte]](n.T, n.storeName)
	if err != nil {
		return fmt.Errorf("%s: %w", n.NodeName, err)
	}
	n.held = 0
	it := n.store.Range([]byte{suppressIndex}, []byte{suppressIndex + 1})
	defer it.Close()
	for it.Next() {
		n.held++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: counting the buffered keys: %w", n.NodeName, err)
	}
	return nil
}

func (n *suppressNode[K, V]) Process(r processor.Record[K, change[V]]) {
	if r.Timestamp > n.streamTime {
		n.streamTime = r.Timestamp
	}
	topic := n.storeName
	kb, err := n.ks.Serialize(topic, r.Key)
	if err != nil {
		n.Fail(fmt.Errorf("%s: serializing key %v: %w", n.NodeName, r.Key, err))
		return
	}
	idx := append([]byte{suppressIndex}, kb...)
	at, held, err := n.store.Get(idx)
	if err != nil {
		n.Fail(err)
		return
	}
	var entry []byte
	old := r.Value.Old
	hasOld := r.Value.HasOld
	if held {
		entry = append(append([]byte{suppressEntry}, at...), kb...)
		// Keep the value from before the first held update as the old one.
		prev, ok, err := n.store.Get(entry)
		if err != nil {
			n.Fail(err)
			return
		}
		if ok {
			if _, _, ch, err := n.decode(prev); err == nil {
				old, hasOld = ch.Old, ch.HasOld
			}
		}
	} else {
		at = orderedTime(n.timeOf(r.Key, r.Timestamp))
		entry = append(append([]byte{suppressEntry}, at...), kb...)
		if n.maxRecords > 0 && n.held >= n.maxRecords && !n.emitEarly {
			n.Fail(fmt.Errorf("%s: %w: %d keys held, the bound (MaxRecords with ShutDownWhenFull); raise it or use Unbounded", n.NodeName, ErrSuppressBufferFull, n.held))
			return
		}
	}
	v, err := n.encode(r.Timestamp, r.Headers, change[V]{New: r.Value.New, HasNew: r.Value.HasNew, Old: old, HasOld: hasOld})
	if err != nil {
		n.Fail(fmt.Errorf("%s: serializing the value of key %v: %w", n.NodeName, r.Key, err))
		return
	}
	if err := n.store.Put(entry, v); err != nil {
		n.Fail(err)
		return
	}
	if !held {
		if err := n.store.Put(idx, at); err != nil {
			n.Fail(err)
			return
		}
		n.held++
	}
	n.evict()
}

// evict emits, oldest first, the held keys whose time plus the wait stream
// time has reached, and then, with EmitEarlyWhenFull, the oldest ones past
// the bound.
func (n *suppressNode[K, V]) evict() {
	if n.streamTime == math.MinInt64 {
		return
	}
	expiry := n.streamTime - n.wait
	if n.wait > 0 && n.streamTime < math.MinInt64+n.wait {
		return
	}
	// Due keys first; then, emitting early, the oldest of the rest until
	// the buffer is within its bound.
	emitEarly := n.emitEarly && n.maxRecords > 0
	it := n.store.Range([]byte{suppressEntry}, []byte{suppressEntry + 1})
	defer it.Close()
	type due struct{ key, value []byte }
	var out []due
	for it.Next() {
		k := it.Key()
		if len(k) < 9 {
			n.Fail(fmt.Errorf("%s: a corrupt buffer entry", n.NodeName))
			return
		}
		at := int64(binary.BigEndian.Uint64(k[1:9]) ^ (1 << 63))
		if at > expiry && (!emitEarly || n.held-int64(len(out)) <= n.maxRecords) {
			break
		}
		out = append(out, due{append([]byte(nil), k...), append([]byte(nil), it.Value()...)})
	}
	if err := it.Err(); err != nil {
		n.Fail(err)
		return
	}
	topic := n.storeName
	for _, d := range out {
		kb := d.key[9:]
		if _, _, err := n.store.Delete(d.key); err != nil {
			n.Fail(err)
			return
		}
		if _, _, err := n.store.Delete(append([]byte{suppressIndex}, kb...)); err != nil {
			n.Fail(err)
			return
		}
		n.held--
		ts, h, ch, err := n.decode(d.value)
		if err != nil {
			n.Fail(fmt.Errorf("%s: a buffered update: %w", n.NodeName, err))
			return
		}
		if n.final && !ch.HasNew {
			continue // final results hold no deletions
		}
		k, err := n.ks.Deserialize(topic, kb)
		if err != nil {
			n.Fail(fmt.Errorf("%s: a buffered key: %w", n.NodeName, err))
			return
		}
		if !*n.sendOld {
			ch.Old, ch.HasOld = *new(V), false
		}
		n.fw.Forward(processor.Record[K, change[V]]{Key: k, Value: ch, Timestamp: ts, Headers: h})
	}
}

// encode is a held update: its timestamp (8 bytes), its headers, then the
// change.
func (n *suppressNode[K, V]) encode(ts int64, h processor.Headers, ch change[V]) ([]byte, error) {
	b, err := changeSerde(n.vs).Serialize(n.storeName, ch)
	if err != nil {
		return nil, err
	}
	out := appendHeaders(binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(b)), uint64(ts)), h)
	return append(out, b...), nil
}

func (n *suppressNode[K, V]) decode(b []byte) (int64, processor.Headers, change[V], error) {
	if len(b) < 8 {
		return 0, nil, change[V]{}, errChange
	}
	h, rest, err := readHeaders(b[8:])
	if err != nil {
		return 0, nil, change[V]{}, err
	}
	ch, err := changeSerde(n.vs).Deserialize(n.storeName, rest)
	return int64(binary.BigEndian.Uint64(b)), h, ch, err
}
