package stores_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Interactive queries read one store across the tasks an instance owns:
// lookups find a key in whichever task has it, iterations merge the tasks'
// keys in order (both directions), and only committed writes are seen.
func TestCommittedViewsAcrossTasks(t *testing.T) {
	for _, backend := range []string{"pebble", "memory"} {
		t.Run(backend, func(t *testing.T) {
			var b storage.Backend = storage.NewMemory()
			if backend == "pebble" {
				p, err := storage.OpenPebble(t.TempDir(), storage.PebbleOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				b = p
			}
			ws := storage.NewWriteSet(b)
			kb := stores.KeyValue("counts", serde.String(), serde.Int64())
			tasks := map[string][]string{"0_0": {"b", "e"}, "0_1": {"a", "d", "f"}, "0_2": {"c"}}
			for task, keys := range tasks {
				s, err := kb.Build(storage.Env{Task: task, WriteSet: ws})
				if err != nil {
					t.Fatal(err)
				}
				for i, k := range keys {
					if err := s.(stores.KeyValueStore[string, int64]).Put(k, int64(i+1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			ro := kb.ReadOnly(storage.CommittedViews(b, []string{"0_0", "0_1", "0_2"}, "counts"), "counts")
			if _, ok, _ := ro.Get("a"); ok {
				t.Fatal("an uncommitted write is visible")
			}
			if err := ws.Commit(); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := ro.Get("d"); err != nil || !ok || v != 2 {
				t.Fatalf("Get(d) = %d %v %v, want 2 from task 0_1", v, ok, err)
			}
			if _, ok, _ := ro.Get("zz"); ok {
				t.Fatal("Get found a key no task has")
			}
			collect := func(it *stores.Iterator[string, int64]) string {
				s := ""
				for k, v := range it.Seq() {
					s += fmt.Sprintf("%s%d ", k, v)
				}
				if it.Err() != nil {
					t.Fatal(it.Err())
				}
				return s
			}
			if got := collect(ro.All()); got != "a1 b1 c1 d2 e2 f3 " {
				t.Fatalf("All = %q", got)
			}
			if got := collect(ro.ReverseRange("b", "e")); got != "e2 d2 c1 b1 " {
				t.Fatalf("ReverseRange(b, e) = %q", got)
			}
			if n, err := ro.ApproximateNumEntries(); err != nil || n != 6 {
				t.Fatalf("ApproximateNumEntries = %d %v, want 6", n, err)
			}
			only := kb.ReadOnly(storage.CommittedViews(b, []string{"0_1"}, "counts"), "counts")
			if got := collect(only.All()); got != "a1 d2 f3 " {
				t.Fatalf("one task's All = %q", got)
			}
		})
	}
}

// Window and session stores read back read-only over committed data.
func TestReadOnlyWindowAndSessionStores(t *testing.T) {
	b := storage.NewMemory()
	ws := storage.NewWriteSet(b)
	wb := stores.Window("w", serde.String(), serde.Int64(), time.Hour)
	sb := stores.Session("s", serde.String(), serde.Int64(), time.Hour)
	w, err := wb.Build(storage.Env{Task: "0_0", WriteSet: ws})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sb.Build(storage.Env{Task: "0_1", WriteSet: ws})
	if err != nil {
		t.Fatal(err)
	}
	ww := w.(stores.WindowStore[string, int64])
	ss := s.(stores.SessionStore[string, int64])
	for i, start := range []int64{0, 60_000, 120_000} {
		ww.Put("k", start, int64(i+1))
	}
	ww.Put("j", 60_000, 9)
	ss.Put("k", 10, 20, 2)
	ss.Put("k", 500, 900, 5)
	if err := ws.Commit(); err != nil {
		t.Fatal(err)
	}
	rw := wb.ReadOnly(storage.CommittedViews(b, []string{"0_0"}, "w"), "w")
	if v, ok, err := rw.Fetch("k", 60_000); err != nil || !ok || v != 2 {
		t.Fatalf("Fetch = %d %v %v", v, ok, err)
	}
	got, err := rw.FetchRange("k", 0, 60_000)
	if err != nil || len(got) != 2 || got[1].Value != 2 {
		t.Fatalf("FetchRange = %v %v", got, err)
	}
	all, err := rw.FetchAll(60_000, 60_000)
	if err != nil || len(all) != 2 || all[0].Key != "j" || all[1].Key != "k" {
		t.Fatalf("FetchAll = %v %v", all, err)
	}
	rs := sb.ReadOnly(storage.CommittedViews(b, []string{"0_1"}, "s"), "s")
	sess, err := rs.FetchSessions("k")
	if err != nil || len(sess) != 2 || sess[0].End != 20 || sess[1].Value != 5 {
		t.Fatalf("FetchSessions = %v %v", sess, err)
	}
}
