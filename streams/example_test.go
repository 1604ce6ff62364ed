package streams_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// A service that counts clicks per user, exposes eddy's admin endpoint
// under /eddy/ on its own mux, registers eddy's metrics with the default
// Prometheus registry and answers "how many clicks has this user made?"
// from any instance.
func ExampleApp_Handler() {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Count(topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey(),
		topology.Materialized[string, int64]("clicks-per-user"))
	top, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{
		ApplicationID:     "click-counter",
		BootstrapServers:  "127.0.0.1:9092",
		Metrics:           prometheus.DefaultRegisterer,
		ApplicationServer: "127.0.0.1:8080", // where the other instances reach this one
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", app.Handler()) // /healthz, /readyz, /metrics, /topology, /state, /stores/...
	go http.ListenAndServe("127.0.0.1:8080", mux)

	// GET /stores/clicks-per-user/keys/alice on any instance answers with
	// alice's count; inside the service, read the local share directly:
	go func() {
		counts, err := streams.KeyValueStoreOf[string, int64](app, "clicks-per-user")
		if err != nil {
			log.Fatal(err)
		}
		for range time.Tick(time.Minute) {
			n, found, err := counts.Get("alice")
			if errors.Is(err, streams.ErrNotQueryable) {
				continue // rebalancing: ask again later
			}
			md, _ := app.MetadataForKey("clicks-per-user", "alice")
			fmt.Println(n, found, err, md.Local)
		}
	}()
	if err := app.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// bearer adds a token to every request a client sends.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Instances that serve interactive queries over https, behind the service's
// own auth middleware: each instance advertises its https URL, checks the
// token on every request, and forwards queries for keys another instance
// owns with a client that trusts the instances' CA and sends the token.
func ExampleConfig_queryClient() {
	const token = "s3cr3t" // in a real service: from its secret store
	caPEM, err := os.ReadFile("/etc/eddy/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}

	str := serde.String()
	b := topology.NewBuilder()
	topology.Count(topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey(),
		topology.Materialized[string, int64]("clicks-per-user"))
	top, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{
		ApplicationID:     "click-counter",
		BootstrapServers:  "127.0.0.1:9092",
		ApplicationServer: "https://node-1.internal:8443",
		QueryClient:       &http.Client{Timeout: 10 * time.Second, Transport: bearer{token, tr}},
	})
	if err != nil {
		log.Fatal(err)
	}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	go http.ListenAndServeTLS(":8443", "/etc/eddy/node-1.pem", "/etc/eddy/node-1.key", auth(app.Handler()))
	if err := app.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// A stateful service that keeps one standby copy of each task and warms
// a new instance up before moving tasks to it, and whose lookups may read
// a standby's copy while a key's owner is gone or moving: with at most the
// standby's lag behind, instead of no answer.
func ExampleStaleStores() {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Count(topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey(),
		topology.Materialized[string, int64]("clicks-per-user"))
	top, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{
		ApplicationID:         "click-counter",
		BootstrapServers:      "127.0.0.1:9092",
		Guarantee:             streams.ExactlyOnce,
		NumStandbyReplicas:    1,      // a copy of each task's state on another instance
		AcceptableRecoveryLag: 10_000, // a task moves once its new instance is this close (the default)
		// The copy in another zone than its task's active, where the group
		// has an instance there.
		ClientTags:              map[string]string{"zone": os.Getenv("ZONE")},
		RackAwareAssignmentTags: []string{"zone"},
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		counts, err := streams.KeyValueStoreOf[string, int64](app, "clicks-per-user", streams.StaleStores())
		if err != nil {
			log.Fatal(err)
		}
		for range time.Tick(time.Minute) {
			md, _ := app.MetadataForKey("clicks-per-user", "alice")
			n, found, err := counts.Get("alice") // from the active task here, or this instance's standby
			fmt.Println(n, found, err, md.Local, len(md.Standbys))
		}
	}()
	if err := app.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// A price service answering "what did apple cost at 10:30?" from its
// versioned table: in Go with VersionedKeyValueStoreOf, over HTTP with
// GET /stores/prices/keys/apple?asOf=2026-12-07T10:30:00Z.
func ExampleVersionedKeyValueStoreOf() {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Table(b, "prices", topology.Consumed(str, str),
		topology.Materialized[string, string]("prices").WithVersioned(30*24*time.Hour))
	top, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{ApplicationID: "prices", BootstrapServers: "127.0.0.1:9092"})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		prices, err := streams.VersionedKeyValueStoreOf[string, string](app, "prices")
		if err != nil {
			log.Fatal(err)
		}
		at := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC).UnixMilli()
		for range time.Tick(time.Minute) {
			r, found, err := prices.GetAsOf("apple", at)
			fmt.Println(r.Value, r.Timestamp, r.ValidTo, found, err)
			day, _ := prices.Versions("apple", at-12*3600_000, at+12*3600_000, true) // the day's prices, oldest first
			fmt.Println(len(day))
		}
	}()
	go http.ListenAndServe("127.0.0.1:8080", app.Handler())
	if err := app.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
