package storage_test

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/storage"
)

// PebbleOptions.Memory bounds the database's memory whatever it holds: with
// 8 MiB, two 2 MiB memtables and at least 4 MiB of block cache. 30 MB of
// writes and a read of every key keep the memtables within their limit
// (writes wait for flushes rather than queue more memtables), and the block
// cache and memtables together within the budget — while the cache does
// cache (Pebble reserves the memtables in it: a cache no larger than the
// memtables holds nothing).
func TestPebbleMemoryStaysWithinItsBudget(t *testing.T) {
	const budget = 8 << 20
	p, err := storage.OpenPebble(t.TempDir(), storage.PebbleOptions{Memory: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	memtables, blockCache := p.MemoryLimits()
	if memtables != budget/2 || blockCache != budget/2 {
		t.Fatalf("limits: memtables %d, block cache %d; want %d each", memtables, blockCache, budget/2)
	}
	const keys = 150_000
	key := func(i int) []byte { return fmt.Appendf(nil, "0_0/counts/key-%09d", i) }
	var maxMem int64
	for c := range keys / 500 {
		var b storage.Batch
		for i := range 500 {
			b.Set(key(c*500+i), make([]byte, 180))
		}
		if err := p.Apply(&b); err != nil {
			t.Fatal(err)
		}
		maxMem = max(maxMem, int64(p.Metrics().MemTable.Size))
	}
	// One batch (~100 KB) may go into a memtable past its size. And Pebble
	// stops writes when the memtables queued add up to two memtables'
	// size, while its first memtables are smaller (256 KiB, doubling up to
	// the size set): when flushes lag behind (a loaded machine), those
	// small ones (less than one memtable in all) and two full ones can be
	// queued at once, once, at the start.
	if maxMem > memtables+memtables/2+(256<<10) {
		t.Errorf("memtables held %d bytes, limit %d", maxMem, memtables)
	}
	for i := range keys {
		if _, ok, err := p.Get(key(i)); err != nil || !ok {
			t.Fatalf("Get(%s) = %v %v", key(i), ok, err)
		}
	}
	m := p.Metrics()
	if m.BlockCache.Size+int64(m.MemTable.Size) > budget {
		t.Errorf("block cache %d and memtables %d bytes: over the budget %d", m.BlockCache.Size, m.MemTable.Size, budget)
	}
	if m.BlockCache.Size < blockCache/2 || m.BlockCache.Hits == 0 {
		t.Errorf("block cache holds %d bytes (%d hits) after reading 30 MB: it does not cache", m.BlockCache.Size, m.BlockCache.Hits)
	}
	if m.Flush.Count < 5 {
		t.Errorf("%d flushes: the test did not fill the memtables", m.Flush.Count)
	}
	t.Logf("memtables at most %.1f MiB (limit %.1f), block cache %.1f MiB (at least %.1f), %d flushes, %d write stalls",
		float64(maxMem)/(1<<20), float64(memtables)/(1<<20), float64(m.BlockCache.Size)/(1<<20), float64(blockCache)/(1<<20), m.Flush.Count, p.WriteStalls())
}
