package kafkatest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A container's owner names its test process so that only the process's
// end makes it an orphan: a running process is never one, a finished one
// is, and another machine's never is here.
func TestOwnerNamesTheProcessUntilItEnds(t *testing.T) {
	me := processOwner()
	if me == "" {
		t.Fatal("this process cannot be named (no /proc?)")
	}
	if orphaned(me) {
		t.Fatalf("%s: this process taken for gone", me)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := ownerOf(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if child == "" || !orphaned(child) {
		t.Fatalf("a finished process's owner %q is not an orphan", child)
	}
	boot, rest, _ := strings.Cut(child, "/")
	other := strings.Repeat("0", len(boot)) + "/" + rest
	if orphaned(other) {
		t.Fatalf("%s: another machine's container taken for an orphan", other)
	}
	// The same pid with another start time is another process.
	pid, _, _ := strings.Cut(rest, "/")
	if reused := boot + "/" + pid + "/1"; !orphaned(reused) {
		t.Fatalf("%s: a container of an earlier process with this pid taken for the current one's", reused)
	}
}
