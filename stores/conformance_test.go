package stores_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// backends are the implementations every conformance test runs against.
func backends(t *testing.T) map[string]storage.Backend {
	t.Helper()
	p, err := storage.OpenPebble(filepath.Join(t.TempDir(), "db"), storage.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := storage.NewMemory()
	t.Cleanup(func() { p.Close(); m.Close() })
	return map[string]storage.Backend{"pebble": p, "memory": m}
}

// changelog records what a logged store writes.
type changelog struct{ recs []storage.ChangelogRecord }

func (c *changelog) Log(key, value []byte, ts int64) {
	var v []byte
	if value != nil {
		v = slices.Clone(value)
	}
	c.recs = append(c.recs, storage.ChangelogRecord{Key: slices.Clone(key), Value: v, Timestamp: ts})
}

type variant struct {
	name    string
	cached  bool
	logged  bool
	backend string
}

func variants() []variant {
	var out []variant
	for _, b := range []string{"pebble", "memory"} {
		for _, c := range []bool{false, true} {
			for _, l := range []bool{false, true} {
				out = append(out, variant{fmt.Sprintf("%s/cached=%v/logged=%v", b, c, l), c, l, b})
			}
		}
	}
	return out
}

type harness struct {
	b     storage.Backend
	ws    *storage.WriteSet
	cache *storage.Cache
	log   *changelog
	store stores.KeyValueStore[string, string]
	raw   storage.Store
	ts    int64
}

func newHarness(t *testing.T, v variant, b storage.Backend, task string) *harness {
	t.Helper()
	h := &harness{b: b, ws: storage.NewWriteSet(b), log: &changelog{}}
	if v.cached {
		h.cache = storage.NewCache(1 << 20)
	}
	env := storage.Env{Task: task, WriteSet: h.ws, Cache: h.cache, Topic: "app-kv-changelog",
		Timestamp: func() int64 { return h.ts }}
	if v.logged {
		env.Changelog = h.log
	}
	s, err := stores.KeyValue("kv", serde.String(), serde.String()).
		WithCaching(v.cached).WithLogging(v.logged, nil).Build(env)
	if err != nil {
		t.Fatal(err)
	}
	h.raw = s
	h.store = s.(stores.KeyValueStore[string, string])
	return h
}

func (h *harness) commit(t *testing.T) {
	t.Helper()
	if err := h.raw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h.ws.Commit(); err != nil {
		t.Fatal(err)
	}
}

func collect(t *testing.T, it *stores.Iterator[string, string]) []string {
	t.Helper()
	var out []string
	for k, v := range it.Seq() {
		out = append(out, k+"="+v)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestKeyValueStoreConformance(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			h := newHarness(t, v, backends(t)[v.backend], "0_1")
			s := h.store
			if _, ok, err := s.Get("missing"); ok || err != nil {
				t.Fatalf("Get(missing) = %v, %v", ok, err)
			}
			for _, k := range []string{"d", "b", "a", "e", "c"} {
				if err := s.Put(k, "v"+k); err != nil {
					t.Fatal(err)
				}
			}
			if v, ok, _ := s.Get("c"); !ok || v != "vc" {
				t.Fatalf("Get(c) = %q %v", v, ok)
			}
			// Empty values are values, not deletions.
			if err := s.Put("empty", ""); err != nil {
				t.Fatal(err)
			}
			if v, ok, _ := s.Get("empty"); !ok || v != "" {
				t.Fatalf("Get(empty) = %q %v, want present and empty", v, ok)
			}
			if old, existed, _ := s.PutIfAbsent("a", "x"); !existed || old != "va" {
				t.Fatalf("PutIfAbsent(a) = %q %v", old, existed)
			}
			if _, existed, _ := s.PutIfAbsent("f", "vf"); existed {
				t.Fatal("PutIfAbsent(f) said f existed")
			}
			if old, existed, _ := s.Delete("empty"); !existed || old != "" {
				t.Fatalf("Delete(empty) = %q %v", old, existed)
			}
			if _, existed, _ := s.Delete("nope"); existed {
				t.Fatal("Delete(nope) said it existed")
			}
			want := []string{"a=va", "b=vb", "c=vc", "d=vd", "e=ve", "f=vf"}
			check := func(stage string) {
				t.Helper()
				if got := collect(t, s.All()); !slices.Equal(got, want) {
					t.Fatalf("%s: All = %v, want %v", stage, got, want)
				}
				rev := slices.Clone(want)
				slices.Reverse(rev)
				if got := collect(t, s.ReverseAll()); !slices.Equal(got, rev) {
					t.Fatalf("%s: ReverseAll = %v, want %v", stage, got, rev)
				}
				if got := collect(t, s.Range("b", "d")); !slices.Equal(got, want[1:4]) {
					t.Fatalf("%s: Range(b, d) = %v, want %v (both ends included)", stage, got, want[1:4])
				}
				if got := collect(t, s.ReverseRange("b", "d")); !slices.Equal(got, []string{"d=vd", "c=vc", "b=vb"}) {
					t.Fatalf("%s: ReverseRange(b, d) = %v", stage, got)
				}
				if got := collect(t, s.Range("d", "b")); len(got) != 0 {
					t.Fatalf("%s: Range(d, b) = %v, want nothing", stage, got)
				}
			}
			check("before commit")
			h.commit(t)
			check("after commit")
			if n, err := s.ApproximateNumEntries(); err != nil || n != 6 {
				t.Fatalf("ApproximateNumEntries = %d, %v; want 6", n, err)
			}
			// Committed state is what a read-only view (interactive
			// queries) sees.
			ro := stores.ReadOnlyKeyValue(h.b, "0_1", "kv", "app-kv-changelog", serde.String(), serde.String())
			if got := collect(t, ro.All()); !slices.Equal(got, want) {
				t.Fatalf("read-only view = %v, want %v", got, want)
			}
			// Uncommitted writes are seen by the store, not by the view, and
			// vanish on discard.
			s.Put("a", "changed")
			s.Delete("b")
			if v, _, _ := s.Get("a"); v != "changed" {
				t.Fatalf("uncommitted write not visible: %q", v)
			}
			if _, ok, _ := s.Get("b"); ok {
				t.Fatal("uncommitted delete not visible")
			}
			if v, _, _ := ro.Get("a"); v != "va" {
				t.Fatalf("read-only view sees uncommitted %q", v)
			}
			h.raw.Discard()
			h.ws.Discard()
			check("after discard")
			// An early break out of a range-over-func loop closes the
			// iterator; a second Close is harmless.
			it := s.All()
			for range it.Seq() {
				break
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestChangelogRecordsEveryWrite(t *testing.T) {
	h := newHarness(t, variant{logged: true}, storage.NewMemory(), "0_0")
	h.ts = 7
	h.store.Put("a", "1")
	h.ts = 8
	h.store.Put("a", "2")
	h.store.Delete("a")
	want := []storage.ChangelogRecord{{Key: []byte("a"), Value: []byte("1"), Timestamp: 7},
		{Key: []byte("a"), Value: []byte("2"), Timestamp: 8}, {Key: []byte("a"), Value: nil, Timestamp: 8}}
	if fmt.Sprint(h.log.recs) != fmt.Sprint(want) {
		t.Fatalf("changelog = %v, want %v", h.log.recs, want)
	}
}

// With caching, repeated writes of a key between commits reach the
// changelog once, with the last value and the time of the last write.
func TestCacheDedupesWritesUntilFlush(t *testing.T) {
	h := newHarness(t, variant{logged: true, cached: true}, storage.NewMemory(), "0_0")
	for i := range 100 {
		h.ts = int64(i)
		h.store.Put("k", fmt.Sprint(i))
	}
	h.store.Put("gone", "x")
	h.store.Delete("gone")
	if len(h.log.recs) != 0 {
		t.Fatalf("changelog written before flush: %v", h.log.recs)
	}
	h.commit(t)
	if len(h.log.recs) != 2 || string(h.log.recs[0].Value) != "99" || h.log.recs[0].Timestamp != 99 {
		t.Fatalf("changelog after flush = %v, want k=99@99 and a tombstone for gone", h.log.recs)
	}
	if h.log.recs[1].Value != nil {
		t.Fatalf("gone should be logged as a tombstone: %v", h.log.recs[1])
	}
	hits, _, _ := h.cache.Stats()
	if hits == 0 {
		t.Fatal("cache reported no hits")
	}
}

// A cache over its budget evicts least-recently-used entries; a dirty
// victim first flushes its store, so nothing written is lost.
func TestCacheEvictionFlushesDirtyEntries(t *testing.T) {
	b := storage.NewMemory()
	ws := storage.NewWriteSet(b)
	cache := storage.NewCache(2_000) // room for ~15 small entries
	log := &changelog{}
	s, _ := stores.KeyValue("kv", serde.String(), serde.String()).WithCaching(true).
		Build(storage.Env{Task: "0_0", WriteSet: ws, Cache: cache, Changelog: log, Timestamp: func() int64 { return 0 }})
	kv := s.(stores.KeyValueStore[string, string])
	for i := range 200 {
		kv.Put(fmt.Sprintf("key-%03d", i), "value")
	}
	if cache.Size() > 2_000 {
		t.Fatalf("cache holds %d bytes, over its 2000", cache.Size())
	}
	if _, _, ev := cache.Stats(); ev == 0 {
		t.Fatal("no evictions")
	}
	if len(log.recs) == 0 {
		t.Fatal("evicting dirty entries wrote nothing to the changelog")
	}
	s.Flush()
	if len(log.recs) != 200 {
		t.Fatalf("changelog has %d records after flush, want 200 (each key once)", len(log.recs))
	}
	for i := range 200 {
		if v, ok, _ := kv.Get(fmt.Sprintf("key-%03d", i)); !ok || v != "value" {
			t.Fatalf("key-%03d lost", i)
		}
	}
}

func TestFlushListenerGetsOldValues(t *testing.T) {
	b := storage.NewMemory()
	ws := storage.NewWriteSet(b)
	s, _ := stores.KeyValue("kv", serde.String(), serde.String()).WithCaching(true).
		Build(storage.Env{Task: "0_0", WriteSet: ws, Cache: storage.NewCache(1 << 20), Timestamp: func() int64 { return 5 }})
	kv := s.(stores.KeyValueStore[string, string])
	var got []string
	s.(storage.CacheFlusher).SetFlushListener(func(k, nv, ov []byte, ts int64) error {
		got = append(got, fmt.Sprintf("%s:%q<-%q@%d", k, nv, ov, ts))
		return nil
	}, true)
	kv.Put("a", "1")
	s.Flush()
	kv.Put("a", "2")
	kv.Put("a", "3")
	kv.Delete("b")
	s.Flush()
	want := []string{`a:"1"<-""@5`, `a:"3"<-"1"@5`, `b:""<-""@5`}
	if !slices.Equal(got, want) {
		t.Fatalf("flushes = %v, want %v", got, want)
	}
}

// Two tasks' stores share a backend without seeing each other; dropping one
// task removes its data and offsets only.
func TestTasksAreIsolatedAndDroppable(t *testing.T) {
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			h1 := newHarness(t, variant{}, b, "0_1")
			h2 := newHarness(t, variant{}, b, "0_2")
			h1.store.Put("k", "task1")
			h2.store.Put("k", "task2")
			h1.ws.SetOffset("0_1", "kv", 10)
			h2.ws.SetOffset("0_2", "kv", 20)
			h1.commit(t)
			h2.commit(t)
			if v, _, _ := h1.store.Get("k"); v != "task1" {
				t.Fatalf("task 0_1 sees %q", v)
			}
			if err := storage.DropTask(b, "0_1"); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := h1.store.Get("k"); ok {
				t.Fatal("task 0_1's data survived DropTask")
			}
			if _, ok, _ := storage.StoredOffset(b, "0_1", "kv"); ok {
				t.Fatal("task 0_1's offset survived DropTask")
			}
			if v, _, _ := h2.store.Get("k"); v != "task2" {
				t.Fatalf("task 0_2 lost its data: %q", v)
			}
			if off, ok, _ := storage.StoredOffset(b, "0_2", "kv"); !ok || off != 20 {
				t.Fatalf("task 0_2 offset = %d %v", off, ok)
			}
		})
	}
}

func TestRestoreWritesRecordsAndOffset(t *testing.T) {
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			recs := []storage.ChangelogRecord{
				{Key: []byte("a"), Value: []byte("1"), Timestamp: 100},
				{Key: []byte("b"), Value: []byte("2"), Timestamp: 200},
				{Key: []byte("a"), Value: nil, Timestamp: 300},
			}
			if err := storage.Restore(b, "1_0", storage.Spec{Name: "tkv", Timestamped: true}, recs, 3); err != nil {
				t.Fatal(err)
			}
			off, ok, err := storage.StoredOffset(b, "1_0", "tkv")
			if err != nil || !ok || off != 3 {
				t.Fatalf("StoredOffset = %d %v %v", off, ok, err)
			}
			ro := stores.ReadOnlyKeyValue(b, "1_0", "tkv", "t", serde.String(), stores.TimestampedSerde(serde.String()))
			if _, ok, _ := ro.Get("a"); ok {
				t.Fatal("tombstone did not delete a")
			}
			v, ok, _ := ro.Get("b")
			if !ok || v.Value != "2" || v.Timestamp != 200 {
				t.Fatalf("b = %+v %v; want value 2 at 200", v, ok)
			}
			// A plain store: values as they are, an empty one kept.
			plain := []storage.ChangelogRecord{{Key: []byte("x"), Value: []byte("9")}, {Key: []byte("y"), Value: []byte{}}}
			if err := storage.Restore(b, "1_0", storage.Spec{Name: "kv"}, plain, 2); err != nil {
				t.Fatal(err)
			}
			rp := stores.ReadOnlyKeyValue(b, "1_0", "kv", "t", serde.String(), serde.String())
			if x, ok, _ := rp.Get("x"); !ok || x != "9" {
				t.Fatalf("x = %q %v; want 9", x, ok)
			}
			if y, ok, _ := rp.Get("y"); !ok || y != "" {
				t.Fatalf("y = %q %v; want the empty value", y, ok)
			}
		})
	}
}

