package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
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
	// stores.KeyValueBuilder.WithTTL), measured in TTLClock.
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

// Builder is a store builder as the runtime sees it: the public builders of
// package stores (KeyValue, Window, Session, …) each give one through
// FromPublic.
type Builder interface {
	Spec() Spec
	// Build builds the store's instance for one task. The value also
	// implements the typed interface processors use
	// (stores.KeyValueStore[K, V], …).
	Build(env Env) (Store, error)
	// ReadOnly returns the store's typed read-only view over bs
	// (stores.ReadOnlyKeyValueStore[K, V], stores.ReadOnlyWindowStore[K, V]
	// or stores.ReadOnlySessionStore[K, V]); topic is the name its serdes
	// are called with.
	ReadOnly(bs BytesStore, topic string) any
	// SerializeKey serializes key, which must have the store's key type,
	// as the store does.
	SerializeKey(key any, topic string) ([]byte, error)
	// KeyBytes parses text as the store's key type (strings as they are,
	// numbers in decimal, other types as JSON) and serializes it with the
	// store's key serde, as the store and the partitioner see it.
	KeyBytes(text, topic string) ([]byte, error)
	// QueryText reads the key given as text from bs. Key-value stores
	// answer the value (for a timestamped store, without its timestamp)
	// and its timestamp (-1 when the store keeps none); window and session
	// stores answer the key's windows as []stores.WindowAnswer, found when there
	// is at least one.
	QueryText(bs BytesStore, topic, text string) (value any, timestamp int64, found bool, err error)
	// Public is the builder the topology was given.
	Public() any
}

// AsOfQuerier is a Builder whose stores may answer as-of queries: the key
// given as text, its value valid at asOf, when that version became valid
// and when it stopped (math.MaxInt64: the latest). Stores that keep no
// versions answer ErrNotVersioned.
type AsOfQuerier interface {
	QueryAsOf(bs BytesStore, topic, text string, asOf int64) (value any, from, to int64, found bool, err error)
}

// ErrNotVersioned is an as-of query of a store that keeps no versions.
var ErrNotVersioned = errors.New("the store keeps no versions (asOf needs a versioned store)")

// FromPublic returns the runtime side of a public store builder (a
// stores.Builder). Package stores sets it: the runtime side cannot be an
// exported method of the public builders without putting this package's
// types in eddy's public API.
var FromPublic func(b any) (Builder, bool)

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

// Layers is the byte-level stack under one store instance: the task's
// slice of the write set, the changelog, the record cache and, for a
// key-value store with a time to live, the time index. The typed layer of
// package stores reads and writes the top of it.
type Layers struct {
	BytesStore        // the top layer
	Topic      string // the name the store's serdes are called with
	cached     *caching
	ttl        *ttlLayer
}

// NewLayers stacks a store's byte-level layers as spec asks.
func NewLayers(spec Spec, env Env) (*Layers, error) {
	if err := validName("store name", spec.Name); err != nil {
		return nil, err
	}
	if err := validName("task id", env.Task); err != nil {
		return nil, err
	}
	if env.WriteSet == nil {
		return nil, fmt.Errorf("stores: building %s for task %s: no write set", spec.Name, env.Task)
	}
	clock := &storeClock{record: env.Timestamp}
	l := &Layers{Topic: env.Topic}
	if l.Topic == "" {
		l.Topic = spec.Name
	}
	var bs BytesStore = newTaskSlice(env.WriteSet, env.Task, spec.Name)
	if spec.Logged && env.Changelog != nil {
		bs = &changelogging{BytesStore: bs, log: env.Changelog, timestamped: spec.Timestamped, clock: clock}
	}
	if spec.Cached && env.Cache != nil {
		l.cached = newCaching(bs, env.Cache, clock)
		bs = l.cached
	}
	if spec.TTL > 0 && spec.Kind == KindKeyValue {
		index := newTaskSlice(env.WriteSet, env.Task, spec.Name+ttlSuffix)
		l.ttl = newTTLLayer(bs, index, spec.TTL, spec.TTLClock, spec.StampsValues, &storeClock{record: env.Timestamp}, env.StreamTime)
		l.ttl.silent = spec.TTLSilent
		bs = l.ttl
	}
	l.BytesStore = bs
	return l, nil
}

// Discard drops what the layers hold for the current commit that was not
// flushed (an abort).
func (l *Layers) Discard() {
	if l == nil {
		return // a read-only view
	}
	if l.cached != nil {
		l.cached.nc.clear()
	}
	if l.ttl != nil {
		l.ttl.discard()
	}
}

// SetFlushListener implements CacheFlusher.
func (l *Layers) SetFlushListener(fl FlushListener, sendOld bool) bool {
	if l == nil || l.cached == nil {
		return false
	}
	l.cached.listener = fl
	l.cached.sendOld = sendOld
	return true
}

// SetExpiryListener implements Expirer; without a time to live it does
// nothing.
func (l *Layers) SetExpiryListener(el ExpiryListener) {
	if l.ttl != nil {
		l.ttl.listener = el
	}
}

// TTL implements Expirer: 0 without a time to live.
func (l *Layers) TTL() (time.Duration, TTLClock) {
	if l.ttl == nil {
		return 0, StreamTime
	}
	return time.Duration(l.ttl.ttl) * time.Millisecond, l.ttl.clockKind
}

// decodeTimestamp reads the timestamp prefix of a timestamped value.
func decodeTimestamp(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[:8])) }
