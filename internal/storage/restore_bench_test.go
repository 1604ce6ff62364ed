package storage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkRestore applies changelog batches of 10,000 records (the
// engine's restore batch) with distinct keys into a Pebble store through a
// Restorer, as a cold restore does: the cost per restored record of the
// write path alone (no fetching), flushes and compactions included. Keys
// come in key order (a bulk-loaded changelog: ingested tables) or shuffled
// (a changelog in update order: the memtable).
func BenchmarkRestore(b *testing.B) {
	for _, order := range []string{"sorted", "shuffled"} {
		for _, timestamped := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%s/timestamped=%v", order, timestamped), func(b *testing.B) {
				p, err := OpenPebble(b.TempDir(), PebbleOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				spec := Spec{Name: "counts", Timestamped: timestamped}
				keys := make([]int, b.N)
				for i := range keys {
					keys[i] = i
				}
				if order == "shuffled" {
					rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
				}
				// A batch is the restorer's once written: the next one is
				// filled in the slice it returns.
				r := NewRestorer(p, "1_0", spec)
				defer r.Close()
				b.ReportAllocs()
				b.ResetTimer()
				var batch []ChangelogRecord
				for i := 0; i < b.N; {
					n := min(10_000, b.N-i)
					if cap(batch) < n {
						batch = make([]ChangelogRecord, 0, 10_000)
					}
					batch = batch[:n]
					for j := range batch {
						batch[j].Key = fmt.Appendf(batch[j].Key[:0], "key-%012d", keys[i+j])
						batch[j].Value = binary.BigEndian.AppendUint64(batch[j].Value[:0], uint64(j))
						batch[j].Timestamp = int64(j)
					}
					next, err := r.Write(batch, int64(i+n))
					if err != nil {
						b.Fatal(err)
					}
					i, batch = i+n, next
				}
				if err := r.Finish(int64(b.N)); err != nil {
					b.Fatal(err)
				}
				// What the restore left to do: its flush, and the compactions
				// running then.
				if err := p.db.Flush(); err != nil {
					b.Fatal(err)
				}
				for p.db.Metrics().Compact.NumInProgress > 0 {
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
}
