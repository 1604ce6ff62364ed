package storage

import (
	"bytes"
	"strings"
	"sync/atomic"

	"github.com/RaduBerinde/btreemap"
)

// entryOverhead approximates the memory an entry takes besides its key and
// value bytes (struct, map slot, list links).
const entryOverhead = 96

// Cache is the record cache of one stream thread, shared by the cached
// stores of all its tasks: a bounded number of bytes, least-recently-used
// eviction across stores. Writes stay in the cache until the store is
// flushed (every commit) or the entry is evicted, so repeated updates of one
// key between commits reach the store, its changelog and the downstream
// processors once — as Kafka Streams' caching does.
//
// A Cache belongs to one goroutine; only its counters may be read from
// others.
type Cache struct {
	maxBytes   int64
	size       int64
	head, tail *cacheEntry // LRU list, head most recent

	hits, misses, evictions atomic.Int64
}

// NewCache returns a cache of at most maxBytes (keys, values and per-entry
// overhead). maxBytes <= 0 caches nothing: every write goes straight down.
func NewCache(maxBytes int64) *Cache { return &Cache{maxBytes: maxBytes} }

// Size is the number of bytes the cache holds.
func (c *Cache) Size() int64 { return c.size }

// Stats returns the lookups that found an entry, those that did not, and the
// evictions so far.
func (c *Cache) Stats() (hits, misses, evictions int64) {
	return c.hits.Load(), c.misses.Load(), c.evictions.Load()
}

// namedCache is the part of the cache that belongs to one store of one task.
type namedCache struct {
	c       *Cache
	entries map[string]*cacheEntry
	// ordered holds the entries in key order, for range reads. It is built
	// at the store's first range read and kept from then on: a store read
	// only by key (most key-value stores) never pays for it.
	ordered              *btreemap.BTreeMap[string, *cacheEntry]
	dirtyHead, dirtyTail *cacheEntry // dirty entries in the order they became dirty
	flushFn              func([]cacheEntry) error
}

type cacheEntry struct {
	key        string
	value      []byte
	deleted    bool // a cached deletion
	quiet      bool // a deletion the flush listener is not told of (a silent expiry)
	dirty      bool
	ts         int64
	nc         *namedCache
	prev, next *cacheEntry // LRU
	dprev      *cacheEntry // dirty list
	dnext      *cacheEntry
}

func (e *cacheEntry) size() int64 { return int64(len(e.key)+len(e.value)) + entryOverhead }

func (c *Cache) named(flush func([]cacheEntry) error) *namedCache {
	return &namedCache{c: c, entries: map[string]*cacheEntry{}, flushFn: flush}
}

// inOrder returns the entries in key order, building the index at the
// first call.
func (n *namedCache) inOrder() *btreemap.BTreeMap[string, *cacheEntry] {
	if n.ordered == nil {
		n.ordered = btreemap.New[string, *cacheEntry](16, strings.Compare)
		for k, e := range n.entries {
			n.ordered.ReplaceOrInsert(k, e)
		}
	}
	return n.ordered
}

func (c *Cache) unlinkLRU(e *cacheEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *Cache) pushLRU(e *cacheEntry) {
	e.next = c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}

// evict removes least-recently-used entries until the cache fits. A dirty
// victim first flushes every dirty entry of its store, as Kafka Streams does,
// so that store's writes stay in order.
func (c *Cache) evict() error {
	for c.size > c.maxBytes && c.tail != nil {
		e := c.tail
		if e.dirty {
			if err := e.nc.flush(); err != nil {
				return err
			}
			if c.tail != e { // the flush touched the list; look again
				continue
			}
		}
		c.evictions.Add(1)
		e.nc.remove(e)
	}
	return nil
}

func (n *namedCache) get(key []byte) *cacheEntry {
	e, ok := n.entries[string(key)]
	if !ok {
		n.c.misses.Add(1)
		return nil
	}
	n.c.hits.Add(1)
	n.c.unlinkLRU(e)
	n.c.pushLRU(e)
	return e
}

func (n *namedCache) put(key, value []byte, deleted, dirty, quiet bool, ts int64) error {
	e, ok := n.entries[string(key)]
	if ok {
		n.c.size -= e.size()
		n.c.unlinkLRU(e)
		e.value = append(e.value[:0], value...)
		e.deleted = deleted
		e.quiet = quiet
		e.ts = ts
	} else {
		e = &cacheEntry{key: string(key), value: bytes.Clone(value), deleted: deleted, quiet: quiet, ts: ts, nc: n}
		n.entries[e.key] = e
		if n.ordered != nil {
			n.ordered.ReplaceOrInsert(e.key, e)
		}
	}
	if dirty && !e.dirty {
		e.dirty = true
		n.linkDirty(e)
	}
	n.c.size += e.size()
	n.c.pushLRU(e)
	return n.c.evict()
}

func (n *namedCache) linkDirty(e *cacheEntry) {
	e.dprev = n.dirtyTail
	e.dnext = nil
	if n.dirtyTail != nil {
		n.dirtyTail.dnext = e
	} else {
		n.dirtyHead = e
	}
	n.dirtyTail = e
}

func (n *namedCache) remove(e *cacheEntry) {
	n.c.unlinkLRU(e)
	n.c.size -= e.size()
	delete(n.entries, e.key)
	if n.ordered != nil {
		n.ordered.Delete(e.key)
	}
}