// A crash (close without committing) leaves the Pebble store exactly at the
// last committed batch and changelog offset.
func TestPebbleCrashLeavesLastCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	p, err := storage.OpenPebble(dir, storage.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, variant{cached: true, logged: true}, p, "0_0")
	for i := range 1000 {
		h.store.Put(fmt.Sprintf("k%04d", i), "committed")
	}
	h.raw.Flush()
	h.ws.SetOffset("0_0", "kv", 1000)
	h.commit(t)
	// The next batch is written but never committed.
	for i := range 1000 {
		h.store.Put(fmt.Sprintf("k%04d", i), "lost")
	}
	h.store.Put("extra", "lost")
	h.raw.Flush()
	h.ws.SetOffset("0_0", "kv", 2001)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	p2, err := storage.OpenPebble(dir, storage.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	off, ok, err := storage.StoredOffset(p2, "0_0", "kv")
	if err != nil || !ok || off != 1000 {
		t.Fatalf("stored offset after crash = %d %v %v, want 1000", off, ok, err)
	}
	ro := stores.ReadOnlyKeyValue(p2, "0_0", "kv", "t", serde.String(), serde.String())
	n := 0
	for k, v := range ro.All().Seq() {
		if v != "committed" {
			t.Fatalf("%s = %q after crash, want the committed value", k, v)
		}
		n++
	}
	if n != 1000 {
		t.Fatalf("%d keys after crash, want 1000", n)
	}
}

