package stores

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
)

// NoValidTo is the ValidTo of a key's latest version: valid until a newer
// one arrives.
const NoValidTo int64 = math.MaxInt64

// VersionedRecord is one version of a key's value: Value, valid from
// Timestamp (included) to ValidTo (excluded; NoValidTo for the latest).
type VersionedRecord[V any] struct {
	Value     V
	Timestamp int64
	ValidTo   int64
}

// ReadOnlyVersionedKeyValueStore is the read side of a versioned key-value
// store: what interactive queries get.
type ReadOnlyVersionedKeyValueStore[K, V any] interface {
	// Get returns the key's latest version; false when the key has none
	// or its latest version is a deletion.
	Get(key K) (VersionedRecord[V], bool, error)
	// GetAsOf returns the version of the key that was valid at asOf;
	// false when there was none, it was a deletion, or asOf is older than
	// the history the store keeps (stream time minus the history
	// retention) — but the key's latest version never expires: it answers
	// any asOf from its timestamp on.
	GetAsOf(key K, asOf int64) (VersionedRecord[V], bool, error)
	// Versions returns the key's versions valid at some time in [from,
	// to], oldest first when ascending, newest first otherwise, deletions
	// left out (Kafka Streams' MultiVersionedKeyQuery).
	Versions(key K, from, to int64, ascending bool) ([]VersionedRecord[V], error)
}

// VersionedKeyValueStore keeps, for each key, its values over time: every
// put is a version valid from its timestamp until the next version's, and
// a delete is a version with no value. Versions older than the history
// retention (their validity ended before stream time minus the retention)
// are dropped, and a put older than that is refused — Kafka Streams'
// versioned store (KIP-889).
type VersionedKeyValueStore[K, V any] interface {
	ReadOnlyVersionedKeyValueStore[K, V]
	// Name is the store's name in the topology.
	Name() string
	// Put adds value as the key's version from timestamp. It returns when
	// that version stops being valid (NoValidTo when it is the latest),
	// and false, with nothing written, when timestamp is older than stream
	// time minus the history retention.
	Put(key K, value V, timestamp int64) (validTo int64, put bool, err error)
	// Delete adds a deletion of the key from timestamp: a version with no
	// value. Like Put, it returns when that stops (NoValidTo when it is the
	// latest), and false, with nothing written, when timestamp is older
	// than stream time minus the history retention. (GetAsOf the same
	// timestamp first tells what it deletes.)
	Delete(key K, timestamp int64) (validTo int64, deleted bool, err error)
	// StreamTime returns the largest timestamp put so far (math.MinInt64
	// before any).
	StreamTime() (int64, error)
}

// VersionedKeyValueBuilder builds versioned key-value stores. A store is
// logged (its changelog topic holds each version under the key and its
// timestamp, compacted) and kept in Pebble; it is never cached.
type VersionedKeyValueBuilder[K, V any] struct {
	spec      storage.Spec
	ks        serde.Serde[K]
	vs        serde.Serde[V]
	retention int64
}

// VersionedKeyValue returns a builder for the versioned key-value store
// name, keeping history for historyRetention of stream time.
func VersionedKeyValue[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V], historyRetention time.Duration) *VersionedKeyValueBuilder[K, V] {
	return &VersionedKeyValueBuilder[K, V]{spec: storage.Spec{Name: name, Kind: storage.KindKeyValue, Logged: true},
		ks: ks, vs: vs, retention: historyRetention.Milliseconds()}
}

// WithLogging turns the changelog on or off; config adds changelog topic
// configs (nil for none).
func (b *VersionedKeyValueBuilder[K, V]) WithLogging(on bool, config map[string]string) *VersionedKeyValueBuilder[K, V] {
	b.spec.Logged = on
	b.spec.LogConfig = config
	return b
}

// InMemory keeps the store in the Memory backend instead of Pebble.
func (b *VersionedKeyValueBuilder[K, V]) InMemory(on bool) *VersionedKeyValueBuilder[K, V] {
	b.spec.InMemory = on
	return b
}

