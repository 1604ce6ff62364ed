package integration_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptCluster is a Kafka broker or cluster of a test's own, started by the
// project's scripts/kafka.sh, for tests that kill and restart brokers (the
// shared broker of the suite is never touched).
type scriptCluster struct {
	t     *testing.T
	env   []string
	nodes int
	port  int
}

// startScriptCluster starts nodes Kafka nodes (1 or 3) on free loopback
// ports; t.Cleanup stops them and removes their data.
func startScriptCluster(t *testing.T, nodes int) *scriptCluster {
	t.Helper()
	c := &scriptCluster{t: t, nodes: nodes, port: freePortRange(t, 2*nodes)}
	dir, err := os.MkdirTemp("", "eddy-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(), "EDDY_SERVICES_DIR="+dir, "EDDY_KAFKA_PORT="+strconv.Itoa(c.port),
		"EDDY_KAFKA_NODES="+strconv.Itoa(nodes),
		"EDDY_KAFKA_SECURE=0") // no SASL_SSL listener: freePortRange reserved two ports a node
	if nodes == 1 {
		// The single broker's controller runs on its own, as in production:
		// a combined node restarted after SIGKILL drops the transaction
		// markers it sends before its own controller fences its old
		// registration, leaving hanging transactions (scripts/kafka.sh).
		c.env = append(c.env, "EDDY_KAFKA_CONTROLLER=dedicated")
	}
	t.Cleanup(func() {
		// EDDY_TEST_KEEP_CLUSTER=1 leaves a failed test's cluster running,
		// for inspecting it with Kafka's tools.
		if t.Failed() {
			c.logBrokerTails(dir)
		}
		if t.Failed() && os.Getenv("EDDY_TEST_KEEP_CLUSTER") == "1" {
			t.Logf("keeping the cluster at %s (services dir %s); stop it with EDDY_SERVICES_DIR=%s EDDY_KAFKA_PORT=%d scripts/kafka.sh stop", c.bootstrap(), dir, dir, c.port)
			return
		}
		c.script("stop")
		os.RemoveAll(dir)
	})
	start := time.Now()
	if out, err := c.script("start", "kafka"); err != nil {
		t.Fatalf("scripts/kafka.sh start kafka (%d nodes): %v\n%s", nodes, err, out)
	}
	t.Logf("started a %d-node Kafka cluster of the test's own at %s in %v", nodes, c.bootstrap(), time.Since(start).Round(time.Millisecond))
	return c
}

// logBrokerTails logs the end of each node's broker log and JVM output, so
// a failed test says what the brokers did (their directory is removed).
func (c *scriptCluster) logBrokerTails(dir string) {
	for n := 1; n <= c.nodes; n++ {
		names := []string{fmt.Sprintf("kafka-%d.out", n), fmt.Sprintf("kafka-%d.log", n)}
		if n == 1 {
			names = append(names, "kafka-c.log") // a dedicated controller's
		}
		for _, name := range names {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var bad []string
			for _, l := range lines {
				if strings.Contains(l, " ERROR ") || strings.Contains(l, " FATAL ") || strings.Contains(l, " WARN ") {
					bad = append(bad, l)
				}
			}
			if len(bad) > 40 {
				bad = bad[len(bad)-40:]
			}
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			c.t.Logf("node %d's %s, its last warnings and errors:\n%s\nand its last lines:\n%s", n, name, strings.Join(bad, "\n"), strings.Join(lines, "\n"))
		}
		c.logSockets(dir, n)
	}
}

