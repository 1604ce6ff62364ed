package kafkatest

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Environment variables read by Broker and SchemaRegistry.
const (
	// EnvBootstrap names an existing Kafka cluster (host:port[,host:port…]).
	EnvBootstrap = "EDDY_KAFKA_BOOTSTRAP"
	// EnvSchemaRegistry names an existing schema registry (http://host:port).
	EnvSchemaRegistry = "EDDY_SCHEMA_REGISTRY_URL"
	// EnvRequireReal, when "1", turns a missing real broker or registry into a
	// test failure instead of a fallback to an embedded one.
	EnvRequireReal = "EDDY_REQUIRE_REAL_SERVICES"
	// EnvKafkaImage overrides the container image used when a Docker engine
	// is reachable (default DefaultKafkaImage).
	EnvKafkaImage = "EDDY_KAFKA_IMAGE"
)

// DefaultKafkaImage is the Apache Kafka image started through testcontainers.
const DefaultKafkaImage = "apache/kafka:4.1.1"

// Kind says where a broker came from.
type Kind string

// The kinds of broker Broker can return.
const (
	KindEnv       Kind = "env"       // EDDY_KAFKA_BOOTSTRAP
	KindContainer Kind = "container" // testcontainers
	KindEmbedded  Kind = "embedded"  // franz-go kfake in the test process
)

// RequireReal reports whether EDDY_REQUIRE_REAL_SERVICES=1 is set.
func RequireReal() bool { return os.Getenv(EnvRequireReal) == "1" }

// Broker returns the bootstrap servers of a Kafka cluster for t:
//
//  1. EDDY_KAFKA_BOOTSTRAP, when set;
//  2. else a Kafka container started with testcontainers-go, when a Docker
//     engine is reachable (this step is passed over when none is);
//  3. else an embedded franz-go kfake cluster in the test process.
//
// Containers and embedded clusters are torn down by t.Cleanup. With
// EDDY_REQUIRE_REAL_SERVICES=1, step 3 is a test failure instead. Broker logs
// which one it chose.
func Broker(t testing.TB) string {
	t.Helper()
	addr, _ := BrokerKind(t)
	return addr
}

// BrokerKind is Broker, also saying which kind of broker it returned. Tests
// that assert what only a real broker does (log compaction timing, for
// example) can branch on it.
func BrokerKind(t testing.TB) (string, Kind) {
	t.Helper()
	if addr := strings.TrimSpace(os.Getenv(EnvBootstrap)); addr != "" {
		t.Logf("kafkatest: using Kafka at %s (from %s)", addr, EnvBootstrap)
		return addr, KindEnv
	}
	if addr, ok := containerBroker(t); ok {
		return addr, KindContainer
	}
	if RequireReal() {
		t.Fatalf("kafkatest: %s=1 but no real broker: set %s (scripts/kafka.sh start prints it) or start a Docker engine",
			EnvRequireReal, EnvBootstrap)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatalf("kafkatest: starting embedded kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	addr := strings.Join(c.ListenAddrs(), ",")
	t.Logf("kafkatest: using embedded kfake broker at %s (no %s, no Docker engine)", addr, EnvBootstrap)
	return addr, KindEmbedded
}

// dockerReachable reports whether a Docker engine answers, without letting
// testcontainers panic or skip the test.
func dockerReachable(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	return p.Health(ctx) == nil
}

// containerBroker starts a single-node KRaft Kafka container. The container's
// listener is published on a fixed free host port that is also its advertised
// port, so clients on the host reach it by the address the broker announces.
func containerBroker(t testing.TB) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	probeCtx, probeCancel := context.WithTimeout(ctx, 5*time.Second)
	reachable := dockerReachable(probeCtx)
	probeCancel()
	if !reachable {
		t.Logf("kafkatest: no Docker engine reachable; not using testcontainers")
		return "", false
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("kafkatest: finding a free port for the Kafka container: %v", err)
	}
	image := os.Getenv(EnvKafkaImage)
	if image == "" {
		image = DefaultKafkaImage
	}
	hostPort := strconv.Itoa(port)
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("9092/tcp"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("9092/tcp"): {{HostPort: hostPort}},
			}
		}),
		testcontainers.WithEnv(map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
			"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://127.0.0.1:" + hostPort,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_MIN_INSYNC_REPLICAS":                      "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Kafka Server started").WithStartupTimeout(2*time.Minute)),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("kafkatest: starting Kafka container %s: %v", image, err)
	}
	addr := "127.0.0.1:" + hostPort
	t.Logf("kafkatest: using Kafka container %s at %s", image, addr)
	return addr, true
}

// freePort asks the kernel for a free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
