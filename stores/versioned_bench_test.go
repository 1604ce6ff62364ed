package stores_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// The versioned store beside the plain key-value store, on Pebble, at 1M
// keys × 10 versions (10M puts, 100-byte values, committed every 1,000
// writes, history retention longer than the data so every version stays):
// a put of a new latest version, a read of the latest value and a read as
// of a time inside a key's history.

const (
	benchKeys     = 1_000_000
	benchVersions = 10
)

func versionedKey(i int) string { return fmt.Sprintf("key-%07d", i%benchKeys) }

// loaded is a store filled once per process for the read benchmarks.
var loaded struct {
	sync.Once
	ws        *storage.WriteSet
	versioned stores.VersionedKeyValueStore[string, string]
	plain     stores.KeyValueStore[string, string]
}

func loadVersioned(b *testing.B) {
	loaded.Do(func() {
		dir, err := mkdirTemp()
		if err != nil {
			b.Fatal(err)
		}
		p, err := storage.OpenPebble(dir, storage.PebbleOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ws := storage.NewWriteSet(p)
		env := storage.Env{Task: "0_0", WriteSet: ws, Timestamp: func() int64 { return 0 }}
		vs, err := stores.VersionedKeyValue("v", serde.String(), serde.String(), 1000*time.Hour).WithLogging(false, nil).Build(env)
		if err != nil {
			b.Fatal(err)
		}
		kv, err := stores.KeyValue("kv", serde.String(), serde.String()).WithLogging(false, nil).Build(env)
		if err != nil {
			b.Fatal(err)
		}
		v, s := vs.(stores.VersionedKeyValueStore[string, string]), kv.(stores.KeyValueStore[string, string])
		n := 0
		for ver := range benchVersions {
			for i := range benchKeys {
				k := versionedKey(i)
				if _, _, err := v.Put(k, value100, int64(ver*1000+i%1000)); err != nil {
					b.Fatal(err)
				}
				if ver == benchVersions-1 {
					s.Put(k, value100)
				}
				if n++; n%1000 == 0 {
					vs.Flush()
					if err := ws.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		vs.Flush()
		ws.Commit()
		loaded.ws, loaded.versioned, loaded.plain = ws, v, s
	})
}

// Put of a new latest version of one of 1M keys (into the write set,
// committed every 1,000 puts).
func BenchmarkVersionedPut(b *testing.B) {
	loadVersioned(b)
	v, ws := loaded.versioned, loaded.ws
	ts := int64(benchVersions * 1000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, err := v.Put(versionedKey(i*7919), value100, ts+int64(i/benchKeys)); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := ws.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// The plain store's Put at the same scale, for comparison.
func BenchmarkVersionedPlainPut(b *testing.B) {
	loadVersioned(b)
	s, ws := loaded.plain, loaded.ws
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Put(versionedKey(i*7919), value100)
		if i%1000 == 999 {
			if err := ws.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Get (the latest version) of one of 1M keys with 10 versions each.
func BenchmarkVersionedGet(b *testing.B) {
	loadVersioned(b)
	v := loaded.versioned
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok, err := v.Get(versionedKey(i * 7919)); !ok || err != nil {
			b.Fatal("missing key", err)
		}
	}
}

// GetAsOf a time inside the key's history (its 5th of 10 versions).
func BenchmarkVersionedGetAsOf(b *testing.B) {
	loadVersioned(b)
	v := loaded.versioned
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i * 7919
		if _, ok, err := v.GetAsOf(versionedKey(k), int64(4*1000+k%1000)+500); !ok || err != nil {
			b.Fatal("missing version", err)
		}
	}
}

// The plain store's Get of the same keys.
func BenchmarkVersionedPlainGet(b *testing.B) {
	loadVersioned(b)
	s := loaded.plain
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok, err := s.Get(versionedKey(i * 7919)); !ok || err != nil {
			b.Fatal("missing key", err)
		}
	}
}

// mkdirTemp is a directory for the process-wide benchmark store (b.TempDir
// would be removed after the first benchmark that made it); TestMain
// removes it.
func mkdirTemp() (string, error) {
	d, err := os.MkdirTemp("", "eddy-versioned-bench-")
	benchDir = d
	return d, err
}

var benchDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}