// logSockets logs who listens on node n's broker port and what the node's
// JVM says of its socket-server threads: seen twice, a restarted single
// node whose process lived on refused connections for minutes.
func (c *scriptCluster) logSockets(dir string, n int) {
	port := c.port + 2*(n-1)
	out, _ := exec.Command("ss", "-tanpH", fmt.Sprintf("( sport = :%d )", port)).CombinedOutput()
	states := map[string]int{}
	var listen []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			states[f[0]]++
			if f[0] == "LISTEN" {
				listen = append(listen, l)
			}
		}
	}
	c.t.Logf("node %d's port %d: sockets by state %v; listening: %q", n, port, states, listen)
	pid, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("kafka-%d.pid", n)))
	if err != nil {
		c.t.Logf("node %d: no pid file (%v)", n, err)
		return
	}
	threads, err := exec.Command("jcmd", strings.TrimSpace(string(pid)), "Thread.print").CombinedOutput()
	if err != nil {
		c.t.Logf("node %d (pid %s): jcmd: %v %s", n, strings.TrimSpace(string(pid)), err, threads)
		return
	}
	var sock []string
	for _, l := range strings.Split(string(threads), "\n") {
		if strings.HasPrefix(l, "\"") && (strings.Contains(l, "acceptor") || strings.Contains(l, "network-thread") || strings.Contains(l, "request-handler")) {
			sock = append(sock, l)
		}
	}
	c.t.Logf("node %d (pid %s): %d socket-server threads:\n%s", n, strings.TrimSpace(string(pid)), len(sock), strings.Join(sock, "\n"))
}

func (c *scriptCluster) script(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot(), "scripts", "kafka.sh"), args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *scriptCluster) bootstrap() string {
	var addrs []string
	for n := range c.nodes {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", c.port+2*n))
	}
	return strings.Join(addrs, ",")
}

// kill SIGKILLs node n (1-based); its data stays.
func (c *scriptCluster) kill(n int) {
	c.t.Helper()
	if out, err := c.script("kill", strconv.Itoa(n)); err != nil {
		c.t.Fatalf("killing Kafka node %d: %v\n%s", n, err, out)
	}
}

// restart starts node n again on its data and waits for its port.
func (c *scriptCluster) restart(n int) {
	c.t.Helper()
	if out, err := c.script("restart", strconv.Itoa(n)); err != nil {
		c.t.Fatalf("restarting Kafka node %d: %v\n%s", n, err, out)
	}
}

// leader returns the node leading a partition.
func (c *scriptCluster) leader(topic string, partition int) int {
	c.t.Helper()
	out, err := c.script("leader", topic, strconv.Itoa(partition))
	n, perr := strconv.Atoi(strings.TrimSpace(lastLine(out)))
	if err != nil || perr != nil {
		c.t.Fatalf("leader of %s-%d: %v %v\n%s", topic, partition, err, perr, out)
	}
	return n
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// repoRoot is the repository root (the integration module is one level
// below it).
func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}

// freePortRange returns the first of n consecutive free loopback ports,
// below Linux's ephemeral range (32768–60999). A port in that range can be
// taken while its broker is down: a client's outgoing connection may get
// it as its local port, and a client retrying 127.0.0.1:P from local port
// P connects to itself (TCP simultaneous open), so the restarted broker
// could not bind ("Unable to start acceptor").
//
// A range is reserved for the test that got it until it ends: tests
// running side by side start their brokers seconds after choosing ports.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	const lo, hi = 20000, 32700
	start := lo + os.Getpid()%300*40
	reservedMu.Lock()
	defer reservedMu.Unlock()
	for i := 0; i < (hi-lo)/20; i++ {
		base := lo + (start-lo+i*20)%(hi-lo-n)
		ok := true
		for p := base; p < base+n && ok; p++ {
			if reserved[p] {
				ok = false
				break
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			for p := base; p < base+n; p++ {
				reserved[p] = true
			}
			t.Cleanup(func() {
				reservedMu.Lock()
				defer reservedMu.Unlock()
				for p := base; p < base+n; p++ {
					delete(reserved, p)
				}
			})
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// reserved are the ports freePortRange gave tests still running.
var (
	reservedMu sync.Mutex
	reserved   = map[int]bool{}
)
