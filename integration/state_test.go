package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// fastCompaction makes a changelog's log cleaner drop a tombstone seconds
// after it is written (with records still arriving to roll segments).
var fastCompaction = map[string]string{
	"segment.ms":                "1000",
	"min.cleanable.dirty.ratio": "0.01",
	"min.compaction.lag.ms":     "0",
	"delete.retention.ms":       "2000",
}

// tableApp is a table over a 2-partition topic, its instances and their
// logs.
type tableApp struct {
	t         *testing.T
	brokers   string
	app       string
	input     string
	changelog string
	guarantee streams.Guarantee
	cleanup   time.Duration // Config.StateCleanupDelay
	standbys  int           // Config.NumStandbyReplicas
	top       *topology.Topology
}

func newTableApp(t *testing.T, brokers string, g streams.Guarantee, cleanup time.Duration) *tableApp {
	a := &tableApp{t: t, brokers: brokers, app: kafkatest.UniqueName(t, "dk"), guarantee: g, cleanup: cleanup}
	a.input, a.changelog = a.app+"-in", a.app+"-table-changelog"
	kafkatest.CreateTopic(t, brokers, a.input, 2, nil)
	b := topology.NewBuilder()
	topology.Table(b, a.input, topology.Consumed(serde.String(), serde.String()),
		topology.Materialized[string, string]("table").WithLogging(true, fastCompaction))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a.top = top
	return a
}

// tableInstance is one running App of a tableApp.
type tableInstance struct {
	name string
	app  *streams.App
	logs *syncBuffer
	stop func()
}

// start runs an instance on state directory dir.
func (a *tableApp) start(name, dir string) *tableInstance {
	a.t.Helper()
	logs := &syncBuffer{}
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(logs), zapcore.InfoLevel)
	cfg := streams.Config{ApplicationID: a.app, BootstrapServers: a.brokers, StateDir: dir, Guarantee: a.guarantee,
		CommitInterval: 200 * time.Millisecond, StateCleanupDelay: a.cleanup, ProcessID: name,
		NumStandbyReplicas: a.standbys, Logger: zap.New(core).Named(name)}
	app, stop := startApp(a.t, a.top, cfg)
	in := &tableInstance{name: name, app: app, logs: logs, stop: stop}
	a.t.Cleanup(func() {
		if a.t.Failed() {
			a.t.Logf("log of %s:\n%s", name, lastLines(logs.String(), 60))
		}
	})
	return in
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// get reads key from the instance's local table: its value, or found
// false. ok is false while the instance cannot answer (not running, or not
// the key's owner, or its state not yet past the key's partition's
// record `after`).
func (in *tableInstance) get(key string) (value string, found bool, err error) {
	st, err := streams.KeyValueStoreOf[string, string](in.app, "table")
	if err != nil {
		return "", false, err
	}
	md, err := in.app.MetadataForKey("table", key)
	if err != nil {
		return "", false, err
	}
	if !md.Local {
		return "", false, fmt.Errorf("%s does not own %s's task %s", in.name, key, md.Task)
	}
	return st.Get(key)
}

