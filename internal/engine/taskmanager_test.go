package engine

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
)

// A cooperative revocation: the task manager commits, closes only the task
// of the partition that moves (the other keeps running, never revoked nor
// assigned again), and its counts stay in the thread's; the partition
// coming back starts its task again from what was committed, and every
// key's updates stay exact.
func TestTaskManagerRevokesOnlyTheMovingTask(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	core, logs := observer.New(zapcore.InfoLevel)
	r.cfg.Log = zap.New(zapcore.NewTee(r.cfg.Log.Core(), core))
	want := feed(cl, 0, 100, 10)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	p1 := kclient.TP{Topic: testIn, Partition: 1}

	cl.RevokePartitions(p1)
	wait(t, "the revocation", func() bool { return len(run.th.Snapshot().Tasks) == 1 })
	if id := run.th.Snapshot().Tasks[0].ID; id != "0_0" {
		t.Fatalf("after revoking partition 1 the thread runs %s, want 0_0", id)
	}
	if n := run.th.Snapshot().Counts.Processed; n != 100 {
		t.Errorf("the thread counts %d records processed after a task closed, want the 100 of both", n)
	}
	for k, n := range feed(cl, 100, 60, 10) {
		want[k] += n
	}
	// Task 0_0 goes on alone: its partition's input is committed to its
	// end while partition 1's waits.
	wait(t, "0_0 to commit its new input", func() bool {
		off, _ := cl.Committed(testIn, 0)
		return off == cl.End(testIn, 0)
	})
	if off, _ := cl.Committed(testIn, 1); off == cl.End(testIn, 1) {
		t.Fatal("partition 1 committed to its end while revoked")
	}
	cl.AssignPartitions(p1)
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
	var revoked, assigned []string
	for _, e := range logs.All() {
		switch e.Message {
		case "partitions revoked":
			revoked = append(revoked, fmt.Sprint(e.ContextMap()["tasks"]))
		case "partitions assigned":
			assigned = append(assigned, fmt.Sprint(e.ContextMap()["tasks"]))
		}
	}
	if fmt.Sprint(revoked) != "[[0_1]]" || fmt.Sprint(assigned) != "[[0_0 0_1] [0_1]]" {
		t.Errorf("revoked %v and assigned %v, want 0_1 revoked and assigned again, 0_0 assigned once", revoked, assigned)
	}
	if n := run.th.Stats.Aborts.Load(); n != 0 {
		t.Errorf("%d aborts", n)
	}
}
