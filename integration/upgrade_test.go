package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// output stays exact, and no instance restores its state in full: each
// new one resumes the state its old self left (the state directory's
// format is unchanged).
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
	for i, n := range names {
		a.strike(fmt.Sprintf("upgrade of %s", n), 0.1+0.25*float64(i), 0.3+0.25*float64(i), func() {
			ws[i].stop(t)
			ws[i] = a.start(n, args...)
		})
		ws[i].waitRunning(t, 2*time.Minute)
		if i < len(names)-1 {
			if p := groupProtocol(t, brokers, a.app); p != "eddy-tasks" {
				t.Fatalf("with %d of 3 instances upgraded the group's protocol is %q, want eddy-tasks (the one every member offers)", i+1, p)
			}
		}
	}
	a.waitDone(5 * time.Minute)
	deadline := time.Now().Add(time.Minute)
	for groupProtocol(t, brokers, a.app) != "eddy-tasks-2" {
		if time.Now().After(deadline) {
			t.Fatalf("every instance upgraded, the group's protocol is still %q, want eddy-tasks-2", groupProtocol(t, brokers, a.app))
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := a.changelogRecords()
	for i, w := range ws {
		for _, e := range w.all() {
			if m, _ := e["msg"].(string); strings.Contains(m, "restoring it in full") || strings.Contains(m, "wiping and restoring in full") {
				t.Errorf("%s restored a store in full after the upgrade: %v", names[i], e)
			}
		}
		t.Logf("%s (upgraded) restored %d changelog records (the changelogs hold %d)", names[i], w.restored(), total)
		if r := w.restored(); r*10 > int64(total) {
			t.Errorf("%s restored %d of %d changelog records after the upgrade: it should have resumed its state", names[i], r, total)
		}
	}
	for _, w := range ws {
		w.stop(t)
	}
	a.checkExactSequences()
}

// groupProtocol returns the protocol a group's members use now ("" while
// it rebalances).
func groupProtocol(t *testing.T, brokers, group string) string {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describing group %s: %v", group, err)
	}
	return gs[group].Protocol
}
