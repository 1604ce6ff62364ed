package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// A key-value store with a time to live forgets an entry once time passes
// the entry's timestamp plus the TTL. The entry's timestamp is the one the
// store keeps with its value: the timestamp of the record that wrote it (for
// a DSL table), of the newest record folded in (for an aggregation), or, in
// a plain store, of the record being processed when it was written. Time is
// the task's stream time by default (deterministic: a replay expires the
// same entries at the same records), or the wall clock.
//
// Expiry is driven by a time index kept beside the store, in the same write
// set (so committed and aborted with it): one key per live entry, its
// timestamp followed by the store key, with no value (a write or deletion
// removes the entry's previous index key; it read the previous value
// anyway). Expiring takes index keys in order from the oldest up to the
// cut-off, reading the index a slice at a time, so it costs what expires,
// never a scan of the live entries. The index is not logged: restore writes
// it again from the changelog records' timestamps.
//
// The index's empty key holds the store's committed bookkeeping, written at
// every flush: the cut-off in force, an estimate of the live entries and the
// count of entries expired. Interactive queries read the cut-off from it to
// hide what expired as of the committed state.

// ttlSuffix names the time index of a store: its data prefix is the
// store's name with this suffix (0x01 does not occur in store names the
// DSL or users choose; the store's own prefix ends in 0x00, so the ranges
// never overlap).
const ttlSuffix = "\x01ttl"

// TTLClock says what time a store's time to live is measured in.
type TTLClock int

const (
	// StreamTime measures the time to live in the task's stream time (the
	// largest record timestamp it processed): deterministic and
	// reproducible. The default.
	StreamTime TTLClock = iota
	// WallClockTime measures it against the wall clock: entries expire
	// even while no records arrive, but a replay after a crash may expire a
	// different set at a different point.
	WallClockTime
)

func (c TTLClock) String() string {
	if c == WallClockTime {
		return "wall-clock time"
	}
	return "stream time"
}

// ExpiryListener is told of every entry a store expires: its key and the
// value it had (as stored: timestamped values keep their prefix), and the
// timestamp of the record being processed when it expired.
type ExpiryListener func(key, old []byte, ts int64) error

// Expirer is implemented by stores with a time to live.
type Expirer interface {
	// SetExpiryListener installs l, called as entries expire; DSL tables
	// forward their tombstones from it when they are not cached (a cached
	// store's expiries reach its flush listener as deletions).
	SetExpiryListener(l ExpiryListener)
	// TTL is the time to live and the clock it is measured in.
	TTL() (time.Duration, TTLClock)
}

func encodeIndexTime(ts int64) uint64 { return uint64(ts) ^ (1 << 63) }

func appendIndexKey(dst []byte, ts int64, key []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, encodeIndexTime(ts))
	return append(dst, key...)
}

func indexTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63)) }

// ttlMeta is the bookkeeping under the index's empty key.
type ttlMeta struct {
	cutoff  int64 // entries with a timestamp at or below it are expired
	live    int64 // estimated live entries
	expired int64 // entries expired since the store was created
}

var ttlMetaKey = []byte{}

func (m ttlMeta) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(m.cutoff))
	b = binary.BigEndian.AppendUint64(b, uint64(m.live))
	return binary.BigEndian.AppendUint64(b, uint64(m.expired))
}

func decodeTTLMeta(v []byte) (ttlMeta, error) {
	if len(v) != 24 {
		return ttlMeta{}, fmt.Errorf("stores: corrupt time-to-live bookkeeping (%d bytes)", len(v))
	}
	return ttlMeta{
		cutoff:  int64(binary.BigEndian.Uint64(v)),
		live:    int64(binary.BigEndian.Uint64(v[8:])),
		expired: int64(binary.BigEndian.Uint64(v[16:])),
	}, nil
}

func readTTLMeta(s BytesStore) (ttlMeta, bool, error) {
	v, ok, err := s.Get(ttlMetaKey)
	if err != nil || !ok {
		return ttlMeta{cutoff: math.MinInt64}, false, err
	}
	m, err := decodeTTLMeta(v)
	return m, err == nil, err
}

