package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkPointMiss reads keys that are not there from a store of 2M keys
// written in commit-sized batches in random order, as a count over many
// distinct keys does on every new key.
func BenchmarkPointMiss(b *testing.B) {
	p, err := OpenPebble(b.TempDir(), PebbleOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const n = 2_000_000
	rng := rand.New(rand.NewPCG(1, 2))
	perm := rng.Perm(2 * n)
	key := func(i int) []byte { return fmt.Appendf(nil, "1_0\x00counts\x00key-%010d", i) }
	var batch Batch
	for i := 0; i < n; i++ {
		batch.Set(key(perm[i]), []byte("12345678"))
		if batch.Len() == 5000 {
			if err := p.Apply(&batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	m := p.Metrics()
	b.Logf("levels: %s", m.String())
	absent := perm[n:]
	b.Run("get", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok, _ := p.Get(key(absent[i%n])); ok {
				b.Fatal("found")
			}
		}
	})
	b.Run("iter-l6filters", func(b *testing.B) {
		it, err := p.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			b.Fatal(err)
		}
		defer it.Close()
		for i := 0; i < b.N; i++ {
			k := key(absent[i%n])
			if it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k) {
				b.Fatal("found")
			}
		}
	})
	b.Run("iter", func(b *testing.B) {
		it, err := p.db.NewIter(nil)
		if err != nil {
			b.Fatal(err)
		}
		defer it.Close()
		for i := 0; i < b.N; i++ {
			k := key(absent[i%n])
			if it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k) {
				b.Fatal("found")
			}
		}
	})
}
