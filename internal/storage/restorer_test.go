package storage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// changelog is n records over keys key-000000..: each key set once in key
// order, then (when rewrites) a tail in random order that sets some keys
// again and deletes others.
func changelog(n int, rewrites bool) []ChangelogRecord {
	recs := make([]ChangelogRecord, 0, n+n/2)
	for i := range n {
		recs = append(recs, ChangelogRecord{Key: fmt.Appendf(nil, "key-%06d", i),
			Value: binary.BigEndian.AppendUint64(nil, uint64(i)), Timestamp: int64(i)})
	}
	if rewrites {
		rng := rand.New(rand.NewPCG(1, 2))
		for j := range n / 2 {
			r := ChangelogRecord{Key: fmt.Appendf(nil, "key-%06d", rng.IntN(n)), Timestamp: int64(n + j)}
			if j%3 != 0 {
				r.Value = binary.BigEndian.AppendUint64(nil, uint64(n+j))
			}
			recs = append(recs, r)
		}
	}
	return recs
}

// want is the state a changelog leaves: the last value of each key.
func want(recs []ChangelogRecord) map[string][]byte {
	m := map[string][]byte{}
	for _, r := range recs {
		if r.Value == nil {
			delete(m, string(r.Key))
		} else {
			m[string(r.Key)] = AppendTimestamped(nil, r.Timestamp, r.Value)
		}
	}
	return m
}

// restoreAll writes recs through a Restorer in batches of batch records.
func restoreAll(t *testing.T, b Backend, recs []ChangelogRecord, from, batch int) {
	t.Helper()
	r := NewRestorer(b, "0_1", Spec{Name: "counts", Timestamped: true})
	defer r.Close()
	for i := from; i < len(recs); i += batch {
		j := min(i+batch, len(recs))
		if _, err := r.Write(recs[i:j], int64(j)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Finish(int64(len(recs))); err != nil {
		t.Fatal(err)
	}
}

// checkState asserts b's store holds exactly the state of recs, and the
// offset after them.
func checkState(t *testing.T, b Backend, recs []ChangelogRecord) {
	t.Helper()
	w := want(recs)
	prefix := DataPrefix("0_1", "counts")
	it := b.Iter(prefix, PrefixEnd(prefix), false)
	defer it.Close()
	n := 0
	for it.Next() {
		k := string(it.Key()[len(prefix):])
		if v, ok := w[k]; !ok || string(v) != string(it.Value()) {
			t.Fatalf("key %s: %x, want %x (present %v)", k, it.Value(), v, ok)
		}
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(w) {
		t.Fatalf("store holds %d keys, want %d", n, len(w))
	}
	if off, ok, err := StoredOffset(b, "0_1", "counts"); err != nil || !ok || off != int64(len(recs)) {
		t.Fatalf("stored offset %d (%v, %v), want %d", off, ok, err, len(recs))
	}
}

// A changelog in key order is restored into ingested tables, one out of
// order through the memtable, a changelog that starts in order and goes on
// out of order through both: each ends in the changelog's state, with the
// offset after it, on a store that held other keys of other tasks.
func TestRestorerIngestsRunsInKeyOrder(t *testing.T) {
	for _, c := range []struct {
		name     string
		recs     []ChangelogRecord
		ingested bool
	}{
		{"in key order", changelog(6_000, false), true},
		{"in order then rewrites", changelog(6_000, true), true},
		{"out of order", func() []ChangelogRecord {
			recs := changelog(6_000, false)
			rand.New(rand.NewPCG(3, 4)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
			return recs
		}(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := OpenPebble(t.TempDir(), PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// Another task's store, before and after the restored one.
			other := NewRestorer(p, "0_0", Spec{Name: "counts"})
			if _, err := other.Write(changelog(100, false), 100); err != nil {
				t.Fatal(err)
			}
			if err := other.Finish(100); err != nil {
				t.Fatal(err)
			}
			restoreAll(t, p, c.recs, 0, 500)
			checkState(t, p, c.recs)
			if got := p.db.Metrics().Ingest.Count > 1; got != c.ingested {
				t.Fatalf("tables ingested: %v, want %v", got, c.ingested)
			}
		})
	}
}

// A restore cut short (Close before Finish, as a revocation or a crash
// leaves it) keeps the offset of what it made durable, leaves no table file
// behind, and a restore from that offset ends in the changelog's state:
// records the store already held are written again over themselves.
func TestRestorerCutShortRestoresAgainFromItsOffset(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs := changelog(8_000, true)
	r := NewRestorer(p, "0_1", Spec{Name: "counts", Timestamped: true}).(*tableRestorer)
	// The first half, in a table ingested at its end; then a table open.
	for i := 0; i < 4_000; i += 500 {
		if _, err := r.Write(recs[i:i+500], int64(i+500)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.do(r.ingest); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write(recs[4_000:5_000], 5_000); err != nil {
		t.Fatal(err)
	}
	// What is durable is what the ingested table held, not the open one.
	if next, n := r.Durable(); next != 4_000 || n != 4_000 {
		t.Fatalf("durable: offset %d, %d records; want 4000 and 4000", next, n)
	}
	r.Close()
	off, ok, err := StoredOffset(p, "0_1", "counts")
	if err != nil || !ok || off != 4_000 {
		t.Fatalf("stored offset after the cut %d (%v, %v), want 4000", off, ok, err)
	}
	names, err := p.fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, restoreTablePrefix) {
			t.Fatalf("%s left behind", n)
		}
	}
	// Restoring again from an offset before what the store holds (a crash
	// between an ingest and its offset) ends the same.
	restoreAll(t, p, recs, 2_000, 500)
	checkState(t, p, recs)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// A table file a killed process left is removed when the store opens.
	stale := p.fs.PathJoin(dir, restoreTablePrefix+"7.sst")
	f, err := p.fs.Create(stale, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	p, err = OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.fs.Stat(stale); err == nil {
		t.Fatal("a stale restore table survived OpenPebble")
	}
	checkState(t, p, recs)
}

// The memory backend restores through batches, the same state.
func TestRestorerOnMemory(t *testing.T) {
	m := NewMemory()
	recs := changelog(3_000, true)
	restoreAll(t, m, recs, 0, 700)
	checkState(t, m, recs)
}

// do runs fn on the writer's goroutine once the batches queued before are
// written (on the caller's, once it stopped).
func (r *tableRestorer) do(fn func() error) error {
	if r.jobs == nil || r.stopped {
		return fn()
	}
	done := make(chan error, 1)
	r.jobs <- restoreJob{fn: fn, done: done}
	return <-done
}
