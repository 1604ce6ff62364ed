package stores

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/eddy-go/eddy/serde"
)

// ReadOnlyWindowStore is the read side of a window store: what interactive
// queries get.
type ReadOnlyWindowStore[K, V any] interface {
	// Fetch returns the value of key's window starting at start.
	Fetch(key K, start int64) (V, bool, error)
	// FetchRange returns key's windows with starts in [from, to], in order.
	FetchRange(key K, from, to int64) ([]WindowEntry[V], error)
	// FetchAll returns every key's windows with starts in [from, to],
	// ordered by start, then serialized key.
	FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error)
}

// ReadOnlySessionStore is the read side of a session store: what
// interactive queries get.
type ReadOnlySessionStore[K, V any] interface {
	// FetchSessions returns key's sessions, ordered by end then start.
	FetchSessions(key K) ([]KeyWindowEntry[K, V], error)
	// FetchAll returns every session ending in [from, to], ordered by end,
	// then serialized key.
	FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error)
}

// ReadOnly returns the builder's store, read-only, over bs (for instance
// CommittedViews); topic is the name its serdes are called with.
func (b *KeyValueBuilder[K, V]) ReadOnly(bs BytesStore, topic string) ReadOnlyKeyValueStore[K, V] {
	return &kvStore[K, V]{name: b.spec.Name, topic: topic, under: bs, ks: b.ks, vs: b.vs}
}

// ReadOnly returns the builder's window store, read-only, over bs.
func (b *WindowBuilder[K, V]) ReadOnly(bs BytesStore, topic string) ReadOnlyWindowStore[K, V] {
	return readOnlyWindows[K, V]{b.readOnly(bs, topic)}
}

type readOnlyWindows[K, V any] struct{ s *windowStore[K, V] }

func (r readOnlyWindows[K, V]) Fetch(key K, start int64) (V, bool, error) {
	return r.s.Fetch(key, start)
}

func (r readOnlyWindows[K, V]) FetchRange(key K, from, to int64) ([]WindowEntry[V], error) {
	lo, hi, ok, err := r.s.timeBounds()
	if err != nil || !ok {
		return nil, err
	}
	return r.s.FetchRange(key, max(from, lo), min(to, hi))
}

func (r readOnlyWindows[K, V]) FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error) {
	lo, hi, ok, err := r.s.timeBounds()
	if err != nil || !ok {
		return nil, err
	}
	return r.s.FetchAll(max(from, lo), min(to, hi))
}

// timeBounds returns the span of time the store's segments cover (window
// starts; session ends), so reads over open ranges visit only segments
// that exist.
func (s *windowStore[K, V]) timeBounds() (lo, hi int64, ok bool, err error) {
	edge := func(reverse bool) (int64, bool, error) {
		it := s.under.Iter(nil, emitKey, reverse)
		defer it.Close()
		for it.Next() {
			if k := it.Key(); len(k) >= 8 && !bytes.Equal(k, emitKey) {
				return int64(binary.BigEndian.Uint64(k)), true, nil
			}
		}
		return 0, false, it.Err()
	}
	first, ok, err := edge(false)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	last, _, err := edge(true)
	return first * s.keys.segment, (last+1)*s.keys.segment - 1, err == nil, err
}

func (b *WindowBuilder[K, V]) readOnly(bs BytesStore, topic string) *windowStore[K, V] {
	// observed is unknown to a reader: nothing is hidden as past the
	// retention but what expiry has already deleted.
	return &windowStore[K, V]{name: b.spec.Name, topic: topic, under: bs, ks: b.ks, vs: b.vs,
		keys: windowKeys{segment: SegmentInterval(b.retention)}, retention: b.retention.Milliseconds(), observed: math.MinInt64 / 2}
}

// ReadOnly returns the builder's session store, read-only, over bs.
func (b *SessionBuilder[K, V]) ReadOnly(bs BytesStore, topic string) ReadOnlySessionStore[K, V] {
	return readOnlySessions[K, V]{&sessionStore[K, V]{*b.readOnly(bs, topic)}}
}

type readOnlySessions[K, V any] struct{ s *sessionStore[K, V] }

