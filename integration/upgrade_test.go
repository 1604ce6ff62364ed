package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// previousRelease is the last commit of eddy whose group protocol is
// eddy-tasks alone (a task a partition number over every sub-topology):
// the release a group upgrades from.
const previousRelease = "f6cbe69bfdf4bde63cb487e8960e8e6f8355b351"

// buildPreviousWorker builds the word-count worker of previousRelease from
// the repository's history (git archive of the commit, built with the go
// command like this one).
func buildPreviousWorker(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive --format=tar %s | tar -x -C %q", root, previousRelease, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extracting release %s from the repository's history (a clone with its history is needed): %v\n%s", previousRelease, err, out)
	}
	bin := filepath.Join(t.TempDir(), "wcworker-previous")
	build := exec.Command("go", "build", "-tags", buildTags, "-o", bin, "./internal/wcworker")
	build.Dir = filepath.Join(src, "integration")
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "GOWORK=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building release %s's worker: %v\n%s", previousRelease, err, out)
	}
	return bin
}

// A rolling upgrade from the previous release, under exactly-once with
// input flowing: three instances of the previous release's worker, each
// replaced in turn (stopped, then started again on its state directory)
// by this release's. While old and new instances share the group it keeps
// to the old protocol (eddy-tasks: every member offers it; the coordinator
// picks what all offer) and the new members read and write its formats;
// once the last old member is gone the group moves to eddy-tasks-2. The
// output stays exact, and each new instance gets back the tasks its old
// self ran and resumes their state, never restoring one from its
// changelog's start (the state directory's format is unchanged).
func TestRollingUpgradeFromThePreviousRelease(t *testing.T) {
	brokers := realBroker(t)
	old := buildPreviousWorker(t)
	a := newWordApp(t, brokers, 6)
	args := []string{"-guarantee", "exactly_once", "-cache=false"}
	a.produce(30_000)
	names := []string{"p0", "p1", "p2"}
	var ws []*worker
	for _, n := range names {
		ws = append(ws, a.startBinary(old, n, args...))
	}
	for _, w := range ws {
		w.waitRunning(t, 2*time.Minute)
	}
	kafkatest.WaitCaughtUp(t, brokers, a.app, 3*time.Minute, append([]string{a.input}, a.internal...)...)
	a.feed(90_000, 3_000)
	olds := slices.Clone(ws)
	for i, n := range names {
		a.strike(fmt.Sprintf("upgrade of %s", n), 0.1+0.25*float64(i), 0.3+0.25*float64(i), func() {
			ws[i].stop(t)
			ws[i] = a.start(n, args...)
		})
		ws[i].waitRunning(t, 2*time.Minute)
		if i < len(names)-1 {
			if p := stableProtocol(t, brokers, a.app); p != "eddy-tasks" {
				t.Fatalf("with %d of 3 instances upgraded the group's protocol is %q, want eddy-tasks (the one every member offers)", i+1, p)
			}
		}
	}
	a.waitDone(5 * time.Minute)
	if p := stableProtocol(t, brokers, a.app); p != "eddy-tasks-2" {
		t.Fatalf("every instance upgraded, the group's protocol is %q, want eddy-tasks-2", p)
	}
	// Each upgraded instance got back the counting tasks its old self ran
	// when it stopped and resumed their state: none restored from its
	// changelog's start, nor wiped. (Tasks of an instance being upgraded
	// run elsewhere meanwhile, restored there: a rolling restart without
	// static membership or standbys moves them.)
	for i, w := range ws {
		before := olds[i].countingPartitions(t)
		back := 0
		for _, e := range w.rebalanceEntries() {
			if e["msg"] != "partitions assigned" {
				continue
			}
			ts, _ := e["tasks"].([]any)
			for _, id := range ts {
				if sub, p := taskOf(t, id); sub == 1 && slices.Contains(before, p) {
					back++
				}
			}
			if len(ts) > 0 {
				break // the upgraded instance's first assignment
			}
		}
		for _, e := range w.entries("restoring store") {
			if _, p := taskOf(t, e["task"]); slices.Contains(before, p) && e["from"] == float64(0) {
				t.Errorf("%s restored its own task %v from the changelog's start after the upgrade: %v", names[i], e["task"], e)
			}
		}
		for _, e := range w.all() {
			if m, _ := e["msg"].(string); strings.Contains(m, "restoring it in full") || strings.Contains(m, "wiping and restoring in full") {
				t.Errorf("%s restored a store in full after the upgrade: %v", names[i], e)
			}
		}
		t.Logf("%s ran counting tasks of partitions %v before the upgrade; %d of them came back to it first", names[i], before, back)
		if len(before) > 0 && back == 0 {
			t.Errorf("%s got none of its counting tasks %v back after the upgrade: the group did not place them by its state", names[i], before)
		}
	}
	for _, w := range ws {
		w.stop(t)
	}
	a.checkExactSequences()
}

// stableProtocol waits until the group is stable (a rebalance may be
// under way: its protocol is chosen only once every member joined) and
// returns the protocol its members use.
func stableProtocol(t *testing.T, brokers, group string) string {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		gs, err := adm.DescribeGroups(ctx, group)
		cancel()
		if err != nil {
			t.Fatalf("describing group %s: %v", group, err)
		}
		if g := gs[group]; g.State == "Stable" && g.Protocol != "" {
			return g.Protocol
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s not stable within 2m (state %q)", group, gs[group].State)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