// TTLStats reads the committed bookkeeping of a store with a time to live
// in one task: an estimate of its live entries and the number it expired;
// ok is false when the store has none (no TTL, or never committed).
func TTLStats(b Backend, task, store string) (live, expired int64, ok bool, err error) {
	m, ok, err := readTTLMeta(CommittedView(b, task, store+ttlSuffix))
	return m.live, m.expired, ok, err
}

// ttlLayer sits between the typed layer and the record cache (or the
// changelog): values below it always carry the 8-byte timestamp prefix;
// with stamp set it adds the prefix on writes and strips it on reads (plain
// stores), otherwise the typed layer's values carry it already (timestamped
// stores).
type ttlLayer struct {
	under      BytesStore
	index      BytesStore // the time index, in the write set, neither cached nor logged
	ttl        int64      // ms
	clockKind  TTLClock
	stamp      bool
	clock      *storeClock
	streamTime func() int64
	listener   ExpiryListener
	silent     bool // no listener, and a cached store's flush listener is not told either

	loaded bool
	meta   ttlMeta
	// window holds, in order, every index key with a timestamp below
	// windowEnd not yet acted on: expiry takes from its front without
	// touching the index, and reads the next slice of the index (one
	// iterator, at most windowMax keys or a slice of the TTL) only when
	// the cut-off passes windowEnd. A write whose timestamp falls below
	// windowEnd (a late record) joins it.
	window    [][]byte
	windowEnd int64
	buf       []byte
}

// windowMax bounds how many index keys the layer holds in memory.
const windowMax = 4096

func newTTLLayer(under, index BytesStore, ttl time.Duration, clockKind TTLClock, stamp bool, clock *storeClock, streamTime func() int64) *ttlLayer {
	return &ttlLayer{under: under, index: index, ttl: ttl.Milliseconds(), clockKind: clockKind, stamp: stamp, clock: clock, streamTime: streamTime}
}

// cutoff is the largest timestamp that has expired now.
func (l *ttlLayer) cutoff() int64 {
	if l.clockKind == WallClockTime {
		return time.Now().UnixMilli() - l.ttl
	}
	if l.streamTime == nil {
		return math.MinInt64
	}
	st := l.streamTime()
	if st < 0 {
		return math.MinInt64 // no record processed yet
	}
	return st - l.ttl
}

// load reads the committed bookkeeping, after the store opens and after an
// abort (the write set is back at the last commit, and so is the index);
// the window starts empty, below every index key.
func (l *ttlLayer) load() error {
	m, _, err := readTTLMeta(l.index)
	if err != nil {
		return err
	}
	l.meta = m
	l.window, l.windowEnd = l.window[:0], math.MinInt64
	l.loaded = true
	return nil
}

