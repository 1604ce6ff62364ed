package kafkatest

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Environment variables read by Kafka, Registry, Broker and SchemaRegistry.
const (
	// EnvBootstrap names an existing Kafka cluster (host:port[,host:port…]).
	EnvBootstrap = "EDDY_KAFKA_BOOTSTRAP"
	// EnvSchemaRegistry names an existing schema registry (http://host:port).
	EnvSchemaRegistry = "EDDY_SCHEMA_REGISTRY_URL"
	// EnvRequireReal, when "1", turns a missing real broker or registry into a
	// test failure instead of a fallback to an embedded one.
	EnvRequireReal = "EDDY_REQUIRE_REAL_SERVICES"
	// EnvKafkaImage overrides DefaultKafkaImage.
	EnvKafkaImage = "EDDY_KAFKA_IMAGE"
)

// Kind says where a broker came from.
type Kind string

// The kinds of broker Broker can return.
const (
	KindEnv       Kind = "env"       // EDDY_KAFKA_BOOTSTRAP
	KindContainer Kind = "container" // StartKafka (testcontainers-go)
	KindEmbedded  Kind = "embedded"  // franz-go kfake in the test process
)

// RequireReal reports whether EDDY_REQUIRE_REAL_SERVICES=1 is set.
func RequireReal() bool { return os.Getenv(EnvRequireReal) == "1" }

// Kafka returns the bootstrap address of a Kafka broker for t:
// EDDY_KAFKA_BOOTSTRAP when set, else a container started by StartKafka and
// removed at the end of the test. When no container engine answers, t fails
// with what to start or set, unless WithFallback is given: then an embedded
// franz-go kfake broker serves the test, and a log line says so.
//
//	func TestOrders(t *testing.T) {
//		brokers := kafkatest.Kafka(t)
//		…
//	}
func Kafka(t testing.TB, opts ...Option) string {
	t.Helper()
	addr, _ := kafka(t, opts)
	return addr
}

// Broker is Kafka with WithFallback: the cluster named by
// EDDY_KAFKA_BOOTSTRAP, else a container, else (no container engine) an
// embedded kfake broker. With EDDY_REQUIRE_REAL_SERVICES=1 the embedded
// broker is a test failure instead.
func Broker(t testing.TB) string {
	t.Helper()
	addr, _ := kafka(t, []Option{WithFallback()})
	return addr
}

// BrokerKind is Broker, also saying which kind of broker it returned. Tests
// that assert what only a real broker does (log compaction timing, for
// example) can branch on it.
func BrokerKind(t testing.TB) (string, Kind) {
	t.Helper()
	return kafka(t, []Option{WithFallback()})
}

func kafka(t testing.TB, opts []Option) (string, Kind) {
	t.Helper()
	if addr := strings.TrimSpace(os.Getenv(EnvBootstrap)); addr != "" {
		t.Logf("kafkatest: using Kafka at %s (from %s)", addr, EnvBootstrap)
		return addr, KindEnv
	}
	o := makeOptions(opts, EnvKafkaImage, DefaultKafkaImage)
	o.name = t.Name()
	c, err := startKafka(context.Background(), o)
	if err == nil {
		cleanupContainer(t, c)
		t.Logf("kafkatest: using Kafka container %s (%s) at %s", c.Image, shortID(c.ID), c.Addr)
		return c.Addr, KindContainer
	}
	if !o.fallback || !errors.Is(err, ErrNoEngine) {
		t.Fatal(err)
	}
	if RequireReal() {
		t.Fatalf("kafkatest: %s=1 but no real broker: set %s (scripts/kafka.sh start prints it) or start a container engine (%v)",
			EnvRequireReal, EnvBootstrap, err)
	}
	c2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatalf("kafkatest: starting embedded kfake cluster: %v", err)
	}
	t.Cleanup(c2.Close)
	addr := strings.Join(c2.ListenAddrs(), ",")
	t.Logf("kafkatest: no container engine answers; falling back, as the test asked (WithFallback), to an embedded kfake broker at %s", addr)
	return addr, KindEmbedded
}

// cleanupContainer removes c when t ends, and fails t when it cannot.
func cleanupContainer(t testing.TB, c *Container) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Terminate(ctx); err != nil {
			t.Errorf("kafkatest: removing container %s (%s): %v", shortID(c.ID), c.Image, err)
		}
	})
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// freePort asks the kernel for a free loopback TCP port.
func freePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
