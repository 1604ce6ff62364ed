package engine

import (
	"testing"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
)

// A cooperative rebalance takes one partition away and gives it back
// later: the thread commits, closes only that partition's task, and goes
// on processing the other through the rebalance; while the returning
// task's committed offsets cannot be read (a transaction of its previous
// owner pending), the other task does not wait for it. Exactly once
// throughout.
func TestCooperativeRebalanceKeepsTheOtherTasksRunning(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	want := feed(cl, 0, 100, 10)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	p1 := kclient.TP{Topic: testIn, Partition: 1}

	cl.RevokePartitions(p1)
	wait(t, "the revocation", func() bool { return len(run.th.Snapshot().Tasks) == 1 })
	committed1, _ := cl.Committed(testIn, 1)
	for k, n := range feed(cl, 100, 100, 10) {
		want[k] += n
	}
	wait(t, "partition 0 to be committed to its end", func() bool {
		off, _ := cl.Committed(testIn, 0)
		return off == cl.End(testIn, 0)
	})
	if off, _ := cl.Committed(testIn, 1); off != committed1 {
		t.Fatalf("partition 1 moved from %d to %d while revoked", committed1, off)
	}

	// It comes back, but its committed offsets cannot be read for a
	// while: partition 0 goes on.
	for range 1000 {
		cl.FailNext("Committed", kclienttest.ErrUnreachable)
	}
	calls := cl.Calls("Committed")
	cl.AssignPartitions(p1)
	wait(t, "the new task to try its offsets", func() bool { return cl.Calls("Committed") >= calls+3 })
	for k, n := range feed(cl, 200, 100, 10) {
		want[k] += n
	}
	wait(t, "partition 0 to be committed to its end while partition 1 waits", func() bool {
		off, _ := cl.Committed(testIn, 0)
		return off == cl.End(testIn, 0)
	})
	if off, _ := cl.Committed(testIn, 1); off != committed1 {
		t.Fatalf("partition 1 committed %d before its task started", off)
	}
	cl.ClearFaults("Committed")
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
}
