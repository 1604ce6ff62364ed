package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors of the stores package.
var (
	// ErrClosed is returned by a store or backend used after Close.
	ErrClosed = errors.New("stores: closed")
	// ErrReadOnly is returned when a read-only view is written to.
	ErrReadOnly = errors.New("stores: read-only")
)

// BytesIterator walks key-value pairs in key order (or reverse order).
// Key and Value are valid until the next call to Next; copy them to keep them.
type BytesIterator interface {
	Next() bool
	Key() []byte
	Value() []byte
	Err() error
	Close() error
}

// Backend is the byte-level storage of one application instance: every
// store of every task lives in it under its own key prefix. Pebble (on disk)
// and Memory are the two implementations. A Backend is safe for concurrent
// use.
type Backend interface {
	// Get returns a copy of the value of key, and whether it exists.
	Get(key []byte) ([]byte, bool, error)
	// Iter walks the keys in [lower, upper); a nil bound is open.
	Iter(lower, upper []byte, reverse bool) BytesIterator
	// Apply writes every operation of b, in order. A batch is atomic
	// (after a crash, all of it is visible or none) unless it is too
	// large for the backend to hold at once (Pebble: a quarter of a
	// memtable); then a prefix of it may be visible after a crash, so a
	// caller puts what marks the batch as applied (stored offsets) last.
	Apply(b *Batch) error
	// Flush makes everything applied so far durable without a write-ahead
	// log replay.
	Flush() error
	// Persistent reports whether the data survives Close.
	Persistent() bool
	Close() error
}

// PointReader reads single keys of a Backend for one goroutine, more
// cheaply than Backend.Get where the backend can keep state between reads
// (Pebble keeps an iterator). It sees every write applied before the read.
type PointReader interface {
	// Get returns a copy of the value of key, and whether it exists.
	Get(key []byte) ([]byte, bool, error)
	// Release drops what the reader holds in the backend (an iterator
	// pins memtables and tables); the next Get takes it again.
	Release()
}

type opKind uint8

const (
	opSet opKind = iota
	opDelete
	opDeleteRange
)

type batchOp struct {
	kind       opKind
	key, value []byte // value: the end key for opDeleteRange
}

// Batch is an ordered list of writes applied by Backend.Apply (atomically
// unless it is very large: see Backend.Apply).
// The batch keeps the slices it is given; callers must not modify them.
type Batch struct {
	ops []batchOp
}

// Set writes key = value.
func (b *Batch) Set(key, value []byte) { b.ops = append(b.ops, batchOp{opSet, key, value}) }

// Delete removes key.
func (b *Batch) Delete(key []byte) { b.ops = append(b.ops, batchOp{opDelete, key, nil}) }

// DeleteRange removes every key in [start, end).
func (b *Batch) DeleteRange(start, end []byte) {
	b.ops = append(b.ops, batchOp{opDeleteRange, start, end})
}

// Len is the number of operations in b.
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties b for reuse.
func (b *Batch) Reset() { b.ops = b.ops[:0] }

// Key layout inside a backend. Task ids ("0_3") and store names never hold a
// 0x00 byte, so they can be separated by one.
//
//	data:    0x01 <task> 0x00 <store> 0x00 <user key>  → value
//	offsets: 0x02 <task> 0x00 <store>                  → 8-byte big-endian next changelog offset
//	synced:  0x03 <task> 0x00 <store>                  → 8-byte big-endian wall-clock ms (see SyncedAt)
const (
	nsData   = 0x01
	nsOffset = 0x02
	nsSynced = 0x03
)

// namespaces are the key namespaces a task's state has keys in.
var namespaces = []byte{nsData, nsOffset, nsSynced}

// DataPrefix is the key prefix of one store of one task.
func DataPrefix(task, store string) []byte {
	p := make([]byte, 0, len(task)+len(store)+3)
	p = append(p, nsData)
	p = append(p, task...)
	p = append(p, 0)
	p = append(p, store...)
	return append(p, 0)
}

func offsetKey(task, store string) []byte { return storeKey(nsOffset, task, store) }

