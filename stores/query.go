package stores

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/eddy-go/eddy/internal/storage"

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

// view returns the builder's store, read-only, over bs (for instance
// storage.CommittedViews); topic is the name its serdes are called with.
func (b *KeyValueBuilder[K, V]) view(bs storage.BytesStore, topic string) ReadOnlyKeyValueStore[K, V] {
	return &kvStore[K, V]{name: b.spec.Name, topic: topic, under: bs, ks: b.ks, vs: b.vs}
}

// view returns the builder's window store, read-only, over bs.
func (b *WindowBuilder[K, V]) view(bs storage.BytesStore, topic string) ReadOnlyWindowStore[K, V] {
	return readOnlyWindows[K, V]{b.windowView(bs, topic)}
}

func (b *KeyValueBuilder[K, V]) readOnly(bs storage.BytesStore, topic string) any {
	return b.view(bs, topic)
}
func (b *WindowBuilder[K, V]) readOnly(bs storage.BytesStore, topic string) any {
	return b.view(bs, topic)
}
func (b *SessionBuilder[K, V]) readOnly(bs storage.BytesStore, topic string) any {
	return b.view(bs, topic)
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

func (b *WindowBuilder[K, V]) windowView(bs storage.BytesStore, topic string) *windowStore[K, V] {
	// observed is unknown to a reader: nothing is hidden as past the
	// retention but what expiry has already deleted.
	return &windowStore[K, V]{name: b.spec.Name, topic: topic, under: bs, ks: b.ks, vs: b.vs,
		keys: windowKeys{segment: storage.SegmentInterval(b.retention)}, retention: b.retention.Milliseconds(), observed: math.MinInt64 / 2}
}

// view returns the builder's session store, read-only, over bs.
func (b *SessionBuilder[K, V]) view(bs storage.BytesStore, topic string) ReadOnlySessionStore[K, V] {
	return readOnlySessions[K, V]{&sessionStore[K, V]{*b.windowView(bs, topic)}}
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

// serializeKey serializes key, which must be a K, as the store does.
func (b *KeyValueBuilder[K, V]) serializeKey(key any, topic string) ([]byte, error) {
	return serializeAny(b.spec.Name, b.ks, key, topic)
}

// serializeKey serializes key, which must be a K, as the store does.
func (b *WindowBuilder[K, V]) serializeKey(key any, topic string) ([]byte, error) {
	return serializeAny(b.spec.Name, b.ks, key, topic)
}

func serializeAny[K any](store string, ks serde.Serde[K], key any, topic string) ([]byte, error) {
	k, ok := key.(K)
	if !ok {
		var want K
		return nil, fmt.Errorf("stores: %s has keys of type %T, not %T", store, want, key)
	}
	return ks.Serialize(topic, k)
}

// WindowAnswer is one window (or session) of a key, as the admin
// endpoint's key lookups answer for window and session stores (a window's
// end is its start plus the size the store was given with WithWindowSize).
type WindowAnswer struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Value any   `json:"value"`
}

// keyBytes: see storage.Builder.KeyBytes.
func (b *KeyValueBuilder[K, V]) keyBytes(text, topic string) ([]byte, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, err
	}
	return b.ks.Serialize(topic, k)
}

// queryText: see storage.Builder.QueryText.
func (b *KeyValueBuilder[K, V]) queryText(bs storage.BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	v, found, err := b.view(bs, topic).Get(k)
	if err != nil || !found {
		return nil, -1, false, err
	}
	if t, ok := any(v).(interface{ parts() (any, int64) }); ok {
		val, ts := t.parts()
		return val, ts, true, nil
	}
	return v, -1, true, nil
}

// keyBytes: see storage.Builder.KeyBytes.
func (b *WindowBuilder[K, V]) keyBytes(text, topic string) ([]byte, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, err
	}
	return b.ks.Serialize(topic, k)
}

// queryText answers every window of the key.
func (b *WindowBuilder[K, V]) queryText(bs storage.BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	es, err := b.view(bs, topic).FetchRange(k, 0, math.MaxInt64/2)
	if err != nil {
		return nil, -1, false, err
	}
	out := make([]WindowAnswer, len(es))
	for i, e := range es {
		out[i] = WindowAnswer{Start: e.Start, End: e.Start + b.windowSize, Value: plainValue(e.Value)}
	}
	return out, -1, len(out) > 0, nil
}

// queryText answers every session of the key.
func (b *SessionBuilder[K, V]) queryText(bs storage.BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	es, err := b.view(bs, topic).FetchSessions(k)
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
