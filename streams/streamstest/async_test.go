package streamstest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// keyGuard records, per key, how many calls run at once, and the most
// calls running at once over all keys.
type keyGuard struct {
	mu      sync.Mutex
	running map[string]int
	overlap int // calls of one key seen running together
	total   atomic.Int64
	peak    atomic.Int64
}

func newKeyGuard() *keyGuard { return &keyGuard{running: map[string]int{}} }

func (g *keyGuard) enter(k string) {
	g.mu.Lock()
	g.running[k]++
	if g.running[k] > 1 {
		g.overlap++
	}
	g.mu.Unlock()
	n := g.total.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

func (g *keyGuard) leave(k string) {
	g.total.Add(-1)
	g.mu.Lock()
	g.running[k]--
	g.mu.Unlock()
}

// Under random call latencies, with many keys and commits only now and
// then (so thousands of calls overlap): every key's results come out in
// its input order, equal to the synchronous MapValues' on the same input;
// calls of one key never overlap, and no more than the concurrency run.
func TestMapValuesAsyncKeepsEachKeysOrder(t *testing.T) {
	str := serde.String()
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			const records, keys = 4000, 60
			type in struct{ k, v string }
			input := make([]in, records)
			for i := range input {
				input[i] = in{fmt.Sprintf("k%02d", rng.IntN(keys)), fmt.Sprint(i)}
			}
			lat := make([]time.Duration, records) // per input: the call's latency
			for i := range lat {
				lat[i] = time.Duration(rng.IntN(1500)) * time.Microsecond
			}
			transform := func(k, v string) string { return k + "/" + v + "!" }

			guard := newKeyGuard()
			const conc = 12
			b := topology.NewBuilder()
			s := topology.Stream(b, "in", topology.Consumed(str, str))
			topology.MapValuesAsync(s, func(ctx context.Context, k, v string) (string, error) {
				guard.enter(k)
				defer guard.leave(k)
				var i int
				fmt.Sscan(v, &i)
				select {
				case <-time.After(lat[i]):
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return transform(k, v), nil
			}, topology.Async().WithConcurrency(conc).WithMaxPending(200)).To("out", topology.Produced(str, str))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := streamstest.New(t, top, streamstest.Options{ManualCommit: true})
			pipe := streamstest.Input(d, "in", str, str)
			out := streamstest.Output(d, "out", str, str)
			for i, r := range input {
				pipe.Pipe(r.k, r.v)
				if i%700 == 699 {
					if err := d.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}

			// The synchronous operator on the same input.
			want := map[string][]string{}
			for _, r := range input {
				want[r.k] = append(want[r.k], transform(r.k, r.v))
			}
			got := map[string][]string{}
			recs := out.ReadRecords()
			for _, r := range recs {
				got[r.Key] = append(got[r.Key], r.Value)
			}
			if len(recs) != records {
				t.Fatalf("%d results for %d records", len(recs), records)
			}
			for k, w := range want {
				if strings.Join(got[k], ",") != strings.Join(w, ",") {
					t.Fatalf("key %s: results %v, want %v", k, got[k], w)
				}
			}
			if guard.overlap > 0 {
				t.Fatalf("calls of one key overlapped %d times", guard.overlap)
			}
			if p := guard.peak.Load(); p > conc {
				t.Fatalf("%d calls ran at once, concurrency %d", p, conc)
			}
		})
	}
}

// Records of different keys are called at once: four calls that each wait
// for all four to have started complete only if they overlap.
func TestMapValuesAsyncOverlapsKeys(t *testing.T) {
	str := serde.String()
	var started sync.WaitGroup
	started.Add(4)
	b := topology.NewBuilder()
	topology.MapValuesAsync(topology.Stream(b, "in", topology.Consumed(str, str)), func(ctx context.Context, k, v string) (string, error) {
		started.Done()
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		select {
		case <-all:
			return v + " overlapped", nil
		case <-ctx.Done():
			return "", errors.New("the four calls did not run at once")
		}
	}, topology.Async().WithConcurrency(4).WithTimeout(30*time.Second)).To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{ManualCommit: true})
	in := streamstest.Input(d, "in", str, str)
	for _, k := range []string{"a", "b", "c", "d"} {
		in.Pipe(k, k)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	got := streamstest.ReadKeyValueMap(streamstest.Output(d, "out", str, str))
	if len(got) != 4 || got["c"] != "c overlapped" {
		t.Fatalf("results %v", got)
	}
}

