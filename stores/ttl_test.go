package stores_test

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// ttlOracle is the plain computation a store with a time to live must
// match: an entry lives while stream time is below its timestamp plus the
// TTL, and expires (a tombstone) at the first store operation after that.
type ttlOracle struct {
	ttl     int64
	entries map[string]oracleEntry
}

type oracleEntry struct {
	value string
	ts    int64
}

// expire removes what the cut-off reached, returning the keys in the order
// a time index yields them: by timestamp, then key.
func (o *ttlOracle) expire(streamTime int64) []string {
	if streamTime < 0 {
		return nil
	}
	type kt struct {
		k  string
		ts int64
	}
	var due []kt
	for k, e := range o.entries {
		if e.ts <= streamTime-o.ttl {
			due = append(due, kt{k, e.ts})
		}
	}
	slices.SortFunc(due, func(a, b kt) int { return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.k, b.k)) })
	out := make([]string, len(due))
	for i, d := range due {
		delete(o.entries, d.k)
		out[i] = d.k
	}
	return out
}

func (o *ttlOracle) live() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(o.entries)) {
		out = append(out, k+"="+o.entries[k].value)
	}
	return out
}

type ttlHarness struct {
	b          storage.Backend
	ws         *storage.WriteSet
	cache      *storage.Cache
	log        *changelog
	raw        storage.Store
	kv         stores.KeyValueStore[string, string]
	ts, stream int64
	expired    []string
}

func newTTLHarness(t *testing.T, b storage.Backend, cached bool, ttl time.Duration, stream int64) *ttlHarness {
	t.Helper()
	h := &ttlHarness{b: b, ws: storage.NewWriteSet(b), log: &changelog{}, stream: stream}
	if cached {
		h.cache = storage.NewCache(4 << 10) // small: evictions write through mid-commit
	}
	env := storage.Env{Task: "0_0", WriteSet: h.ws, Cache: h.cache, Changelog: h.log, Topic: "app-kv-changelog",
		Timestamp: func() int64 { return h.ts }, StreamTime: func() int64 { return h.stream }}
	s, err := ttlBuilder(cached, ttl).Build(env)
	if err != nil {
		t.Fatal(err)
	}
	h.raw = s
	h.kv = s.(stores.KeyValueStore[string, string])
	if !cached { // a cached DSL store has no listener: expiry then deletes without reading
		s.(storage.Expirer).SetExpiryListener(func(key, old []byte, ts int64) error {
			h.expired = append(h.expired, string(key))
			return nil
		})
	}
	return h
}

func ttlBuilder(cached bool, ttl time.Duration) *stores.KeyValueBuilder[string, string] {
	return stores.KeyValue("kv", serde.String(), serde.String()).WithCaching(cached).WithTTL(ttl)
}

// TestTTLMatchesOracle drives stores with a time to live through random
// writes, deletes, reads, commits, aborts and restores, with random gaps in
// stream time and out-of-order timestamps, and compares every step with the
// oracle: contents, reads, iteration and the expired keys reported.
func TestTTLMatchesOracle(t *testing.T) {
	const ttl = 50 * time.Millisecond
	for _, backend := range []string{"pebble", "memory"} {
		for _, cached := range []bool{false, true} {
			for seed := range uint64(4) {
				t.Run(fmt.Sprintf("%s/cached=%v/seed=%d", backend, cached, seed), func(t *testing.T) {
					runTTLOracle(t, backends(t)[backend], cached, ttl, seed)
				})
			}
		}
	}
}

