package stores

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
)

// Window and session stores keep each entry under a key that starts with
// its time segment, so a whole expired segment is one range deletion; within
// a segment entries order as in Kafka Streams' segmented stores (key bytes,
// then time):
//
//	window:  <segment 8B> <key> <window start 8B>
//	session: <segment 8B> <key> <session end 8B> <session start 8B>
//
// The segment is the window start (sessions: end) divided by the segment
// interval. Changelog records carry the same keys; only eddy reads them.

// WindowStore is a typed store of values per key and window start.
type WindowStore[K, V any] interface {
	Name() string
	// Put writes the value of key's window starting at start.
	Put(key K, start int64, value V) error
	// Delete removes key's window starting at start.
	Delete(key K, start int64) error
	// Fetch returns the value of key's window starting at start.
	Fetch(key K, start int64) (V, bool, error)
	// FetchRange returns key's windows with starts in [from, to], in order.
	FetchRange(key K, from, to int64) ([]WindowEntry[V], error)
	// FetchAll returns every key's windows with starts in [from, to],
	// ordered by start, then serialized key.
	FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error)
	// ExpireBefore drops the segments whose windows all start before t
	// minus the retention.
	ExpireBefore(t int64) error
	// EmittedUpTo and SetEmittedUpTo keep, with the store, the start of the
	// last window whose final result was emitted (EmitOnWindowClose).
	EmittedUpTo() (int64, bool, error)
	SetEmittedUpTo(start int64) error
}

// WindowEntry is one window's value.
type WindowEntry[V any] struct {
	Start int64
	Value V
}

// KeyWindowEntry is one key's window value.
type KeyWindowEntry[K, V any] struct {
	Key   K
	Start int64
	End   int64 // sessions only
	Value V
}

type windowKeys struct {
	segment int64
	buf     []byte
}

func (w *windowKeys) seg(t int64) int64 {
	if t < 0 {
		return 0
	}
	return t / w.segment
}

func appendKeyPart(dst, key []byte) []byte { return append(dst, key...) }

func appendTime(dst []byte, t int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(t)) }

type windowStore[K, V any] struct {
	name   string
	topic  string
	under  storage.BytesStore
	layers *storage.Layers // nil in a read-only view
	ks     serde.Serde[K]
	vs     serde.Serde[V]
	keys   windowKeys
	// retention in ms: windows starting before streamTime - retention are
	// gone.
	retention int64
	expired   int64 // segments below this are deleted
	observed  int64 // the largest window start written: fetches ignore what is past the retention from it
}

func (s *windowStore[K, V]) Name() string { return s.name }

func (s *windowStore[K, V]) storageKey(key K, start int64) ([]byte, error) {
	kb, err := s.ks.Serialize(s.topic, key)
	if err != nil {
		return nil, fmt.Errorf("stores: %s: serializing key: %w", s.name, err)
	}
	b := appendTime(s.keys.buf[:0], s.keys.seg(start))
	b = appendKeyPart(b, kb)
	b = appendTime(b, start)
	s.keys.buf = b
	return b, nil
}

func (s *windowStore[K, V]) Put(key K, start int64, value V) error {
	if s.keys.seg(start) < s.expired {
		return nil // the window's segment has expired: Kafka Streams drops the write too
	}
	s.observed = max(s.observed, start)
	k, err := s.storageKey(key, start)
	if err != nil {
		return err
	}
	vb, err := s.vs.Serialize(s.topic, value)
	if err != nil {
		return fmt.Errorf("stores: %s: serializing value: %w", s.name, err)
	}
	return s.under.Put(k, vb)
}

func (s *windowStore[K, V]) Delete(key K, start int64) error {
	k, err := s.storageKey(key, start)
	if err != nil {
		return err
	}
	return s.under.Delete(k)
}

func (s *windowStore[K, V]) Fetch(key K, start int64) (V, bool, error) {
	var zero V
	k, err := s.storageKey(key, start)
	if err != nil {
		return zero, false, err
	}
	b, ok, err := s.under.Get(k)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vs.Deserialize(s.topic, b)
	return v, err == nil, err
}

