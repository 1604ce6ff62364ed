package streams_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

func newCountApp(t *testing.T, reg prometheus.Registerer) (*streams.App, *topology.Topology) {
	t.Helper()
	str := serde.String()
	b := topology.NewBuilder()
	topology.Count(topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey(),
		topology.Materialized[string, int64]("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{ApplicationID: "handler-test", BootstrapServers: "127.0.0.1:1", Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	return app, top
}

// Before it runs, an app is alive but not ready, describes its topology,
// exports its state as a metric, and refuses queries with ErrNotQueryable
// (and mistaken store names or types with errors that say what is wrong).
func TestHandlerAndQueriesBeforeRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	app, top := newCountApp(t, reg)
	srv := httptest.NewServer(app.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("/healthz = %d %s", code, body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "CREATED") {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, body := get("/topology"); code != 200 || body != top.Describe() {
		t.Errorf("/topology = %d %s", code, body)
	}
	if code, body := get("/topology?format=mermaid"); code != 200 || body != top.Mermaid() {
		t.Errorf("/topology?format=mermaid = %d %s", code, body)
	}
	if code, _ := get("/topology?format=svg"); code != 400 {
		t.Errorf("/topology?format=svg = %d, want 400", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `eddy_state{application_id="handler-test",state="CREATED"} 1`) {
		t.Errorf("/metrics = %d %s", code, body)
	}
	// The registerer passed in Config gets the same metrics.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"eddy_state", "eddy_commits_total", "eddy_restore_remaining_records"} {
		if !names[n] {
			t.Errorf("Config.Metrics registry lacks %s (has %v)", n, names)
		}
	}
	// A second app with the same id in the same registry is refused.
	str := serde.String()
	b := topology.NewBuilder()
	topology.Stream(b, "x", topology.Consumed(str, str)).To("y", topology.Produced(str, str))
	top2, _ := b.Build()
	if _, err := streams.New(top2, streams.Config{ApplicationID: "handler-test", BootstrapServers: "127.0.0.1:1", Metrics: reg}); err == nil {
		t.Error("registering the same application's metrics twice did not fail")
	}

	if code, body := get("/stores/counts/keys/alice"); code != 503 || !strings.Contains(body, "not queryable") {
		t.Errorf("query before Run = %d %s", code, body)
	}
	if code, body := get("/stores/nope/keys/alice"); code != 404 || !strings.Contains(body, `no store \"nope\"`) {
		t.Errorf("query of an unknown store = %d %s", code, body)
	}
	kv, err := streams.KeyValueStoreOf[string, int64](app, "counts")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := kv.Get("alice"); !errors.Is(err, streams.ErrNotQueryable) {
		t.Errorf("Get before Run: %v, want ErrNotQueryable", err)
	}
	it := kv.All()
	for range it.Seq() {
		t.Error("All before Run yielded an entry")
	}
	if !errors.Is(it.Err(), streams.ErrNotQueryable) {
		t.Errorf("All before Run: %v, want ErrNotQueryable", it.Err())
	}
	if _, err := streams.KeyValueStoreOf[string, string](app, "counts"); err == nil || !strings.Contains(err.Error(), "does not hold string keys and string values") {
		t.Errorf("wrong value type: %v", err)
	}
	if _, err := streams.WindowStoreOf[string, int64](app, "counts"); err == nil || !strings.Contains(err.Error(), "not a window store") {
		t.Errorf("wrong store kind: %v", err)
	}
	if _, err := app.MetadataForKey("counts", "alice"); !errors.Is(err, streams.ErrNotQueryable) {
		t.Errorf("MetadataForKey before Run: %v", err)
	}
}
