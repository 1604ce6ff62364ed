package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/avro"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

type jsonPayment struct {
	Account string  `json:"account"`
	Amount  float64 `json:"amount"`
}

// badInput is a topology reading Avro payments and JSON payments, with
// malformed records in the middle of valid ones: wrong magic byte, a valid
// header with a broken Avro body, JSON on the Avro topic, broken JSON.
type badInput struct {
	t                    *testing.T
	brokers              string
	avroIn, jsonIn, out  string
	dlq                  string
	good                 map[string]int64 // account → good records
	bad                  map[string]bool  // "topic/partition/offset" of every bad record
	reader               *avro.Serde[paymentV1T]
	totalGood, totalRecs int
}

func newBadInput(t *testing.T) *badInput {
	brokers := realBroker(t)
	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: kafkatest.SchemaRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	b := &badInput{t: t, brokers: brokers, good: map[string]int64{}, bad: map[string]bool{},
		avroIn: kafkatest.UniqueName(t, "avro-payments"), jsonIn: kafkatest.UniqueName(t, "json-payments"),
		out: kafkatest.UniqueName(t, "counts"), dlq: kafkatest.UniqueName(t, "dlq")}
	for _, tp := range []string{b.avroIn, b.jsonIn, b.out, b.dlq} {
		kafkatest.CreateTopic(t, brokers, tp, 2, nil)
	}
	w, err := avro.New[paymentV1T](reg, paymentV1)
	if err != nil {
		t.Fatal(err)
	}
	b.reader = w
	var avroRecs, jsonRecs []kafkatest.Record
	for i := range 600 {
		acct := fmt.Sprintf("acct-%d", i%9)
		good, _ := w.Serialize(b.avroIn, paymentV1T{Account: acct, Amount: float64(i)})
		switch {
		case i%97 == 13:
			wrongMagic := append([]byte{7}, good[1:]...)
			avroRecs = append(avroRecs, kafkatest.Record{Key: []byte(acct), Value: wrongMagic})
		case i%97 == 40:
			broken := append(append([]byte{}, good[:5]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
			avroRecs = append(avroRecs, kafkatest.Record{Key: []byte(acct), Value: broken})
		case i%97 == 71:
			avroRecs = append(avroRecs, kafkatest.Record{Key: []byte(acct), Value: []byte(`{"account":"` + acct + `","amount":1}`)})
		default:
			avroRecs = append(avroRecs, kafkatest.Record{Key: []byte(acct), Value: good})
			b.good[acct]++
			b.totalGood++
		}
		if i%50 == 25 {
			jsonRecs = append(jsonRecs, kafkatest.Record{Key: []byte(acct), Value: []byte(`{"account": "` + acct + `", "amount": `)})
		} else {
			v, _ := json.Marshal(jsonPayment{Account: acct, Amount: 1})
			jsonRecs = append(jsonRecs, kafkatest.Record{Key: []byte(acct), Value: v})
			b.good[acct]++
			b.totalGood++
		}
	}
	b.totalRecs = len(avroRecs) + len(jsonRecs)
	kafkatest.Produce(t, brokers, b.avroIn, avroRecs...)
	kafkatest.Produce(t, brokers, b.jsonIn, jsonRecs...)
	// Where the bad records landed.
	for _, topic := range []string{b.avroIn, b.jsonIn} {
		for _, r := range kafkatest.ConsumeAll(t, brokers, topic) {
			var err error
			if topic == b.avroIn {
				_, err = w.Deserialize(topic, r.Value)
			} else {
				var p jsonPayment
				err = json.Unmarshal(r.Value, &p)
			}
			if err != nil {
				b.bad[fmt.Sprintf("%s/%d/%d", topic, r.Partition, r.Offset)] = true
			}
		}
	}
	if len(b.bad) != b.totalRecs-b.totalGood {
		t.Fatalf("found %d bad records on the topics, wrote %d", len(b.bad), b.totalRecs-b.totalGood)
	}
	return b
}

// topology counts each account's payments from both topics.
func (b *badInput) topology() *topology.Topology {
	str := serde.String()
	bld := topology.NewBuilder()
	fromAvro := topology.MapValues(topology.Stream(bld, b.avroIn, topology.Consumed(str, b.reader)),
		func(p paymentV1T) string { return p.Account })
	fromJSON := topology.MapValues(topology.Stream(bld, b.jsonIn, topology.Consumed(str, serde.JSON[jsonPayment]())),
		func(p jsonPayment) string { return p.Account })
	topology.Count(fromAvro.Merge(fromJSON).GroupByKey(), topology.Materialized[string, int64]("payment-counts")).
		ToStream().To(b.out, topology.Produced(str, serde.Int64()))
	top, err := bld.Build()
	if err != nil {
		b.t.Fatal(err)
	}
	return top
}

// With DeadLetter, every bad record lands in the dead-letter topic once,
// unchanged, with headers naming where it came from, and every good record
// is counted exactly once.
func TestDeadLetterMalformedRecords(t *testing.T) {
	b := newBadInput(t)
	appID := kafkatest.UniqueName(t, "dlq-app")
	stop := runApp(t, b.topology(), streams.Config{ApplicationID: appID, BootstrapServers: b.brokers, StateDir: t.TempDir(),
		Guarantee: streams.ExactlyOnce, NoCache: true, DeserializationErrors: streams.Always(streams.DeadLetter), DeadLetterTopic: b.dlq})
	kafkatest.WaitCaughtUp(t, b.brokers, appID, 2*time.Minute, b.avroIn, b.jsonIn)
	stop()

	// Good records: each account's count goes 1, 2, … N exactly once.
	seqs := map[string][]int64{}
	for _, r := range kafkatest.ConsumeAll(t, b.brokers, b.out) {
		n, _ := serde.Int64().Deserialize(b.out, r.Value)
		seqs[string(r.Key)] = append(seqs[string(r.Key)], n)
	}
	for acct, want := range b.good {
		got := seqs[acct]
		ok := int64(len(got)) == want
		for i := 0; ok && i < len(got); i++ {
			ok = got[i] == int64(i+1)
		}
		if !ok {
			t.Errorf("%s: counts %s, want 1..%d", acct, summarize(got), want)
		}
	}
	// Bad records: each once, with KIP-1034 headers.
	inputs := map[string]map[string]kafkatest.Record{}
	for _, topic := range []string{b.avroIn, b.jsonIn} {
		inputs[topic] = map[string]kafkatest.Record{}
		for _, r := range kafkatest.ConsumeAll(t, b.brokers, topic) {
			inputs[topic][fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = r
		}
	}
	seen := map[string]int{}
	for _, r := range kafkatest.ConsumeAll(t, b.brokers, b.dlq) {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		where := fmt.Sprintf("%s/%s/%s", h[streams.HeaderErrorTopic], h[streams.HeaderErrorPartition], h[streams.HeaderErrorOffset])
		seen[where]++
		if !b.bad[where] {
			t.Errorf("dead-lettered %s, which is not a bad record (headers %v)", where, h)
			continue
		}
		p, _ := strconv.Atoi(h[streams.HeaderErrorPartition])
		orig := inputs[h[streams.HeaderErrorTopic]][fmt.Sprintf("%d/%s", p, h[streams.HeaderErrorOffset])]
		if string(orig.Key) != string(r.Key) || string(orig.Value) != string(r.Value) {
			t.Errorf("dead letter %s changed the record: %q=%q, was %q=%q", where, r.Key, r.Value, orig.Key, orig.Value)
		}
		if !strings.HasPrefix(h[streams.HeaderErrorClass], "deserialization:") || h[streams.HeaderErrorMessage] == "" {
			t.Errorf("dead letter %s: headers %v", where, h)
		}
	}
	for where := range b.bad {
		if seen[where] != 1 {
			t.Errorf("bad record %s dead-lettered %d times, want once", where, seen[where])
		}
	}
	t.Logf("%d good records counted exactly once, %d bad records dead-lettered once each", b.totalGood, len(b.bad))
}

// With Fail (the default), the first bad record stops the app with an
// error naming its topic, partition and offset.
func TestFailOnMalformedRecordNamesIt(t *testing.T) {
	b := newBadInput(t)
	appID := kafkatest.UniqueName(t, "fail-app")
	app, err := streams.New(b.topology(), streams.Config{ApplicationID: appID, BootstrapServers: b.brokers,
		StateDir: t.TempDir(), Guarantee: streams.ExactlyOnce})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = app.Run(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run = %v, want a failure on a bad record", err)
	}
	msg := err.Error()
	named := false
	for where := range b.bad {
		p := strings.Split(where, "/")
		if strings.Contains(msg, fmt.Sprintf("topic %q partition %s offset %s", p[0], p[1], p[2])) {
			named = true
		}
	}
	if !named {
		t.Fatalf("the error does not name a bad record's topic, partition and offset: %v", err)
	}
	if app.State() != streams.Error && app.State() != streams.NotRunning {
		t.Errorf("state %v after a fatal record error", app.State())
	}
	t.Logf("stopped with: %v", err)
}
