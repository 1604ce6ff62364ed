package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/topology"
)

// tableTopology materializes "in" as the table "table" (a tombstone
// deletes a key).
func tableTopology(t *testing.T) *rt.Program {
	t.Helper()
	b := topology.NewBuilder()
	topology.Table(b, testIn, topology.Consumed(serde.String(), serde.String()), topology.Materialized[string, string]("table"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	prog, _ := rt.ProgramOf(top)
	return prog
}

// fakeClock is a wall clock a test moves.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *fakeClock) now() int64              { return c.ms.Load() }
func (c *fakeClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// useClock makes the rig's thread and state directory read clock.
func (r *rig) useClock(c *fakeClock) {
	r.cfg.WallClock = c.now
	r.cfg.StateDirectory = NewStateDirectory([]storage.Backend{r.cfg.Pebble, r.cfg.Memory}, -1, c.now, r.cfg.Log)
}

// tableValue reads key from the table's committed state of its task.
func tableValue(t *testing.T, b storage.Backend, key string) (string, bool) {
	t.Helper()
	task := fmt.Sprintf("0_%d", kclient.KeyPartition([]byte(key), testParts))
	v, ok, err := b.Get(append(storage.DataPrefix(task, "table"), key...))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "", false
	}
	return string(v[8:]), true // after the timestamp
}

func produceKV(cl *kclienttest.Cluster, key string, value []byte) {
	cl.Produce(testIn, kclient.KeyPartition([]byte(key), testParts), kclienttest.Record{Key: []byte(key), Value: value, Timestamp: time.Now().UnixMilli()})
}

// The deleted-key sequence of the issue, on the fake cluster: instance A
// stores K=v1; B takes the task over and deletes K; compaction drops the
// tombstone (and v1); A takes the task back on its old state. A store
// whose state is older than its changelog keeps deletes is restored in
// full (no K); one younger resumes from its stored offset — where the
// tombstone is still in the changelog.
func TestStateOlderThanDeleteRetentionIsRebuilt(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		for _, tc := range []struct {
			name    string
			away    time.Duration // A's clock moves this far while B owns the task
			compact bool
			// slow: A's restore takes 2 s, while compaction drops the
			// tombstone it has not read yet.
			slow    bool
			rebuilt bool
		}{
			{"older than delete.retention.ms", 2 * time.Second, true, false, true},
			{"younger than delete.retention.ms", 500 * time.Millisecond, false, false, false},
			{"younger, but restored too slowly", 500 * time.Millisecond, false, true, true},
		} {
			t.Run(fmt.Sprintf("eos=%v/%s", exactlyOnce, tc.name), func(t *testing.T) {
				cl := kclienttest.NewCluster()
				prog := tableTopology(t)
				clock := newFakeClock()
				a := newRig(t, cl, prog, exactlyOnce, t.TempDir())
				a.useClock(clock)
				changelog := rt.ChangelogTopic(testApp, "table")
				cl.SetTopicConfig(changelog, "cleanup.policy", "compact")
				cl.SetTopicConfig(changelog, "delete.retention.ms", "1000")

				produceKV(cl, "K", []byte("v1"))
				for i := range 10 {
					produceKV(cl, fmt.Sprintf("other%d", i), []byte("x"))
				}
				run := a.start()
				wait(t, "A caught up", func() bool { return caughtUp(cl) })
				if err := run.stop(t); err != nil {
					t.Fatal(err)
				}
				if v, ok := tableValue(t, a.cfg.Pebble, "K"); !ok || v != "v1" {
					t.Fatalf("A's store: K=%q (%v), want v1", v, ok)
				}

				// B, another instance, owns the task while A's clock moves on.
				b := newRig(t, cl, prog, exactlyOnce, t.TempDir())
				b.useClock(clock)
				runB := b.start()
				produceKV(cl, "K", nil)
				produceKV(cl, "other0", []byte("y"))
				wait(t, "B caught up", func() bool { return caughtUp(cl) })
				clock.advance(tc.away)
				if err := runB.stop(t); err != nil {
					t.Fatal(err)
				}
				if tc.compact {
					cl.Compact(changelog)
				}

				a.cfg.StateDirectory.Rebuilt.Store(0)
				if tc.slow {
					a.cfg.Restore = kclient.Config{"isolation.level": "read_committed", "test.restore": true}
					a.cfg.NewConsumer = func(c kclient.Config) (kclient.Consumer, error) {
						if c["test.restore"] == true {
							clock.advance(2 * time.Second)
							cl.Compact(changelog)
						}
						return cl.NewConsumer(c)
					}
				}
				run = a.start()
				wait(t, "A restored", func() bool { return ThreadState(a.state.Load()) == ThreadRunning && caughtUp(cl) })
				if err := run.stop(t); err != nil {
					t.Fatal(err)
				}
				if v, ok := tableValue(t, a.cfg.Pebble, "K"); ok {
					t.Errorf("the deleted key came back: K=%q", v)
				}
				if v, ok := tableValue(t, a.cfg.Pebble, "other0"); !ok || v != "y" {
					t.Errorf("other0=%q (%v), want y", v, ok)
				}
				if got, want := a.cfg.StateDirectory.Rebuilt.Load() > 0, tc.rebuilt; got != want {
					t.Errorf("stores rebuilt: %v, want %v", got, want)
				}
			})
		}
	}
}

// The cleaner deletes the state of a task no thread owns once it has been
// left alone for the cleanup delay: state found at start counts from the
// start, a task a thread let go from then; an owned task's state is never
// touched, however long it is owned.
func TestUnownedStateIsDeletedAfterTheDelay(t *testing.T) {
	cl := kclienttest.NewCluster()
	clock := newFakeClock()
	r := newRig(t, cl, tableTopology(t), true, t.TempDir())
	r.cfg.WallClock = clock.now
	const delay = 10 * time.Minute
	d := NewStateDirectory([]storage.Backend{r.cfg.Pebble, r.cfg.Memory}, delay, clock.now, r.cfg.Log)
	r.cfg.StateDirectory = d
	pebble := r.cfg.Pebble
	// Left by an earlier run: a task this instance will not be assigned.
	spec := storage.Spec{Name: "table", Logged: true, Timestamped: true}
	if err := storage.Restore(pebble, "0_7", spec, []storage.ChangelogRecord{{Key: []byte("old"), Value: []byte("v")}}, 1); err != nil {
		t.Fatal(err)
	}
	tasks := func() []string {
		ts, err := storage.Tasks(pebble)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	clean := func(want ...string) {
		t.Helper()
		got, err := d.Clean()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("cleaned %v, want %v", got, want)
		}
	}

	for i := range 10 { // both partitions get some
		produceKV(cl, fmt.Sprintf("k%d", i), []byte("1"))
	}
	run := r.start()
	wait(t, "caught up", func() bool { return caughtUp(cl) && ThreadState(r.state.Load()) == ThreadRunning })
	if got := fmt.Sprint(tasks()); got != "[0_0 0_1 0_7]" {
		t.Fatalf("tasks with state: %s", got)
	}
	clean() // nothing is older than the delay yet
	clock.advance(delay)
	clean("0_7") // found at start, not assigned
	clock.advance(3 * delay)
	clean() // owned for ever: never touched
	if _, ok := tableValue(t, pebble, "k1"); !ok {
		t.Fatal("an owned task's state was deleted")
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	clean() // just let go
	clock.advance(delay - time.Millisecond)
	clean()
	clock.advance(time.Millisecond)
	clean("0_0", "0_1")
	if ts := tasks(); len(ts) != 0 {
		t.Fatalf("state left after cleaning: %v", ts)
	}
	if n := d.Cleaned.Load(); n != 3 {
		t.Errorf("Cleaned = %d, want 3", n)
	}
}

// staleness and resumeDeadline: the rule that decides whether kept state
// may be resumed.
func TestStalenessRule(t *testing.T) {
	day := 24 * time.Hour
	compacted := tombstoneRetention{compacted: true, keep: time.Hour}
	for _, tc := range []struct {
		name     string
		age      time.Duration
		synced   bool
		r        tombstoneRetention
		stale    bool
		deadline time.Duration // after synced; 0: none
	}{
		{"young", 59 * time.Minute, true, compacted, false, time.Hour},
		{"as old as the retention", time.Hour, true, compacted, true, 0},
		{"older", 2 * time.Hour, true, compacted, true, 0},
		{"no synced time", 0, false, compacted, true, 0},
		{"not compacted", 30 * day, true, tombstoneRetention{keep: time.Hour}, false, 0},
		{"not compacted, no synced time", 0, false, tombstoneRetention{keep: time.Hour}, false, 0},
	} {
		now := int64(1_000_000_000_000)
		synced := now - tc.age.Milliseconds()
		why := staleness(now, synced, tc.synced, tc.r)
		if (why != "") != tc.stale {
			t.Errorf("%s: staleness %q, want stale %v", tc.name, why, tc.stale)
		}
		if !tc.stale {
			want := int64(0)
			if tc.deadline > 0 {
				want = synced + tc.deadline.Milliseconds()
			}
			if got := resumeDeadline(synced, tc.r); got != want {
				t.Errorf("%s: deadline %d, want %d", tc.name, got, want)
			}
		}
	}
	for cfg, want := range map[string]tombstoneRetention{
		"":                                 {compacted: true, keep: day},
		"cleanup.policy=compact":           {compacted: true, keep: day},
		"cleanup.policy=compact,delete":    {compacted: true, keep: day},
		"cleanup.policy=delete":            {compacted: false, keep: day},
		"delete.retention.ms=2000":         {compacted: true, keep: 2 * time.Second},
		"delete.retention.ms=not-a-number": {compacted: true, keep: day},
	} {
		m := map[string]string{}
		if k, v, ok := strings.Cut(cfg, "="); ok {
			m[k] = v
		}
		if got := retentionOf(m); got != want {
			t.Errorf("retentionOf(%s) = %+v, want %+v", cfg, got, want)
		}
	}
}

// A global table's local state follows the same rule: kept state older
// than its compacted topic keeps deletes is read again in full at start,
// so a key deleted while the instance was away stays deleted; younger
// state resumes from its stored offsets.
func TestGlobalStateOlderThanDeleteRetentionIsReadAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		away    time.Duration
		compact bool
		rebuilt bool
	}{
		{"older than delete.retention.ms", 2 * time.Second, true, true},
		{"younger than delete.retention.ms", 500 * time.Millisecond, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := kclienttest.NewCluster()
			cl.CreateTopic("g", 2)
			cl.SetTopicConfig("g", "cleanup.policy", "compact")
			cl.SetTopicConfig("g", "delete.retention.ms", "1000")
			b := topology.NewBuilder()
			topology.GlobalTable(b, "g", topology.Consumed(serde.String(), serde.String()), topology.Materialized[string, string]("globals"))
			topology.Stream(b, testIn, topology.Consumed(serde.String(), serde.String())).To(testOut, topology.Produced(serde.String(), serde.String()))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			prog, _ := rt.ProgramOf(top)
			r := newRig(t, cl, prog, true, t.TempDir())
			clock := newFakeClock()
			r.useClock(clock)
			put := func(key string, value []byte) {
				cl.Produce("g", kclient.KeyPartition([]byte(key), 2), kclienttest.Record{Key: []byte(key), Value: value, Timestamp: 1})
			}
			get := func(key string) bool {
				_, ok, err := r.cfg.Pebble.Get(append(storage.DataPrefix(storage.GlobalTask, "globals"), key...))
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			bootstrap := func() {
				t.Helper()
				g := NewGlobalReader(r.cfg)
				if err := g.Bootstrap(context.Background()); err != nil {
					t.Fatal(err)
				}
				g.consumer.Close()
			}
			put("K", []byte("v1"))
			for i := range 6 {
				put(fmt.Sprintf("other%d", i), []byte("x"))
			}
			bootstrap()
			if !get("K") {
				t.Fatal("K not in the global store")
			}
			// While the instance is away, K is deleted (and the delete
			// compacted away when older than the topic keeps deletes).
			put("K", nil)
			put("other0", []byte("y"))
			clock.advance(tc.away)
			if tc.compact {
				cl.Compact("g")
			}
			bootstrap()
			if get("K") {
				t.Error("the deleted key came back in the global store")
			}
			if !get("other0") {
				t.Error("other0 missing from the global store")
			}
			if got := r.cfg.StateDirectory.Rebuilt.Load() > 0; got != tc.rebuilt {
				t.Errorf("global store rebuilt: %v, want %v", got, tc.rebuilt)
			}
		})
	}
}
