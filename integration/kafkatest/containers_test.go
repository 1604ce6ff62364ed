package kafkatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The container path as a user's test takes it, on a real container engine
// (`make test`: podman's Docker-compatible API, eddy's Kafka 4.4.0 and
// registry images from scripts/containers.sh): StartKafka's broker takes a
// transactional round trip through 127.0.0.1, and the container is gone
// from the engine once terminated.
func TestKafkaContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := StartKafka(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Terminate(ctx)
	if !strings.HasPrefix(c.Addr, "127.0.0.1:") {
		t.Fatalf("broker address %q is not on 127.0.0.1", c.Addr)
	}
	t.Logf("Kafka container %s (%s) at %s", shortID(c.ID), c.Image, c.Addr)

	CreateTopic(t, c.Addr, "orders", 3, nil)
	cl := Client(t, c.Addr, kgo.TransactionalID("kafkatest-round-trip"), kgo.DefaultProduceTopic("orders"))
	for _, commit := range []bool{true, false, true} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			r := kgo.StringRecord(fmt.Sprintf("%v-%d", commit, i))
			r.Key = []byte(fmt.Sprint(i))
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	got := ConsumeAll(t, c.Addr, "orders")
	if len(got) != 20 {
		t.Fatalf("read_committed read %d records, want the 20 of the two committed transactions", len(got))
	}
	for _, r := range got {
		if !strings.HasPrefix(string(r.Value), "true-") {
			t.Fatalf("read an aborted record %q", r.Value)
		}
	}

	if err := c.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, c.ID)
}

// StartRegistry's registry answers on 127.0.0.1, registers a schema,
// serves it by id, enforces BACKWARD compatibility, and is gone once
// terminated.
func TestRegistryContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := StartRegistry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Terminate(ctx)
	if !strings.HasPrefix(c.Addr, "http://127.0.0.1:") {
		t.Fatalf("registry URL %q is not on 127.0.0.1", c.Addr)
	}
	v1 := `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}`
	id := registerSchema(t, c.Addr, "orders-value", v1, http.StatusOK)
	var got struct{ Schema string }
	getJSON(t, fmt.Sprintf("%s/schemas/ids/%d", c.Addr, id), &got)
	if !strings.Contains(got.Schema, `"Order"`) {
		t.Fatalf("schema %d is %q", id, got.Schema)
	}
	// A new required field without a default cannot read old records.
	v2 := `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"},{"name":"total","type":"long"}]}`
	registerSchema(t, c.Addr, "orders-value", v2, http.StatusConflict)

	if err := c.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, c.ID)
}

// Kafka and Registry as a user's test calls them, with neither
// EDDY_KAFKA_BOOTSTRAP nor EDDY_SCHEMA_REGISTRY_URL set: containers, removed
// when the test that asked for them ends, labelled with the test run's id
// (EDDY_TEST_RUN) so that a run counts only its own leftovers.
func TestKafkaAndRegistryHelpersRemoveTheirContainers(t *testing.T) {
	t.Setenv(EnvBootstrap, "")
	t.Setenv(EnvSchemaRegistry, "")
	run := os.Getenv(EnvTestRun)
	if run == "" {
		run = fmt.Sprintf("%d.kafkatest", os.Getpid())
		t.Setenv(EnvTestRun, run)
	}
	var name string
	t.Run("user test", func(t *testing.T) {
		name = t.Name()
		brokers := Kafka(t)
		url := Registry(t)
		CreateTopic(t, brokers, "in", 1, nil)
		Produce(t, brokers, "in", KV("k", "v"))
		if got := ConsumeAll(t, brokers, "in"); len(got) != 1 || string(got[0].Value) != "v" {
			t.Fatalf("read back %v", got)
		}
		var subjects []string
		getJSON(t, url+"/subjects", &subjects)
		if len(subjects) != 0 {
			t.Fatalf("a fresh registry has subjects %v", subjects)
		}
		if n := len(containersOf(t, name)); n != 2 {
			t.Fatalf("%d containers labelled for %s, want 2", n, name)
		}
		if n := len(containersOf(t, name, ContainerLabel+".run="+run)); n != 2 {
			t.Fatalf("%d containers of %s labelled for test run %s, want 2", n, name, run)
		}
	})
	if left := containersOf(t, name); len(left) != 0 {
		t.Fatalf("containers left after %s ended: %v", name, left)
	}
}

