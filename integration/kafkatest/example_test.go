package kafkatest_test

import (
	"context"
	"log"
	"os"
	"testing"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// A service's integration test: Kafka and the schema registry in
// containers (testcontainers-go), removed when the test ends.
// examples/ordertotals is a whole one.
func ExampleKafka() {
	// In a test: func TestOrders(t *testing.T) { … }
	var t testing.TB                  // the test's *testing.T
	brokers := kafkatest.Kafka(t)     // EDDY_KAFKA_BOOTSTRAP, else a Kafka 4.4 container
	registry := kafkatest.Registry(t) // EDDY_SCHEMA_REGISTRY_URL, else a registry container
	kafkatest.CreateTopic(t, brokers, "orders", 3, nil)
	kafkatest.Produce(t, brokers, "orders", kafkatest.KV("order-1", `{"total":12}`))
	_ = registry
}

// One broker for every test of a package: StartKafka in TestMain, its
// address through the variable Kafka reads first.
func ExampleStartKafka() {
	// func TestMain(m *testing.M) {
	ctx := context.Background()
	c, err := kafkatest.StartKafka(ctx, kafkatest.WithImage("apache/kafka:4.4.0"))
	if err != nil {
		log.Fatal(err) // says what to start or set when no container engine answers
	}
	os.Setenv(kafkatest.EnvBootstrap, c.Addr)
	var m *testing.M // TestMain's
	code := m.Run()
	c.Terminate(ctx)
	os.Exit(code)
	// }
}