// Name implements Builder.
func (b *VersionedKeyValueBuilder[K, V]) Name() string { return b.spec.Name }

// HistoryRetention is how long (in stream time) the store keeps versions
// that are no longer the latest.
func (b *VersionedKeyValueBuilder[K, V]) HistoryRetention() time.Duration {
	return time.Duration(b.retention) * time.Millisecond
}

// Serdes returns the builder's key and value serdes.
func (b *VersionedKeyValueBuilder[K, V]) Serdes() (serde.Serde[K], serde.Serde[V]) { return b.ks, b.vs }

func (b *VersionedKeyValueBuilder[K, V]) storeSpec() storage.Spec {
	s := b.spec
	s.Cached = false
	return s
}

func (b *VersionedKeyValueBuilder[K, V]) build(env storage.Env) (storage.Store, error) {
	if b.retention < 0 {
		return nil, fmt.Errorf("versioned store %q: the history retention must not be negative", b.spec.Name)
	}
	spec := b.storeSpec()
	l, err := storage.NewLayers(spec, env)
	if err != nil {
		return nil, err
	}
	return &builtVersioned[K, V]{versionedStore: b.view(l.BytesStore, l.Topic), layers: l}, nil
}

func (b *VersionedKeyValueBuilder[K, V]) view(bs storage.BytesStore, topic string) *versionedStore[K, V] {
	return &versionedStore[K, V]{name: b.spec.Name, topic: topic, ks: b.ks, vs: b.vs,
		v: &versions{under: bs, retention: b.retention}}
}

func (b *VersionedKeyValueBuilder[K, V]) readOnly(bs storage.BytesStore, topic string) any {
	return ReadOnlyVersionedKeyValueStore[K, V](b.view(bs, topic))
}

func (b *VersionedKeyValueBuilder[K, V]) serializeKey(key any, topic string) ([]byte, error) {
	return serializeAny(b.spec.Name, b.ks, key, topic)
}

func (b *VersionedKeyValueBuilder[K, V]) keyBytes(text, topic string) ([]byte, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, err
	}
	return b.ks.Serialize(topic, k)
}

// queryText answers the key's latest value and its timestamp.
func (b *VersionedKeyValueBuilder[K, V]) queryText(bs storage.BytesStore, topic, text string) (any, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, false, err
	}
	r, ok, err := b.view(bs, topic).Get(k)
	if err != nil || !ok {
		return nil, -1, false, err
	}
	return r.Value, r.Timestamp, true, nil
}

// queryAsOf: see storage.AsOfQuerier.
func (b *VersionedKeyValueBuilder[K, V]) queryAsOf(bs storage.BytesStore, topic, text string, asOf int64) (any, int64, int64, bool, error) {
	k, err := ParseText[K](text)
	if err != nil {
		return nil, -1, 0, false, err
	}
	r, ok, err := b.view(bs, topic).GetAsOf(k, asOf)
	if err != nil || !ok {
		return nil, -1, 0, false, err
	}
	return r.Value, r.Timestamp, r.ValidTo, true, nil
}

// builtVersioned is a task's instance of a versioned store.
type builtVersioned[K, V any] struct {
	*versionedStore[K, V]
	layers *storage.Layers
}

func (s *builtVersioned[K, V]) Flush() error {
	if err := s.v.saveStreamTime(); err != nil {
		return err
	}
	return s.layers.Flush()
}

// Discard drops what was not flushed; stream time is read again from the
// store.
func (s *builtVersioned[K, V]) Discard() {
	s.layers.Discard()
	s.v.loaded = false
}

func (s *builtVersioned[K, V]) Close() error {
	s.Discard()
	return nil
}

// versionedStore is the typed layer of a versioned store.
type versionedStore[K, V any] struct {
	name  string
	topic string
	ks    serde.Serde[K]
	vs    serde.Serde[V]
	v     *versions
}

func (s *versionedStore[K, V]) Name() string { return s.name }

func (s *versionedStore[K, V]) key(k K) ([]byte, error) {
	b, err := s.ks.Serialize(s.topic, k)
	if err != nil {
		return nil, fmt.Errorf("store %s: serializing key: %w", s.name, err)
	}
	return b, nil
}

