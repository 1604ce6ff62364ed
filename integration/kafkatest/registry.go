package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
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

// SchemaRegistry returns the URL of a Confluent-compatible schema registry:
// EDDY_SCHEMA_REGISTRY_URL when set, else a fresh AxonOps Schema Registry
// (in-memory storage, BACKWARD default compatibility) started on a free
// loopback port and stopped by t.Cleanup. The binary is EDDY_SCHEMA_REGISTRY_BIN
// when set, else built once with the go command into the user cache
// directory. With EDDY_REQUIRE_REAL_SERVICES=1 the URL must come from the
// environment, so a test run uses the services its script started.
func SchemaRegistry(t testing.TB) string {
	t.Helper()
	if u := strings.TrimSpace(os.Getenv(EnvSchemaRegistry)); u != "" {
		t.Logf("kafkatest: using schema registry at %s (from %s)", u, EnvSchemaRegistry)
		return strings.TrimRight(u, "/")
	}
	if RequireReal() {
		t.Fatalf("kafkatest: %s=1 but %s is not set (scripts/kafka.sh start prints it)", EnvRequireReal, EnvSchemaRegistry)
	}
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
	cmd.Env = append(os.Environ(),
		"SCHEMA_REGISTRY_HOST=127.0.0.1",
		"SCHEMA_REGISTRY_PORT="+strconv.Itoa(port),
		"SCHEMA_REGISTRY_STORAGE_TYPE=memory",
		"SCHEMA_REGISTRY_COMPATIBILITY_LEVEL=BACKWARD",
	)
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/subjects", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("kafkatest: schema registry exited at start:\n%s", out.String())
		case <-ctx.Done():
			t.Fatalf("kafkatest: schema registry did not answer on %s within 30s:\n%s", url, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("kafkatest: started schema registry %s at %s", RegistryVersion, url)
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
