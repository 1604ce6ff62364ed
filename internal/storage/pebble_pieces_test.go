package storage_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/storage"
)

// A commit too large for one Pebble batch is written in pieces with the
// stores' offsets last: cut after its first piece (as a crash would cut
// it), the stored offset is still the previous commit's, part of the new
// writes is visible, and replaying the changelog from that offset gives
// exactly the state of the whole commit.
func TestCommitCutBetweenPiecesIsReplayedWhole(t *testing.T) {
	p, err := storage.OpenPebble(t.TempDir(), storage.PebbleOptions{InMemory: true, Memory: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	spec := storage.Spec{Name: "kv", Kind: storage.KindKeyValue, Logged: true}
	prefix := storage.DataPrefix("0_0", "kv")
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%06d", i)) }
	full := func(i int) []byte { return append(append([]byte(nil), prefix...), key(i)...) }
	const n = 50_000 // ~12 MB of memtable footprint: pieces of a quarter of a 2 MiB memtable

	// Commit 1: every key = "old", changelog offsets [0, n).
	ws := storage.NewWriteSet(p)
	for i := range n {
		ws.Set(full(i), []byte("old"))
	}
	ws.SetOffset("0_0", "kv", n)
	if err := ws.Commit(); err != nil {
		t.Fatal(err)
	}
	// Commit 2: even keys = "new", odd keys deleted; changelog [n, 2n).
	var changelog []storage.ChangelogRecord
	for i := range n {
		if i%2 == 0 {
			ws.Set(full(i), []byte("new"))
			changelog = append(changelog, storage.ChangelogRecord{Key: key(i), Value: []byte("new")})
		} else {
			ws.Delete(full(i))
			changelog = append(changelog, storage.ChangelogRecord{Key: key(i)})
		}
	}
	ws.SetOffset("0_0", "kv", 2*n)
	pieces := 0
	crash := errors.New("crash")
	storage.SetAfterPiece(p, func() error {
		pieces++
		return crash
	})
	if err := ws.Commit(); !errors.Is(err, crash) {
		t.Fatalf("commit: %v, want it cut after its first piece", err)
	}
	storage.SetAfterPiece(p, nil)
	ws.ReleaseReads()
	if pieces != 1 {
		t.Fatalf("%d pieces written before the cut, want 1", pieces)
	}
	off, ok, err := storage.StoredOffset(p, "0_0", "kv")
	if err != nil || !ok || off != n {
		t.Fatalf("stored offset after the cut: %d %v %v, want %d (the previous commit's)", off, ok, err, n)
	}
	changed := 0
	for i := range n {
		v, ok, err := p.Get(full(i))
		if err != nil {
			t.Fatal(err)
		}
		if !ok || string(v) != "old" {
			changed++
		}
	}
	if changed == 0 || changed == n {
		t.Fatalf("%d of %d keys changed after the cut: want part of the commit visible", changed, n)
	}

	// Restore replays the changelog from the stored offset.
	if err := storage.Restore(p, "0_0", spec, changelog[off-n:], 2*n); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v, ok, err := p.Get(full(i))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i%2 == 0 && (!ok || string(v) != "new"):
			t.Fatalf("key %d after the replay: %q (%v), want new", i, v, ok)
		case i%2 == 1 && ok:
			t.Fatalf("key %d after the replay: %q, want deleted", i, v)
		}
	}
	if off, _, _ := storage.StoredOffset(p, "0_0", "kv"); off != 2*n {
		t.Fatalf("stored offset after the replay: %d, want %d", off, 2*n)
	}
}

// A commit written in pieces is whole once Apply returns.
func TestLargeCommitIsWhole(t *testing.T) {
	p, err := storage.OpenPebble(t.TempDir(), storage.PebbleOptions{InMemory: true, Memory: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	prefix := storage.DataPrefix("0_0", "kv")
	pieces := 0
	storage.SetAfterPiece(p, func() error { pieces++; return nil })
	ws := storage.NewWriteSet(p)
	defer ws.ReleaseReads()
	const n = 20_000
	for i := range n {
		ws.Set(fmt.Appendf(append([]byte(nil), prefix...), "key-%06d", i), fmt.Appendf(nil, "v%d", i))
	}
	ws.SetOffset("0_0", "kv", n)
	if err := ws.Commit(); err != nil {
		t.Fatal(err)
	}
	if pieces == 0 {
		t.Fatalf("a commit of %d writes was not written in pieces", n)
	}
	for i := range n {
		v, ok, err := ws.Get(fmt.Appendf(append([]byte(nil), prefix...), "key-%06d", i))
		if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("key %d: %q %v %v", i, v, ok, err)
		}
	}
	if off, ok, err := storage.StoredOffset(p, "0_0", "kv"); err != nil || !ok || off != n {
		t.Fatalf("stored offset %d %v %v, want %d", off, ok, err, n)
	}
}
