package kafkatest

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// The reaper. testcontainers' own (Ryuk, a container of its own image)
// is not used; instead every container kafkatest starts names the test
// process that owns it (the label ContainerLabel+".owner": the machine's
// boot id, the process id and the process's start time, so that a later
// process given the same id is not taken for it), and before its first
// container a test process removes the containers of owners on this
// machine that are no longer running: a test binary killed by SIGKILL, by
// go test's -timeout or by Ctrl-C leaves its containers only until the
// next test that starts one. Containers of processes still running, and of
// other machines sharing the engine, are never touched.

// OwnerLabel names the test process a container belongs to.
const OwnerLabel = ContainerLabel + ".owner"

// processOwner is this process's owner label value, "" where the process
// cannot be named (no /proc: not Linux).
var processOwner = sync.OnceValue(func() string { return ownerOf(os.Getpid()) })

// bootID is the machine's boot id, "" without /proc.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// ownerOf returns the owner label value of process pid: boot id, pid and
// start time (in clock ticks since boot), or "" when it is not running (or
// cannot be named).
func ownerOf(pid int) string {
	boot := bootID()
	if boot == "" {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after its closing parenthesis start at field 3; the start
	// time is field 22.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + fields[19]
}

// orphaned reports whether the owner label value names a process of this
// machine that is no longer running.
func orphaned(owner string) bool {
	boot, rest, ok := strings.Cut(owner, "/")
	if !ok || boot != bootID() {
		return false // another machine's, or not ours to judge
	}
	pidText, _, _ := strings.Cut(rest, "/")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	return ownerOf(pid) != owner
}

// Reap removes the containers kafkatest started for test processes of
// this machine that are no longer running, and returns their ids. Every
// test process runs it before starting its first container; call it to
// clean up without starting one.
func Reap(ctx context.Context) ([]string, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: reaping: %w", err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", OwnerLabel)})
	if err != nil {
		return nil, fmt.Errorf("kafkatest: reaping: listing containers: %w", err)
	}
	var removed []string
	for _, c := range list.Items {
		if !orphaned(c.Labels[OwnerLabel]) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			return removed, fmt.Errorf("kafkatest: reaping container %s of process %s: %w", c.ID, c.Labels[OwnerLabel], err)
		}
		removed = append(removed, c.ID)
	}
	return removed, nil
}

// reapOnce runs Reap before the process's first container; a failure is
// logged, not fatal (the container about to start does not depend on it).
var reapOnce sync.Once

func reapOrphans(ctx context.Context) {
	reapOnce.Do(func() {
		removed, err := Reap(ctx)
		if err != nil {
			log.Printf("%v", err)
		}
		if len(removed) > 0 {
			log.Printf("kafkatest: removed %d containers left by test processes that are no longer running: %s",
				len(removed), strings.Join(removed, ", "))
		}
	})
}
