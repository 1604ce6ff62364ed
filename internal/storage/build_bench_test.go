package storage

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"testing"
	"time"
)

// BenchmarkBuildState is the state path of a count over distinct keys, as
// the state workload of make bench runs it: records with keys key-0…N
// spread by hash over four tasks (so each task sees its keys in increasing
// order), each a read of a key the store does not hold and a write of its
// count, through one WriteSet committed every `commit` records. It reports
// Pebble's read amplification and level-0 tables at the end.
func BenchmarkBuildState(b *testing.B) {
	for _, commit := range []int{8_000, 80_000, 160_000} {
		for _, read := range []string{"reader", "get"} {
			b.Run(fmt.Sprintf("commit=%d/read=%s", commit, read), func(b *testing.B) {
				p, err := OpenPebble(b.TempDir(), PebbleOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				ws := NewWriteSet(p)
				defer ws.ReleaseReads() // runs before p.Close
				if read == "get" {      // Pebble's Get, as before the PointReader
					ws.reader = nil
				}
				const tasks = 4
				var slices [tasks]*taskSlice
				for t := range slices {
					slices[t] = newTaskSlice(ws, fmt.Sprintf("0_%d", t), "counts")
				}
				key := make([]byte, 0, 32)
				val := make([]byte, 16)
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					key = fmt.Appendf(key[:0], "key-%010d", i)
					h := fnv.New32a()
					h.Write(key)
					s := slices[h.Sum32()%tasks]
					v, ok, err := s.Get(key)
					if err != nil {
						b.Fatal(err)
					}
					n := uint64(1)
					if ok {
						n += binary.BigEndian.Uint64(v[8:])
					}
					binary.BigEndian.PutUint64(val[8:], n)
					s.Put(key, val)
					if (i+1)%commit == 0 {
						if err := ws.Commit(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := ws.Commit(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m := p.Metrics()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
				b.ReportMetric(float64(m.ReadAmp()), "read-amp")
				b.ReportMetric(float64(m.Levels[0].TablesCount), "L0-tables")
			})
		}
	}
}