// waitValue waits until the instance owns key and its local table holds
// want ("" for no value); the bound only turns a hang into a failure.
func (in *tableInstance) waitValue(t *testing.T, key, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, found, err := in.get(key)
		if err == nil && (found && v == want || !found && want == "") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s = %q (found %v, err %v), want %q", in.name, key, v, found, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partitionOf is the input (and changelog) partition of key.
func (in *tableInstance) partitionOf(t *testing.T, key string) int32 {
	t.Helper()
	for {
		// The partition is known once the app has started, whoever owns it.
		md, err := in.app.MetadataForKey("table", key)
		if md.Task != "" {
			return md.Partition
		}
		if err != nil && !errors.Is(err, streams.ErrNotQueryable) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// filler keeps writing new keys to the input, so that changelog segments
// roll and the log cleaner runs, until stopped.
func (a *tableApp) filler() (stop func() int) {
	cl := kafkatest.Client(a.t, a.brokers)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var recs []*kgo.Record
			for range 10 {
				recs = append(recs, &kgo.Record{Topic: a.input, Key: fmt.Appendf(nil, "f-%d", n), Value: []byte("x")})
				n++
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
				a.t.Errorf("filler: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() int { cancel(); wg.Wait(); return n }
}

// changelogHas reports whether partition p of the changelog holds any
// record of key, and the values it holds for it.
func (a *tableApp) changelogHas(p int32, key string) []string {
	var vals []string
	for _, r := range kafkatest.ConsumeAll(a.t, a.brokers, a.changelog) {
		if r.Partition == p && string(r.Key) == key {
			if r.Value == nil {
				vals = append(vals, "null")
			} else {
				vals = append(vals, string(r.Value))
			}
		}
	}
	return vals
}

// A deleted key stays deleted when its task returns to an instance with
// old local state, on the real broker, under both guarantees: instance A
// alone stores K=v1; B joins and takes K's task; K is deleted on B; the
// log cleaner drops the tombstone (the changelog is read from its start
// and holds no K, its log start still 0); B stops cleanly and the task
// returns to A — kept running, or restarted on its old state directory.
// A's state for the task was last in step with the changelog longer ago
// than the changelog keeps deletes (delete.retention.ms 2 s), so A rebuilds
// it in full: K is not found, as in a fresh restore. (Before eddy kept a
// synced time per store, A resumed from its stored offset and answered
// K=v1.) The unowned-state cleaner is off (negative StateCleanupDelay), so
// the exact guard alone is what is proven. The five cases run side by side
// (each its own application and topics): most of each is waiting for the
// log cleaner.
func TestDeletedKeyStaysDeletedWhenTaskReturns(t *testing.T) {
	brokers := realBroker(t)
	for _, g := range []streams.Guarantee{streams.ExactlyOnce, streams.AtLeastOnce} {
		for _, restartA := range []bool{false, true} {
			name := fmt.Sprintf("%s/A_kept_running", g)
			if restartA {
				name = fmt.Sprintf("%s/A_restarted_on_its_old_state", g)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testDeletedKeyStaysDeleted(t, brokers, g, restartA, 0)
			})
		}
	}
	// With a standby replica (and warm-ups, on by default): A follows the
	// task while B owns it, and takes it back from its standby.
	t.Run("exactly_once/A_kept_running_with_a_standby", func(t *testing.T) {
		t.Parallel()
		testDeletedKeyStaysDeleted(t, brokers, streams.ExactlyOnce, false, 1)
	})
}

func testDeletedKeyStaysDeleted(t *testing.T, brokers string, g streams.Guarantee, restartA bool, standbys int) {
	a := newTableApp(t, brokers, g, -1)
	a.standbys = standbys
	var recs []kafkatest.Record
	for i := range 20 {
		recs = append(recs, kafkatest.KV(fmt.Sprintf("K-%d", i), "v1"))
	}
	kafkatest.Produce(t, brokers, a.input, recs...)
	dirA, dirB := t.TempDir(), t.TempDir()

	// 1. A alone stores every K-i = v1.
	instA := a.start("A", dirA)
	for i := range 20 {
		instA.waitValue(t, fmt.Sprintf("K-%d", i), "v1", 2*time.Minute)
	}
	// 2. B joins and takes one of the two tasks, restoring it.
	instB := a.start("B", dirB)
	var key string
	deadline := time.Now().Add(2 * time.Minute)
	for key == "" {
		for i := range 20 {
			k := fmt.Sprintf("K-%d", i)
			if v, found, err := instB.get(k); err == nil && found && v == "v1" {
				key = k
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("B took no task within 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := instB.partitionOf(t, key)
	t.Logf("B owns %s (partition %d)", key, p)
	if restartA {
		instA.stop()
	}
	// 3. The key is deleted on B.
	kafkatest.Produce(t, brokers, a.input, kafkatest.Record{Key: []byte(key)})
	instB.waitValue(t, key, "", time.Minute)
	if got := a.changelogHas(p, key); strings.Join(got, " ") != "v1 null" {
		t.Fatalf("changelog partition %d holds %s = %v, want [v1 null]", p, key, got)
	}
	// 4. Other keys keep arriving until the log cleaner has dropped the
	// tombstone (and the value it deleted).
	stopFiller := a.filler()
	deadline = time.Now().Add(3 * time.Minute)
	for len(a.changelogHas(p, key)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the log cleaner kept %s in changelog partition %d for 3 minutes: %v", key, p, a.changelogHas(p, key))
		}
		time.Sleep(500 * time.Millisecond)
	}
	filled := stopFiller()
	if start := kafkatest.StartOffsets(t, brokers, a.changelog)[p]; start != 0 {
		t.Fatalf("changelog partition %d starts at %d, want 0 (compaction only)", p, start)
	}
	t.Logf("tombstone of %s compacted away (%d filler records); log start still 0", key, filled)
	// A record after the filler, in the key's partition: once A has it, A's
	// state is past everything B wrote.
	last := ""
	for i := 0; last == ""; i++ {
		k := fmt.Sprintf("last-%d", i)
		if instB.partitionOf(t, k) == p {
			last = k
		}
	}
	kafkatest.Produce(t, brokers, a.input, kafkatest.KV(last, "done"))
	instB.waitValue(t, last, "done", time.Minute)

	// 5. B stops cleanly; the task returns to A.
	instB.stop()
	if restartA {
		instA = a.start("A", dirA)
	}
	instA.waitValue(t, last, "done", 2*time.Minute)
	if v, found, err := instA.get(key); err != nil || found {
		t.Fatalf("A answers %s = %q (found %v, err %v) after the task returned: a deleted key came back", key, v, found, err)
	}
	for i := range 20 {
		if k := fmt.Sprintf("K-%d", i); k != key {
			instA.waitValue(t, k, "v1", time.Minute)
		}
	}
	if standbys == 0 && !strings.Contains(instA.logs.String(), "wiping a store's local state and restoring it in full") {
		t.Error("A did not log why it rebuilt the store")
	}
	if standbys > 0 && !strings.Contains(instA.logs.String(), `"standby_tasks": 1`) {
		t.Error("A never followed B's task as a standby")
	}
}

// The local state of a task that moved to another instance is deleted
// after StateCleanupDelay (shortened here to 2 s), while the state of the
// task the instance keeps is never touched: A owns both tasks; B joins and
// takes one; once A's cleaner has deleted that task's state (counted in
// eddy_state_cleaned_tasks_total, logged), A still answers every key of
// its own task, and when B leaves, A restores the returning task from its
// changelog's start — it has nothing of it left.
func TestUnownedStateIsDeletedAfterCleanupDelay(t *testing.T) {
	brokers := realBroker(t)
	a := newTableApp(t, brokers, streams.ExactlyOnce, 2*time.Second)
	var recs []kafkatest.Record
	for i := range 20 {
		recs = append(recs, kafkatest.KV(fmt.Sprintf("K-%d", i), "v1"))
	}
	kafkatest.Produce(t, brokers, a.input, recs...)
	instA := a.start("A", t.TempDir())
	for i := range 20 {
		instA.waitValue(t, fmt.Sprintf("K-%d", i), "v1", 2*time.Minute)
	}
	instB := a.start("B", t.TempDir())
	// Wait until B owns a task and A has deleted that task's state.
	deadline := time.Now().Add(2 * time.Minute)
	var moved string
	for moved == "" {
		for _, line := range strings.Split(instA.logs.String(), "\n") {
			if strings.Contains(line, "deleted the local state of a task") {
				moved = line
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("A deleted no unowned task's state within 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("A: %s", moved)
	var kept, gone []string // keys of A's task, keys of the task that moved
	for i := range 20 {
		k := fmt.Sprintf("K-%d", i)
		md, err := instA.app.MetadataForKey("table", k)
		if err == nil && md.Local {
			kept = append(kept, k)
		} else {
			gone = append(gone, k)
		}
	}
	if len(kept) == 0 || len(gone) == 0 {
		t.Fatalf("A owns %v and not %v: want one task each", kept, gone)
	}
	for _, k := range kept {
		instA.waitValue(t, k, "v1", time.Minute) // never touched
	}
	if n := cleanedMetric(t, instA.app); n != 1 {
		t.Errorf("eddy_state_cleaned_tasks_total = %v, want 1", n)
	}
	instB.stop()
	for _, k := range gone {
		instA.waitValue(t, k, "v1", 2*time.Minute)
	}
	// The returning task's state was gone: A restored it from the start.
	task := regexp.MustCompile(`"task": "([0-9]+_[0-9]+)"`).FindStringSubmatch(moved)
	if task == nil {
		t.Fatalf("no task in %q", moved)
	}
	var restore string
	for _, line := range strings.Split(instA.logs.String(), "\n") {
		if strings.Contains(line, "restoring store") && strings.Contains(line, `"task": "`+task[1]+`"`) {
			restore = line
		}
	}
	if !strings.Contains(restore, `"from": 0,`) {
		t.Errorf("A's last restore of task %s: %q, want one from the changelog's start", task[1], restore)
	}
}

// cleanedMetric reads eddy_state_cleaned_tasks_total from an app's
// Handler.
func cleanedMetric(t *testing.T, app *streams.App) float64 {
	t.Helper()
	v, ok := handlerMetric(app, "eddy_state_cleaned_tasks_total")
	if !ok {
		t.Fatal("no eddy_state_cleaned_tasks_total in /metrics")
	}
	return v
}

// handlerMetric reads one unlabelled sample from an app's /metrics.
func handlerMetric(app *streams.App, name string) (float64, bool) {
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	m := regexp.MustCompile(`(?m)^` + name + `(?:\{[^}]*\})? (\S+)$`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}
