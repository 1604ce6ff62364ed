package stores_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// oracle is what a versioned store must answer, kept the obvious way: every
// accepted put per key and timestamp, and stream time.
type oracle struct {
	retention int64
	st        int64
	puts      map[string]map[int64]*string // nil: a deletion
}

func (o *oracle) horizon() int64 {
	if o.st == math.MinInt64 {
		return math.MinInt64
	}
	return o.st - o.retention
}

func (o *oracle) put(k string, v *string, ts int64) bool {
	if ts < o.horizon() {
		return false
	}
	if o.puts[k] == nil {
		o.puts[k] = map[int64]*string{}
	}
	o.puts[k][ts] = v
	o.st = max(o.st, ts)
	return true
}

// timeline is the key's versions, oldest first.
func (o *oracle) timeline(k string) []stores.VersionedRecord[*string] {
	var ts []int64
	for t := range o.puts[k] {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	var out []stores.VersionedRecord[*string]
	for i, t := range ts {
		to := stores.NoValidTo
		if i+1 < len(ts) {
			to = ts[i+1]
		}
		out = append(out, stores.VersionedRecord[*string]{Value: o.puts[k][t], Timestamp: t, ValidTo: to})
	}
	return out
}

func (o *oracle) asOf(k string, t int64) (string, int64, bool) {
	tl := o.timeline(k)
	if t < o.horizon() {
		// Only the latest version (a value) never expires.
		if len(tl) == 0 {
			return "", 0, false
		}
		l := tl[len(tl)-1]
		if l.Value == nil || l.Timestamp > t {
			return "", 0, false
		}
		return *l.Value, l.Timestamp, true
	}
	for _, v := range tl {
		if v.Timestamp <= t && t < v.ValidTo {
			if v.Value == nil {
				return "", 0, false
			}
			return *v.Value, v.Timestamp, true
		}
	}
	return "", 0, false
}

func (o *oracle) versions(k string, from, to int64) []string {
	tl := o.timeline(k)
	var out []string
	if to < o.horizon() {
		if len(tl) > 0 {
			l := tl[len(tl)-1]
			if l.Value != nil && l.Timestamp <= to && from <= to {
				out = append(out, fmt.Sprintf("%s@%d-%d", *l.Value, l.Timestamp, l.ValidTo))
			}
		}
		return out
	}
	from = max(from, o.horizon())
	for _, v := range tl {
		if v.Value != nil && v.Timestamp <= to && v.ValidTo > from && from <= to {
			out = append(out, fmt.Sprintf("%s@%d-%d", *v.Value, v.Timestamp, v.ValidTo))
		}
	}
	return out
}

func versionedHarness(t *testing.T, b storage.Backend, log *changelog, retention time.Duration) (stores.VersionedKeyValueStore[string, string], storage.Store, *storage.WriteSet) {
	t.Helper()
	ws := storage.NewWriteSet(b)
	env := storage.Env{Task: "0_0", WriteSet: ws, Topic: "app-vs-changelog", Timestamp: func() int64 { return 0 }}
	if log != nil {
		env.Changelog = log
	}
	s, err := stores.VersionedKeyValue("vs", serde.String(), serde.String(), retention).Build(env)
	if err != nil {
		t.Fatal(err)
	}
	return s.(stores.VersionedKeyValueStore[string, string]), s, ws
}

func commitStore(t *testing.T, s storage.Store, ws *storage.WriteSet) {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ws.Commit(); err != nil {
		t.Fatal(err)
	}
}

// Random puts and deletes, out of order, on both backends, against the
// oracle: every as-of read at every time around the versions, latest
// reads, version ranges both ways, refusals of puts older than the history
// — then the same answers from a store restored from the changelog alone.
func TestVersionedStoreMatchesTheModel(t *testing.T) {
	for seed := range uint64(40) {
		for name, b := range backends(t) {
			r := rand.New(rand.NewPCG(seed, 7))
			retention := int64(20 + r.IntN(200))
			log := &changelog{}
			s, raw, ws := versionedHarness(t, b, log, time.Duration(retention)*time.Millisecond)
			o := &oracle{retention: retention, st: math.MinInt64, puts: map[string]map[int64]*string{}}
			keys := 1 + r.IntN(5)
			now := int64(1000)
			check := func(s stores.ReadOnlyVersionedKeyValueStore[string, string], when string) {
				t.Helper()
				for k := range keys {
					key := fmt.Sprint("k", k)
					for at := now - 400; at <= now+20; at++ {
						want, wts, wok := o.asOf(key, at)
						got, ok, err := s.GetAsOf(key, at)
						if err != nil {
							t.Fatal(err)
						}
						if ok != wok || (ok && (got.Value != want || got.Timestamp != wts)) {
							t.Fatalf("seed %d %s %s: GetAsOf(%s, %d) = %+v %v, want %q@%d %v\ntimeline %v", seed, name, when, key, at, got, ok, want, wts, wok, o.timeline(key))
						}
					}
					want, wts, wok := o.asOf(key, math.MaxInt64-1)
					got, ok, _ := s.Get(key)
					if ok != wok || (ok && (got.Value != want || got.Timestamp != wts || got.ValidTo != stores.NoValidTo)) {
						t.Fatalf("seed %d %s %s: Get(%s) = %+v %v, want %q@%d %v", seed, name, when, key, got, ok, want, wts, wok)
					}
					from, to := now-300+r.Int64N(200), now-100+r.Int64N(150)
					vs, err := s.Versions(key, from, to, true)
					if err != nil {
						t.Fatal(err)
					}
					var gotVs []string
					for _, v := range vs {
						gotVs = append(gotVs, fmt.Sprintf("%s@%d-%d", v.Value, v.Timestamp, v.ValidTo))
					}
					if wantVs := o.versions(key, from, to); !slices.Equal(gotVs, wantVs) {
						t.Fatalf("seed %d %s %s: Versions(%s, %d, %d) = %v, want %v", seed, name, when, key, from, to, gotVs, wantVs)
					}
					desc, _ := s.Versions(key, from, to, false)
					if len(desc) != len(vs) || (len(vs) > 0 && desc[0] != vs[len(vs)-1]) {
						t.Fatalf("seed %d: descending versions %v are not the ascending %v reversed", seed, desc, vs)
					}
				}
			}
			for i := range 60 + r.IntN(100) {
				now += r.Int64N(8)
				ts := now - r.Int64N(40)
				switch x := r.IntN(12); {
				case x == 0:
					ts = now - 100 - r.Int64N(300) // often older than the history
				case x == 1 && o.st != math.MinInt64:
					ts = o.horizon() - r.Int64N(2) // at the edge of the history, or just past it
				}
				key := fmt.Sprint("k", r.IntN(keys))
				var want, put bool
				var validTo int64
				var err error
				before := o.st
				if r.IntN(5) == 0 {
					want = o.put(key, nil, ts)
					validTo, put, err = s.Delete(key, ts)
				} else {
					v := fmt.Sprint("v", i)
					want = o.put(key, &v, ts)
					validTo, put, err = s.Put(key, v, ts)
				}
				if err != nil {
					t.Fatal(err)
				}
				if put != want {
					t.Fatalf("seed %d %s: put of %s at %d (stream time %d, retention %d): stored %v, want %v", seed, name, key, ts, before, retention, put, want)
				}
				if put {
					for _, v := range o.timeline(key) {
						if v.Timestamp == ts && v.ValidTo != validTo {
							t.Fatalf("seed %d %s: put of %s at %d: valid to %d, want %d", seed, name, key, ts, validTo, v.ValidTo)
						}
					}
				}
				if r.IntN(10) == 0 {
					commitStore(t, raw, ws)
				}
			}
			check(s, "live")
			commitStore(t, raw, ws)

			// A fresh backend, restored from the changelog alone.
			fresh := storage.NewMemory()
			if err := storage.Restore(fresh, "0_0", stores.VersionedKeyValue("vs", serde.String(), serde.String(), 0).SpecForTest(), log.recs, int64(len(log.recs))); err != nil {
				t.Fatal(err)
			}
			restored, _, _ := versionedHarness(t, fresh, nil, time.Duration(retention)*time.Millisecond)
			check(restored, "restored")
			if st, _ := restored.StreamTime(); st != o.st {
				t.Fatalf("seed %d: restored stream time %d, want %d", seed, st, o.st)
			}
		}
	}
}

// The history is dropped as stream time passes it, not kept for ever: a
// key rewritten many times holds only the versions the retention needs.
func TestVersionedStoreDropsOldVersions(t *testing.T) {
	b := storage.NewMemory()
	defer b.Close()
	s, raw, ws := versionedHarness(t, b, nil, 100*time.Millisecond)
	for ts := int64(0); ts < 10_000; ts += 10 {
		if _, ok, err := s.Put("k", fmt.Sprint(ts), ts); err != nil || !ok {
			t.Fatalf("put at %d: %v %v", ts, ok, err)
		}
	}
	commitStore(t, raw, ws)
	n := 0
	it := b.Iter(nil, nil, false)
	for it.Next() {
		n++
	}
	it.Close()
	// About 10 versions in the last 100 ms, each with its index entry.
	if n > 30 {
		t.Fatalf("%d entries kept for one key after 1000 versions with 100 ms of history", n)
	}
	if _, ok, _ := s.GetAsOf("k", 9_800); ok {
		t.Fatal("a version older than the history answered")
	}
	if r, ok, _ := s.GetAsOf("k", 9_995); !ok || r.Value != "9990" || r.ValidTo != stores.NoValidTo {
		t.Fatalf("GetAsOf(9995) = %+v %v, want the latest", r, ok)
	}
	if r, ok, _ := s.GetAsOf("k", 9_905); !ok || r.Value != "9900" || r.ValidTo != 9910 {
		t.Fatalf("GetAsOf(9905) = %+v %v", r, ok)
	}
}
