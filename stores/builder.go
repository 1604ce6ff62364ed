package stores

import (
	"maps"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
)

// Builder declares a store for a topology (topology.Builder.AddStateStore,
// or a DSL operator given one): KeyValue, Window, Session and their
// timestamped forms build one instance of the store for each task that
// uses it. The runtime creates, changelogs, restores and commits the
// instances; a processor gets its task's instance from its context.
type Builder interface {
	// Name is the store's name.
	Name() string
	runtimeBuilder
}

// runtimeBuilder is what a builder gives the runtime (see runtime).
type runtimeBuilder interface {
	storeSpec() storage.Spec
	build(env storage.Env) (storage.Store, error)
	readOnly(bs storage.BytesStore, topic string) any
	serializeKey(key any, topic string) ([]byte, error)
	keyBytes(text, topic string) ([]byte, error)
	queryText(bs storage.BytesStore, topic, text string) (any, int64, bool, error)
}

// runtime is a builder as the runtime sees it (storage.Builder).
type runtime struct{ b Builder }

func (r runtime) Spec() storage.Spec                               { return r.b.storeSpec() }
func (r runtime) Build(env storage.Env) (storage.Store, error)     { return r.b.build(env) }
func (r runtime) ReadOnly(bs storage.BytesStore, topic string) any { return r.b.readOnly(bs, topic) }
func (r runtime) SerializeKey(key any, topic string) ([]byte, error) {
	return r.b.serializeKey(key, topic)
}
func (r runtime) KeyBytes(text, topic string) ([]byte, error) { return r.b.keyBytes(text, topic) }
func (r runtime) Public() any                                 { return r.b }
func (r runtime) QueryText(bs storage.BytesStore, topic, text string) (any, int64, bool, error) {
	return r.b.queryText(bs, topic, text)
}

// asOfQuerier is a builder whose stores answer as-of queries (versioned
// stores).
type asOfQuerier interface {
	queryAsOf(bs storage.BytesStore, topic, text string, asOf int64) (any, int64, int64, bool, error)
}

// QueryAsOf implements storage.AsOfQuerier: storage.ErrNotVersioned for a
// store that keeps no versions.
func (r runtime) QueryAsOf(bs storage.BytesStore, topic, text string, asOf int64) (any, int64, int64, bool, error) {
	q, ok := r.b.(asOfQuerier)
	if !ok {
		return nil, -1, 0, false, storage.ErrNotVersioned
	}
	return q.queryAsOf(bs, topic, text, asOf)
}

func init() {
	storage.FromPublic = func(b any) (storage.Builder, bool) {
		if pb, ok := b.(Builder); ok && pb != nil {
			return runtime{pb}, true
		}
		return nil, false
	}
}

// KeyValueBuilder builds typed key-value stores. By default a store is
// logged (changelog topic), not cached, and kept in Pebble.
type KeyValueBuilder[K, V any] struct {
	spec        storage.Spec
	ks          serde.Serde[K]
	vs          serde.Serde[V]
	timestamped bool // the typed values carry the timestamp prefix
}

// KeyValue returns a builder for the key-value store name.
func KeyValue[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V]) *KeyValueBuilder[K, V] {
	return &KeyValueBuilder[K, V]{spec: storage.Spec{Name: name, Kind: storage.KindKeyValue, Logged: true}, ks: ks, vs: vs}
}

// TimestampedKeyValue returns a builder for a key-value store whose values
// carry the timestamp of the record that wrote them (the DSL's tables).
func TimestampedKeyValue[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V]) *KeyValueBuilder[K, ValueAndTimestamp[V]] {
	b := KeyValue(name, ks, TimestampedSerde(vs))
	b.spec.Timestamped = true
	b.timestamped = true
	return b
}

// WithCaching turns the record cache on or off.
func (b *KeyValueBuilder[K, V]) WithCaching(on bool) *KeyValueBuilder[K, V] {
	b.spec.Cached = on
	return b
}