func (r readOnlySessions[K, V]) FetchSessions(key K) ([]KeyWindowEntry[K, V], error) {
	_, hi, ok, err := r.s.timeBounds()
	if err != nil || !ok {
		return nil, err
	}
	return r.s.FindSessions(key, 0, hi, hi)
}

func (r readOnlySessions[K, V]) FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error) {
	lo, hi, ok, err := r.s.timeBounds()
	if err != nil || !ok {
		return nil, err
	}
	return r.s.FetchAll(max(from, lo), min(to, hi))
}

// ErrorIterator returns an iterator that yields nothing and reports err.
func ErrorIterator[K, V any](err error) *Iterator[K, V] { return errIterator[K, V](err) }

// CommittedViews returns a read-only BytesStore over the committed state
// of one store across several tasks: Get answers from the first task that
// has the key, iterations merge the tasks' keys in order.
func CommittedViews(b Backend, tasks []string, store string) BytesStore {
	m := &mergedView{}
	for _, t := range tasks {
		m.parts = append(m.parts, CommittedView(b, t, store))
	}
	return m
}

type mergedView struct{ parts []BytesStore }

func (m *mergedView) Get(key []byte) ([]byte, bool, error) {
	for _, p := range m.parts {
		if v, ok, err := p.Get(key); err != nil || ok {
			return v, ok, err
		}
	}
	return nil, false, nil
}
func (m *mergedView) Put(key, value []byte) error { return ErrReadOnly }
func (m *mergedView) Delete(key []byte) error     { return ErrReadOnly }
func (m *mergedView) Flush() error                { return nil }

func (m *mergedView) ApproximateNumEntries() (int64, error) {
	var n int64
	for _, p := range m.parts {
		c, err := p.ApproximateNumEntries()
		if err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}

func (m *mergedView) Iter(lower, upper []byte, reverse bool) BytesIterator {
	mi := &mergedIter{reverse: reverse, cur: -1}
	for _, p := range m.parts {
		it := p.Iter(lower, upper, reverse)
		mi.its = append(mi.its, it)
		mi.has = append(mi.has, false)
	}
	for i, it := range mi.its {
		mi.has[i] = it.Next()
		if err := it.Err(); err != nil && mi.err == nil {
			mi.err = err
		}
	}
	return mi
}

// mergedIter merges ordered iterators over disjoint key sets.
type mergedIter struct {
	its     []BytesIterator
	has     []bool // its[i] is positioned on an entry
	cur     int
	reverse bool
	started bool
	err     error
}

func (m *mergedIter) Next() bool {
	if m.err != nil {
		return false
	}
	if m.started && m.cur >= 0 {
		it := m.its[m.cur]
		m.has[m.cur] = it.Next()
		if err := it.Err(); err != nil {
			m.err = err
			return false
		}
	}
	m.started = true
	m.cur = -1
	for i, it := range m.its {
		if !m.has[i] {
			continue
		}
		if m.cur < 0 {
			m.cur = i
			continue
		}
		c := bytes.Compare(it.Key(), m.its[m.cur].Key())
		if (c < 0) != m.reverse && c != 0 {
			m.cur = i
		}
	}
	return m.cur >= 0
}

func (m *mergedIter) Key() []byte   { return m.its[m.cur].Key() }
func (m *mergedIter) Value() []byte { return m.its[m.cur].Value() }
func (m *mergedIter) Err() error    { return m.err }

func (m *mergedIter) Close() error {
	var first error
	for _, it := range m.its {
		if err := it.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// SerializeKey serializes key, which must be a K, as the store does.
func (b *KeyValueBuilder[K, V]) SerializeKey(key any, topic string) ([]byte, error) {
	return serializeAny(b.spec.Name, b.ks, key, topic)
}

// SerializeKey serializes key, which must be a K, as the store does.
func (b *WindowBuilder[K, V]) SerializeKey(key any, topic string) ([]byte, error) {
	return serializeAny(b.spec.Name, b.ks, key, topic)
}

// KeySerializer is implemented by every store builder: it serializes a
// key given as any (it must have the store's key type).
type KeySerializer interface {
	SerializeKey(key any, topic string) ([]byte, error)
}

func serializeAny[K any](store string, ks serde.Serde[K], key any, topic string) ([]byte, error) {
	k, ok := key.(K)
	if !ok {
		var want K
		return nil, fmt.Errorf("stores: %s has keys of type %T, not %T", store, want, key)
	}
	return ks.Serialize(topic, k)
}

// TextQuerier is implemented by the store builders: it answers a lookup
// given the key as text (as an HTTP path gives it), for the admin
// endpoint's interactive queries.
type TextQuerier interface {
	// KeyBytes parses text as the store's key type (strings as they are,
	// numbers in decimal, other types as JSON) and serializes it with the
	// store's key serde, as the store and the partitioner see it.
	KeyBytes(text, topic string) ([]byte, error)
	// QueryText reads the key given as text from bs. Key-value stores
	// answer the value (for a timestamped store, without its timestamp)
	// and its timestamp (-1 when the store keeps none); window and session
	// stores answer the key's windows as []WindowAnswer, found when there
	// is at least one (a window's end is its start plus the size the store
	// was given with WithWindowSize).
	QueryText(bs BytesStore, topic, text string) (value any, timestamp int64, found bool, err error)
}

// WindowAnswer is one window (or session) of a key, as QueryText answers
// for window and session stores.
type WindowAnswer struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Value any   `json:"value"`
}

// KeyBytes implements TextQuerier.
func (b *KeyValueBuilder[K, V]) KeyBytes(text, topic string) ([]byte, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, err
	}
	return b.ks.Serialize(topic, k)
}

// QueryText implements TextQuerier.
func (b *KeyValueBuilder[K, V]) QueryText(bs BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	v, found, err := b.ReadOnly(bs, topic).Get(k)
	if err != nil || !found {
		return nil, -1, false, err
	}
	if t, ok := any(v).(interface{ parts() (any, int64) }); ok {
		val, ts := t.parts()
		return val, ts, true, nil
	}
	return v, -1, true, nil
}

// KeyBytes implements TextQuerier.
func (b *WindowBuilder[K, V]) KeyBytes(text, topic string) ([]byte, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, err
	}
	return b.ks.Serialize(topic, k)
}