func (s *versionedStore[K, V]) record(v version) (VersionedRecord[V], error) {
	val, err := s.vs.Deserialize(s.topic, v.value)
	if err != nil {
		return VersionedRecord[V]{}, fmt.Errorf("store %s: deserializing a value: %w", s.name, err)
	}
	return VersionedRecord[V]{Value: val, Timestamp: v.from, ValidTo: v.to}, nil
}

func (s *versionedStore[K, V]) Put(key K, value V, ts int64) (int64, bool, error) {
	kb, err := s.key(key)
	if err != nil {
		return 0, false, err
	}
	vb, err := s.vs.Serialize(s.topic, value)
	if err != nil {
		return 0, false, fmt.Errorf("store %s: serializing a value: %w", s.name, err)
	}
	if vb == nil {
		vb = []byte{} // a value, not a deletion
	}
	return s.v.put(kb, vb, ts)
}

func (s *versionedStore[K, V]) Delete(key K, ts int64) (int64, bool, error) {
	kb, err := s.key(key)
	if err != nil {
		return 0, false, err
	}
	return s.v.put(kb, nil, ts)
}

func (s *versionedStore[K, V]) Get(key K) (VersionedRecord[V], bool, error) {
	return s.GetAsOf(key, NoValidTo-1)
}

func (s *versionedStore[K, V]) GetAsOf(key K, asOf int64) (VersionedRecord[V], bool, error) {
	kb, err := s.key(key)
	if err != nil {
		return VersionedRecord[V]{}, false, err
	}
	v, ok, err := s.v.asOf(kb, asOf)
	if err != nil || !ok || v.value == nil {
		return VersionedRecord[V]{}, false, err
	}
	r, err := s.record(v)
	return r, err == nil, err
}

func (s *versionedStore[K, V]) Versions(key K, from, to int64, ascending bool) ([]VersionedRecord[V], error) {
	kb, err := s.key(key)
	if err != nil {
		return nil, err
	}
	vs, err := s.v.between(kb, from, to)
	if err != nil {
		return nil, err
	}
	out := make([]VersionedRecord[V], 0, len(vs))
	for _, v := range vs {
		if v.value == nil {
			continue
		}
		r, err := s.record(v)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if !ascending {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

func (s *versionedStore[K, V]) StreamTime() (int64, error) { return s.v.streamTime() }

// versions is a versioned store at the byte level, over a key-value byte
// store (so the changelog, restore, standbys and exactly-once are those of
// key-value stores). Its entries:
//
//	'v' len(key) key from   -> to, then 1 and the value (0: a deletion)
//	'x' to len(key) key from -> (empty): the index of versions by the end
//	                            of their validity, for dropping them
//	'm'                      -> stream time
//
// with len as 4 big-endian bytes and times as big-endian uint64 of the
// time with its sign bit flipped, so byte order is time order.
type versions struct {
	under     storage.BytesStore
	retention int64
	// st is stream time once loaded from 'm' (loaded), dirty when it moved
	// since it was saved.
	st            int64
	loaded, dirty bool
}

// version is one version of a key: value valid in [from, to); value nil
// for a deletion.
type version struct {
	from, to int64
	value    []byte
}

var metaKey = []byte{'m'}

func orderedTime(t int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t)^(1<<63))
}

func fromOrdered(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// versionStart reads the start time at the end of version key k, whose
// key prefix is p bytes long.
func versionStart(k []byte, p int) (int64, error) {
	if len(k) != p+8 {
		return 0, errCorruptVersion
	}
	return fromOrdered(k[p:]), nil
}

// keyPrefix is 'v' len(key) key.
func keyPrefix(key []byte) []byte {
	p := make([]byte, 0, 5+len(key)+8)
	p = append(p, 'v')
	p = binary.BigEndian.AppendUint32(p, uint32(len(key)))
	return append(p, key...)
}

func versionKey(key []byte, from int64) []byte {
	return append(keyPrefix(key), orderedTime(from)...)
}

func indexKey(to int64, key []byte, from int64) []byte {
	k := append([]byte{'x'}, orderedTime(to)...)
	k = binary.BigEndian.AppendUint32(k, uint32(len(key)))
	k = append(k, key...)
	return append(k, orderedTime(from)...)
}

func encodeVersion(to int64, value []byte) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(value)), uint64(to))
	if value == nil {
		return append(b, 0)
	}
	return append(append(b, 1), value...)
}

