package ordertotals_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/examples/ordertotals"
	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde/avro"
	"github.com/eddy-go/eddy/streams"
)

// README:begin
func TestOrderTotalsInOneFunction(t *testing.T) {
	// Kafka and the schema registry in containers, removed when the test ends.
	brokers := kafkatest.Kafka(t)
	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: kafkatest.Registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, out := kafkatest.UniqueName(t, "orders"), kafkatest.UniqueName(t, "totals")
	kafkatest.CreateTopic(t, brokers, in, 3, nil)
	kafkatest.CreateTopic(t, brokers, out, 3, nil)

	// Avro input, as a producer with Confluent's serializer writes it.
	orders, err := avro.New[ordertotals.Order](reg, ordertotals.OrderSchema)
	if err != nil {
		t.Fatal(err)
	}
	for i, cents := range []int64{120, 80, 300} {
		id := fmt.Sprint("order-", i)
		b, err := orders.Serialize(in, ordertotals.Order{ID: id, Customer: "ada", Cents: cents})
		if err != nil {
			t.Fatal(err)
		}
		kafkatest.Produce(t, brokers, in, kafkatest.Record{Key: []byte(id), Value: b})
	}

	// The service, run until it has processed and committed everything.
	top, err := ordertotals.Topology(reg, in, out)
	if err != nil {
		t.Fatal(err)
	}
	appID := kafkatest.UniqueName(t, "ordertotals")
	app, err := streams.New(top, streams.Config{ApplicationID: appID, BootstrapServers: brokers,
		Guarantee: streams.ExactlyOnce, StateDir: t.TempDir()}) // t.TempDir on the test's goroutine
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, in)
	stop()
	if err := <-done; err != nil { // stopped before the test ends and its TempDir goes
		t.Fatal(err)
	}

	// The output, read to its end (read_committed), asserted.
	totals, err := avro.New[ordertotals.Total](reg, ordertotals.TotalSchema)
	if err != nil {
		t.Fatal(err)
	}
	recs := kafkatest.ConsumeAll(t, brokers, out)
	if len(recs) == 0 {
		t.Fatal("no totals")
	}
	last, err := totals.Deserialize(out, recs[len(recs)-1].Value)
	if want := (ordertotals.Total{Customer: "ada", Orders: 3, Cents: 500}); err != nil || last != want {
		t.Fatalf("last total %+v (%v), want %+v", last, err, want)
	}
}

// README:end

// The README's test of a service is this file's, word for word, so that it
// compiles and passes.
func TestTheReadmeShowsThisTest(t *testing.T) {
	region := func(text, begin, end string) string {
		_, after, ok := strings.Cut(text, begin)
		if !ok {
			t.Fatalf("no %q", begin)
		}
		body, _, ok := strings.Cut(after, end)
		if !ok {
			t.Fatalf("no %q after %q", end, begin)
		}
		return strings.TrimSpace(body)
	}
	self, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := region(string(self), "// README:begin", "// README:end")
	got := region(region(string(readme), "<!-- kafkatest test: begin -->", "<!-- kafkatest test: end -->"), "```go", "```")
	got = strings.TrimSpace(got[strings.Index(got, "func Test"):])
	if got != want {
		t.Fatalf("README's kafkatest test is not examples/ordertotals/readme_test.go's:\n--- README\n%s\n--- readme_test.go\n%s", got, want)
	}
}