// flush hands the dirty entries, oldest first, to the store's flush function
// and marks them clean. Entries dirtied again during the flush (by
// processing it triggers) stay dirty for the next flush.
func (n *namedCache) flush() error {
	if n.dirtyHead == nil {
		return nil
	}
	// Snapshot the entries (a flush listener may write the same key again)
	// into one slice, their values into one buffer.
	count, size := 0, 0
	for e := n.dirtyHead; e != nil; e = e.dnext {
		count++
		size += len(e.value)
	}
	flushed := make([]cacheEntry, count)
	buf := make([]byte, 0, size)
	i := 0
	for e := n.dirtyHead; e != nil; i++ {
		next := e.dnext
		e.dirty = false
		e.dprev, e.dnext = nil, nil
		flushed[i] = *e
		if e.value != nil {
			buf = append(buf, e.value...)
			flushed[i].value = buf[len(buf)-len(e.value) : len(buf) : len(buf)]
		}
		e = next
	}
	n.dirtyHead, n.dirtyTail = nil, nil
	return n.flushFn(flushed)
}

// storeClock is the time of the write a store's layers are handling: the
// current record's timestamp, or the timestamp of a cached write while it is
// flushed.
type storeClock struct {
	record func() int64
	pinned bool
	ts     int64
}

func (c *storeClock) now() int64 {
	if c.pinned {
		return c.ts
	}
	if c.record == nil {
		return 0
	}
	return c.record()
}

func (c *storeClock) pin(ts int64) { c.pinned, c.ts = true, ts }
func (c *storeClock) unpin()       { c.pinned = false }

// clear drops every entry of this store, dirty ones included (an aborted
// transaction's writes).
func (n *namedCache) clear() {
	for _, e := range n.entries {
		n.c.unlinkLRU(e)
		n.c.size -= e.size()
	}
	clear(n.entries)
	if n.ordered != nil {
		n.ordered.Clear(false)
	}
	n.dirtyHead, n.dirtyTail = nil, nil
}

// FlushListener receives each entry a cached store flushes: the key, the new
// value (nil when deleted), and, when asked for, the value the store held
// before (nil when absent). timestamp is the time of the write.
type FlushListener func(key, newValue, oldValue []byte, timestamp int64) error

// caching is the record-cache layer of a store.
type caching struct {
	under    BytesStore
	nc       *namedCache
	listener FlushListener
	sendOld  bool
	clock    *storeClock
}

func newCaching(under BytesStore, c *Cache, clock *storeClock) *caching {
	s := &caching{under: under, clock: clock}
	s.nc = c.named(s.flushEntries)
	return s
}

func (s *caching) Get(key []byte) ([]byte, bool, error) {
	if e := s.nc.get(key); e != nil {
		if e.deleted {
			return nil, false, nil
		}
		return e.value, true, nil
	}
	v, ok, err := s.under.Get(key)
	if err != nil || !ok {
		return v, ok, err
	}
	if err := s.nc.put(key, v, false, false, false, 0); err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (s *caching) Put(key, value []byte) error {
	return s.nc.put(key, value, false, true, false, s.clock.now())
}

func (s *caching) Delete(key []byte) error {
	return s.nc.put(key, nil, true, true, false, s.clock.now())
}

// deleteQuietly deletes key like Delete, but the flush listener is not
// told (the changelog still is): a silent expiry.
func (s *caching) deleteQuietly(key []byte) error {
	return s.nc.put(key, nil, true, true, true, s.clock.now())
}

func (s *caching) Iter(lower, upper []byte, reverse bool) BytesIterator {
	lo, hi := btreemap.Min[string](), btreemap.Max[string]()
	if lower != nil {
		lo = btreemap.GE(string(lower))
	}
	if upper != nil {
		hi = btreemap.LT(string(upper))
	}
	var over []overlayEntry
	add := func(k string, e *cacheEntry) bool {
		over = append(over, overlayEntry{key: []byte(k), value: e.value, deleted: e.deleted})
		return true
	}
	if reverse {
		s.nc.inOrder().Descend(hi, lo)(add)
	} else {
		s.nc.inOrder().Ascend(lo, hi)(add)
	}
	return newMergeIter(over, s.under.Iter(lower, upper, reverse), reverse)
}

func (s *caching) ApproximateNumEntries() (int64, error) {
	return s.under.ApproximateNumEntries()
}

func (s *caching) Flush() error {
	if err := s.nc.flush(); err != nil {
		return err
	}
	return s.under.Flush()
}

func (s *caching) flushEntries(entries []cacheEntry) error {
	for i := range entries {
		e := &entries[i]
		key := []byte(e.key)
		var old []byte
		if s.listener != nil && s.sendOld && !e.quiet {
			v, ok, err := s.under.Get(key)
			if err != nil {
				return err
			}
			if ok {
				old = bytes.Clone(v)
			}
		}
		// Layers below (the changelog) see the time of the cached write,
		// not of the record that triggered the flush.
		s.clock.pin(e.ts)
		var err error
		if e.deleted {
			err = s.under.Delete(key)
		} else {
			err = s.under.Put(key, e.value)
		}
		s.clock.unpin()
		if err != nil {
			return err
		}
		if s.listener != nil && !e.quiet {
			var nv []byte
			if !e.deleted {
				nv = e.value
			}
			if err := s.listener(key, nv, old, e.ts); err != nil {
				return err
			}
		}
	}
	return nil
}