// storeKey is the key of one store of one task in namespace ns.
func storeKey(ns byte, task, store string) []byte {
	p := make([]byte, 0, len(task)+len(store)+2)
	p = append(p, ns)
	p = append(p, task...)
	p = append(p, 0)
	return append(p, store...)
}

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func taskRanges(task string) [][2][]byte {
	var out [][2][]byte
	for _, ns := range namespaces {
		p := append(append([]byte{ns}, task...), 0)
		out = append(out, [2][]byte{p, PrefixEnd(p)})
	}
	return out
}

func validName(kind, s string) error {
	if s == "" {
		return fmt.Errorf("stores: empty %s", kind)
	}
	if bytes.IndexByte([]byte(s), 0) >= 0 {
		return fmt.Errorf("stores: %s %q holds a 0x00 byte", kind, s)
	}
	return nil
}

// StoredOffset returns the next changelog offset to restore from for one
// store of one task (the offset after the last changelog record its
// committed state holds), and false when none was ever stored.
func StoredOffset(b Backend, task, store string) (int64, bool, error) {
	v, ok, err := b.Get(offsetKey(task, store))
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("stores: corrupt changelog offset for task %s store %s (%d bytes)", task, store, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// OffsetSum returns the sum of the changelog offsets stored for a task's
// stores, and false when none is stored: how far the task's local state
// has read its changelogs, which the group's assignor compares between
// instances (Kafka Streams' task offset sums).
func OffsetSum(b Backend, task string) (int64, bool, error) {
	p := append(append([]byte{nsOffset}, task...), 0)
	it := b.Iter(p, PrefixEnd(p), false)
	defer it.Close()
	var sum int64
	found := false
	for it.Next() {
		if v := it.Value(); len(v) == 8 {
			sum += int64(binary.BigEndian.Uint64(v))
			found = true
		}
	}
	return sum, found, it.Err()
}

func encodeOffset(off int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(off)) }

// DropTask deletes every store, stored offset and synced time of a task:
// one range delete per key namespace, applied atomically.
func DropTask(b Backend, task string) error {
	if err := validName("task id", task); err != nil {
		return err
	}
	var batch Batch
	for _, r := range taskRanges(task) {
		batch.DeleteRange(r[0], r[1])
	}
	return b.Apply(&batch)
}

// DropStore deletes one store of one task (with its time index, if any),
// its stored offset and its synced time.
func DropStore(b Backend, task, store string) error {
	var batch Batch
	for _, p := range [][]byte{DataPrefix(task, store), DataPrefix(task, store+ttlSuffix)} {
		batch.DeleteRange(p, PrefixEnd(p))
	}
	batch.Delete(offsetKey(task, store))
	batch.Delete(syncedKey(task, store))
	return b.Apply(&batch)
}

// ChangelogRecord is one record of a store's changelog topic, as restore
// applies it. A nil Value is a tombstone.
type ChangelogRecord struct {
	Key       []byte
	Value     []byte
	Timestamp int64
}

// Restore writes changelog records into one store of one task, together with
// nextOffset (the changelog offset after the last record), in one atomic
// write. For timestamped stores the record timestamp is stored in front of
// the value, as the store layers expect; for a store with a time to live
// the time index is written too (and the estimate of live entries moved by
// the records' sets less their tombstones).
func Restore(b Backend, task string, spec Spec, recs []ChangelogRecord, nextOffset int64) error {
	var batch Batch
	if spec.TTL > 0 {
		if err := restoreIndex(b, &batch, task, spec.Name, recs); err != nil {
			return err
		}
	}
	return restore(b, &batch, task, spec.Name, offsetKey(task, spec.Name), spec.Timestamped, recs, nextOffset)
}

// restoreIndex adds the time index keys of recs to batch, removing those
// of the values they replace, and keeps the count of live entries exact:
// a read of each key not seen earlier in the batch (restoring a store with
// a time to live costs a lookup per record).
func restoreIndex(b Backend, batch *Batch, task, store string, recs []ChangelogRecord) error {
	prefix := DataPrefix(task, store+ttlSuffix)
	data := DataPrefix(task, store)
	m, _, err := readTTLMeta(CommittedView(b, task, store+ttlSuffix))
	if err != nil {
		return err
	}
	type state struct {
		live bool
		ts   int64
	}
	cur := make(map[string]state, len(recs))
	indexKey := func(ts int64, key []byte) []byte { return appendIndexKey(bytes.Clone(prefix), ts, key) }
	for _, r := range recs {
		was, seen := cur[string(r.Key)]
		if !seen {
			v, ok, err := b.Get(append(bytes.Clone(data), r.Key...))
			if err != nil {
				return err
			}
			if ok && len(v) >= 8 {
				was = state{true, decodeTimestamp(v)}
			}
		}
		now := state{live: r.Value != nil, ts: r.Timestamp}
		cur[string(r.Key)] = now
		switch {
		case now.live && !was.live:
			m.live++
		case !now.live && was.live:
			m.live--
		}
		if was.live && (!now.live || was.ts != now.ts) {
			batch.Delete(indexKey(was.ts, r.Key))
		}
		if now.live {
			batch.Set(indexKey(now.ts, r.Key), nil)
		}
	}
	batch.Set(prefix, m.encode()) // the empty index key
	return nil
}

func restore(b Backend, batch *Batch, task, store string, offKey []byte, timestamped bool, recs []ChangelogRecord, nextOffset int64) error {
	prefix := DataPrefix(task, store)
	if p, ok := b.(*Pebble); ok && batch.Len() == 0 {
		return p.writeChangelog(prefix, timestamped, recs, offKey, encodeOffset(nextOffset))
	}
	for _, r := range recs {
		k := append(append(make([]byte, 0, len(prefix)+len(r.Key)), prefix...), r.Key...)
		switch {
		case r.Value == nil:
			batch.Delete(k)
		case timestamped:
			batch.Set(k, AppendTimestamped(nil, r.Timestamp, r.Value))
		default:
			batch.Set(k, r.Value)
		}
	}
	batch.Set(offKey, encodeOffset(nextOffset))
	return b.Apply(batch)
}

// GlobalTask is the task id under which global stores live: one copy per
// instance, written by the global reader, read by every task.
const GlobalTask = "global"

// globalOffsetKey is where a global store keeps the next offset to read of
// one partition of its topic (0x01 cannot occur in a store name).
func globalOffsetKey(store string, partition int32) []byte {
	return binary.BigEndian.AppendUint32(offsetKey(GlobalTask, store+"\x01"), uint32(partition))
}

// ApplyGlobal writes records read from one partition of a global table's
// topic into its store (values prefixed with their timestamps), together
// with the next offset to read, in one atomic write.
func ApplyGlobal(b Backend, store string, partition int32, recs []ChangelogRecord, nextOffset int64) error {
	return restore(b, &Batch{}, GlobalTask, store, globalOffsetKey(store, partition), true, recs, nextOffset)
}

// GlobalOffset returns the next offset to read of one partition of a global
// store's topic, and false when the store never read it.
func GlobalOffset(b Backend, store string, partition int32) (int64, bool, error) {
	v, ok, err := b.Get(globalOffsetKey(store, partition))
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("stores: corrupt offset for global store %s partition %d (%d bytes)", store, partition, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// DropGlobal deletes a global store, the offsets it read to and its synced
// time.
func DropGlobal(b Backend, store string) error {
	p := DataPrefix(GlobalTask, store)
	o := offsetKey(GlobalTask, store+"\x01")
	var batch Batch
	batch.DeleteRange(p, PrefixEnd(p))
	batch.DeleteRange(o, PrefixEnd(o))
	batch.Delete(syncedKey(GlobalTask, store))
	return b.Apply(&batch)
}

// AppendTimestamped appends the timestamped value encoding (8-byte
// big-endian timestamp, then the value bytes, as Kafka Streams'
// ValueAndTimestamp) to dst.
func AppendTimestamped(dst []byte, ts int64, value []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return append(dst, value...)
}

// Pick returns what belongs to the backend a store is kept in: memory's
// when inMemory (Spec.InMemory), Pebble's otherwise.
func Pick[T any](inMemory bool, pebble, memory T) T {
	if inMemory {
		return memory
	}
	return pebble
}