var errCorruptVersion = errors.New("corrupt version entry")

func decodeVersion(from int64, b []byte) (version, error) {
	if len(b) < 9 || b[8] > 1 {
		return version{}, errCorruptVersion
	}
	v := version{from: from, to: int64(binary.BigEndian.Uint64(b))}
	if b[8] == 1 {
		v.value = append([]byte{}, b[9:]...) // the iterator's bytes are its own
	}
	return v, nil
}

func (s *versions) streamTime() (int64, error) {
	if s.loaded {
		return s.st, nil
	}
	b, ok, err := s.under.Get(metaKey)
	if err != nil {
		return 0, err
	}
	s.st, s.loaded, s.dirty = math.MinInt64, true, false
	if ok && len(b) == 8 {
		s.st = int64(binary.BigEndian.Uint64(b))
	}
	return s.st, nil
}

func (s *versions) saveStreamTime() error {
	if !s.loaded || !s.dirty {
		return nil
	}
	s.dirty = false
	return s.under.Put(metaKey, binary.BigEndian.AppendUint64(nil, uint64(s.st)))
}

// horizon is the oldest time the store answers for: stream time minus the
// history retention (math.MinInt64 before any put).
func (s *versions) horizon() (int64, error) {
	st, err := s.streamTime()
	if err != nil || st == math.MinInt64 {
		return math.MinInt64, err
	}
	if st < math.MinInt64+s.retention {
		return math.MinInt64, nil
	}
	return st - s.retention, nil
}

// at returns the key's version with the largest start not after t.
func (s *versions) at(key []byte, t int64) (version, bool, error) {
	p := keyPrefix(key)
	upper := versionKey(key, t)
	upper = append(upper, 0) // include the version starting at t
	it := s.under.Iter(p, upper, true)
	defer it.Close()
	if !it.Next() {
		return version{}, false, it.Err()
	}
	from, err := versionStart(it.Key(), len(p))
	if err != nil {
		return version{}, false, err
	}
	v, err := decodeVersion(from, it.Value())
	return v, err == nil, err
}

