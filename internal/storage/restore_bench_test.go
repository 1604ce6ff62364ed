package storage

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkRestore applies changelog batches of restoreBatch-sized (10,000)
// records with distinct keys into a Pebble store, as a cold restore does:
// the cost per restored record of the write path alone (no fetching).
func BenchmarkRestore(b *testing.B) {
	for _, timestamped := range []bool{false, true} {
		b.Run(fmt.Sprintf("timestamped=%v", timestamped), func(b *testing.B) {
			p, err := OpenPebble(b.TempDir(), PebbleOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			spec := Spec{Name: "counts", Timestamped: timestamped}
			recs := make([]ChangelogRecord, 10_000)
			for i := range recs {
				recs[i].Value = binary.BigEndian.AppendUint64(nil, uint64(i))
				recs[i].Timestamp = int64(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			next := int64(0)
			for i := 0; i < b.N; i += len(recs) {
				for j := range recs {
					recs[j].Key = fmt.Appendf(recs[j].Key[:0], "key-%012d", i+j)
				}
				next += int64(len(recs))
				if err := Restore(p, "1_0", spec, recs, next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
