package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap/zaptest"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/topology"
)

// The engine's unit tests run real stream threads against the scripted fake
// of the kclient seam (kclienttest): every guarantee and failure path of the
// runtime, in milliseconds, with -race.

const (
	testApp   = "app"
	testIn    = "in"
	testOut   = "out"
	testParts = 2
)

// countTopology counts records per key (cache off, so every update is
// forwarded): "in" string → "out" int64, store "counts". A value "boom"
// panics in the key mapper (a processing error). peek, if not nil, sees
// each record before it is counted.
func countTopology(t *testing.T, peek func(key, value string)) *rt.Program {
	t.Helper()
	b := topology.NewBuilder()
	s := topology.Stream(b, testIn, topology.Consumed(serde.String(), serde.String()))
	if peek != nil {
		s = s.Peek(peek)
	}
	s = topology.MapValues(s, func(v string) string {
		if v == "boom" {
			panic("boom")
		}
		return v
	})
	topology.Count(s.GroupByKey(), topology.Materialized[string, int64]("counts").WithCaching(false)).
		ToStream().To(testOut, topology.Produced(serde.String(), serde.Int64()))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	prog, ok := rt.ProgramOf(top)
	if !ok {
		t.Fatal("no program")
	}
	return prog
}

// rig is one application instance's engine on a fake cluster.
type rig struct {
	t      *testing.T
	cl     *kclienttest.Cluster
	cfg    *Config
	state  atomic.Int32 // the thread's last ThreadState
	closed bool
}

// newRig creates the topics and a thread config. state is the Pebble
// directory ("" for an in-memory Pebble).
func newRig(t *testing.T, cl *kclienttest.Cluster, prog *rt.Program, exactlyOnce bool, state string) *rig {
	t.Helper()
	cl.CreateTopic(testIn, testParts)
	cl.CreateTopic(testOut, testParts)
	admin := cl.NewAdmin()
	ctx := context.Background()
	topics, err := PrepareTopics(ctx, admin, prog, testApp, 1)
	if err != nil {
		t.Fatal(err)
	}
	pebble, err := storage.OpenPebble(state, storage.PebbleOptions{InMemory: state == ""})
	if err != nil {
		t.Fatal(err)
	}
	mem := storage.NewMemory()
	iso := "read_uncommitted"
	if exactlyOnce {
		iso = "read_committed"
	}
	cfg := &Config{
		AppID: testApp, ProcessID: "p0", Program: prog, ExactlyOnce: exactlyOnce,
		CommitInterval: 5 * time.Millisecond, MaxBufferedRecords: 1000, FenceBackoff: time.Millisecond,
		Consumer: kclient.Config{"isolation.level": iso}, Producer: kclient.Config{},
		Restore: kclient.Config{"isolation.level": "read_committed"},
		Admin:   admin, Log: zaptest.NewLogger(t), Pebble: pebble, Memory: mem,
		Partitions: topics.Partitions, Subscription: topics.Subscription,
		WallClock:   func() int64 { return time.Now().UnixMilli() },
		NewConsumer: cl.NewConsumer, NewProducer: cl.NewProducer,
		NewAdmin: func() (kclient.Admin, error) { return cl.NewAdmin(), nil },
	}
	cfg.StateDirectory = NewStateDirectory([]storage.Backend{pebble, mem}, -1, cfg.WallClock, cfg.Log)
	r := &rig{t: t, cl: cl, cfg: cfg}
	cfg.OnState = func(_ int, s ThreadState) { r.state.Store(int32(s)) }
	t.Cleanup(r.closeStores)
	return r
}

// closeStores closes the rig's state stores (once).
func (r *rig) closeStores() {
	if r.closed {
		return
	}
	r.closed = true
	r.cfg.Pebble.(*storage.Pebble).Close()
	r.cfg.Memory.(*storage.Memory).Close()
}

// running is a thread running in its own goroutine.
type running struct {
	th     *Thread
	cancel context.CancelFunc
	done   chan error
}

func (r *rig) start() *running {
	th := NewThread(0, r.cfg)
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{th: th, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := th.Run(ctx)
		if err != nil {
			r.t.Logf("Run returned: %v", err) // a failure that a wait would only time out on
		}
		run.done <- err
	}()
	r.t.Cleanup(func() { cancel(); <-run.done })
	return run
}

// stop cancels the thread and returns what Run returned.
func (run *running) stop(t *testing.T) error {
	t.Helper()
	run.cancel()
	select {
	case err := <-run.done:
		run.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("thread did not stop within 30s")
		return nil
	}
}

// wait polls cond until it holds; the bound only turns a hang into a
// failure, it never decides an outcome.
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// feed writes n records with keys k0..k(keys-1), round-robin over the
// input partitions by key, and returns each key's count.
func feed(cl *kclienttest.Cluster, from, n, keys int) map[string]int64 {
	for i := from; i < from+n; i++ {
		k := fmt.Sprintf("k%d", i%keys)
		cl.Produce(testIn, kclient.KeyPartition([]byte(k), testParts),
			kclienttest.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i)), Timestamp: int64(1000 + i)})
	}
	return counts(from, n, keys)
}

// counts is what feed(from, n, keys) adds to each key's count.
func counts(from, n, keys int) map[string]int64 {
	want := map[string]int64{}
	for i := from; i < from+n; i++ {
		want[fmt.Sprintf("k%d", i%keys)]++
	}
	return want
}

// caughtUp reports whether the group committed every input partition to
// its end.
func caughtUp(cl *kclienttest.Cluster) bool {
	for p := range int32(testParts) {
		off, _ := cl.Committed(testIn, p)
		if off < cl.End(testIn, p) {
			return false
		}
	}
	return true
}

// outputs returns each key's count updates in the output, as a
// read_committed reader sees them.
func outputs(t *testing.T, cl *kclienttest.Cluster, readCommitted bool) map[string][]int64 {
	t.Helper()
	i64 := serde.Int64()
	out := map[string][]int64{}
	for p := range int32(testParts) {
		for _, r := range cl.Records(testOut, p, readCommitted) {
			n, err := i64.Deserialize(testOut, r.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[string(r.Key)] = append(out[string(r.Key)], n)
		}
	}
	return out
}

// exactSequences checks that every key's updates go 1, 2, …, want[key].
func exactSequences(t *testing.T, got map[string][]int64, want map[string]int64) {
	t.Helper()
	for k, n := range want {
		seq := got[k]
		ok := int64(len(seq)) == n
		for i := 0; ok && i < len(seq); i++ {
			ok = seq[i] == int64(i+1)
		}
		if !ok {
			t.Errorf("key %s: updates %v, want 1..%d", k, seq, n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("output has %d keys, want %d", len(got), len(want))
	}
}

func changelog() string { return rt.ChangelogTopic(testApp, "counts") }
