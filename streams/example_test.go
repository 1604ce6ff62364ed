package streams_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
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