// A call's state (MapValuesAsyncWithState) sees every write of its key's
// earlier records: a per-key counter kept by calls with random latencies
// counts 1, 2, 3, … for every key, and the store ends at each key's count.
// A failed call writes nothing.
func TestMapValuesAsyncWithStateIsConsistentPerKey(t *testing.T) {
	str, i64 := serde.String(), serde.Int64()
	b := topology.NewBuilder()
	b.AddStateStore(stores.KeyValue("seen", str, i64))
	rng := rand.New(rand.NewPCG(5, 5))
	lat := make([]time.Duration, 3000)
	for i := range lat {
		lat[i] = time.Duration(rng.IntN(800)) * time.Microsecond
	}
	s := topology.Stream(b, "in", topology.Consumed(str, i64))
	topology.MapValuesAsyncWithState(s, "seen", func(ctx context.Context, k string, v int64, st *topology.KeyState[int64]) (int64, error) {
		time.Sleep(lat[v])
		if v%100 == 99 {
			st.Put(-1000) // not applied: the call fails
			return 0, fmt.Errorf("record %d refused", v)
		}
		n, _ := st.Get()
		st.Put(n + 1)
		return n + 1, nil
	}, topology.Async().WithConcurrency(8)).To("out", topology.Produced(str, i64))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	d := streamstest.New(t, top, streamstest.Options{ManualCommit: true, OnError: func(e *processor.RecordError) processor.ErrorAction {
		failed.Add(1)
		return processor.Continue
	}})
	in := streamstest.Input(d, "in", str, i64)
	want := map[string]int64{}
	for i := range int64(len(lat)) {
		k := fmt.Sprintf("k%d", rng.IntN(25))
		in.Pipe(k, i)
		if i%100 != 99 {
			want[k]++
		}
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	seq := map[string][]int64{}
	for _, r := range streamstest.Output(d, "out", str, i64).ReadRecords() {
		seq[r.Key] = append(seq[r.Key], r.Value)
	}
	store := streamstest.KeyValueStore[string, int64](d, "seen")
	for k, n := range want {
		for i, v := range seq[k] {
			if v != int64(i+1) {
				t.Fatalf("key %s: counts %v", k, seq[k])
			}
		}
		if int64(len(seq[k])) != n {
			t.Fatalf("key %s: %d results, want %d", k, len(seq[k]), n)
		}
		if v, _, _ := store.Get(k); v != n {
			t.Fatalf("key %s: store holds %d, want %d", k, v, n)
		}
	}
	if failed.Load() != int64(len(lat)/100) {
		t.Fatalf("%d failures handled, want %d", failed.Load(), len(lat)/100)
	}
}

// A call's error goes to the processing error handler with its input
// record: dead-lettered with the cause; a call that ignores its context and
// never returns is abandoned once its budget passed, and dead-lettered too;
// the other records' results are forwarded. The call's context carries the
// input record's metadata.
func TestMapValuesAsyncFailuresGoToTheHandler(t *testing.T) {
	str := serde.String()
	never := make(chan struct{})
	defer close(never)
	var offsets sync.Map
	b := topology.NewBuilder()
	topology.MapValuesAsync(topology.Stream(b, "in", topology.Consumed(str, str)), func(ctx context.Context, k, v string) (string, error) {
		if md, ok := processor.RecordMetadataFrom(ctx); ok {
			offsets.Store(v, md.Offset)
		}
		switch v {
		case "bad":
			return "", errors.New("the service said no")
		case "hang":
			<-never
		}
		return strings.ToUpper(v), nil
	}, topology.Async().WithTimeout(50*time.Millisecond).WithRetries(1, 10*time.Millisecond, time.Second)).
		To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{
		OnError:         func(*processor.RecordError) processor.ErrorAction { return processor.DeadLetter },
		DeadLetterTopic: "dlq",
	})
	in := streamstest.Input(d, "in", str, str)
	for _, v := range []string{"a", "bad", "b", "hang", "c"} {
		in.Pipe("k-"+v, v)
	}
	got := streamstest.ReadKeyValueMap(streamstest.Output(d, "out", str, str))
	if len(got) != 3 || got["k-c"] != "C" {
		t.Fatalf("results %v", got)
	}
	dlq := streamstest.Output(d, "dlq", str, str).ReadRecords()
	if len(dlq) != 2 || dlq[0].Value != "bad" || dlq[1].Value != "hang" {
		t.Fatalf("dead letters %v", dlq)
	}
	for i, want := range []string{"the service said no", topology.ErrAsyncTimeout.Error()} {
		msg, _ := dlq[i].Headers.Get(processor.HeaderErrorMessage)
		if !strings.Contains(string(msg), want) {
			t.Fatalf("dead letter %d: message %q, want it to say %q", i, msg, want)
		}
	}
	if off, _ := offsets.Load("b"); off != int64(2) {
		t.Fatalf("the call for offset 2 saw offset %v", off)
	}
}

// Closing a task abandons its running calls: their contexts are cancelled,
// they return, and nothing they return is forwarded; Close does not wait
// for them.
func TestAsyncCallsAreCancelledWhenTheTaskCloses(t *testing.T) {
	str := serde.String()
	var started, returned sync.WaitGroup
	started.Add(4)
	returned.Add(4)
	b := topology.NewBuilder()
	topology.MapValuesAsync(topology.Stream(b, "in", topology.Consumed(str, str)), func(ctx context.Context, k, v string) (string, error) {
		defer returned.Done()
		started.Done()
		<-ctx.Done()
		return v, nil // dropped: the task gave the call up
	}, topology.Async().WithConcurrency(4).WithTimeout(time.Minute).WithRetries(2, time.Millisecond, time.Millisecond)).
		To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d, err := streamstest.Open(top, streamstest.Options{ManualCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	in := streamstest.Input(d, "in", str, str)
	for _, k := range []string{"a", "b", "c", "d"} {
		in.Pipe(k, k)
	}
	started.Wait()
	out := streamstest.Output(d, "out", str, str)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	returned.Wait()
	if n := out.Len(); n != 0 {
		t.Fatalf("%d results of abandoned calls forwarded", n)
	}
}
