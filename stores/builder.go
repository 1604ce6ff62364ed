package stores

import (
	"fmt"
	"maps"
	"time"

	"github.com/eddy-go/eddy/serde"
)

// Kind is the shape of a store.
type Kind int

// The kinds of store.
const (
	KindKeyValue Kind = iota
	KindWindow
	KindSession
)

func (k Kind) String() string {
	switch k {
	case KindWindow:
		return "window"
	case KindSession:
		return "session"
	}
	return "key-value"
}

// Spec describes a store to the runtime: what to create, changelog and
// restore.
type Spec struct {
	Name        string
	Kind        Kind
	Logged      bool              // has a changelog topic
	LogConfig   map[string]string // extra changelog topic configs
	Cached      bool              // uses the thread's record cache
	InMemory    bool              // Memory backend instead of Pebble
	Timestamped bool              // values carry the 8-byte timestamp prefix
	// TTL, when positive, expires key-value entries that old (see
	// KeyValueBuilder.WithTTL), measured in TTLClock.
	TTL      time.Duration
	TTLClock TTLClock
	// TTLSilent: expiries reach the changelog but no listener (a DSL
	// table sends no tombstone downstream).
	TTLSilent bool
	// StampsValues: the store adds the timestamp prefix below the typed
	// layer itself (a plain store with a TTL); restore and queries treat
	// its values as timestamped.
	StampsValues bool
}

// Env is what a task gives a store builder.
type Env struct {
	Task string // task id, "<subtopology>_<partition>"
	// WriteSet is where the store's writes go until commit: the thread's
	// write set over the backend the Spec asks for.
	WriteSet *WriteSet
	// Cache is the thread's record cache; nil disables caching.
	Cache *Cache
	// Changelog receives the store's writes; nil disables logging.
	Changelog ChangelogWriter
	// Topic is the name given to the serdes: the changelog topic
	// ("<application>-<store>-changelog"), or the store name when the store
	// is not logged.
	Topic string
	// Timestamp returns the timestamp of the record being processed.
	Timestamp func() int64
	// StreamTime returns the task's stream time (-1 before any record);
	// stores with a time to live expire by it.
	StreamTime func() int64
}

// Builder builds one instance of a store for each task that uses it.
type Builder interface {
	Spec() Spec
	Build(env Env) (Store, error)
}

// Store is a built store as the runtime sees it. The value Build returns
// also implements the typed interface (KeyValueStore[K, V], …) processors
// use.
type Store interface {
	Name() string
	// Flush writes cached writes down to the write set (every commit).
	Flush() error
	// Discard drops cached writes that were not flushed (an abort).
	Discard()
	Close() error
}

// CacheFlusher is implemented by cached stores: DSL processors forward a
// table's updates when the cache flushes them rather than on every write.
type CacheFlusher interface {
	// SetFlushListener installs l; sendOld asks for the previous values.
	// It returns false when the store is not cached (forward directly then).
	SetFlushListener(l FlushListener, sendOld bool) bool
}

// KeyValueBuilder builds typed key-value stores. By default a store is
// logged (changelog topic), not cached, and kept in Pebble.
type KeyValueBuilder[K, V any] struct {
	spec        Spec
	ks          serde.Serde[K]
	vs          serde.Serde[V]
	timestamped bool // the typed values carry the timestamp prefix
}

