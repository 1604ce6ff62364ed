package storage

import "fmt"

// BytesStore is the byte-level key-value store of one store of one task.
// The layers of a store (caching, changelogging, the task's slice of the
// backend) are BytesStores wrapped around each other; the typed store sits
// on top. Keys order by bytes.
type BytesStore interface {
	Get(key []byte) ([]byte, bool, error)
	Put(key, value []byte) error
	Delete(key []byte) error
	// Iter walks keys in [lower, upper); nil bounds are open.
	Iter(lower, upper []byte, reverse bool) BytesIterator
	ApproximateNumEntries() (int64, error)
	// Flush writes down whatever a layer holds back (the record cache).
	Flush() error
}

// taskSlice is one store of one task inside a write set: every key is the
// store's prefix followed by the user key.
type taskSlice struct {
	ws     *WriteSet
	prefix []byte
	buf    []byte // scratch for prefixed keys; the slice is single-goroutine
}

func newTaskSlice(ws *WriteSet, task, store string) *taskSlice {
	return &taskSlice{ws: ws, prefix: DataPrefix(task, store)}
}

func (s *taskSlice) full(key []byte) []byte {
	s.buf = append(append(s.buf[:0], s.prefix...), key...)
	return s.buf
}

func (s *taskSlice) Get(key []byte) ([]byte, bool, error) { return s.ws.Get(s.full(key)) }

func (s *taskSlice) Put(key, value []byte) error {
	s.ws.Set(s.full(key), value)
	return nil
}

func (s *taskSlice) Delete(key []byte) error {
	s.ws.Delete(s.full(key))
	return nil
}

func (s *taskSlice) Iter(lower, upper []byte, reverse bool) BytesIterator {
	lo, hi := rangeBounds(s.prefix, lower, upper)
	return &unprefixIter{BytesIterator: s.ws.Iter(lo, hi, reverse), n: len(s.prefix)}
}

func (s *taskSlice) ApproximateNumEntries() (int64, error) { return countAll(s) }

// DeleteRange deletes the user keys in [lower, upper).
func (s *taskSlice) DeleteRange(lower, upper []byte) error {
	lo, hi := rangeBounds(s.prefix, lower, upper)
	s.ws.DeleteRange(lo, hi)
	return nil
}

func (s *taskSlice) Flush() error { return nil }

// rangeBounds turns user-key bounds into backend-key bounds for prefix.
func rangeBounds(prefix, lower, upper []byte) (lo, hi []byte) {
	lo = append(append([]byte{}, prefix...), lower...)
	if upper == nil {
		hi = PrefixEnd(prefix)
	} else {
		hi = append(append([]byte{}, prefix...), upper...)
	}
	return lo, hi
}

type unprefixIter struct {
	BytesIterator
	n int
}

func (u *unprefixIter) Key() []byte { return u.BytesIterator.Key()[u.n:] }

func countAll(s BytesStore) (int64, error) {
	it := s.Iter(nil, nil, false)
	defer it.Close()
	var n int64
	for it.Next() {
		n++
	}
	return n, it.Err()
}

// committedSlice reads one store of one task straight from the backend:
// committed data only, never the writes of an open transaction. Interactive
// queries read through it.
type committedSlice struct {
	b      Backend
	prefix []byte
}

// CommittedView returns a read-only BytesStore over the committed state of
// one store of one task.
func CommittedView(b Backend, task, store string) BytesStore {
	return &committedSlice{b: b, prefix: DataPrefix(task, store)}
}

func (c *committedSlice) Get(key []byte) ([]byte, bool, error) {
	return c.b.Get(append(append([]byte{}, c.prefix...), key...))
}
func (c *committedSlice) Put(key, value []byte) error { return ErrReadOnly }
func (c *committedSlice) Delete(key []byte) error     { return ErrReadOnly }
func (c *committedSlice) Iter(lower, upper []byte, reverse bool) BytesIterator {
	lo, hi := rangeBounds(c.prefix, lower, upper)
	return &unprefixIter{BytesIterator: c.b.Iter(lo, hi, reverse), n: len(c.prefix)}
}
func (c *committedSlice) ApproximateNumEntries() (int64, error) { return countAll(c) }
func (c *committedSlice) Flush() error                          { return nil }

// RangeDeleter is implemented by BytesStores that delete key ranges in
// one operation (window stores drop expired segments with it). Changelogs
// do not record range deletions: the changelog's own retention expires
// those records.
type RangeDeleter interface {
	DeleteRange(lower, upper []byte) error
}

// DeleteRange deletes [lower, upper) from s: flushing a cache above first,
// so no cached write of the range comes back later.
func DeleteRange(s BytesStore, lower, upper []byte) error {
	if err := s.Flush(); err != nil {
		return err
	}
	for {
		switch x := s.(type) {
		case RangeDeleter:
			return x.DeleteRange(lower, upper)
		case *changelogging:
			s = x.BytesStore
		case *caching:
			x.nc.clear()
			s = x.under
		default:
			return fmt.Errorf("stores: %T cannot delete ranges", s)
		}
	}
}

// ChangelogWriter receives every write of a logged store, in order, for the
// runtime to produce to the store's changelog topic partition. A nil value
// is a tombstone.
type ChangelogWriter interface {
	Log(key, value []byte, timestamp int64)
}

// changelogging sends every write to the changelog after writing it below.
// For timestamped stores the 8-byte timestamp in front of the value becomes
// the changelog record's timestamp and is not part of its value, as in Kafka
// Streams, so the changelog holds plain values.
type changelogging struct {
	BytesStore
	log         ChangelogWriter
	timestamped bool
	clock       *storeClock
}

func (c *changelogging) Put(key, value []byte) error {
	if err := c.BytesStore.Put(key, value); err != nil {
		return err
	}
	if c.timestamped && len(value) >= 8 {
		c.log.Log(key, value[8:], decodeTimestamp(value))
	} else {
		c.log.Log(key, value, c.clock.now())
	}
	return nil
}

func (c *changelogging) Delete(key []byte) error {
	if err := c.BytesStore.Delete(key); err != nil {
		return err
	}
	c.log.Log(key, nil, c.clock.now())
	return nil
}
