package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Container images. The defaults are the public images a user pulls;
// `make test` runs eddy's own builds of the same software and versions
// (scripts/containers.sh), named by EDDY_KAFKA_IMAGE and EDDY_REGISTRY_IMAGE.
const (
	// DefaultKafkaImage is the Apache Kafka image StartKafka runs.
	DefaultKafkaImage = "apache/kafka:4.4.0"
	// DefaultRegistryImage is the schema registry image StartRegistry runs:
	// the AxonOps Schema Registry, the version SchemaRegistry builds.
	DefaultRegistryImage = "ghcr.io/axonops/axonops-schema-registry:0.2.1"
	// EnvRegistryImage overrides DefaultRegistryImage.
	EnvRegistryImage = "EDDY_REGISTRY_IMAGE"
	// ContainerLabel is set on every container kafkatest starts, so that a
	// leftover can be found (`podman ps -a --filter label=org.eddy-go.kafkatest`).
	ContainerLabel = "org.eddy-go.kafkatest"
	// EnvTestRun names the test run a container belongs to: when it is set,
	// every container kafkatest starts carries it in the label
	// ContainerLabel+".run", so a run can check that it left nothing behind
	// without counting another run's containers, and remove those of a run
	// that was killed before it could (eddy's scripts/test.sh sets it).
	EnvTestRun = "EDDY_TEST_RUN"
)

// stopTimeout bounds a container's stop: both images stop on SIGTERM within
// a second; the engine sends SIGKILL after this.
const stopTimeout = 5 * time.Second

// Container is a Kafka broker or a schema registry kafkatest started in a
// container. Terminate removes it.
type Container struct {
	// Addr is where the service answers: a bootstrap address
	// (127.0.0.1:port) for Kafka, a URL (http://127.0.0.1:port) for the
	// registry.
	Addr string
	// Image is the image the container runs.
	Image string
	// ID is the container's id on the engine.
	ID string

	ctr testcontainers.Container
}

// Terminate stops and removes the container.
func (c *Container) Terminate(ctx context.Context) error {
	if c == nil || c.ctr == nil {
		return nil
	}
	return c.ctr.Terminate(ctx, testcontainers.StopTimeout(stopTimeout))
}

// Logs returns what the container printed so far.
func (c *Container) Logs(ctx context.Context) (string, error) {
	r, err := c.ctr.Logs(ctx)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// Option changes how Kafka, Registry, StartKafka and StartRegistry start a
// service.
type Option func(*options)

type options struct {
	image    string
	fallback bool
	name     string
}

// WithImage runs image instead of the default (or the image the
// environment names).
func WithImage(image string) Option { return func(o *options) { o.image = image } }

// WithFallback lets Kafka and Registry fall back when no container engine
// answers: Kafka to a franz-go kfake broker embedded in the test process,
// Registry to the schema registry run as a local process. Each logs that it
// fell back. Without it, no engine is a test failure that says what to
// start or set. (With EDDY_REQUIRE_REAL_SERVICES=1 the embedded broker is a
// failure all the same.)
func WithFallback() Option { return func(o *options) { o.fallback = true } }

func makeOptions(opts []Option, env, def string) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.image == "" {
		o.image = strings.TrimSpace(os.Getenv(env))
	}
	if o.image == "" {
		o.image = def
	}
	return o
}

// ErrNoEngine is wrapped by the error StartKafka and StartRegistry return
// when no container engine answers.
var ErrNoEngine = errors.New("no container engine answers")

// engineCheck reports why no container engine answers, or nil when one
// does, within ctx. testcontainers-go panics when it finds no engine
// address at all: that is an answer too.
func engineCheck(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Health(ctx)
}

// noEngine is the error for an engine that does not answer: what to start
// or set.
func noEngine(service, env string, cause error) error {
	where := "the default Docker socket"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		where = "DOCKER_HOST=" + h
	}
	return fmt.Errorf("kafkatest: starting %s in a container: %w at %s (%v). "+
		"Start Docker, or podman's Docker-compatible API (in eddy's repository: scripts/containers.sh up, "+
		"then eval \"$(scripts/containers.sh env)\" sets DOCKER_HOST and the images); "+
		"or set %s to a running %s; or pass kafkatest.WithFallback()",
		service, ErrNoEngine, where, cause, env, service)
}

// startHint adds to a failed start what usually causes it.
func startHint(image string, err error) error {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "ryuk") || strings.Contains(msg, "reaper"):
		return fmt.Errorf("%w (testcontainers' reaper could not start; kafkatest removes its containers itself: set TESTCONTAINERS_RYUK_DISABLED=true)", err)
	case strings.Contains(msg, "pull") || strings.Contains(msg, "no such image") || strings.Contains(msg, "manifest unknown"):
		return fmt.Errorf("%w (image %s is not on the engine and could not be pulled: pull it, or build eddy's with scripts/containers.sh up and set %s/%s)",
			err, image, EnvKafkaImage, EnvRegistryImage)
	}
	return err
}

// run starts a container of image on the host's network (no port
// publishing: the service listens on the 127.0.0.1 ports its environment
// names) and waits for its log to say ready.
func run(ctx context.Context, o options, env map[string]string, ready string) (*Container, error) {
	labels := map[string]string{ContainerLabel: "1"}
	if o.name != "" {
		labels[ContainerLabel+".test"] = o.name
	}
	if r := os.Getenv(EnvTestRun); r != "" {
		labels[ContainerLabel+".run"] = r
	}
	if owner := processOwner(); owner != "" {
		labels[OwnerLabel] = owner
	}
	reapOrphans(ctx)
	ctr, err := testcontainers.Run(ctx, o.image,
		testcontainers.WithEnv(env),
		testcontainers.WithLabels(labels),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
		}),
		testcontainers.WithWaitStrategy(wait.ForLog(ready).WithStartupTimeout(3*time.Minute)),
	)
	c := &Container{Image: o.image, ctr: ctr}
	if ctr != nil {
		c.ID = ctr.GetContainerID()
	}
	if err != nil {
		logs := ""
		if ctr != nil {
			logs, _ = c.Logs(context.Background())
			_ = c.Terminate(context.Background())
		}
		return nil, &startError{image: o.image, err: startHint(o.image, err), logs: logs}
	}
	return c, nil
}

