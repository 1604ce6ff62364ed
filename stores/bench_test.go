package stores_test

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

func benchStore(b *testing.B, opts ...storage.PebbleOptions) (*storage.WriteSet, stores.KeyValueStore[string, string]) {
	var o storage.PebbleOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	p, err := storage.OpenPebble(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	ws := storage.NewWriteSet(p)
	s, err := stores.KeyValue("kv", serde.String(), serde.String()).WithLogging(false, nil).
		Build(storage.Env{Task: "0_0", WriteSet: ws, Timestamp: func() int64 { return 0 }})
	if err != nil {
		b.Fatal(err)
	}
	return ws, s.(stores.KeyValueStore[string, string])
}

var value100 = string(make([]byte, 100))

// Put of a 100-byte value into a Pebble-backed store (into the write set,
// committed every 1,000 puts, commit cost included).
func BenchmarkPebblePut(b *testing.B) {
	ws, s := benchStore(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Put(fmt.Sprintf("key-%07d", i%100_000), value100)
		if i%1000 == 999 {
			if err := ws.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Get of committed keys from a Pebble-backed store with 100,000 keys.
func BenchmarkPebbleGet(b *testing.B) {
	ws, s := benchStore(b)
	for i := range 100_000 {
		s.Put(fmt.Sprintf("key-%07d", i), value100)
		if i%1000 == 999 {
			ws.Commit()
		}
	}
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%07d", (i*7919)%100_000)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok, err := s.Get(keys[i%len(keys)]); !ok || err != nil {
			b.Fatal("missing key", err)
		}
	}
}

// Commit of a write set holding 1,000 writes of 100-byte values: one
// atomic Pebble batch with the changelog offset.
func BenchmarkPebbleCommit1000(b *testing.B) { benchCommit1000(b) }

// The same with PebbleOptions.Fsync: the write-ahead log fsynced at every
// commit.
func BenchmarkPebbleCommit1000Fsync(b *testing.B) {
	benchCommit1000(b, storage.PebbleOptions{Fsync: true})
}

func benchCommit1000(b *testing.B, opts ...storage.PebbleOptions) {
	ws, s := benchStore(b, opts...)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for j := range 1000 {
			s.Put(fmt.Sprintf("key-%07d", (i*1000+j)%100_000), value100)
		}
		ws.SetOffset("0_0", "kv", int64(i))
		b.StartTimer()
		if err := ws.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