// QueryText implements TextQuerier: every window of the key.
func (b *WindowBuilder[K, V]) QueryText(bs BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	es, err := b.ReadOnly(bs, topic).FetchRange(k, 0, math.MaxInt64/2)
	if err != nil {
		return nil, -1, false, err
	}
	out := make([]WindowAnswer, len(es))
	for i, e := range es {
		out[i] = WindowAnswer{Start: e.Start, End: e.Start + b.windowSize, Value: plainValue(e.Value)}
	}
	return out, -1, len(out) > 0, nil
}

// QueryText implements TextQuerier: every session of the key.
func (b *SessionBuilder[K, V]) QueryText(bs BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	es, err := b.ReadOnly(bs, topic).FetchSessions(k)
	if err != nil {
		return nil, -1, false, err
	}
	out := make([]WindowAnswer, len(es))
	for i, e := range es {
		out[i] = WindowAnswer{Start: e.Start, End: e.End, Value: plainValue(e.Value)}
	}
	return out, -1, len(out) > 0, nil
}

// plainValue drops a timestamped value's timestamp.
func plainValue(v any) any {
	if t, ok := v.(interface{ parts() (any, int64) }); ok {
		val, _ := t.parts()
		return val
	}
	return v
}

func (v ValueAndTimestamp[V]) parts() (any, int64) { return v.Value, v.Timestamp }

// ParseText parses text as a K: strings as they are, integers and floats
// in decimal, byte slices as their bytes, anything else as JSON.
func ParseText[K any](text string) (K, error) {
	var k K
	var err error
	switch p := any(&k).(type) {
	case *string:
		*p = text
	case *[]byte:
		*p = []byte(text)
	case *int64:
		*p, err = strconv.ParseInt(text, 10, 64)
	case *int32:
		var n int64
		n, err = strconv.ParseInt(text, 10, 32)
		*p = int32(n)
	case *int:
		*p, err = strconv.Atoi(text)
	case *float64:
		*p, err = strconv.ParseFloat(text, 64)
	default:
		err = json.Unmarshal([]byte(text), p)
	}
	if err != nil {
		return k, fmt.Errorf("stores: key %q is not a %T: %w", text, k, err)
	}
	return k, nil
}
