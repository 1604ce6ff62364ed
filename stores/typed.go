package stores

import (
	"encoding/binary"
	"fmt"
	"iter"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
)

// ReadOnlyKeyValueStore is the read side of a key-value store: what
// interactive queries get.
type ReadOnlyKeyValueStore[K, V any] interface {
	// Get returns the value of key and whether it exists.
	Get(key K) (V, bool, error)
	// Range iterates the keys from from to to, both included, in the byte
	// order of their serialized form.
	Range(from, to K) *Iterator[K, V]
	// ReverseRange is Range in descending order.
	ReverseRange(from, to K) *Iterator[K, V]
	// All iterates every key in ascending order.
	All() *Iterator[K, V]
	// ReverseAll iterates every key in descending order.
	ReverseAll() *Iterator[K, V]
	// ApproximateNumEntries estimates the number of keys.
	ApproximateNumEntries() (int64, error)
}

// KeyValueStore is a typed key-value state store of one task.
type KeyValueStore[K, V any] interface {
	ReadOnlyKeyValueStore[K, V]
	// Name is the store's name in the topology.
	Name() string
	// Put writes key = value.
	Put(key K, value V) error
	// PutIfAbsent writes key = value unless key exists; it returns the value
	// already there and true in that case.
	PutIfAbsent(key K, value V) (V, bool, error)
	// Delete removes key, returning the value it had and whether it existed.
	Delete(key K) (V, bool, error)
}

// Iterator walks typed key-value pairs. Close it when done, or range over
// Seq, which closes it at the end of the loop. After the walk, Err reports
// any failure (reading the store, or deserializing an entry).
type Iterator[K, V any] struct {
	it     storage.BytesIterator
	key    K
	value  V
	err    error
	kde    func([]byte) (K, error)
	vde    func([]byte) (V, error)
	closed bool
}

// Next moves to the next pair.
func (i *Iterator[K, V]) Next() bool {
	if i.err != nil || i.closed {
		return false
	}
	if !i.it.Next() {
		i.err = i.it.Err()
		return false
	}
	if i.key, i.err = i.kde(i.it.Key()); i.err != nil {
		return false
	}
	if i.value, i.err = i.vde(i.it.Value()); i.err != nil {
		return false
	}
	return true
}

// Key is the current key.
func (i *Iterator[K, V]) Key() K { return i.key }

// Value is the current value.
func (i *Iterator[K, V]) Value() V { return i.value }

// Err is the error that ended the walk, if any.
func (i *Iterator[K, V]) Err() error { return i.err }

// Close releases the iterator. It is safe to call more than once.
func (i *Iterator[K, V]) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	return i.it.Close()
}

// Seq returns the pairs as a range-over-func sequence; the iterator is
// closed when the loop ends, however it ends. Check Err afterwards.
func (i *Iterator[K, V]) Seq() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		defer i.Close()
		for i.Next() {
			if !yield(i.key, i.value) {
				return
			}
		}
	}
}

func errIterator[K, V any](err error) *Iterator[K, V] {
	return &Iterator[K, V]{it: storage.ErrIterator(err), err: err}
}

// ValueAndTimestamp is a value with the timestamp of the record that last
// wrote it: what the DSL's stores hold, so a table's records keep their
// timestamps, as Kafka Streams' timestamped stores.
type ValueAndTimestamp[V any] struct {
	Value     V
	Timestamp int64
}

// TimestampedSerde encodes ValueAndTimestamp[V] as Kafka Streams does: the
// timestamp in 8 big-endian bytes, then the value's bytes.
func TimestampedSerde[V any](s serde.Serde[V]) serde.Serde[ValueAndTimestamp[V]] {
	return tsSerde[V]{s}
}

type tsSerde[V any] struct{ inner serde.Serde[V] }

func (t tsSerde[V]) Serialize(topic string, v ValueAndTimestamp[V]) ([]byte, error) {
	b, err := t.inner.Serialize(topic, v.Value)
	if err != nil {
		return nil, err
	}
	return storage.AppendTimestamped(make([]byte, 0, 8+len(b)), v.Timestamp, b), nil
}

func (t tsSerde[V]) Deserialize(topic string, data []byte) (ValueAndTimestamp[V], error) {
	if len(data) < 8 {
		return ValueAndTimestamp[V]{}, fmt.Errorf("%w: timestamped value needs at least 8 bytes, got %d", serde.ErrSize, len(data))
	}
	v, err := t.inner.Deserialize(topic, data[8:])
	return ValueAndTimestamp[V]{Value: v, Timestamp: decodeTimestamp(data)}, err
}

func decodeTimestamp(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[:8])) }

// kvStore is the typed layer: serdes over a storage.BytesStore.
type kvStore[K, V any] struct {
	name  string
	topic string // given to the serdes: the changelog topic
	under storage.BytesStore
	ks    serde.Serde[K]
	vs    serde.Serde[V]
}

func (s *kvStore[K, V]) Name() string { return s.name }

