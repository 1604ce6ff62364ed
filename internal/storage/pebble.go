package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// PebbleOptions tune the Pebble backend. The zero value is usable: every
// field has the default written in its comment.
type PebbleOptions struct {
	// Memory bounds the database's memory: its block cache (data, index and
	// filter blocks) and its memtables share it, as Pebble reserves each
	// memtable's size in the block cache. At most pebbleMemTables memtables
	// exist (one filling, one flushing; writes wait while both are full), so
	// the block cache keeps at least what they leave. Default 256 MiB.
	Memory int64
	// MemTableSize is the size of one memtable. Default a quarter of
	// Memory (64 MiB by default): with Pebble's own 4 MiB default a
	// read-modify-write per record costs ~9 µs (many small L0 files to
	// search); with 64 MiB, ~1 µs. At most a quarter of Memory.
	MemTableSize uint64
	// BloomBitsPerKey sets the bloom filter on every level, so point reads
	// of absent keys skip tables once state outgrows the memtable. Default
	// 10 (about 1% false positives); negative disables filters.
	BloomBitsPerKey int
	// InMemory keeps the database in memory (Pebble's in-memory file system),
	// for tests that want the Pebble code path without a disk.
	InMemory bool
	// Fsync makes every commit fsync the write-ahead log, so that it
	// survives a machine crash or power loss, at the cost of an fsync per
	// commit. Default false: each commit's write-ahead log is written to the
	// operating system (it survives the process being killed, SIGKILL
	// included, but not the machine going down — then a restore replays the
	// changelog tail after the last commit that reached the disk).
	Fsync bool
	// Logger receives Pebble's own log lines. Default: discarded.
	Logger pebble.Logger
}

// EnsureDefaults fills in the zero fields of o with their defaults.
func (o *PebbleOptions) EnsureDefaults() {
	if o.Memory <= 0 {
		o.Memory = 256 << 20
	}
	if o.MemTableSize == 0 || o.MemTableSize > uint64(o.Memory/(2*pebbleMemTables)) {
		o.MemTableSize = uint64(o.Memory / (2 * pebbleMemTables))
	}
	if o.BloomBitsPerKey == 0 {
		o.BloomBitsPerKey = 10
	}
}

// pebbleMemTables is the most memtables the database holds: one filling,
// one flushing; writes wait while both are full.
const pebbleMemTables = 2

// MemoryLimits are the most the database holds in memory in its memtables
// (filling and flushing) and the least its block cache may hold beside
// them; together PebbleOptions.Memory.
func (p *Pebble) MemoryLimits() (memtables, blockCache int64) {
	return p.memtables, p.blockCache
}

// WriteStalls is how many times the database stopped writes (memtables
// full, or too many files in level 0) since it was opened.
func (p *Pebble) WriteStalls() int64 { return p.stalls.Load() }

// Pebble is the on-disk Backend: ONE Pebble database per application
// instance, holding every store of every task under its key prefix, with
// one block cache and one memtable budget however many tasks the instance
// owns.
//
// A batch is applied only after the Kafka transaction it belongs to
// committed, so after a crash the database is at some committed point and
// restore replays the changelog tail after the stored offsets. Each apply
// writes the write-ahead log out to the operating system before it returns
// (fsynced too with PebbleOptions.Fsync): a killed process loses no commit.
type Pebble struct {
	db    *pebble.DB
	cache interface{ Unref() }
	// memtables and blockCache are their memory limits (MemoryLimits).
	memtables, blockCache int64
	stalls                *atomic.Int64 // write stalls begun (WriteStalls)
	// dir, fs and tableOpts are where and how a restore writes the tables
	// it ingests (tableRestorer); tables counts them, for unique names.
	dir       string
	fs        vfs.FS
	tableOpts sstable.WriterOptions
	tables    atomic.Int64
	// gen counts the writes applied (batches, restored tables): a
	// PointReader's iterator sees the database as of one count and is
	// replaced once it moved on. Bumped after each write is visible.
	gen atomic.Uint64
	// afterPiece, when set (tests), runs after each piece of a batch but
	// the last; an error stops Apply there, as a crash would.
	afterPiece func() error
}