// fill reads the index keys from windowEnd on into the window: up to
// windowMax of them, and no further than a slice of the TTL past c (the
// write set copies the pending keys of the range an iterator covers, so the
// range stays short).
func (l *ttlLayer) fill(c int64) error {
	from := l.windowEnd
	horizon := max(from, c) + 1 + max(l.ttl/64, 1)
	if horizon < c { // overflow
		horizon = math.MaxInt64
	}
	lo := appendIndexKey(nil, from, nil)
	if from == math.MinInt64 {
		lo = binary.BigEndian.AppendUint64(nil, 0) // past the bookkeeping key
	}
	it := l.index.Iter(lo, appendIndexKey(nil, horizon, nil), false)
	l.windowEnd = horizon
	for it.Next() {
		k := it.Key()
		if n := len(l.window); n >= windowMax && indexTime(k) != indexTime(l.window[n-1]) {
			l.windowEnd = indexTime(k) // the rest is for the next fill
			break
		}
		l.window = append(l.window, bytes.Clone(k))
	}
	err := it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

// expire removes every entry whose timestamp is at or below the cut-off.
func (l *ttlLayer) expire() error {
	if !l.loaded {
		if err := l.load(); err != nil {
			return err
		}
	}
	c := l.cutoff()
	if c > l.meta.cutoff {
		l.meta.cutoff = c
	}
	for {
		for len(l.window) > 0 && indexTime(l.window[0]) <= c {
			ik := l.window[0]
			l.window = l.window[1:]
			if err := l.expireKey(ik); err != nil {
				return err
			}
		}
		if len(l.window) > 0 || c < l.windowEnd {
			return nil
		}
		if err := l.fill(c); err != nil {
			return err
		}
		if len(l.window) == 0 && c < l.windowEnd {
			return nil
		}
	}
}

// expireKey expires the entry of one index key at or below the cut-off:
// the index holds one key per live entry (writes and deletions remove the
// previous one), so the entry is there with that timestamp. Its old value
// is read only for an expiry listener.
func (l *ttlLayer) expireKey(ik []byte) error {
	key := ik[8:]
	var old []byte
	tell := l.listener != nil && !l.silent
	if tell {
		v, ok, err := l.under.Get(key)
		if err != nil {
			return err
		}
		if !ok || len(v) < 8 || decodeTimestamp(v) != indexTime(ik) {
			return fmt.Errorf("stores: time index out of step with the store: key %q indexed at %d", key, indexTime(ik))
		}
		old = bytes.Clone(v)
	}
	del := l.under.Delete
	if c, ok := l.under.(*caching); ok && l.silent {
		del = c.deleteQuietly
	}
	if err := del(key); err != nil {
		return err
	}
	l.meta.live--
	l.meta.expired++
	if tell {
		if err := l.listener(key, l.strip(old), l.clock.now()); err != nil {
			return err
		}
	}
	return l.index.Delete(ik)
}

func (l *ttlLayer) strip(v []byte) []byte {
	if l.stamp && len(v) >= 8 {
		return v[8:]
	}
	return v
}

func (l *ttlLayer) Get(key []byte) ([]byte, bool, error) {
	if err := l.expire(); err != nil {
		return nil, false, err
	}
	v, ok, err := l.under.Get(key)
	if err != nil || !ok {
		return nil, false, err
	}
	if len(v) < 8 || decodeTimestamp(v) <= l.meta.cutoff {
		return nil, false, nil // expired (written with a timestamp already past its time)
	}
	return l.strip(v), true, nil
}

func (l *ttlLayer) Put(key, value []byte) error {
	if err := l.expire(); err != nil {
		return err
	}
	v := value
	if l.stamp {
		l.buf = AppendTimestamped(l.buf[:0], l.clock.now(), value)
		v = l.buf
	}
	if len(v) < 8 {
		return fmt.Errorf("stores: a store with a time to live needs timestamped values (got %d bytes)", len(v))
	}
	ts := decodeTimestamp(v)
	old, existed, err := l.under.Get(key)
	if err != nil {
		return err
	}
	prev, hasPrev := timestampOf(old) // before the write: old may be the cache's own bytes
	if err := l.under.Put(key, v); err != nil {
		return err
	}
	ik := appendIndexKey(nil, ts, key)
	if existed {
		if err := l.unindex(prev, hasPrev, key, ik); err != nil {
			return err
		}
	} else {
		l.meta.live++
	}
	if err := l.index.Put(ik, nil); err != nil {
		return err
	}
	if ts < l.windowEnd { // a late write: into the window, in order
		if i, found := slices.BinarySearchFunc(l.window, ik, bytes.Compare); !found {
			l.window = slices.Insert(l.window, i, ik)
		}
	}
	return nil
}

func timestampOf(v []byte) (int64, bool) {
	if len(v) < 8 {
		return 0, false
	}
	return decodeTimestamp(v), true
}

// unindex removes the index key of an entry's previous value (timestamp
// prev) unless it is keep, from the index and the window: the index holds
// exactly one key per live entry, so what comes due always expires.
func (l *ttlLayer) unindex(prev int64, ok bool, key, keep []byte) error {
	if !ok {
		return nil
	}
	pk := appendIndexKey(nil, prev, key)
	if bytes.Equal(pk, keep) {
		return nil
	}
	if prev < l.windowEnd {
		if i, found := slices.BinarySearchFunc(l.window, pk, bytes.Compare); found {
			l.window = slices.Delete(l.window, i, i+1)
		}
	}
	return l.index.Delete(pk)
}

func (l *ttlLayer) Delete(key []byte) error {
	if err := l.expire(); err != nil {
		return err
	}
	old, existed, err := l.under.Get(key)
	if err != nil {
		return err
	}
	if existed {
		l.meta.live--
		prev, ok := timestampOf(old)
		if err := l.unindex(prev, ok, key, nil); err != nil {
			return err
		}
	}
	return l.under.Delete(key)
}

func (l *ttlLayer) Iter(lower, upper []byte, reverse bool) BytesIterator {
	if err := l.expire(); err != nil {
		return &sliceIter{err: err}
	}
	return &ttlIter{BytesIterator: l.under.Iter(lower, upper, reverse), cutoff: l.meta.cutoff, stamp: l.stamp}
}

func (l *ttlLayer) ApproximateNumEntries() (int64, error) {
	if err := l.expire(); err != nil {
		return 0, err
	}
	return max(l.meta.live, 0), nil
}

// Flush writes the layers below down and records the bookkeeping in the
// same write set.
func (l *ttlLayer) Flush() error {
	if err := l.expire(); err != nil {
		return err
	}
	if err := l.under.Flush(); err != nil {
		return err
	}
	return l.index.Put(ttlMetaKey, l.meta.encode())
}

// discard forgets what the layer knew of uncommitted writes (an abort).
func (l *ttlLayer) discard() { l.loaded = false }

// ttlIter hides expired entries and, for plain stores, the timestamp
// prefix.
type ttlIter struct {
	BytesIterator
	cutoff int64
	stamp  bool
}

func (t *ttlIter) Next() bool {
	for t.BytesIterator.Next() {
		v := t.BytesIterator.Value()
		if len(v) >= 8 && decodeTimestamp(v) > t.cutoff {
			return true
		}
	}
	return false
}

func (t *ttlIter) Value() []byte {
	v := t.BytesIterator.Value()
	if t.stamp {
		return v[8:]
	}
	return v
}

// ttlView is the read-only committed view of one task's store with a time
// to live, as interactive queries read it: what the committed cut-off
// expired is hidden even if the task has not deleted it yet.
type ttlView struct {
	BytesStore
	cutoff int64
	stamp  bool
}

func (v *ttlView) Get(key []byte) ([]byte, bool, error) {
	b, ok, err := v.BytesStore.Get(key)
	if err != nil || !ok {
		return nil, false, err
	}
	if len(b) < 8 || decodeTimestamp(b) <= v.cutoff {
		return nil, false, nil
	}
	if v.stamp {
		b = b[8:]
	}
	return b, true, nil
}

func (v *ttlView) Iter(lower, upper []byte, reverse bool) BytesIterator {
	return &ttlIter{BytesIterator: v.BytesStore.Iter(lower, upper, reverse), cutoff: v.cutoff, stamp: v.stamp}
}

func (v *ttlView) ApproximateNumEntries() (int64, error) { return countAll(v) }

// QueryViews returns a read-only BytesStore over the committed state of
// the store spec describes across several tasks, as CommittedViews, and for
// a store with a time to live without the entries its committed cut-off
// expired (and, for a plain store, without the timestamp prefix).
func QueryViews(b Backend, tasks []string, spec Spec) (BytesStore, error) {
	if spec.TTL <= 0 {
		return CommittedViews(b, tasks, spec.Name), nil
	}
	m := &mergedView{}
	for _, t := range tasks {
		meta, _, err := readTTLMeta(CommittedView(b, t, spec.Name+ttlSuffix))
		if err != nil {
			return nil, fmt.Errorf("stores: %s of task %s: %w", spec.Name, t, err)
		}
		cutoff := meta.cutoff
		if spec.TTLClock == WallClockTime {
			cutoff = max(cutoff, time.Now().UnixMilli()-spec.TTL.Milliseconds())
		}
		m.parts = append(m.parts, &ttlView{BytesStore: CommittedView(b, t, spec.Name), cutoff: cutoff, stamp: spec.StampsValues})
	}
	return m, nil
}