func runTTLOracle(t *testing.T, b storage.Backend, cached bool, ttl time.Duration, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	h := newTTLHarness(t, b, cached, ttl, -1)
	o := &ttlOracle{ttl: ttl.Milliseconds(), entries: map[string]oracleEntry{}}
	committed := &ttlOracle{ttl: o.ttl, entries: map[string]oracleEntry{}}
	var want []string // expired keys the oracle reported, for the uncached listener
	logged := 0       // changelog records committed
	key := func() string { return fmt.Sprintf("k%02d", rng.IntN(40)) }
	step := func(op string) {
		t.Helper()
		want = append(want, o.expire(h.stream)...)
		_ = op
	}
	for i := range 3000 {
		// Records mostly advance stream time a little, sometimes jump, and
		// sometimes arrive out of order (a timestamp behind stream time).
		switch r := rng.IntN(20); {
		case r < 12:
			h.ts = max(h.stream, 0) + int64(rng.IntN(4))
		case r < 13:
			h.ts = max(h.stream, 0) + int64(rng.IntN(200))
		default:
			h.ts = max(h.stream, 0) - int64(rng.IntN(80))
		}
		h.ts = max(h.ts, 0)
		h.stream = max(h.stream, h.ts)
		switch r := rng.IntN(100); {
		case r < 55:
			k, v := key(), fmt.Sprintf("v%d", i)
			step("put")
			if err := h.kv.Put(k, v); err != nil {
				t.Fatal(err)
			}
			o.entries[k] = oracleEntry{v, h.ts}
		case r < 65:
			k := key()
			step("delete")
			if _, _, err := h.kv.Delete(k); err != nil {
				t.Fatal(err)
			}
			delete(o.entries, k)
		case r < 85:
			k := key()
			step("get")
			v, ok, err := h.kv.Get(k)
			if err != nil {
				t.Fatal(err)
			}
			e, wok := o.entries[k]
			// A late write can carry a timestamp already past its time:
			// present in the oracle until the next operation expires it, but
			// never readable.
			if wok && e.ts <= h.stream-o.ttl {
				wok = false
			}
			if ok != wok || (ok && v != e.value) {
				t.Fatalf("step %d: Get(%s) = %q %v, want %q %v (stream time %d)", i, k, v, ok, e.value, wok, h.stream)
			}
		case r < 90:
			step("all")
			got := collect(t, h.kv.All())
			var live []string
			for _, kv := range o.live() {
				k := kv[:3]
				if o.entries[k].ts > h.stream-o.ttl {
					live = append(live, kv)
				}
			}
			if !slices.Equal(got, live) {
				t.Fatalf("step %d: All() = %v, want %v", i, got, live)
			}
		case r < 97:
			step("commit")
			if err := h.raw.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := h.ws.Commit(); err != nil {
				t.Fatal(err)
			}
			committed.entries = maps.Clone(o.entries)
			logged = len(h.log.recs)
		default:
			// An abort: back to the last commit; a read_committed restore
			// never sees the aborted changelog records.
			h.raw.Discard()
			h.ws.Discard()
			h.log.recs = h.log.recs[:logged]
			o.entries = maps.Clone(committed.entries)
			want = nil
			h.expired = nil
		}
		if !cached && !slices.Equal(h.expired, want) {
			t.Fatalf("step %d: expired %v, want %v", i, h.expired, want)
		}
		if cached {
			want, h.expired = nil, nil // a cached store's expiries reach its flush listener instead
		}
	}
	if err := h.raw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h.ws.Commit(); err != nil {
		t.Fatal(err)
	}
	o.expire(h.stream)

	// Restore the changelog into an empty backend: the same live entries,
	// and they expire at the same stream time as the original's.
	rb := storage.NewMemory()
	defer rb.Close()
	if err := storage.Restore(rb, "0_0", ttlBuilder(cached, ttl).Spec(), h.log.recs, int64(len(h.log.recs))); err != nil {
		t.Fatal(err)
	}
	r := newTTLHarness(t, rb, cached, ttl, h.stream)
	r.ts = h.stream
	if got, want := collect(t, r.kv.All()), o.live(); !slices.Equal(got, want) {
		t.Fatalf("restored store holds %v, want %v", got, want)
	}
	more := int64(rng.IntN(30))
	for _, s := range []*ttlHarness{h, r} {
		s.stream += more
		s.ts = s.stream
	}
	o.expire(h.stream)
	for _, s := range []*ttlHarness{h, r} {
		if got, want := collect(t, s.kv.All()), o.live(); !slices.Equal(got, want) {
			t.Fatalf("after more stream time the store holds %v, want %v", got, want)
		}
	}
	// Stream time far ahead: everything goes.
	for _, s := range []*ttlHarness{h, r} {
		s.stream += 10 * o.ttl
		if got := collect(t, s.kv.All()); len(got) != 0 {
			t.Fatalf("every entry should have expired, left %v", got)
		}
		if n, err := s.kv.ApproximateNumEntries(); err != nil || n != 0 {
			t.Fatalf("ApproximateNumEntries = %d, %v after everything expired", n, err)
		}
	}
}