// next returns the start of the key's first version starting after t.
func (s *versions) next(key []byte, t int64) (int64, bool, error) {
	p := keyPrefix(key)
	lower := append(versionKey(key, t), 0)
	upper := append(bytes.Clone(p), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	it := s.under.Iter(lower, upper, false)
	defer it.Close()
	if !it.Next() {
		return 0, false, it.Err()
	}
	from, err := versionStart(it.Key(), len(p))
	return from, err == nil, err
}

// write stores version v of key, keeping the index of its end.
func (s *versions) write(key []byte, v version, oldTo int64) error {
	if oldTo != v.to && oldTo != NoValidTo {
		if err := s.under.Delete(indexKey(oldTo, key, v.from)); err != nil {
			return err
		}
	}
	if v.to != NoValidTo && oldTo != v.to {
		if err := s.under.Put(indexKey(v.to, key, v.from), []byte{}); err != nil {
			return err
		}
	}
	return s.under.Put(versionKey(key, v.from), encodeVersion(v.to, v.value))
}

// put adds value (nil: a deletion) as key's version from ts. It returns
// the new version's end, and false when ts is older than the history.
func (s *versions) put(key, value []byte, ts int64) (int64, bool, error) {
	h, err := s.horizon()
	if err != nil {
		return 0, false, err
	}
	if ts < h {
		return 0, false, nil
	}
	prev, found, err := s.at(key, ts)
	if err != nil {
		return 0, false, err
	}
	nv := version{from: ts, value: value}
	switch {
	case found && prev.to > ts && prev.from == ts: // the same start: the value is replaced
		nv.to = prev.to
		if err := s.write(key, nv, prev.to); err != nil {
			return 0, false, err
		}
		return nv.to, true, s.advance(ts)
	case found && prev.to > ts: // prev ends where the new version starts
		nv.to = prev.to
		oldTo := prev.to
		prev.to = ts
		if err := s.write(key, prev, oldTo); err != nil {
			return 0, false, err
		}
	default:
		// Before the key's first version (or after one that ended, which
		// only a version starting later can end): valid until the next.
		n, ok, err := s.next(key, ts)
		if err != nil {
			return 0, false, err
		}
		nv.to = NoValidTo
		if ok {
			nv.to = n
		}
	}
	if err := s.write(key, nv, NoValidTo); err != nil {
		return 0, false, err
	}
	return nv.to, true, s.advance(ts)
}

// advance moves stream time to ts when it is later, and drops the versions
// whose validity ended before the history now kept.
func (s *versions) advance(ts int64) error {
	st, err := s.streamTime()
	if err != nil || ts <= st {
		return err
	}
	s.st, s.dirty = ts, true
	h, err := s.horizon()
	if err != nil {
		return err
	}
	// Versions ending before the horizon answer no query.
	it := s.under.Iter([]byte{'x'}, append([]byte{'x'}, orderedTime(h)...), false)
	var drop [][]byte
	for it.Next() {
		drop = append(drop, bytes.Clone(it.Key()))
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return err
	}
	for i := len(drop) - 1; i >= 0; i-- {
		k := drop[i]
		if len(k) < 1+8+4+8 {
			return errCorruptVersion
		}
		n := binary.BigEndian.Uint32(k[9:13])
		if uint32(len(k)) != 13+n+8 {
			return errCorruptVersion
		}
		key, from := k[13:13+n], fromOrdered(k[13+n:])
		if err := s.under.Delete(versionKey(key, from)); err != nil {
			return err
		}
		if err := s.under.Delete(k); err != nil {
			return err
		}
	}
	// The end of a dropped version is also the time the version after it
	// starts, which stays: at(t) for t past the horizon never needs it.
	return nil
}

// asOf returns the key's version valid at t: false when there is none, or
// t is older than the history kept — unless the key's latest version (a
// value) was valid then: the latest version never expires, as in Kafka
// Streams.
func (s *versions) asOf(key []byte, t int64) (version, bool, error) {
	h, err := s.horizon()
	if err != nil {
		return version{}, false, err
	}
	if t < h {
		v, ok, err := s.at(key, NoValidTo-1)
		if err != nil || !ok || v.to != NoValidTo || v.from > t {
			return version{}, false, err
		}
		return v, true, nil
	}
	v, ok, err := s.at(key, t)
	if err != nil || !ok || t >= v.to {
		return version{}, false, err
	}
	return v, true, nil
}

// between returns the key's versions valid at some time in [from, to],
// oldest first (deletions included).
func (s *versions) between(key []byte, from, to int64) ([]version, error) {
	if to < from {
		return nil, nil
	}
	h, err := s.horizon()
	if err != nil {
		return nil, err
	}
	if to < h {
		// Before the history: only the latest version, which never expires.
		v, ok, err := s.at(key, NoValidTo-1)
		if err != nil || !ok || v.to != NoValidTo || v.from > to {
			return nil, err
		}
		return []version{v}, nil
	}
	from = max(from, h)
	// The version valid at from (it may start before), then every version
	// starting in (from, to].
	var out []version
	first, ok, err := s.at(key, from)
	if err != nil {
		return nil, err
	}
	if ok && first.to > from {
		out = append(out, first)
	}
	p := keyPrefix(key)
	lower := append(versionKey(key, from), 0)
	upper := append(versionKey(key, to), 0)
	it := s.under.Iter(lower, upper, false)
	defer it.Close()
	for it.Next() {
		from, err := versionStart(it.Key(), len(p))
		if err != nil {
			return nil, err
		}
		v, err := decodeVersion(from, it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, it.Err()
}
