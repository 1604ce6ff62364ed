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
				// Two batches in turn: a Restorer keeps the last one until
				// the next call.
				var bufs [2][]ChangelogRecord
				for k := range bufs {
					bufs[k] = make([]ChangelogRecord, 10_000)
					for i := range bufs[k] {
						bufs[k][i].Value = binary.BigEndian.AppendUint64(nil, uint64(i))
						bufs[k][i].Timestamp = int64(i)
					}
				}
				r := NewRestorer(p, "1_0", spec)
				defer r.Close()
				b.ReportAllocs()
				b.ResetTimer()
				for i, k := 0, 0; i < b.N; i, k = i+len(bufs[0]), 1-k {
					batch := bufs[k][:min(len(bufs[k]), b.N-i)]
					for j := range batch {
						batch[j].Key = fmt.Appendf(batch[j].Key[:0], "key-%012d", keys[i+j])
					}
					if err := r.Write(batch, int64(i+len(batch))); err != nil {
						b.Fatal(err)
					}
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
