package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/riferrei/srclient"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/avro"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

const paymentV1 = `{"type":"record","name":"Payment","namespace":"eddy.it","fields":[
	{"name":"account","type":"string"},{"name":"amount","type":"double"}]}`

const paymentV2 = `{"type":"record","name":"Payment","namespace":"eddy.it","fields":[
	{"name":"account","type":"string"},{"name":"amount","type":"double"},
	{"name":"currency","type":"string","default":"EUR"}]}`

// v3 adds a field without a default: BACKWARD-incompatible.
const paymentV3 = `{"type":"record","name":"Payment","namespace":"eddy.it","fields":[
	{"name":"account","type":"string"},{"name":"amount","type":"double"},
	{"name":"currency","type":"string","default":"EUR"},{"name":"merchant","type":"string"}]}`

type paymentV1T struct {
	Account string  `avro:"account"`
	Amount  float64 `avro:"amount"`
}

type paymentV2T struct {
	Account  string  `avro:"account"`
	Amount   float64 `avro:"amount"`
	Currency string  `avro:"currency"`
}

type paymentV3T struct {
	paymentV2T
	Merchant string `avro:"merchant"`
}

// The registry's compatibility rules reach eddy's serdes: v1 registers, a
// BACKWARD-compatible v2 registers, an incompatible v3 is refused when the
// serde is created, with an error naming the subject, the level and the
// registry's reason.
func TestAvroRegistrationAndCompatibility(t *testing.T) {
	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: kafkatest.SchemaRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	topic := kafkatest.UniqueName(t, "payments")
	if _, err := avro.New[paymentV1T](reg, paymentV1, avro.RegisterFor(topic)); err != nil {
		t.Fatalf("v1: %v", err)
	}
	if _, err := avro.New[paymentV2T](reg, paymentV2, avro.RegisterFor(topic)); err != nil {
		t.Fatalf("BACKWARD-compatible v2: %v", err)
	}
	_, err = avro.New[paymentV3T](reg, paymentV3, avro.RegisterFor(topic))
	var ie *avro.IncompatibleError
	if !errors.As(err, &ie) {
		t.Fatalf("incompatible v3: err = %v, want *avro.IncompatibleError", err)
	}
	if ie.Subject != topic+"-value" || ie.Level != "BACKWARD" || ie.Reason == "" {
		t.Fatalf("refusal = %+v; want subject %s-value, level BACKWARD and the registry's reason", ie, topic)
	}
	for _, want := range []string{topic + "-value", "BACKWARD", ie.Reason} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
	t.Logf("refusal: %v", err)
}

type totals struct {
	Count int64   `avro:"count"`
	Sum   float64 `avro:"sum"`
}

const totalsSchema = `{"type":"record","name":"Totals","namespace":"eddy.it","fields":[
	{"name":"count","type":"long"},{"name":"sum","type":"double"}]}`

// A topology reads a topic holding v1 and v2 payments with the v2 serde,
// aggregates per account into an Avro-valued store, and writes Avro
// totals: results exact, the output schema registered under the output
// topic's subject.
func TestAvroTopologyReadsOldAndNewVersions(t *testing.T) {
	brokers := kafkatest.Broker(t)
	url := kafkatest.SchemaRegistry(t)
	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	in, out := kafkatest.UniqueName(t, "payments"), kafkatest.UniqueName(t, "totals")
	kafkatest.CreateTopic(t, brokers, in, 3, nil)
	kafkatest.CreateTopic(t, brokers, out, 3, nil)

	w1, err := avro.New[paymentV1T](reg, paymentV1)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := avro.New[paymentV2T](reg, paymentV2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]totals{}
	var recs []kafkatest.Record
	for i := range 600 {
		acct := fmt.Sprintf("acct-%d", i%7)
		amount := float64(i%13) + 0.25
		var b []byte
		if i%2 == 0 {
			b, err = w1.Serialize(in, paymentV1T{Account: acct, Amount: amount})
		} else {
			b, err = w2.Serialize(in, paymentV2T{Account: acct, Amount: amount, Currency: "USD"})
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, kafkatest.Record{Key: []byte(acct), Value: b})
		tt := want[acct]
		tt.Count++
		tt.Sum += amount
		want[acct] = tt
	}
	kafkatest.Produce(t, brokers, in, recs...)

	reader, err := avro.New[paymentV2T](reg, paymentV2)
	if err != nil {
		t.Fatal(err)
	}
	tot, err := avro.New[totals](reg, totalsSchema)
	if err != nil {
		t.Fatal(err)
	}
	b := topology.NewBuilder()
	payments := topology.Stream(b, in, topology.Consumed(serde.String(), reader))
	agg := topology.Aggregate(payments.GroupByKey(), func() totals { return totals{} },
		func(_ string, p paymentV2T, t totals) totals {
			if p.Currency == "" {
				panic("currency default not applied")
			}
			return totals{Count: t.Count + 1, Sum: t.Sum + p.Amount}
		}, topology.Materialized[string, totals]("totals-store").WithSerdes(serde.String(), tot))
	agg.ToStream().To(out, topology.Produced(serde.String(), tot))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	appID := kafkatest.UniqueName(t, "avro-app")
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

	got := map[string]totals{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		v, err := tot.Deserialize(out, r.Value)
		if err != nil {
			t.Fatalf("output record: %v", err)
		}
		got[string(r.Key)] = v
	}
	for acct, w := range want {
		g := got[acct]
		if g.Count != w.Count || math.Abs(g.Sum-w.Sum) > 1e-9 {
			t.Fatalf("%s: totals %+v, want %+v", acct, g, w)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d accounts in the output, want %d", len(got), len(want))
	}
	latest, err := srclient.NewSchemaRegistryClient(url).GetLatestSchema(out + "-value")
	if err != nil {
		t.Fatalf("output subject %s-value: %v", out, err)
	}
	if !strings.Contains(latest.Schema(), "Totals") {
		t.Fatalf("subject %s-value holds %s, want the Totals schema", out, latest.Schema())
	}
}
