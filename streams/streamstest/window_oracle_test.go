package streamstest_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// The windowed oracle: random events whose disorder stays within the grace
// period (so none is late) are summed per key and window by tumbling,
// hopping, sliding and session windows; the final result of every window
// must equal a batch computation over the same events. Emitting on every
// update (cache on or off), the last result per window is final; emitting
// on close, each window comes out exactly once.
func TestOracleWindows(t *testing.T) {
	const (
		size  = 100
		hop   = 40
		slide = 50
		gap   = 30
		grace = 60
	)
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, onClose := range []bool{false, true} {
		for _, cache := range []int64{-1, 4096} {
			if onClose && cache > 0 {
				continue // emit-on-close windows are not cached
			}
			for seed := range uint64(4) {
				t.Run(fmt.Sprintf("on-close=%v/cache=%d/seed=%d", onClose, cache, seed), func(t *testing.T) {
					i64 := serde.Int64()
					b := topology.NewBuilder()
					g := topology.Stream(b, "events", topology.Consumed(str, i64)).GroupByKey()
					sum := func(_ string, v, s int64) int64 { return s + v }
					zero := func() int64 { return 0 }
					windowed := func(name string, w topology.Windows) {
						ws := g.WindowedBy(w)
						if onClose {
							ws = ws.EmitOnWindowClose()
						}
						flatWindowedTo(topology.WindowedAggregate(ws, zero, sum, topology.Materialized[string, int64](name).WithSerdes(str, i64)), name)
					}
					windowed("tumbling", topology.TumblingWindows(ms(size), ms(grace)))
					windowed("hopping", topology.HoppingWindows(ms(size), ms(hop), ms(grace)))
					windowed("sliding", topology.SlidingWindows(ms(slide), ms(grace)))
					sw := g.WindowedBySession(topology.Sessions(ms(gap), ms(grace)))
					if onClose {
						sw = sw.EmitOnWindowClose()
					}
					s := topology.SessionAggregate(sw, zero, sum,
						func(_ string, a, b int64) int64 { return a + b }, topology.Materialized[string, int64]("session").WithSerdes(str, i64))
					flatWindowedTo(s, "session")
					top, err := b.Build()
					if err != nil {
						t.Fatal(err)
					}
					d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: cache, ManualCommit: true})
					in := streamstest.Input(d, "events", str, i64)

					rng := rand.New(rand.NewPCG(seed, 7))
					type event struct {
						key    string
						ts, v  int64
						serial int
					}
					var events []event
					for i := range 1500 {
						// Up to grace behind the latest timestamp: never late.
						ts := int64(i*7) + rng.Int64N(grace)
						e := event{key: "k" + strconv.Itoa(rng.IntN(8)), ts: ts, v: 1 + rng.Int64N(100), serial: i}
						events = append(events, e)
						in.PipeAt(e.key, e.v, e.ts)
						if rng.IntN(40) == 0 {
							if err := d.Commit(); err != nil {
								t.Fatal(err)
							}
						}
					}
					// A later record on another key moves stream time past
					// every window's close; then commit to flush caches.
					in.PipeAt("zz-end", 0, 1_000_000)
					if err := d.Commit(); err != nil {
						t.Fatal(err)
					}

					byKey := map[string][]int64{} // timestamps per key
					vals := map[string]map[int64]int64{}
					for _, e := range events {
						byKey[e.key] = append(byKey[e.key], e.ts)
						if vals[e.key] == nil {
							vals[e.key] = map[int64]int64{}
						}
						vals[e.key][e.ts] += e.v
					}
					sumIn := func(k string, from, to int64) (s int64) { // [from, to]
						for ts, v := range vals[k] {
							if ts >= from && ts <= to {
								s += v
							}
						}
						return s
					}
					want := map[string]map[string]int64{"tumbling": {}, "hopping": {}, "sliding": {}, "session": {}}
					for k, tss := range byKey {
						slices.Sort(tss)
						for _, ts := range tss {
							for start := max(0, ts-size+hop) / hop * hop; start <= ts; start += hop {
								want["hopping"][fmt.Sprintf("%s@%d/%d", k, start, start+size)] = sumIn(k, start, start+size-1)
							}
							start := ts / size * size
							want["tumbling"][fmt.Sprintf("%s@%d/%d", k, start, start+size)] = sumIn(k, start, start+size-1)
							// Sliding: each record's left window, and its right
							// window when a later record falls into it.
							left := max(0, ts-slide)
							want["sliding"][fmt.Sprintf("%s@%d/%d", k, left, left+slide)] = sumIn(k, left, left+slide)
							if sumIn(k, ts+1, ts+1+slide) > 0 {
								want["sliding"][fmt.Sprintf("%s@%d/%d", k, ts+1, ts+1+slide)] = sumIn(k, ts+1, ts+1+slide)
							}
						}
						// Sessions: runs of timestamps no more than gap apart.
						for i := 0; i < len(tss); {
							j := i
							for j+1 < len(tss) && tss[j+1]-tss[j] <= gap {
								j++
							}
							want["session"][fmt.Sprintf("%s@%d/%d", k, tss[i], tss[j])] = sumIn(k, tss[i], tss[j])
							i = j + 1
						}
					}
					for _, name := range []string{"tumbling", "hopping", "sliding", "session"} {
						recs := streamstest.Output(d, name, str, i64).ReadRecords()
						got := map[string]int64{}
						seen := map[string]int{}
						for _, r := range recs {
							if r.NullValue {
								delete(got, r.Key) // a merged-away session
								continue
							}
							if len(r.Key) >= 6 && r.Key[:6] == "zz-end" {
								continue
							}
							got[r.Key] = r.Value
							seen[r.Key]++
						}
						if !maps.Equal(got, want[name]) {
							t.Errorf("%s: final window results differ from the batch computation\n%s", name, mapDiff(got, want[name]))
						}
						if onClose {
							for k, n := range seen {
								if n != 1 {
									t.Errorf("%s: window %s emitted %d times on close", name, k, n)
								}
							}
						}
					}
					if n := d.LateRecords(); n != 0 {
						t.Errorf("%d records counted late; the input's disorder is within grace", n)
					}
				})
			}
		}
	}
}

