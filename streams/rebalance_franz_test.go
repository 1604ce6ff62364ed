//go:build !eddy_librdkafka

package streams_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
	"go.uber.org/zap"
)

// A rebalance moves only some tasks, and the keys of the tasks that stay
// keep answering through it. One instance holds a table over two
// partitions; a second joins. While the first is held inside the
// rebalance (its state listener, on entering REBALANCING, waits for the
// test), every key is queried on it; once the group settles, every key of
// the task it kept must have been answered during the rebalance.
func TestKeysOfTasksThatStayAnswerDuringARebalance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, keys := tableInput(ctx, t, func(string) string { return "v" })
	str := serde.String()
	build := func() *topology.Topology {
		b := topology.NewBuilder()
		topology.Table(b, "in", topology.Consumed(str, str), topology.Materialized[string, string]("t"))
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}

	held, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lg, _ := zap.NewDevelopment()
	first, err := streams.New(build(), streams.Config{ApplicationID: "iq-rebalance", BootstrapServers: brokers, StateDir: t.TempDir(), Logger: lg,
		StateListener: func(old, s streams.State) {
			if old == streams.Running && s == streams.Rebalancing {
				once.Do(func() { close(held); <-resume })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(a *streams.App) func() {
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return func() {
			a.Close(context.Background())
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	stopFirst := run(first)
	store, err := streams.KeyValueStoreOf[string, string](first, "t")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every key on the first instance", func() bool {
		for _, k := range keys {
			if _, ok, err := store.Get(k); err != nil || !ok {
				return false
			}
		}
		return true
	})

	second, err := streams.New(build(), streams.Config{ApplicationID: "iq-rebalance", BootstrapServers: brokers, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopSecond := run(second)
	defer stopSecond()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the first instance never rebalanced")
	}
	during := map[string]error{}
	for _, k := range keys {
		_, ok, err := store.Get(k)
		if err == nil && !ok {
			err = errors.New("not found")
		}
		during[k] = err
	}
	close(resume)

	waitFor(t, "both instances running", func() bool {
		return first.State() == streams.Running && second.State() == streams.Running && len(tasksOf(first)) == 1 && len(tasksOf(second)) == 1
	})
	kept := tasksOf(first)[0]
	answered := 0
	for _, k := range keys {
		if _, ok, err := store.Get(k); err != nil || !ok {
			continue // not the first instance's now
		}
		if during[k] != nil {
			t.Errorf("key %s of task %s, which stayed on the first instance, failed during the rebalance: %v", k, kept, during[k])
		}
		answered++
	}
	if answered == 0 {
		t.Fatalf("no key of the kept task %s", kept)
	}
	stopFirst()
}

// tableInput starts an embedded broker with a two-partition topic "in"
// holding 20 keys, k0…k19, with value(key) each; it returns the broker's
// address and the keys.
func tableInput(ctx context.Context, t *testing.T, value func(key string) string) (string, []string) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(keys[i]), Value: []byte(value(keys[i]))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return brokers, keys
}

// tasksOf returns the ids of the tasks an app runs.
func tasksOf(a *streams.App) []string {
	var ids []string
	for _, th := range a.Report().Threads {
		for _, tk := range th.Tasks {
			ids = append(ids, tk.ID)
		}
	}
	return ids
}

// waitFor polls cond until it holds; the bound only turns a hang into a
// failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With a standby replica, MetadataForKey names the standby's instance;
// there a query with StaleStores (and GET /stores/…?stale=true, which
// says "stale" and the standby's lag) reads the key from the standby's
// state, while a plain query does not find it; /state lists the standby.
func TestStandbyAnswersStaleQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, keys := tableInput(ctx, t, func(k string) string { return "v-" + k })
	str := serde.String()
	type instance struct {
		app *streams.App
		srv *httptest.Server
	}
	start := func(name string) *instance {
		b := topology.NewBuilder()
		topology.Table(b, "in", topology.Consumed(str, str), topology.Materialized[string, string]("t"))
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		in := &instance{}
		var h atomic.Pointer[http.Handler]
		in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
		t.Cleanup(in.srv.Close)
		in.app, err = streams.New(top, streams.Config{ApplicationID: "iq-standby", BootstrapServers: brokers, StateDir: t.TempDir(),
			ProcessID: name, NumStandbyReplicas: 1, ApplicationServer: strings.TrimPrefix(in.srv.URL, "http://")})
		if err != nil {
			t.Fatal(err)
		}
		handler := in.app.Handler()
		h.Store(&handler)
		done := make(chan error, 1)
		go func() { done <- in.app.Run(ctx) }()
		t.Cleanup(func() {
			in.app.Close(context.Background())
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return in
	}
	a, b := start("a"), start("b")
	standbysOf := func(app *streams.App) []string {
		var ids []string
		for _, th := range app.Report().Threads {
			for _, sb := range th.Standbys {
				ids = append(ids, sb.ID)
			}
		}
		return ids
	}
	waitFor(t, "a task and a standby on each instance", func() bool {
		for _, in := range []*instance{a, b} {
			if in.app.State() != streams.Running || len(tasksOf(in.app)) != 1 || len(standbysOf(in.app)) != 1 {
				return false
			}
		}
		return true
	})
	// A key of b's task: a follows its task as a standby.
	task := tasksOf(b.app)[0]
	var key string
	var md streams.KeyMetadata
	waitFor(t, "a to know b's task from the instance directory", func() bool {
		for _, k := range keys {
			if m, err := a.app.MetadataForKey("t", k); err == nil && m.Task == task {
				key, md = k, m
				return true
			}
		}
		return false
	})
	if md.ProcessID != "b" || len(md.Standbys) != 1 || md.Standbys[0].ProcessID != "a" || !md.Standbys[0].Local {
		t.Fatalf("metadata of %s on a: %+v; want owner b, standby a (local)", key, md)
	}
	waitFor(t, "b to know a's standby of its task", func() bool {
		m, err := b.app.MetadataForKey("t", key)
		return err == nil && m.Local && len(m.Standbys) == 1 && m.Standbys[0].ProcessID == "a" && !m.Standbys[0].Local
	})
	plain, err := streams.KeyValueStoreOf[string, string](a.app, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := plain.Get(key); err != nil || ok {
		t.Fatalf("a plain query on a found b's key %s (%v): only a stale one may", key, err)
	}
	stale, err := streams.KeyValueStoreOf[string, string](a.app, "t", streams.StaleStores())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby to hold the key", func() bool {
		v, ok, err := stale.Get(key)
		return err == nil && ok && v == "v-"+key
	})
	resp, err := http.Get(a.srv.URL + "/stores/t/keys/" + key + "?stale=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans streams.KeyAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !ans.Found || !ans.Stale || ans.Lag == nil || ans.ServedBy != "a" || ans.Value != "v-"+key {
		t.Fatalf("GET ?stale=true on a: %d %+v; want a's standby's answer", resp.StatusCode, ans)
	}
	// Without stale, a forwards the query to b, the owner.
	resp2, err := http.Get(a.srv.URL + "/stores/t/keys/" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	ans = streams.KeyAnswer{}
	if err := json.NewDecoder(resp2.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	if resp2.StatusCode != http.StatusOK || ans.Stale || ans.ServedBy != "b" {
		t.Fatalf("GET on a: %d %+v; want b's answer", resp2.StatusCode, ans)
	}
}

// Rack-aware standbys (KIP-708): with ClientTags and
// RackAwareAssignmentTags, every task's standby is in another zone than
// its active. Four instances, two per zone, eight tasks, one standby
// each: without the tags, the least-loaded rule would put some standbys
// beside their actives' zone.
func TestStandbysSpreadOverZones(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()[0]
	str := serde.String()
	zoneOf := map[string]string{}
	var apps []*streams.App
	for _, name := range []string{"a1", "b1", "a2", "b2"} {
		zoneOf[name] = name[:1]
		b := topology.NewBuilder()
		topology.Table(b, "in", topology.Consumed(str, str), topology.Materialized[string, string]("t"))
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		app, err := streams.New(top, streams.Config{ApplicationID: "rack-aware", BootstrapServers: brokers, StateDir: t.TempDir(), ProcessID: name,
			NumStandbyReplicas: 1, ClientTags: map[string]string{"zone": zoneOf[name], "host": name}, RackAwareAssignmentTags: []string{"zone"}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- app.Run(ctx) }()
		t.Cleanup(func() {
			app.Close(context.Background())
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		apps = append(apps, app)
	}
	names := []string{"a1", "b1", "a2", "b2"}
	var active, standby map[string]string // task → instance
	waitFor(t, "two tasks and two standbys on each instance", func() bool {
		active, standby = map[string]string{}, map[string]string{}
		for i, app := range apps {
			if app.State() != streams.Running || len(tasksOf(app)) != 2 {
				return false
			}
			for _, id := range tasksOf(app) {
				active[id] = names[i]
			}
			for _, th := range app.Report().Threads {
				for _, sb := range th.Standbys {
					if _, dup := standby[sb.ID]; dup {
						return false // a warm-up beside a standby: not settled
					}
					standby[sb.ID] = names[i]
				}
			}
		}
		return len(active) == 8 && len(standby) == 8
	})
	for task, on := range active {
		if zoneOf[standby[task]] == zoneOf[on] {
			t.Errorf("task %s: active on %s, its standby on %s, both in zone %s", task, on, standby[task], zoneOf[on])
		}
	}
}

// Unknown rack-aware tags are refused at New.
func TestRackAwareTagsMustBeSet(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(serde.String(), serde.String())).To("out", topology.Produced(serde.String(), serde.String()))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = streams.New(top, streams.Config{ApplicationID: "x", BootstrapServers: "127.0.0.1:1", StateDir: t.TempDir(),
		ClientTags: map[string]string{"zone": "a"}, RackAwareAssignmentTags: []string{"zone", "rack"}})
	if err == nil || !strings.Contains(err.Error(), `RackAwareAssignmentTags names "rack", which ClientTags does not set`) {
		t.Fatalf("New: %v", err)
	}
}

// Members hear of a rebalance from the others' notices, not only at their
// next heartbeat. The heartbeat interval is two minutes and the test gives
// each step one: a second instance joins and takes a task (its join and
// its warm-up's request for a rebalance reach the first instance as
// notices), then stops cleanly once the broker has seen both members'
// heartbeat after the last rebalance (franz-go heartbeats once half a
// second after each rebalance; after that, the first instance would hear
// of the leave only two minutes later), and the first takes its task back.
// waitFor's minute is half the heartbeat interval.
func TestMembersHearOfRebalancesFromNotices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	// The broker's view of the group: the members of the latest
	// generation synced, and each member's latest heartbeat generation.
	var mu sync.Mutex
	synced := map[int32]map[string]bool{}
	beat := map[string]int32{}
	cluster.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.SyncGroupRequest)
		mu.Lock()
		if synced[req.Generation] == nil {
			synced[req.Generation] = map[string]bool{}
		}
		synced[req.Generation][req.MemberID] = true
		mu.Unlock()
		return nil, nil, false
	})
	cluster.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.HeartbeatRequest)
		mu.Lock()
		beat[req.MemberID] = max(beat[req.MemberID], req.Generation)
		mu.Unlock()
		return nil, nil, false
	})
	settled := func() bool { // every member of the latest generation heartbeated in it
		mu.Lock()
		defer mu.Unlock()
		latest := int32(-1)
		for g := range synced {
			latest = max(latest, g)
		}
		for m := range synced[latest] {
			if beat[m] < latest {
				return false
			}
		}
		return latest >= 0
	}

	brokers := cluster.ListenAddrs()[0]
	str := serde.String()
	b := topology.NewBuilder()
	topology.Table(b, "in", topology.Consumed(str, str), topology.Materialized[string, string]("t"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	conf := func() streams.Config {
		return streams.Config{ApplicationID: "notices", BootstrapServers: brokers, StateDir: t.TempDir(),
			ClientConfig: map[string]string{"heartbeat.interval.ms": "120000", "session.timeout.ms": "240000"}}
	}
	start := func() (*streams.App, func()) {
		a, err := streams.New(top, conf())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return a, func() {
			a.Close(context.Background())
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	first, stopFirst := start()
	defer stopFirst()
	waitFor(t, "first instance with both tasks", func() bool { return first.State() == streams.Running && len(tasksOf(first)) == 2 })
	second, stopSecond := start()
	waitFor(t, "task on the joining instance", func() bool {
		return first.State() == streams.Running && second.State() == streams.Running && len(tasksOf(first)) == 1 && len(tasksOf(second)) == 1
	})
	waitFor(t, "heartbeat of every member after the rebalance", settled)
	stopSecond()
	waitFor(t, "task back on the first instance", func() bool { return first.State() == streams.Running && len(tasksOf(first)) == 2 })
}
