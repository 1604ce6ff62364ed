package storage

import (
	"errors"
	"fmt"
	"testing"
)

// gatedBackend applies a batch only once the test lets it (or fails it).
type gatedBackend struct {
	*Memory
	gate chan error
}

func (g *gatedBackend) Apply(b *Batch) error {
	if err := <-g.gate; err != nil {
		return err
	}
	return g.Memory.Apply(b)
}

func wsGet(t *testing.T, w *WriteSet, key string) string {
	t.Helper()
	v, ok, err := w.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "<none>"
	}
	return string(v)
}

func wsScan(t *testing.T, w *WriteSet, reverse bool) string {
	t.Helper()
	it := w.Iter(nil, nil, reverse)
	defer it.Close()
	s := ""
	for it.Next() {
		s += fmt.Sprintf("%s=%s ", it.Key(), it.Value())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// With ApplyInBackground, Commit returns before the backend has the writes;
// reads (point and range, with range deletions on either side) see exactly
// what they would have seen had the apply been done, before, during and
// after it; the next Commit and Wait wait for it.
func TestWriteSetAppliesInBackground(t *testing.T) {
	b := &gatedBackend{Memory: NewMemory(), gate: make(chan error)}
	w := NewWriteSet(b)
	w.ApplyInBackground()
	go func() { b.gate <- nil }()
	for _, k := range []string{"a", "b", "c", "d"} {
		w.Set([]byte(k), []byte("0"))
	}
	if err := w.Commit(); err != nil { // applied in the background
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := wsScan(t, w, false); got != "a=0 b=0 c=0 d=0 " {
		t.Fatalf("after the first apply: %q", got)
	}

	// Commit 2: b=1, c deleted, e=1; not applied until the gate opens.
	w.Set([]byte("b"), []byte("1"))
	w.Delete([]byte("c"))
	w.Set([]byte("e"), []byte("1"))
	w.DeleteRange([]byte("a"), []byte("b")) // a
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Memory.Get([]byte("b")); !ok {
		t.Fatal("the backend lost b")
	}
	if v, _, _ := b.Memory.Get([]byte("b")); string(v) != "0" {
		t.Fatalf("the backend has commit 2 (b=%s) before its apply ran", v)
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		var fwd, rev string
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			if v, ok := want[k]; ok {
				fwd += k + "=" + v + " "
				rev = k + "=" + v + " " + rev
			}
		}
		if got := wsScan(t, w, false); got != fwd {
			t.Errorf("%s: scan %q, want %q", when, got, fwd)
		}
		if got := wsScan(t, w, true); got != rev {
			t.Errorf("%s: reverse scan %q, want %q", when, got, rev)
		}
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			v, ok := want[k]
			if !ok {
				v = "<none>"
			}
			if got := wsGet(t, w, k); got != v {
				t.Errorf("%s: get %s: %s, want %s", when, k, got, v)
			}
		}
	}
	check("while the apply waits", map[string]string{"b": "1", "d": "0", "e": "1"})
	// Commit 3's writes, pending on top: d deleted by a range, f set, e
	// overwritten.
	w.DeleteRange([]byte("d"), []byte("e"))
	w.Set([]byte("f"), []byte("2"))
	w.Set([]byte("e"), []byte("2"))
	want3 := map[string]string{"b": "1", "e": "2", "f": "2"}
	check("pending writes over the apply", want3)
	b.gate <- nil // the apply runs
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	check("pending writes over the applied backend", want3)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	go func() { b.gate <- nil }()
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	it := b.Memory.Iter(nil, nil, false)
	s := ""
	for it.Next() {
		s += fmt.Sprintf("%s=%s ", it.Key(), it.Value())
	}
	it.Close()
	if s != "b=1 e=2 f=2 " {
		t.Fatalf("backend after three commits: %q", s)
	}
}

// A failed background apply keeps its writes readable and fails the next
// Commit and every Wait after it.
func TestWriteSetFailedBackgroundApply(t *testing.T) {
	b := &gatedBackend{Memory: NewMemory(), gate: make(chan error, 1)}
	w := NewWriteSet(b)
	w.ApplyInBackground()
	w.Set([]byte("k"), []byte("v"))
	w.SetOffset("0_0", "s", 7)
	disk := errors.New("disk full")
	b.gate <- disk
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := wsGet(t, w, "k"); got != "v" {
		t.Fatalf("k reads %s while its apply failed", got)
	}
	w.Set([]byte("j"), []byte("w"))
	if err := w.Commit(); !errors.Is(err, disk) {
		t.Fatalf("next commit: %v, want the apply's error", err)
	}
	if err := w.Wait(); !errors.Is(err, disk) {
		t.Fatalf("wait: %v, want the apply's error", err)
	}
	if got := wsGet(t, w, "k"); got != "v" {
		t.Fatalf("k reads %s after the failure was reported", got)
	}
	if _, ok, _ := b.Memory.Get([]byte("k")); ok {
		t.Fatal("the failed batch reached the backend")
	}
}