// flatWindowedTo writes "key@start/end" keys to topic.
func flatWindowedTo(t *topology.KTable[serde.Windowed[string], int64], topic string) {
	topology.Process(t.ToStream(), func() processor.Processor[serde.Windowed[string], int64, string, int64] {
		return &flatWindow{}
	}, nil).To(topic, topology.Produced(str, serde.Int64()))
}

// flatWindow keeps tombstones (deleted sessions) as such.
type flatWindow struct {
	ctx processor.Context[string, int64]
}

func (f *flatWindow) Init(ctx processor.Context[string, int64]) error { f.ctx = ctx; return nil }
func (f *flatWindow) Close() error                                    { return nil }
func (f *flatWindow) Process(r processor.Record[serde.Windowed[string], int64]) error {
	f.ctx.Forward(processor.Record[string, int64]{Key: fmt.Sprintf("%s@%d/%d", r.Key.Key, r.Key.Window.Start, r.Key.Window.End),
		Value: r.Value, NullValue: r.NullValue, Timestamp: r.Timestamp})
	return nil
}

func mapDiff(got, want map[string]int64) string {
	var out string
	n := 0
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok || g != want[k] {
			if n++; n <= 10 {
				out += fmt.Sprintf("  %s: got %d (present %v), want %d\n", k, g, ok, want[k])
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			if n++; n <= 10 {
				out += fmt.Sprintf("  %s: got %d, not expected\n", k, got[k])
			}
		}
	}
	return fmt.Sprintf("%d differences\n%s", n, out)
}