// startError is a container that did not start, with what it printed.
type startError struct {
	image string
	err   error
	logs  string
}

func (e *startError) Error() string {
	s := fmt.Sprintf("kafkatest: starting a container of %s: %v", e.image, e.err)
	if e.logs != "" {
		s += "\ncontainer output (last lines):\n" + lastLines(e.logs, 20)
	}
	return s
}

func (e *startError) Unwrap() error { return e.err }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// portInUse reports whether a start failed because another process took
// one of the ports chosen for it meanwhile.
func portInUse(err error) bool {
	var se *startError
	return errors.As(err, &se) && strings.Contains(se.logs, "Address already in use")
}

// StartKafka starts a single-node Apache Kafka (KRaft, broker and
// controller in one process) in a container and returns once it answers a
// metadata request. The broker listens on a free 127.0.0.1 port, which it
// also advertises; the image is configured the way the public apache/kafka
// image is, by KAFKA_* environment variables. Topics are not created
// automatically; replication factors are 1. The caller terminates the
// container (Kafka does it at the end of the test).
//
// StartKafka ignores EDDY_KAFKA_BOOTSTRAP: it always starts a container.
// When no container engine answers, the error wraps ErrNoEngine and says
// what to start or set.
func StartKafka(ctx context.Context, opts ...Option) (*Container, error) {
	o := makeOptions(opts, EnvKafkaImage, DefaultKafkaImage)
	return startKafka(ctx, o)
}

func startKafka(ctx context.Context, o options) (*Container, error) {
	probe, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := engineCheck(probe)
	cancel()
	if err != nil {
		return nil, noEngine("Kafka", EnvBootstrap, err)
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return nil, fmt.Errorf("kafkatest: finding free ports for Kafka: %w", err)
		}
		broker, controller := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
		c, err := run(ctx, o, map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://127.0.0.1:" + broker + ",CONTROLLER://127.0.0.1:" + controller,
			"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://127.0.0.1:" + broker,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@127.0.0.1:" + controller,
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_MIN_INSYNC_REPLICAS":                      "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
			"KAFKA_HEAP_OPTS":                                "-Xmx512m -Xms512m",
		}, "Kafka Server started")
		if err != nil {
			if attempt < 3 && portInUse(err) {
				continue
			}
			return nil, err
		}
		c.Addr = "127.0.0.1:" + broker
		if err := pingKafka(ctx, c.Addr); err != nil {
			logs, _ := c.Logs(context.Background())
			_ = c.Terminate(context.Background())
			return nil, &startError{image: o.image, err: err, logs: logs}
		}
		return c, nil
	}
}

// pingKafka waits until the broker at addr answers a metadata request.
func pingKafka(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := cl.Ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the broker at %s did not answer: %w", addr, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StartRegistry starts the schema registry (in-memory storage, BACKWARD
// default compatibility) in a container listening on a free 127.0.0.1
// port, and returns once it answers. The caller terminates the container
// (Registry does it at the end of the test).
//
// StartRegistry ignores EDDY_SCHEMA_REGISTRY_URL: it always starts a
// container. When no container engine answers, the error wraps ErrNoEngine
// and says what to start or set.
func StartRegistry(ctx context.Context, opts ...Option) (*Container, error) {
	o := makeOptions(opts, EnvRegistryImage, DefaultRegistryImage)
	return startRegistry(ctx, o)
}

func startRegistry(ctx context.Context, o options) (*Container, error) {
	probe, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := engineCheck(probe)
	cancel()
	if err != nil {
		return nil, noEngine("the schema registry", EnvSchemaRegistry, err)
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, fmt.Errorf("kafkatest: finding a free port for the schema registry: %w", err)
		}
		c, err := run(ctx, o, registryEnv(ports[0]), "starting server")
		if err != nil {
			if attempt < 3 && portInUse(err) {
				continue
			}
			return nil, err
		}
		c.Addr = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		if err := waitRegistry(ctx, c.Addr, nil); err != nil {
			logs, _ := c.Logs(context.Background())
			_ = c.Terminate(context.Background())
			if strings.Contains(logs, "address already in use") && attempt < 3 {
				continue
			}
			return nil, &startError{image: o.image, err: err, logs: logs}
		}
		return c, nil
	}
}

// registryEnv is the schema registry's configuration on port, in a
// container and as a local process alike.
func registryEnv(port int) map[string]string {
	return map[string]string{
		"SCHEMA_REGISTRY_HOST":                "127.0.0.1",
		"SCHEMA_REGISTRY_PORT":                strconv.Itoa(port),
		"SCHEMA_REGISTRY_STORAGE_TYPE":        "memory",
		"SCHEMA_REGISTRY_COMPATIBILITY_LEVEL": "BACKWARD",
	}
}

// waitRegistry waits until the registry at url lists its subjects, for up
// to 30 s, or until exited is closed (a local process that ended).
func waitRegistry(ctx context.Context, url string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/subjects", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /subjects: %s", resp.Status)
		}
		select {
		case <-exited:
			return errors.New("the schema registry exited at start")
		case <-ctx.Done():
			return fmt.Errorf("the schema registry did not answer on %s within 30s: %v", url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts asks the kernel for n distinct free loopback TCP ports.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