// OpenPebble opens (creating if needed) the Pebble backend in dir.
func OpenPebble(dir string, opts PebbleOptions) (*Pebble, error) {
	opts.EnsureDefaults()
	cache := pebble.NewCache(opts.Memory)
	po := &pebble.Options{
		Cache:        cache,
		MemTableSize: opts.MemTableSize,
		// Two memtables before writes stall: one filling, one flushing.
		MemTableStopWritesThreshold: pebbleMemTables,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		Logger:                      opts.Logger,
	}
	stalls := new(atomic.Int64)
	po.EventListener = &pebble.EventListener{WriteStallBegin: func(pebble.WriteStallBeginInfo) { stalls.Add(1) }}
	if po.Logger == nil {
		po.Logger = quietLogger{}
	}
	if opts.InMemory {
		po.FS = vfs.NewMem()
	} else if !opts.Fsync {
		po.FS = walNoSync{vfs.Default}
	}
	if opts.BloomBitsPerKey > 0 {
		for i := range po.Levels {
			po.Levels[i].FilterPolicy = bloom.FilterPolicy(opts.BloomBitsPerKey)
		}
	}
	gate := newCompactionGate()
	po.Experimental.CompactionScheduler = gate
	if po.FS == nil {
		po.FS = vfs.Default
	}
	if err := removeRestoreTables(po.FS, dir); err != nil {
		cache.Unref()
		return nil, fmt.Errorf("stores: opening pebble in %s: %w", dir, err)
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("stores: opening pebble in %s: %w", dir, err)
	}
	gate.openUp()
	po.EnsureDefaults() // what Open used: the level options restored tables are written with
	return &Pebble{db: db, cache: cache, memtables: int64(opts.MemTableSize) * pebbleMemTables,
		blockCache: opts.Memory - int64(opts.MemTableSize)*pebbleMemTables, stalls: stalls,
		dir: dir, fs: po.FS, tableOpts: po.MakeWriterOptions(0, db.TableFormat())}, nil
}

// Get implements Backend.
func (p *Pebble) Get(key []byte) ([]byte, bool, error) {
	v, closer, err := p.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := bytes.Clone(v)
	closer.Close()
	return out, true, nil
}

// NewPointReader returns a PointReader of the database for one goroutine.
func (p *Pebble) NewPointReader() PointReader { return &pebbleReader{p: p} }

// pebbleReader reads keys through one iterator that it keeps across reads
// and replaces when the database was written since it was opened. Unlike
// Pebble's Get, the iterator consults the bloom filters of the bottom
// level too: Pebble skips them by default (reads that mostly find their
// key only pay for them), while a store's reads often miss (every new key
// of a count or an aggregation), and without the filter each miss reads an
// index and a data block of the largest level.
type pebbleReader struct {
	p   *Pebble
	it  *pebble.Iterator
	gen uint64 // p.gen when it was opened
}

// Get implements PointReader.
func (r *pebbleReader) Get(key []byte) ([]byte, bool, error) {
	if g := r.p.gen.Load(); r.it == nil || g != r.gen {
		r.Release()
		it, err := r.p.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return nil, false, err
		}
		r.it, r.gen = it, g
	}
	// The default comparer has no key prefixes (the whole key is the
	// prefix), so the seek finds key itself or nothing.
	if !r.it.SeekPrefixGE(key) {
		return nil, false, r.it.Error()
	}
	v, err := r.it.ValueAndErr()
	if err != nil {
		return nil, false, err
	}
	return bytes.Clone(v), true, nil
}

// Release implements PointReader.
func (r *pebbleReader) Release() {
	if r.it != nil {
		r.it.Close()
		r.it = nil
	}
}

// Iter implements Backend.
func (p *Pebble) Iter(lower, upper []byte, reverse bool) BytesIterator {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return &sliceIter{err: err}
	}
	return &pebbleIter{it: it, reverse: reverse}
}

// Apply implements Backend. A batch whose memtable footprint passes
// pieceLimit is written in pieces, in order (see pieceLimit).
func (p *Pebble) Apply(b *Batch) error {
	defer p.gen.Add(1)
	limit := p.pieceLimit()
	for start := 0; start < len(b.ops); {
		end, size, footprint := start, 0, uint64(0)
		for end < len(b.ops) && (end == start || footprint < limit) {
			op := b.ops[end]
			size += len(op.key) + len(op.value) + 16
			footprint += uint64(len(op.key)+len(op.value)) + memtableEntryOverhead
			end++
		}
		pb := p.db.NewBatchWithSize(size)
		for _, op := range b.ops[start:end] {
			var err error
			switch op.kind {
			case opSet:
				err = pb.Set(op.key, op.value, nil)
			case opDelete:
				err = pb.Delete(op.key, nil)
			case opDeleteRange:
				err = pb.DeleteRange(op.key, op.value, nil)
			}
			if err != nil {
				pb.Close()
				return err
			}
		}
		// pebble.Sync for the last piece: the commit waits until its
		// write-ahead log record is written to the file (with pebble.NoSync
		// it can stay in Pebble's buffer: measured, a SIGKILL lost all of
		// the last 50 commits); the log is written in order, so the pieces
		// before it are too. Without Fsync, walNoSync makes the fsync itself
		// a no-op.
		opt := pebble.NoSync
		if end == len(b.ops) {
			opt = pebble.Sync
		}
		err := pb.Commit(opt)
		pb.Close()
		if err != nil {
			return err
		}
		if p.afterPiece != nil && end < len(b.ops) {
			if err := p.afterPiece(); err != nil {
				return err
			}
		}
		start = end
	}
	return nil
}

// memtableEntryOverhead is about what Pebble reserves in a memtable for one
// entry besides its key and value: a skiplist node of the greatest height
// (~180 bytes) and an 8-byte trailer.
const memtableEntryOverhead = 200

