package storage

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// BenchmarkWriteSetSet writes window-store-shaped keys (8-byte segment,
// user key, 8-byte window start) into a write set the way a windowed
// count's cache flush does: ~10,000 distinct windows between two commits,
// some written twice, then Discard (the commit's cost is not measured).
func BenchmarkWriteSetSet(b *testing.B) {
	ws := NewWriteSet(NewMemory())
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 1<<14)
	for i := range keys {
		k := binary.BigEndian.AppendUint64(nil, 7)
		k = append(k, "0_0\x00window-counts\x00key-"...)
		k = binary.BigEndian.AppendUint64(k, rng.Uint64N(10_000))
		keys[i] = binary.BigEndian.AppendUint64(k, 420_000)
	}
	value := make([]byte, 16)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ws.Set(keys[i&(len(keys)-1)], value)
		if i%10_000 == 9_999 {
			ws.Discard()
		}
	}
}