// WithLogging turns the changelog on or off; config adds changelog topic
// configs (nil for none).
func (b *KeyValueBuilder[K, V]) WithLogging(on bool, config map[string]string) *KeyValueBuilder[K, V] {
	b.spec.Logged = on
	b.spec.LogConfig = maps.Clone(config)
	return b
}

// InMemory keeps the store in the Memory backend instead of Pebble.
func (b *KeyValueBuilder[K, V]) InMemory(on bool) *KeyValueBuilder[K, V] {
	b.spec.InMemory = on
	return b
}

// WithTTL gives the store a time to live: an entry expires once the
// task's stream time (or the wall clock, with WallClockTime) reaches its
// timestamp plus d. The entry's timestamp is the one a timestamped store
// keeps with its value; a plain store stamps each write with the timestamp
// of the record being processed. An expired entry is deleted (a tombstone to
// the changelog in the same commit) and never read again; expiry costs what
// expires, never a scan of the store. d <= 0 turns it off.
func (b *KeyValueBuilder[K, V]) WithTTL(d time.Duration, clock ...TTLClock) *KeyValueBuilder[K, V] {
	b.spec.TTL = max(d, 0)
	b.spec.TTLClock = storage.StreamTime
	if len(clock) > 0 && clock[0] == WallClockTime {
		b.spec.TTLClock = storage.WallClockTime
	}
	b.spec.StampsValues = b.spec.TTL > 0 && !b.timestamped
	return b
}

// ExpireSilently makes a store with a time to live expire entries without
// telling its listeners: the entry goes from the store and its changelog,
// but a DSL table or aggregation sends no tombstone downstream (what it sent
// before stays as it was there).
func (b *KeyValueBuilder[K, V]) ExpireSilently() *KeyValueBuilder[K, V] {
	b.spec.TTLSilent = true
	return b
}

// Name implements Builder.
func (b *KeyValueBuilder[K, V]) Name() string { return b.spec.Name }

func (b *KeyValueBuilder[K, V]) storeSpec() storage.Spec {
	s := b.spec
	s.LogConfig = maps.Clone(b.spec.LogConfig)
	if s.StampsValues {
		s.Timestamped = true // below the typed layer the values are
	}
	return s
}

// Serdes returns the builder's key and value serdes.
func (b *KeyValueBuilder[K, V]) Serdes() (serde.Serde[K], serde.Serde[V]) { return b.ks, b.vs }

// build stacks the task's slice of the write set, the changelog, the
// cache and the time index (storage.Layers), then the typed layer.
func (b *KeyValueBuilder[K, V]) build(env storage.Env) (storage.Store, error) {
	spec := b.storeSpec()
	l, err := storage.NewLayers(spec, env)
	if err != nil {
		return nil, err
	}
	return &builtKV[K, V]{kvStore: kvStore[K, V]{name: spec.Name, topic: l.Topic, under: l.BytesStore, ks: b.ks, vs: b.vs}, layers: l}, nil
}

// builtKV is a task's instance of a key-value store: the typed layer over
// the byte layers.
type builtKV[K, V any] struct {
	kvStore[K, V]
	layers *storage.Layers
}

func (s *builtKV[K, V]) Flush() error { return s.layers.Flush() }
func (s *builtKV[K, V]) Discard()     { s.layers.Discard() }

func (s *builtKV[K, V]) Close() error {
	s.Discard()
	return nil
}

// SetFlushListener implements storage.CacheFlusher.
func (s *builtKV[K, V]) SetFlushListener(l storage.FlushListener, sendOld bool) bool {
	return s.layers.SetFlushListener(l, sendOld)
}

// SetExpiryListener and TTL implement storage.Expirer.
func (s *builtKV[K, V]) SetExpiryListener(l storage.ExpiryListener) { s.layers.SetExpiryListener(l) }
func (s *builtKV[K, V]) TTL() (time.Duration, storage.TTLClock)     { return s.layers.TTL() }

// Serdes returns the store's key and value serdes and the topic name they
// are called with.
func (s *builtKV[K, V]) Serdes() (serde.Serde[K], serde.Serde[V], string) { return s.ks, s.vs, s.topic }