// KeyValue returns a builder for the key-value store name.
func KeyValue[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V]) *KeyValueBuilder[K, V] {
	return &KeyValueBuilder[K, V]{spec: Spec{Name: name, Kind: KindKeyValue, Logged: true}, ks: ks, vs: vs}
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
	b.spec.TTLClock = StreamTime
	if len(clock) > 0 {
		b.spec.TTLClock = clock[0]
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

// Spec implements Builder.
func (b *KeyValueBuilder[K, V]) Spec() Spec {
	s := b.spec
	s.LogConfig = maps.Clone(b.spec.LogConfig)
	if s.StampsValues {
		s.Timestamped = true // below the typed layer the values are
	}
	return s
}

// Serdes returns the builder's key and value serdes.
func (b *KeyValueBuilder[K, V]) Serdes() (serde.Serde[K], serde.Serde[V]) { return b.ks, b.vs }

// Build implements Builder: the task's slice of the write set, then the
// changelog layer, the cache layer and the typed layer.
func (b *KeyValueBuilder[K, V]) Build(env Env) (Store, error) {
	spec := b.Spec()
	bs, cached, topic, err := layers(spec, env)
	if err != nil {
		return nil, err
	}
	s := &builtKV[K, V]{
		kvStore: kvStore[K, V]{name: spec.Name, topic: topic, under: bs, ks: b.ks, vs: b.vs},
		cached:  cached,
	}
	if spec.TTL > 0 {
		index := newTaskSlice(env.WriteSet, env.Task, spec.Name+ttlSuffix)
		s.ttl = newTTLLayer(bs, index, spec.TTL, spec.TTLClock, spec.StampsValues, &storeClock{record: env.Timestamp}, env.StreamTime)
		s.ttl.silent = spec.TTLSilent
		s.under = s.ttl
	}
	return s, nil
}

// layers stacks a store's byte-level layers: the task's slice of the write
// set, the changelog, the record cache.
func layers(spec Spec, env Env) (BytesStore, *caching, string, error) {
	if err := validName("store name", spec.Name); err != nil {
		return nil, nil, "", err
	}
	if err := validName("task id", env.Task); err != nil {
		return nil, nil, "", err
	}
	if env.WriteSet == nil {
		return nil, nil, "", fmt.Errorf("stores: building %s for task %s: no write set", spec.Name, env.Task)
	}
	clock := &storeClock{record: env.Timestamp}
	var bs BytesStore = newTaskSlice(env.WriteSet, env.Task, spec.Name)
	if spec.Logged && env.Changelog != nil {
		bs = &changelogging{BytesStore: bs, log: env.Changelog, timestamped: spec.Timestamped, clock: clock}
	}
	var cached *caching
	if spec.Cached && env.Cache != nil {
		cached = newCaching(bs, env.Cache, clock)
		bs = cached
	}
	topic := env.Topic
	if topic == "" {
		topic = spec.Name
	}
	return bs, cached, topic, nil
}

type builtKV[K, V any] struct {
	kvStore[K, V]
	cached *caching
	ttl    *ttlLayer // nil without a time to live
}

func (s *builtKV[K, V]) Flush() error { return s.under.Flush() }

func (s *builtKV[K, V]) Discard() {
	if s.cached != nil {
		s.cached.nc.clear()
	}
	if s.ttl != nil {
		s.ttl.discard()
	}
}

// SetExpiryListener implements Expirer; without a time to live it does
// nothing.
func (s *builtKV[K, V]) SetExpiryListener(l ExpiryListener) {
	if s.ttl != nil {
		s.ttl.listener = l
	}
}

// TTL implements Expirer: 0 without a time to live.
func (s *builtKV[K, V]) TTL() (time.Duration, TTLClock) {
	if s.ttl == nil {
		return 0, StreamTime
	}
	return time.Duration(s.ttl.ttl) * time.Millisecond, s.ttl.clockKind
}

func (s *builtKV[K, V]) Close() error {
	s.Discard()
	return nil
}

func (s *builtKV[K, V]) SetFlushListener(l FlushListener, sendOld bool) bool {
	if s.cached == nil {
		return false
	}
	s.cached.listener = l
	s.cached.sendOld = sendOld
	return true
}

// Serdes returns the store's key and value serdes and the topic name they
// are called with.
func (s *builtKV[K, V]) Serdes() (serde.Serde[K], serde.Serde[V], string) { return s.ks, s.vs, s.topic }

// ReadOnlyKeyValue returns a read-only typed view of the committed state of
// one store of one task in b, as interactive queries read it.
func ReadOnlyKeyValue[K, V any](b Backend, task, name, topic string, ks serde.Serde[K], vs serde.Serde[V]) ReadOnlyKeyValueStore[K, V] {
	return &kvStore[K, V]{name: name, topic: topic, under: CommittedView(b, task, name), ks: ks, vs: vs}
}