// With no container engine answering, Kafka fails the test at once with
// what to start or set — no hang, no silent fallback — and falls back to
// the embedded broker only when asked to. Run as a child test process
// pointed at a socket nobody serves (testcontainers-go reads the engine's
// address once per process).
func TestNoEngineIsAClearFailure(t *testing.T) {
	if c := os.Getenv("KAFKATEST_CHILD"); c != "" {
		noEngineChild(t, c)
		return
	}
	dead := filepath.Join(t.TempDir(), "engine.sock")
	l, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the socket file stays, as a stopped engine leaves it; nothing answers on it
	for _, tc := range []struct {
		child string
		ok    bool
		want  []string
	}{
		{"kafka", false, []string{"no container engine answers", "DOCKER_HOST=unix://" + dead,
			"scripts/containers.sh up", EnvBootstrap, "WithFallback"}},
		{"registry", false, []string{"no container engine answers", EnvSchemaRegistry}},
		{"fallback", true, []string{"falling back, as the test asked (WithFallback), to an embedded kfake broker"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard, not a timing
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestNoEngineIsAClearFailure$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "KAFKATEST_CHILD="+tc.child, "DOCKER_HOST=unix://"+dead,
			EnvBootstrap+"=", EnvSchemaRegistry+"=", EnvRequireReal+"=0")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		hung := ctx.Err() != nil
		cancel()
		if hung {
			t.Fatalf("%s hung with no engine:\n%s", tc.child, out.String())
		}
		if (err == nil) != tc.ok {
			t.Fatalf("%s: exit error %v, want ok=%v:\n%s", tc.child, err, tc.ok, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s output lacks %q:\n%s", tc.child, w, out.String())
			}
		}
	}
}

// noEngineChild is TestNoEngineIsAClearFailure in its child process.
func noEngineChild(t *testing.T, child string) {
	switch child {
	case "kafka":
		Kafka(t)
		t.Error("Kafka returned with no container engine")
	case "registry":
		Registry(t)
		t.Error("Registry returned with no container engine")
	case "fallback":
		brokers := Kafka(t, WithFallback())
		CreateTopic(t, brokers, "in", 1, nil)
		Produce(t, brokers, "in", KV("k", "v"))
		if got := ConsumeAll(t, brokers, "in"); len(got) != 1 {
			t.Fatalf("read back %v", got)
		}
	}
}

// engineClient is a client of the container engine testcontainers-go uses.
func engineClient(t *testing.T) *testcontainers.DockerClient {
	t.Helper()
	cl, err := testcontainers.NewDockerClientWithOpts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// assertGone fails t unless the engine no longer knows container id.
func assertGone(t *testing.T, id string) {
	t.Helper()
	_, err := engineClient(t).ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err == nil {
		t.Fatalf("container %s still exists after Terminate", shortID(id))
	}
	if !strings.Contains(strings.ToLower(err.Error()), "no such container") {
		t.Fatalf("inspecting container %s: %v", shortID(id), err)
	}
}

// containersOf lists the containers, running or not, labelled for test
// and with every one of labels ("key=value").
func containersOf(t *testing.T, test string, labels ...string) []string {
	t.Helper()
	res, err := engineClient(t).ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", append(labels, ContainerLabel+".test="+test)...),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, shortID(c.ID)+" "+c.Image+" "+string(c.State))
	}
	return ids
}

// registerSchema registers an Avro schema under subject and returns its
// id, failing t unless the registry answers with status.
func registerSchema(t *testing.T, url, subject, schema string, status int) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": schema})
	resp, err := http.Post(url+"/subjects/"+subject+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("registering under %s: %s %s, want status %d", subject, resp.Status, b, status)
	}
	var r struct{ ID int }
	_ = json.Unmarshal(b, &r)
	return r.ID
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(errors.Join(fmt.Errorf("GET %s", url), err))
	}
}