func (s *windowStore[K, V]) FetchRange(key K, from, to int64) ([]WindowEntry[V], error) {
	kb, err := s.ks.Serialize(s.topic, key)
	if err != nil {
		return nil, err
	}
	from = max(from, s.observed-s.retention+1) // as Kafka Streams: past the retention is gone
	var out []WindowEntry[V]
	for seg := max(s.keys.seg(from), s.expired); seg <= s.keys.seg(to); seg++ {
		prefix := appendKeyPart(appendTime(nil, seg), kb)
		lo := appendTime(append([]byte{}, prefix...), max(from, 0))
		hi := appendTime(append([]byte{}, prefix...), to)
		it := s.under.Iter(lo, append(hi, 0), false)
		for it.Next() {
			k, start, ok := storage.ParseWindowKey(it.Key())
			if !ok || string(k) != string(kb) || start < from || start > to {
				continue // another key sharing the prefix
			}
			v, err := s.vs.Deserialize(s.topic, it.Value())
			if err != nil {
				it.Close()
				return nil, err
			}
			out = append(out, WindowEntry[V]{Start: start, Value: v})
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *windowStore[K, V]) FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error) {
	var out []KeyWindowEntry[K, V]
	var keys [][]byte // serialized, for ordering
	lo := appendTime(nil, max(s.keys.seg(from), s.expired))
	hi := appendTime(nil, s.keys.seg(to)+1)
	it := s.under.Iter(lo, hi, false)
	defer it.Close()
	for it.Next() {
		kb, start, ok := storage.ParseWindowKey(it.Key())
		if !ok || start < from || start > to {
			continue
		}
		k, err := s.ks.Deserialize(s.topic, kb)
		if err != nil {
			return nil, err
		}
		v, err := s.vs.Deserialize(s.topic, it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, KeyWindowEntry[K, V]{Key: k, Start: start, Value: v})
		keys = append(keys, bytes.Clone(kb))
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return timeOrdered(out, keys, func(e *KeyWindowEntry[K, V]) int64 { return e.Start }), nil
}

// timeOrdered sorts entries by time, then serialized key (keys[i] is the
// key of out[i]): segments hold keys in key order, while Kafka Streams'
// time-ordered stores, which emit-on-close reads, return time order.
func timeOrdered[K, V any](out []KeyWindowEntry[K, V], keys [][]byte, time func(*KeyWindowEntry[K, V]) int64) []KeyWindowEntry[K, V] {
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(time(&out[a]), time(&out[b])); c != 0 {
			return c
		}
		return bytes.Compare(keys[a], keys[b])
	})
	sorted := make([]KeyWindowEntry[K, V], len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted
}

// emitKey is where a window store keeps how far its closed windows were
// emitted (EmitOnWindowClose): a segment no scan or expiry reaches, so it
// lives with the store and its changelog.
var emitKey = append(appendTime(nil, 1<<63-1), "eddy.emitted"...)

// EmittedUpTo returns the start of the last window (for sessions: the end
// of the last session) emitted on close.
func (s *windowStore[K, V]) EmittedUpTo() (int64, bool, error) {
	b, ok, err := s.under.Get(emitKey)
	if err != nil || !ok || len(b) != 16 {
		return 0, false, err
	}
	return int64(binary.BigEndian.Uint64(b[8:])), true, nil
}

// SetEmittedUpTo records the start of the last window emitted on close.
func (s *windowStore[K, V]) SetEmittedUpTo(start int64) error {
	return s.under.Put(emitKey, appendTime(appendTime(nil, 0), start))
}

func (s *windowStore[K, V]) ExpireBefore(t int64) error {
	seg := s.keys.seg(t - s.retention)
	if seg <= s.expired {
		return nil
	}
	if err := storage.DeleteRange(s.under, appendTime(nil, 0), appendTime(nil, seg)); err != nil {
		return err
	}
	s.expired = seg
	return nil
}

func (s *windowStore[K, V]) Flush() error { return s.under.Flush() }

func (s *windowStore[K, V]) Discard() { s.layers.Discard() }

func (s *windowStore[K, V]) Close() error {
	s.Discard()
	return nil
}

// SetFlushListener implements storage.CacheFlusher.
func (s *windowStore[K, V]) SetFlushListener(l storage.FlushListener, sendOld bool) bool {
	return s.layers.SetFlushListener(l, sendOld)
}

// Serdes returns the store's key and value serdes and their topic.
func (s *windowStore[K, V]) Serdes() (serde.Serde[K], serde.Serde[V], string) {
	return s.ks, s.vs, s.topic
}

// WindowBuilder builds window stores. Logged and persistent by default.
type WindowBuilder[K, V any] struct {
	spec      storage.Spec
	ks        serde.Serde[K]
	vs        serde.Serde[V]
	retention time.Duration
	// windowSize in ms, 0 when unknown.
	windowSize int64
}

// Window returns a builder for the window store name, keeping windows for
// retention (at least window size + grace).
func Window[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V], retention time.Duration) *WindowBuilder[K, V] {
	return &WindowBuilder[K, V]{spec: storage.Spec{Name: name, Kind: storage.KindWindow, Logged: true}, ks: ks, vs: vs, retention: retention}
}