// pieceLimit is the memtable footprint past which Apply writes a batch in
// pieces. Pebble turns a batch of half a memtable or more into a memtable
// of its own ("flushable batch"): every such commit rotates the memtable
// (one small table more in level 0) and leaves a sorted array, without
// bloom filters, for reads to search until it is flushed. Measured at 10M
// distinct keys, at-least-once (1 s commits of ~110k writes, ~26–33 MB of
// footprint against a ~31 MB threshold): 112–116k records/s whole
// (12.0–12.5 CPU-s per million), 120–133k in pieces (10.2–11.3).
//
// Pieces are not atomic: after a crash, a prefix of them may be visible.
// That is safe because of what a commit's batch holds (WriteSet.Commit):
// range deletions first, then writes that every logged store has already
// sent to its changelog (delivered, or inside the committed transaction),
// then the stores' changelog offsets last. A crash between pieces leaves
// the previous offsets, so restore replays the changelog from them and
// writes every key of the visible prefix again, to the same value.
func (p *Pebble) pieceLimit() uint64 { return uint64(p.memtables/pebbleMemTables) / 4 }

// writeChangelog writes changelog records (under prefix; values with
// their timestamps when timestamped) and offKey = offVal in one atomic
// write, straight into a batch sized for them: the restore path, with no
// allocation per record.
func (p *Pebble) writeChangelog(prefix []byte, timestamped bool, recs []ChangelogRecord, offKey, offVal []byte) error {
	size := len(offKey) + len(offVal) + 32
	for _, r := range recs {
		size += len(prefix) + len(r.Key) + len(r.Value) + 8 + 16
	}
	pb := p.db.NewBatchWithSize(size)
	defer pb.Close()
	for _, r := range recs {
		var op *pebble.DeferredBatchOp
		switch {
		case r.Value == nil:
			op = pb.DeleteDeferred(len(prefix) + len(r.Key))
		case timestamped:
			op = pb.SetDeferred(len(prefix)+len(r.Key), 8+len(r.Value))
			binary.BigEndian.PutUint64(op.Value, uint64(r.Timestamp))
			copy(op.Value[8:], r.Value)
		default:
			op = pb.SetDeferred(len(prefix)+len(r.Key), len(r.Value))
			copy(op.Value, r.Value)
		}
		copy(op.Key[copy(op.Key, prefix):], r.Key)
		if err := op.Finish(); err != nil {
			return err
		}
	}
	if err := pb.Set(offKey, offVal, nil); err != nil {
		return err
	}
	defer p.gen.Add(1)
	return pb.Commit(pebble.Sync)
}

// walNoSync is the file system of a Pebble backend without Fsync: the
// write-ahead log's files are written as usual, but syncing them does
// nothing — the data is in the operating system's hands once written,
// which survives the process dying. Every other file (tables, the
// manifest) syncs as Pebble asks.
type walNoSync struct{ vfs.FS }

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs walNoSync) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err == nil && isWAL(name) {
		f = noSyncFile{f}
	}
	return f, err
}

func (fs walNoSync) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err == nil && isWAL(newname) {
		f = noSyncFile{f}
	}
	return f, err
}

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                { return nil }
func (noSyncFile) SyncData() error            { return nil }
func (noSyncFile) SyncTo(int64) (bool, error) { return false, nil }

// Preallocate does nothing: Pebble reserves 110% of MemTableSize (70 MiB)
// at a time for each write-ahead log, and keeps up to
// MemTableStopWritesThreshold+1 old logs for reuse — measured, 360 MB of
// disk for 1M keys whose logs held 29 MB, against 36 MB without. The
// reservation only saves file-size updates in the fsyncs that this file
// system skips.
func (noSyncFile) Preallocate(int64, int64) error { return nil }

// Flush implements Backend: memtables are written to sstables, so a restart
// reads them without replaying the write-ahead log.
func (p *Pebble) Flush() error { return p.db.Flush() }

// Persistent implements Backend: true.
func (p *Pebble) Persistent() bool { return true }

// Close flushes and closes the database.
func (p *Pebble) Close() error {
	ferr := p.db.Flush()
	cerr := p.db.Close()
	p.cache.Unref()
	return errors.Join(ferr, cerr)
}

// Metrics returns Pebble's metrics, for diagnostics.
func (p *Pebble) Metrics() *pebble.Metrics { return p.db.Metrics() }

// StoreDiskBytes estimates the bytes one store of one task takes on disk
// (writes still in the memtable are not counted).
func (p *Pebble) StoreDiskBytes(task, store string) (uint64, error) {
	prefix := DataPrefix(task, store)
	return p.db.EstimateDiskUsage(prefix, PrefixEnd(prefix))
}

type pebbleIter struct {
	it      *pebble.Iterator
	reverse bool
	started bool
}

func (i *pebbleIter) Next() bool {
	if !i.started {
		i.started = true
		if i.reverse {
			return i.it.Last()
		}
		return i.it.First()
	}
	if i.reverse {
		return i.it.Prev()
	}
	return i.it.Next()
}
func (i *pebbleIter) Key() []byte   { return i.it.Key() }
func (i *pebbleIter) Value() []byte { return i.it.Value() }
func (i *pebbleIter) Err() error    { return i.it.Error() }
func (i *pebbleIter) Close() error  { return i.it.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