func (s *kvStore[K, V]) key(k K) ([]byte, error) {
	b, err := s.ks.Serialize(s.topic, k)
	if err != nil {
		return nil, fmt.Errorf("stores: %s: serializing key: %w", s.name, err)
	}
	return b, nil
}

func (s *kvStore[K, V]) decode(b []byte) (V, error) {
	v, err := s.vs.Deserialize(s.topic, b)
	if err != nil {
		return v, fmt.Errorf("stores: %s: deserializing value: %w", s.name, err)
	}
	return v, nil
}

func (s *kvStore[K, V]) Get(k K) (V, bool, error) {
	var zero V
	kb, err := s.key(k)
	if err != nil {
		return zero, false, err
	}
	b, ok, err := s.under.Get(kb)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.decode(b)
	return v, err == nil, err
}

func (s *kvStore[K, V]) Put(k K, v V) error {
	kb, err := s.key(k)
	if err != nil {
		return err
	}
	vb, err := s.vs.Serialize(s.topic, v)
	if err != nil {
		return fmt.Errorf("stores: %s: serializing value: %w", s.name, err)
	}
	return s.under.Put(kb, vb)
}

func (s *kvStore[K, V]) PutIfAbsent(k K, v V) (V, bool, error) {
	old, ok, err := s.Get(k)
	if err != nil || ok {
		return old, ok, err
	}
	return old, false, s.Put(k, v)
}

// Delete writes a deletion even when the key is absent, as Kafka Streams
// does: the changelog and a cached table's downstream see the tombstone.
func (s *kvStore[K, V]) Delete(k K) (V, bool, error) {
	old, ok, err := s.Get(k)
	if err != nil {
		return old, ok, err
	}
	kb, err := s.key(k)
	if err != nil {
		return old, ok, err
	}
	return old, ok, s.under.Delete(kb)
}

func (s *kvStore[K, V]) iter(lower, upper []byte, reverse bool) *Iterator[K, V] {
	return &Iterator[K, V]{
		it:  s.under.Iter(lower, upper, reverse),
		kde: func(b []byte) (K, error) { return s.ks.Deserialize(s.topic, b) },
		vde: s.decode,
	}
}

func (s *kvStore[K, V]) Range(from, to K) *Iterator[K, V] {
	lo, err := s.key(from)
	if err != nil {
		return errIterator[K, V](err)
	}
	hi, err := s.key(to)
	if err != nil {
		return errIterator[K, V](err)
	}
	return s.iter(lo, append(hi, 0), false) // to is inclusive: stop before its successor
}

func (s *kvStore[K, V]) ReverseRange(from, to K) *Iterator[K, V] {
	lo, err := s.key(from)
	if err != nil {
		return errIterator[K, V](err)
	}
	hi, err := s.key(to)
	if err != nil {
		return errIterator[K, V](err)
	}
	return s.iter(lo, append(hi, 0), true)
}

func (s *kvStore[K, V]) All() *Iterator[K, V]        { return s.iter(nil, nil, false) }
func (s *kvStore[K, V]) ReverseAll() *Iterator[K, V] { return s.iter(nil, nil, true) }

func (s *kvStore[K, V]) ApproximateNumEntries() (int64, error) {
	return s.under.ApproximateNumEntries()
}

// ValuesView presents a timestamped store as a plain read-only store of its
// values, as interactive queries on DSL stores see them.
func ValuesView[K, V any](s ReadOnlyKeyValueStore[K, ValueAndTimestamp[V]]) ReadOnlyKeyValueStore[K, V] {
	return valuesView[K, V]{s}
}

type valuesView[K, V any] struct {
	s ReadOnlyKeyValueStore[K, ValueAndTimestamp[V]]
}

func (v valuesView[K, V]) Get(k K) (V, bool, error) {
	x, ok, err := v.s.Get(k)
	return x.Value, ok, err
}

func (v valuesView[K, V]) wrap(it *Iterator[K, ValueAndTimestamp[V]]) *Iterator[K, V] {
	return &Iterator[K, V]{
		it:  it.it,
		kde: it.kde,
		vde: func(b []byte) (V, error) {
			x, err := it.vde(b)
			return x.Value, err
		},
	}
}

func (v valuesView[K, V]) Range(from, to K) *Iterator[K, V] { return v.wrap(v.s.Range(from, to)) }
func (v valuesView[K, V]) ReverseRange(from, to K) *Iterator[K, V] {
	return v.wrap(v.s.ReverseRange(from, to))
}
func (v valuesView[K, V]) All() *Iterator[K, V]        { return v.wrap(v.s.All()) }
func (v valuesView[K, V]) ReverseAll() *Iterator[K, V] { return v.wrap(v.s.ReverseAll()) }
func (v valuesView[K, V]) ApproximateNumEntries() (int64, error) {
	return v.s.ApproximateNumEntries()
}

// ErrClosed is returned by a store, or an interactive query's view of one,
// used after the runtime closed it (the app stopped).
var ErrClosed = closedError()

func closedError() error { return storage.ErrClosed }
