package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riferrei/srclient"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// A compacted topic created through kafkatest reads back with the
// cleanup.policy it was created with.
func TestCompactedTopicConfig(t *testing.T) {
	brokers := kafkatest.Broker(t)
	topic := kafkatest.UniqueName(t, "compacted")
	kafkatest.CreateTopic(t, brokers, topic, 3, map[string]string{"cleanup.policy": "compact"})

	cfg := kafkatest.TopicConfigs(t, brokers, topic)
	if got := cfg["cleanup.policy"]; got != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", got)
	}
	if got := kafkatest.Partitions(t, brokers, topic); got != 3 {
		t.Fatalf("partitions = %d, want 3", got)
	}
}

// Records of a committed transaction are visible to a read_committed
// consumer; records of an aborted one never are. Written with franz-go,
// the client eddy runs on, and read with kafkatest's consumer.
func TestTransactionsReadCommitted(t *testing.T) {
	brokers := kafkatest.Broker(t)
	topic := kafkatest.UniqueName(t, "txn")
	kafkatest.CreateTopic(t, brokers, topic, 3, nil)
	p := kafkatest.Client(t, brokers, kgo.TransactionalID(kafkatest.UniqueName(t, "txn-producer")),
		kgo.ProducerLinger(5*time.Millisecond), kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	write := func(prefix string, n int, commit bool) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatalf("BeginTransaction: %v", err)
		}
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%97), Value: fmt.Appendf(nil, "%s-%d", prefix, i)})
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("Produce: %v", err)
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("ending transaction (commit=%v): %v", commit, err)
		}
	}
	write("committed", 10_000, true)
	write("aborted", 1_000, false)

	got := kafkatest.ConsumeAll(t, brokers, topic)
	if len(got) != 10_000 {
		t.Fatalf("read_committed consumer saw %d records, want 10000", len(got))
	}
	seen := make(map[string]bool, len(got))
	for _, r := range got {
		v := string(r.Value)
		if !strings.HasPrefix(v, "committed-") {
			t.Fatalf("read_committed consumer saw %q from the aborted transaction", v)
		}
		if seen[v] {
			t.Fatalf("record %q seen twice", v)
		}
		seen[v] = true
	}
}

// The schema registry applies BACKWARD compatibility: an evolution that adds
// a field with a default is accepted; one that adds a field without a default
// is rejected with the registry's own error.
func TestSchemaRegistryCompatibility(t *testing.T) {
	url := kafkatest.SchemaRegistry(t)
	client := srclient.NewSchemaRegistryClient(url)
	subject := kafkatest.UniqueName(t, "payments") + "-value"

	v1 := `{"type":"record","name":"Payment","namespace":"eddy.test","fields":[
		{"name":"id","type":"string"},{"name":"amount","type":"double"}]}`
	v2 := `{"type":"record","name":"Payment","namespace":"eddy.test","fields":[
		{"name":"id","type":"string"},{"name":"amount","type":"double"},
		{"name":"currency","type":"string","default":"EUR"}]}`
	v3 := `{"type":"record","name":"Payment","namespace":"eddy.test","fields":[
		{"name":"id","type":"string"},{"name":"amount","type":"double"},
		{"name":"currency","type":"string","default":"EUR"},
		{"name":"merchant","type":"string"}]}`

	s1, err := client.CreateSchema(subject, v1, srclient.Avro)
	if err != nil {
		t.Fatalf("registering v1: %v", err)
	}
	s2, err := client.CreateSchema(subject, v2, srclient.Avro)
	if err != nil {
		t.Fatalf("registering BACKWARD-compatible v2: %v", err)
	}
	if s2.ID() == s1.ID() {
		t.Fatalf("v2 got the id of v1 (%d)", s1.ID())
	}
	_, err = client.CreateSchema(subject, v3, srclient.Avro)
	var regErr srclient.Error
	if !errors.As(err, &regErr) {
		t.Fatalf("registering incompatible v3: err = %v, want the registry's error", err)
	}
	if regErr.Code != 409 {
		t.Fatalf("registry error code = %d (%s), want 409 (incompatible schema)", regErr.Code, regErr.Message)
	}
	if !strings.Contains(strings.ToLower(regErr.Message), "incompatible") {
		t.Fatalf("registry error message %q does not say the schema is incompatible", regErr.Message)
	}
	versions, err := client.GetSchemaVersions(subject)
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) != 2 {
		t.Fatalf("subject has versions %v after the rejected v3, want [1 2]", versions)
	}
}
