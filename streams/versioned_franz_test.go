//go:build !eddy_librdkafka

package streams_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// A versioned table's store answers interactive queries as of a time: the
// Go API (latest, as of, versions both ways) and GET ...?asOf= over HTTP;
// an as-of query of a store that keeps no versions is a 400 that says so.
func TestVersionedStoreQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "prices", "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range []struct {
		v  string
		ts int64
	}{{"1.00", 1000}, {"1.20", 3000}, {"1.10", 2000}} {
		rec := &kgo.Record{Topic: "prices", Key: []byte("apple"), Value: []byte(r.v), Timestamp: time.UnixMilli(r.ts)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	str := serde.String()
	b := topology.NewBuilder()
	topology.Table(b, "prices", topology.Consumed(str, str), topology.Materialized[string, string]("prices").WithVersioned(time.Hour))
	topology.Table(b, "other", topology.Consumed(str, str), topology.Materialized[string, string]("plain"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{ApplicationID: "versioned-app", BootstrapServers: brokers, StateDir: t.TempDir(), CommitInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	store, err := streams.VersionedKeyValueStoreOf[string, string](app, "prices")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streams.VersionedKeyValueStoreOf[string, string](app, "plain"); err == nil {
		t.Fatal("a plain store opened as versioned")
	}
	waitFor(t, "the three prices in the store", func() bool {
		vs, err := store.Versions("apple", 0, 10_000, true)
		return err == nil && len(vs) == 3
	})
	if r, ok, err := store.Get("apple"); err != nil || !ok || r.Value != "1.20" || r.Timestamp != 3000 {
		t.Fatalf("Get = %+v %v %v", r, ok, err)
	}
	if r, ok, err := store.GetAsOf("apple", 2500); err != nil || !ok || r.Value != "1.10" || r.ValidTo != 3000 {
		t.Fatalf("GetAsOf(2500) = %+v %v %v", r, ok, err)
	}
	if _, ok, _ := store.GetAsOf("apple", 999); ok {
		t.Fatal("a value before the first version")
	}
	desc, _ := store.Versions("apple", 1500, 2500, false)
	if len(desc) != 2 || desc[0].Value != "1.10" || desc[1].Value != "1.00" {
		t.Fatalf("Versions(1500, 2500, descending) = %+v", desc)
	}

	srv := httptest.NewServer(app.Handler())
	defer srv.Close()
	get := func(path string) (int, streams.KeyAnswer) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a streams.KeyAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, a
	}
	code, a := get("/stores/prices/keys/apple?asOf=2500")
	if code != 200 || a.Value != "1.10" || a.Timestamp == nil || *a.Timestamp != 2000 || a.ValidTo == nil || *a.ValidTo != 3000 {
		t.Fatalf("asOf=2500: %d %+v", code, a)
	}
	code, a = get("/stores/prices/keys/apple?asOf=" + time.UnixMilli(3500).UTC().Format(time.RFC3339Nano))
	if code != 200 || a.Value != "1.20" || a.ValidTo != nil {
		t.Fatalf("asOf=RFC 3339 3.5 s: %d %+v", code, a)
	}
	if code, a = get("/stores/prices/keys/apple?asOf=500"); code != 404 || a.Found {
		t.Fatalf("asOf before the first version: %d %+v", code, a)
	}
	if code, a = get("/stores/prices/keys/apple?asOf=soon"); code != 400 {
		t.Fatalf("asOf=soon: %d %+v", code, a)
	}
	if code, a = get("/stores/plain/keys/apple?asOf=2500"); code != 400 || a.Error == "" {
		t.Fatalf("asOf on a plain store: %d %+v", code, a)
	}
}