// Expiring a window store's old segments under the record cache loses no
// update: the cache is flushed first (every dirty window forwarded and
// logged once), the expired windows are gone from reads and from the
// committed store, and the open ones keep their values.
func TestWindowExpiryUnderCacheLosesNoUpdate(t *testing.T) {
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ws := storage.NewWriteSet(b)
			log := &changelog{}
			s, err := stores.Window("w", serde.String(), serde.Int64(), time.Minute).WithCaching(true).
				Build(storage.Env{Task: "0_0", WriteSet: ws, Cache: storage.NewCache(1 << 20), Changelog: log, Timestamp: func() int64 { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			w := s.(stores.WindowStore[string, int64])
			var forwarded []string
			s.(storage.CacheFlusher).SetFlushListener(func(k, nv, _ []byte, _ int64) error {
				key, start, _ := storage.ParseWindowKey(k)
				forwarded = append(forwarded, fmt.Sprintf("%s@%d", key, start))
				return nil
			}, false)
			const minute = int64(60_000)
			for _, k := range []string{"a", "b"} {
				mustOK(t, w.Put(k, 0, 1))        // segment 0: expires below
				mustOK(t, w.Put(k, 3*minute, 2)) // segment 3: stays
			}
			mustOK(t, w.Put("a", 0, 5)) // dirty again: still one update
			mustOK(t, w.ExpireBefore(3*minute))
			mustOK(t, s.Flush())
			slices.Sort(forwarded)
			if want := []string{"a@0", "a@180000", "b@0", "b@180000"}; !slices.Equal(forwarded, want) {
				t.Fatalf("forwarded %v, want each window once: %v", forwarded, want)
			}
			if len(log.recs) != 4 {
				t.Fatalf("changelog has %d records, want one per window (4)", len(log.recs))
			}
			for _, k := range []string{"a", "b"} {
				if v, ok, err := w.Fetch(k, 0); err != nil || ok {
					t.Fatalf("expired window %s@0 = %d, %v, %v; want gone", k, v, ok, err)
				}
				if v, ok, err := w.Fetch(k, 3*minute); err != nil || !ok || v != 2 {
					t.Fatalf("open window %s@%d = %d, %v, %v; want 2", k, 3*minute, v, ok, err)
				}
			}
			mustOK(t, ws.Commit())
			if all, err := w.FetchAll(0, 10*minute); err != nil || len(all) != 2 {
				t.Fatalf("committed windows = %v, %v; want the 2 open ones", all, err)
			}
		})
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