// TimestampedWindow is Window with values carrying their record timestamp.
func TimestampedWindow[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V], retention time.Duration) *WindowBuilder[K, ValueAndTimestamp[V]] {
	b := Window(name, ks, TimestampedSerde(vs), retention)
	b.spec.Timestamped = true
	return b
}

// WithCaching turns the record cache on or off.
func (b *WindowBuilder[K, V]) WithCaching(on bool) *WindowBuilder[K, V] {
	b.spec.Cached = on
	return b
}

// WithLogging turns the changelog on or off; config adds topic configs.
func (b *WindowBuilder[K, V]) WithLogging(on bool, config map[string]string) *WindowBuilder[K, V] {
	b.spec.Logged = on
	b.spec.LogConfig = config
	return b
}

// InMemory keeps the store in the Memory backend.
func (b *WindowBuilder[K, V]) InMemory(on bool) *WindowBuilder[K, V] {
	b.spec.InMemory = on
	return b
}

// Retention is how long windows are kept.
func (b *WindowBuilder[K, V]) Retention() time.Duration { return b.retention }

// WithWindowSize records the size of the store's windows, so queries can
// give each window's end (window start plus size).
func (b *WindowBuilder[K, V]) WithWindowSize(size time.Duration) *WindowBuilder[K, V] {
	b.windowSize = size.Milliseconds()
	return b
}

// Name implements Builder.
func (b *WindowBuilder[K, V]) Name() string { return b.spec.Name }

// storeSpec: window changelogs are compacted and deleted after the
// retention plus a day, as Kafka Streams configures them.
func (b *WindowBuilder[K, V]) storeSpec() storage.Spec {
	s := b.spec
	cfg := map[string]string{
		"cleanup.policy": "compact,delete",
		"retention.ms":   fmt.Sprint(b.retention.Milliseconds() + 24*3600*1000),
	}
	for k, v := range b.spec.LogConfig {
		cfg[k] = v
	}
	s.LogConfig = cfg
	return s
}

func (b *WindowBuilder[K, V]) build(env storage.Env) (storage.Store, error) {
	return b.buildWindows(env)
}

func (b *WindowBuilder[K, V]) buildWindows(env storage.Env) (*windowStore[K, V], error) {
	if b.retention <= 0 {
		return nil, fmt.Errorf("stores: window store %s needs a positive retention", b.spec.Name)
	}
	l, err := storage.NewLayers(b.spec, env)
	if err != nil {
		return nil, err
	}
	return &windowStore[K, V]{name: b.spec.Name, topic: l.Topic, under: l.BytesStore, layers: l, ks: b.ks, vs: b.vs,
		keys: windowKeys{segment: storage.SegmentInterval(b.retention)}, retention: b.retention.Milliseconds()}, nil
}
