package ordertotals_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eddy-go/eddy/examples/ordertotals"
	"github.com/eddy-go/eddy/examples/ordertotals/shoppb"
	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde/avro"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// The service's integration test, as a team writes it: kafkatest.Kafka and
// kafkatest.Registry start Apache Kafka and the schema registry in
// containers (testcontainers-go; removed when the test ends), the topology
// runs exactly once against them, and every customer's last total is
// exact. With EDDY_KAFKA_BOOTSTRAP and EDDY_SCHEMA_REGISTRY_URL set, the
// same test runs against those services instead.
func TestOrderTotals(t *testing.T) {
	brokers := kafkatest.Kafka(t)
	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: kafkatest.Registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, out := kafkatest.UniqueName(t, "orders"), kafkatest.UniqueName(t, "customer-totals")
	kafkatest.CreateTopic(t, brokers, in, 3, nil)
	kafkatest.CreateTopic(t, brokers, out, 3, nil)

	orders, err := avro.New[ordertotals.Order](reg, ordertotals.OrderSchema)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ordertotals.Total{}
	var recs []kafkatest.Record
	for i := range 500 {
		o := ordertotals.Order{ID: fmt.Sprintf("order-%03d", i), Customer: fmt.Sprintf("customer-%d", i%11), Cents: int64(100 + i%37)}
		b, err := orders.Serialize(in, o)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, kafkatest.Record{Key: []byte(o.ID), Value: b})
		w := want[o.Customer]
		want[o.Customer] = ordertotals.Total{Customer: o.Customer, Orders: w.Orders + 1, Cents: w.Cents + o.Cents}
	}
	kafkatest.Produce(t, brokers, in, recs...)

	top, err := ordertotals.Topology(reg, in, out)
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, brokers, top, in)

	totals, err := avro.New[ordertotals.Total](reg, ordertotals.TotalSchema)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ordertotals.Total{}
	updates := 0
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		v, err := totals.Deserialize(out, r.Value)
		if err != nil {
			t.Fatalf("output record: %v", err)
		}
		if v.Customer != string(r.Key) {
			t.Fatalf("total %+v under key %q", v, r.Key)
		}
		if prev := got[v.Customer]; v.Orders <= prev.Orders {
			t.Fatalf("%s: total went from %+v to %+v: an order counted twice or out of order", v.Customer, prev, v)
		}
		got[v.Customer] = v
		updates++
	}
	if len(got) != len(want) {
		t.Fatalf("%d customers in the output, want %d", len(got), len(want))
	}
	for c, w := range want {
		if got[c] != w {
			t.Errorf("%s: last total %+v, want %+v", c, got[c], w)
		}
	}
	t.Logf("%d orders, %d total updates, %d customers exact", len(recs), updates, len(got))
}

// runToEnd runs the service exactly once until it has processed and
// committed every record of in, then stops it.
func runToEnd(t *testing.T, brokers string, top *topology.Topology, in string) {
	t.Helper()
	appID := kafkatest.UniqueName(t, "ordertotals")
	app, err := streams.New(top, streams.Config{ApplicationID: appID, BootstrapServers: brokers,
		Guarantee: streams.ExactlyOnce, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, in)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The same service with its events in Protobuf, tested the same way: the
// orders are written with eddy's Protobuf serde (as a Java or Python
// producer with Confluent's serializer would write them), and every
// customer's last total, read back as a shop.Total, is exact.
func TestOrderTotalsProtobuf(t *testing.T) {
	brokers := kafkatest.Kafka(t)
	reg, err := registry.New(registry.Config{URL: kafkatest.Registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, out := kafkatest.UniqueName(t, "orders"), kafkatest.UniqueName(t, "customer-totals")
	kafkatest.CreateTopic(t, brokers, in, 3, nil)
	kafkatest.CreateTopic(t, brokers, out, 3, nil)

	orders, err := protobuf.New[*shoppb.Order](reg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	want := map[string]*shoppb.Total{}
	var recs []kafkatest.Record
	for i := range 300 {
		o := &shoppb.Order{Id: fmt.Sprintf("order-%03d", i), Customer: fmt.Sprintf("customer-%d", i%7), Cents: int64(100 + i%37),
			PlacedAt: timestamppb.New(start.Add(time.Duration(i) * time.Minute))}
		b, err := orders.Serialize(in, o)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, kafkatest.Record{Key: []byte(o.Id), Value: b})
		w := want[o.Customer]
		want[o.Customer] = &shoppb.Total{Customer: o.Customer, Orders: w.GetOrders() + 1, Cents: w.GetCents() + o.Cents, LastOrderAt: o.PlacedAt}
	}
	kafkatest.Produce(t, brokers, in, recs...)

	top, err := ordertotals.ProtobufTopology(reg, in, out)
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, brokers, top, in)

	totals, err := protobuf.New[*shoppb.Total](reg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*shoppb.Total{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		v, err := totals.Deserialize(out, r.Value)
		if err != nil {
			t.Fatalf("output record: %v", err)
		}
		if prev := got[v.Customer]; v.Orders <= prev.GetOrders() {
			t.Fatalf("%s: total went from %v to %v: an order counted twice or out of order", v.Customer, prev, v)
		}
		got[v.Customer] = v
	}
	if len(got) != len(want) {
		t.Fatalf("%d customers in the output, want %d", len(got), len(want))
	}
	for c, w := range want {
		if !proto.Equal(got[c], w) {
			t.Errorf("%s: last total %v, want %v", c, got[c], w)
		}
	}
	t.Logf("%d Protobuf orders, %d customers exact", len(recs), len(got))
}
