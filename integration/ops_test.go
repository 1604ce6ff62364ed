package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// instance is one App of an application under test, serving its Handler
// on a loopback port.
type instance struct {
	app    *streams.App
	url    string
	cancel context.CancelFunc
	done   chan error
	srv    *http.Server
}

// startInstance runs top with cfg, its Handler on a free loopback port
// which it advertises as its ApplicationServer.
func startInstance(t *testing.T, top *topology.Topology, cfg streams.Config) *instance {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ApplicationServer = l.Addr().String()
	app, err := streams.New(top, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{app: app, url: "http://" + l.Addr().String(), done: make(chan error, 1), srv: &http.Server{Handler: app.Handler()}}
	go in.srv.Serve(l)
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- app.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

func (in *instance) stop(t *testing.T) {
	t.Helper()
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	if err := <-in.done; err != nil {
		t.Errorf("instance %s: %v", in.url, err)
	}
	in.srv.Close()
}

func httpGet(url string) (int, []byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metricValue reads one sample from a Prometheus text exposition: the
// metric name and a label that must appear in its label set.
func metricValue(t *testing.T, url, name, label string) (float64, bool) {
	t.Helper()
	_, body, err := httpGet(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + name + `\{([^}]*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		if label == "" || regexp.MustCompile(`(^|,)`+regexp.QuoteMeta(label)+`(,|$)`).MatchString(m[1]) {
			v, err := strconv.ParseFloat(m[2], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// countTopology counts records per key in the store "counts" and, with
// hourly, per key and hour in the window store "hourly".
func countTopology(input string, hourly bool) *topology.Topology {
	b := topology.NewBuilder()
	str := serde.String()
	g := topology.Stream(b, input, topology.Consumed(str, str)).GroupByKey()
	topology.Count(g, topology.Materialized[string, int64]("counts"))
	if hourly {
		topology.WindowedCount(g.WindowedBy(topology.TumblingWindows(time.Hour, 0)), topology.Materialized[string, int64]("hourly"))
	}
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// Three instances, each advertising its Handler: every key of the count
// store is answered by every instance over HTTP with the exact count
// (locally or forwarded to the owner), each key is in exactly one
// instance's local store, and after one instance stops and the group
// rebalances the two left answer every key exactly again.
func TestInteractiveQueriesAcrossInstances(t *testing.T) {
	brokers := realBroker(t)
	app := kafkatest.UniqueName(t, "iq")
	input := app + "-in"
	kafkatest.CreateTopic(t, brokers, input, 6, nil)
	want := map[string]int64{}
	var recs []kafkatest.Record
	for i := range 3000 {
		k := fmt.Sprintf("user-%03d", i%120)
		if i%120 < 40 && i%2 == 0 {
			continue // uneven counts
		}
		want[k]++
		recs = append(recs, kafkatest.KV(k, "x"))
	}
	kafkatest.Produce(t, brokers, input, recs...)
	top := countTopology(input, true)
	var insts []*instance
	for i := range 3 {
		insts = append(insts, startInstance(t, top, streams.Config{
			ApplicationID: app, BootstrapServers: brokers, StateDir: t.TempDir(), Guarantee: streams.ExactlyOnce,
			ProcessID: fmt.Sprintf("iq-%d", i),
		}))
	}
	kafkatest.WaitCaughtUp(t, brokers, app, 2*time.Minute, input)

	// waitStable waits until every live instance runs with some of the six
	// tasks and together they have all of them (the group settled).
	waitStable := func(live []*instance) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			tasks, settled := 0, true
			for _, in := range live {
				rep := in.app.Report()
				n := 0
				for _, th := range rep.Threads {
					n += len(th.Tasks)
				}
				if rep.State != "RUNNING" || n == 0 {
					settled = false
				}
				tasks += n
			}
			if settled && tasks == 6 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the group did not settle within 90s (%d tasks)", tasks)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitStable(insts)

	// checkAll polls until every live instance answers every key exactly.
	checkAll := func(live []*instance) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			bad := ""
			for _, in := range live {
				for k, n := range want {
					status, body, err := httpGet(in.url + "/stores/counts/keys/" + k)
					var ans streams.KeyAnswer
					if err == nil {
						err = json.Unmarshal(body, &ans)
					}
					if err != nil || status != 200 || ans.Value != float64(n) {
						bad = fmt.Sprintf("%s asked for %s: status %d, %s (err %v); want %d", in.url, k, status, body, err, n)
						break
					}
				}
				if bad != "" {
					break
				}
			}
			// A window store answers with the key's windows, wherever
			// the key lives: their counts add up to the key's count.
			for _, in := range live {
				for _, k := range []string{"user-001", "user-041", "user-077", "user-119"} {
					status, body, err := httpGet(in.url + "/stores/hourly/keys/" + k)
					var ans struct {
						Value []struct {
							Start, End int64
							Value      int64
						}
					}
					if err == nil {
						err = json.Unmarshal(body, &ans)
					}
					sum := int64(0)
					for _, w := range ans.Value {
						sum += w.Value
						if w.End-w.Start != time.Hour.Milliseconds() {
							err = fmt.Errorf("window [%d, %d) is not an hour", w.Start, w.End)
						}
					}
					if bad == "" && (err != nil || status != 200 || sum != want[k]) {
						bad = fmt.Sprintf("%s asked for %s's hourly windows: status %d, %s (err %v); want counts adding up to %d", in.url, k, status, body, err, want[k])
					}
				}
			}
			if bad == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queries not answered exactly within 60s: %s", bad)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	checkAll(insts)

	// Locally, the instances' stores partition the keys: each key in
	// exactly one, with its count; MetadataForKey agrees everywhere.
	localUnion := func(live []*instance) {
		t.Helper()
		seen := map[string]int{}
		for _, in := range live {
			kv, err := streams.KeyValueStoreOf[string, int64](in.app, "counts")
			if err != nil {
				t.Fatal(err)
			}
			it := kv.All()
			for k, n := range it.Seq() {
				seen[k]++
				if n != want[k] {
					t.Errorf("%s holds %s = %d, want %d", in.url, k, n, want[k])
				}
			}
			if err := it.Err(); err != nil {
				t.Fatalf("%s: iterating its store: %v", in.url, err)
			}
			for k := range want {
				md0, err0 := live[0].app.MetadataForKey("counts", k)
				md, err := in.app.MetadataForKey("counts", k)
				if err != nil || err0 != nil || md.ProcessID != md0.ProcessID || md.Task != md0.Task {
					t.Fatalf("MetadataForKey(%s) differs: %+v %v vs %+v %v", k, md, err, md0, err0)
				}
			}
		}
		for k := range want {
			if seen[k] != 1 {
				t.Errorf("key %s is in %d local stores, want exactly 1", k, seen[k])
			}
		}
	}
	localUnion(insts)
	if _, err := insts[0].app.MetadataForKey("counts", 42); err == nil {
		t.Error("MetadataForKey with an int key for a string store did not fail")
	}

	insts[2].stop(t)
	waitStable(insts[:2])
	checkAll(insts[:2])
	localUnion(insts[:2])
}

// While a large changelog restores into a fresh instance, /readyz says not
// ready (and /metrics shows records left to restore); once restored it is
// ready, the restore counter holds the whole changelog, and the records
// consumed from the input equal those produced into it.
func TestReadyzDuringRestoreAndMetrics(t *testing.T) {
	brokers := realBroker(t)
	app := kafkatest.UniqueName(t, "ready")
	input := app + "-in"
	kafkatest.CreateTopic(t, brokers, input, 1, nil)
	const keys = 200_000
	recs := make([]kafkatest.Record, keys)
	for i := range recs {
		recs[i] = kafkatest.KV(fmt.Sprintf("key-%06d", i), "v")
	}
	kafkatest.Produce(t, brokers, input, recs...)
	top := countTopology(input, false)
	cfg := streams.Config{ApplicationID: app, BootstrapServers: brokers, StateDir: t.TempDir(), NoCache: true, ProcessID: "first"}
	first := startInstance(t, top, cfg)
	kafkatest.WaitCaughtUp(t, brokers, app, 3*time.Minute, input)
	label := `topic="` + input + `"`
	if n, ok := metricValue(t, first.url, "eddy_records_consumed_total", label); !ok || n != keys {
		t.Fatalf("eddy_records_consumed_total{%s} = %v (found %v), want %d", label, n, ok, keys)
	}
	changelog := app + "-counts-changelog"
	if n, ok := metricValue(t, first.url, "eddy_records_produced_total", `topic="`+changelog+`"`); !ok || n != keys {
		t.Fatalf("eddy_records_produced_total for the changelog = %v (found %v), want %d", n, ok, keys)
	}
	if n, ok := metricValue(t, first.url, "eddy_state", `state="RUNNING"`); !ok || n != 1 {
		t.Fatalf("eddy_state{state=RUNNING} = %v (found %v)", n, ok)
	}
	first.stop(t)

	// A new instance with empty state restores the whole changelog, its
	// state's memory within a budget of 48 MiB.
	cfg.StateDir, cfg.ProcessID = t.TempDir(), "second"
	cfg.StateMemoryBytes = 48 << 20
	second := startInstance(t, top, cfg)
	counts, err := streams.KeyValueStoreOf[string, int64](second.app, "counts")
	if err != nil {
		t.Fatal(err)
	}
	sawRestoring, sawRefused, maxRate, maxMem := false, false, 0.0, 0.0
	deadline := time.Now().Add(3 * time.Minute)
	for {
		status, body, err := httpGet(second.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		remaining, _ := metricValue(t, second.url, "eddy_restore_remaining_records", "")
		if rate, _ := metricValue(t, second.url, "eddy_restore_records_per_second", ""); rate > maxRate {
			maxRate = rate
		}
		mem, _ := metricValue(t, second.url, "eddy_state_memory_bytes", `part="memtables"`)
		cached, _ := metricValue(t, second.url, "eddy_state_memory_bytes", `part="block_cache"`)
		maxMem = max(maxMem, mem+cached)
		if status == http.StatusOK {
			break
		}
		if status != http.StatusServiceUnavailable {
			t.Fatalf("/readyz: %d %s", status, body)
		}
		if remaining > 0 {
			sawRestoring = true
			// A query while the store restores is refused with a clear
			// error (or, if the restore just ended, answered exactly):
			// never a partial answer.
			n, found, err := counts.Get("key-000123")
			switch {
			case errors.Is(err, streams.ErrNotQueryable):
				sawRefused = true
			case err != nil || !found || n != 1:
				t.Fatalf("query during the restore: %d %v %v; want ErrNotQueryable or the restored count 1", n, found, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 3 minutes: %s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !sawRestoring || !sawRefused {
		t.Errorf("never saw /readyz not ready (%v) and a query refused (%v) while records remained to restore", sawRestoring, sawRefused)
	}
	if maxRate <= 0 {
		t.Error("eddy_restore_records_per_second never rose above 0 during the restore")
	}
	t.Logf("restore rate peaked at %.0f records/s; memtables and block cache at most %.1f MiB", maxRate, maxMem/(1<<20))
	var limit float64
	for _, part := range []string{"memtables", "block_cache", "record_cache"} {
		n, ok := metricValue(t, second.url, "eddy_state_memory_limit_bytes", `part="`+part+`"`)
		if !ok {
			t.Errorf("no eddy_state_memory_limit_bytes{part=%q}", part)
		}
		limit += n
	}
	if limit != 48<<20 {
		t.Errorf("eddy_state_memory_limit_bytes add up to %.0f, want StateMemoryBytes %d", limit, 48<<20)
	}
	if maxMem == 0 || maxMem > 48<<20 {
		t.Errorf("eddy_state_memory_bytes peaked at %.0f during the restore, want within StateMemoryBytes %d", maxMem, 48<<20)
	}
	if n, _ := metricValue(t, second.url, "eddy_restore_records_total", ""); n != keys {
		t.Errorf("eddy_restore_records_total = %v, want %d (the whole changelog)", n, keys)
	}
	if n, _ := metricValue(t, second.url, "eddy_restore_remaining_records", ""); n != 0 {
		t.Errorf("eddy_restore_remaining_records = %v once ready, want 0", n)
	}
	if n, err := counts.ApproximateNumEntries(); err != nil || n != keys {
		t.Errorf("restored store has %d keys (%v), want %d", n, err, keys)
	}
	status, body, _ := httpGet(second.url + "/healthz")
	if status != 200 {
		t.Errorf("/healthz: %d %s", status, body)
	}
	status, body, _ = httpGet(second.url + "/topology?format=mermaid")
	if status != 200 || !regexp.MustCompile(`(?s)^flowchart TB\n.*\[\("counts"\)\]`).Match(body) {
		t.Errorf("/topology?format=mermaid: %d %s", status, body)
	}
	status, body, _ = httpGet(second.url + "/state")
	var rep streams.StateReport
	if err := json.Unmarshal(body, &rep); err != nil || status != 200 || rep.State != "RUNNING" || len(rep.Threads) != 1 || len(rep.Threads[0].Tasks) != 1 {
		t.Errorf("/state: %d %s (%v)", status, body, err)
	}
}