// TestTTLQueryViewHidesExpired: interactive queries read committed state
// and never return an entry the committed cut-off expired, even one the
// store has not deleted yet (a late write that was already past its time).
func TestTTLQueryViewHidesExpired(t *testing.T) {
	b := storage.NewMemory()
	defer b.Close()
	h := newTTLHarness(t, b, false, time.Second, -1)
	spec := ttlBuilder(false, time.Second).Spec()
	h.ts, h.stream = 10_000, 10_000
	for _, k := range []string{"a", "b"} {
		if err := h.kv.Put(k, "v"+k); err != nil {
			t.Fatal(err)
		}
	}
	h.ts = 8_000 // late, and already a second behind stream time
	if err := h.kv.Put("late", "x"); err != nil {
		t.Fatal(err)
	}
	if err := h.raw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h.ws.Commit(); err != nil {
		t.Fatal(err)
	}
	view, err := storage.QueryViews(b, []string{"0_0"}, spec)
	if err != nil {
		t.Fatal(err)
	}
	q := ttlBuilder(false, time.Second).ReadOnly(view, "app-kv-changelog")
	if got := collect(t, q.All()); !slices.Equal(got, []string{"a=va", "b=vb"}) {
		t.Fatalf("query sees %v, want [a=va b=vb]", got)
	}
	if _, ok, _ := q.Get("late"); ok {
		t.Fatal("query returned an entry written already expired")
	}
	live, expired, ok, err := storage.TTLStats(b, "0_0", "kv")
	if err != nil || !ok || live != 2 || expired != 1 {
		t.Fatalf("TTLStats = %d live, %d expired, %v, %v; want 2, 1 (the late one expired by the commit)", live, expired, ok, err)
	}
	h.ts, h.stream = 11_000, 11_000
	if _, _, err := h.kv.Get("a"); err != nil {
		t.Fatal(err)
	}
	if err := h.raw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h.ws.Commit(); err != nil {
		t.Fatal(err)
	}
	if live, expired, _, _ := storage.TTLStats(b, "0_0", "kv"); live != 0 || expired != 3 {
		t.Fatalf("TTLStats = %d live, %d expired; want 0, 3", live, expired)
	}
}

// TestTTLWallClock: with WallClockTime an entry expires by the clock, and
// a query of committed state hides it even though no record came since.
func TestTTLWallClock(t *testing.T) {
	b := storage.NewMemory()
	defer b.Close()
	ws := storage.NewWriteSet(b)
	var ts int64
	bl := stores.KeyValue("kv", serde.String(), serde.String()).WithTTL(time.Hour, stores.WallClockTime)
	s, err := bl.Build(storage.Env{Task: "0_0", WriteSet: ws, Timestamp: func() int64 { return ts }, StreamTime: func() int64 { return ts }})
	if err != nil {
		t.Fatal(err)
	}
	kv := s.(stores.KeyValueStore[string, string])
	now := time.Now().UnixMilli()
	ts = now - 2*time.Hour.Milliseconds()
	if err := kv.Put("old", "x"); err != nil {
		t.Fatal(err)
	}
	ts = now
	if err := kv.Put("new", "y"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := kv.Get("old"); ok {
		t.Fatal("an entry written two hours ago lives with a one-hour wall-clock TTL")
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ws.Commit(); err != nil {
		t.Fatal(err)
	}
	view, err := storage.QueryViews(b, []string{"0_0"}, bl.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, bl.ReadOnly(view, "kv").All()); !slices.Equal(got, []string{"new=y"}) {
		t.Fatalf("query sees %v, want [new=y]", got)
	}
}
