package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Registry pin: the AxonOps Schema Registry, a Go implementation of the
// Confluent Schema Registry REST API. Keep in step with tools/go.mod.
const (
	registryModule  = "github.com/axonops/axonops-schema-registry"
	registryPackage = registryModule + "/cmd/schema-registry"
	// RegistryVersion is the schema registry version SchemaRegistry runs.
	RegistryVersion = "v0.2.1"
	// EnvRegistryBin names a schema-registry binary to run instead of the
	// one SchemaRegistry builds and caches.
	EnvRegistryBin = "EDDY_SCHEMA_REGISTRY_BIN"
)

// Registry returns the URL of a Confluent-compatible schema registry for
// t: EDDY_SCHEMA_REGISTRY_URL when set, else a container started by
// StartRegistry and removed at the end of the test. When no container
// engine answers, t fails with what to start or set, unless WithFallback is
// given: then the registry runs as a local process (see SchemaRegistry),
// and a log line says so.
func Registry(t testing.TB, opts ...Option) string {
	t.Helper()
	if u := strings.TrimSpace(os.Getenv(EnvSchemaRegistry)); u != "" {
		t.Logf("kafkatest: using schema registry at %s (from %s)", u, EnvSchemaRegistry)
		return strings.TrimRight(u, "/")
	}
	o := makeOptions(opts, EnvRegistryImage, DefaultRegistryImage)
	o.name = t.Name()
	c, err := startRegistry(context.Background(), o)
	if err == nil {
		cleanupContainer(t, c)
		t.Logf("kafkatest: using schema registry container %s (%s) at %s", c.Image, shortID(c.ID), c.Addr)
		return c.Addr
	}
	if !o.fallback || !errors.Is(err, ErrNoEngine) {
		t.Fatal(err)
	}
	url := localRegistry(t)
	t.Logf("kafkatest: no container engine answers; falling back, as the test asked (WithFallback), to schema registry %s as a local process at %s", RegistryVersion, url)
	return url
}

// SchemaRegistry is Registry with WithFallback: EDDY_SCHEMA_REGISTRY_URL,
// else a container, else (no container engine) the AxonOps Schema Registry
// (in-memory storage, BACKWARD default compatibility) as a local process on
// a free loopback port, stopped by t.Cleanup. Its binary is
// EDDY_SCHEMA_REGISTRY_BIN when set, else built once with the go command
// into the user cache directory.
func SchemaRegistry(t testing.TB) string {
	t.Helper()
	return Registry(t, WithFallback())
}

// localRegistry runs the schema registry as a process of this machine.
func localRegistry(t testing.TB) string {
	t.Helper()
	bin, err := registryBinary()
	if err != nil {
		t.Fatalf("kafkatest: schema registry binary: %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("kafkatest: finding a free port for the schema registry: %v", err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = os.Environ()
	for k, v := range registryEnv(port) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("kafkatest: starting schema registry %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := waitRegistry(context.Background(), url, exited); err != nil {
		t.Fatalf("kafkatest: %v:\n%s", err, out.String())
	}
	return url
}

// registryBinary returns the path of a schema-registry binary, building it
// into the user cache directory on first use. A file lock keeps concurrent
// test binaries from building it twice.
func registryBinary() (string, error) {
	if p := os.Getenv(EnvRegistryBin); p != "" {
		return p, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", "schema-registry-"+RegistryVersion)
	if fileExists(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if fileExists(bin) { // built by another process while we waited
		return bin, nil
	}
	// Build in a throwaway module that requires the pinned version, the same
	// way tools/go.mod pins it for scripts/kafka.sh.
	work, err := os.MkdirTemp("", "eddy-registry-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	steps := [][]string{
		{"go", "mod", "init", "eddy.local/registrybuild"},
		{"go", "get", "-tool", registryPackage + "@" + RegistryVersion},
		{"go", "build", "-o", bin + ".tmp", registryPackage},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = work
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return bin, os.Rename(bin+".tmp", bin)
}

// cacheDir is where kafkatest and scripts/kafka.sh keep what they build:
// $EDDY_CACHE, else <user cache dir>/eddy.
func cacheDir() (string, error) {
	if d := os.Getenv("EDDY_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", errors.New("no user cache directory; set EDDY_CACHE or " + EnvRegistryBin)
	}
	return filepath.Join(d, "eddy"), nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
