package ordertotals_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// envReapChild makes this test binary a test process that starts a
// container and then hangs, as a test does that is killed mid-run.
const envReapChild = "ORDERTOTALS_REAP_CHILD"

// A service's test process killed mid-test (SIGKILL: no cleanup runs)
// leaves its container only until the next test process starts one:
// kafkatest removes the containers of processes of this machine that are
// gone, and never those of a process still running.
func TestAKilledTestLeavesNoContainersBehind(t *testing.T) {
	ctx := context.Background()
	if os.Getenv(envReapChild) != "" {
		c, err := kafkatest.StartRegistry(ctx)
		if err != nil {
			fmt.Println("failed", err)
			os.Exit(1)
		}
		fmt.Println("container", c.ID)
		select {} // killed by the outer test
	}
	// A test process started by the outer test: its container id once it
	// has one.
	start := func(name string) (*exec.Cmd, string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAKilledTestLeavesNoContainersBehind$")
		cmd.Env = append(os.Environ(), envReapChild+"=1")
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if id, ok := strings.CutPrefix(lines.Text(), "container "); ok {
				t.Logf("test process %s (pid %d) runs container %s", name, cmd.Process.Pid, id)
				return cmd, id
			}
			if strings.HasPrefix(lines.Text(), "failed") {
				t.Fatalf("test process %s: %s", name, lines.Text())
			}
		}
		t.Fatalf("test process %s ended without a container: %v", name, lines.Err())
		return nil, ""
	}
	kill := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	exists := func(id string) bool {
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("id", id)})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items) > 0
	}

	killed, killedID := start("killed")
	alive, aliveID := start("alive")
	kill(killed)
	if !exists(killedID) {
		t.Fatalf("container %s went with its process: nothing to reap", killedID)
	}
	// The next test process to start a container reaps before it does.
	next, nextID := start("next")
	if exists(killedID) {
		t.Fatalf("container %s of the killed process is still there after the next start", killedID)
	}
	if !exists(aliveID) {
		t.Fatalf("container %s of a process still running was removed", aliveID)
	}
	// Reap alone, with both gone.
	kill(alive)
	kill(next)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	removed, err := kafkatest.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{aliveID, nextID} {
		if exists(id) {
			t.Errorf("container %s is still there after Reap (removed %v)", id, removed)
		}
	}
}
