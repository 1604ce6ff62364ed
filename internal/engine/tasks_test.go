package engine

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// The task registry holds the thread's standbys and warm-ups: a new
// assignment's standbys replace the old (the ones gone are returned for
// their reading to stop, the kept ones keep their progress), claimed
// tasks mark warm-ups, and what a group member's join reports
// (following) always matches; clearing forgets it all.
func TestTaskRegistryStandbys(t *testing.T) {
	var m taskRegistry
	m.clear()
	id := func(sub int, p int32) processor.TaskID { return processor.TaskID{Subtopology: sub, Partition: p} }
	follows := func() string {
		f := m.following.Load()
		return fmt.Sprint(f.standby, f.claims)
	}
	added, gone, warm := m.setStandbys(map[processor.TaskID]bool{id(1, 3): true, id(0, 3): true, id(1, 5): true}, map[processor.TaskID]bool{id(1, 5): true, id(1, 7): true})
	if fmt.Sprint(added, gone, warm) != "[0_3 1_3 1_5] [] [1_5]" {
		t.Fatalf("first assignment: added %v, gone %v, warm-ups %v", added, gone, warm)
	}
	if follows() != "[0_3 1_3 1_5] [1_5 1_7]" {
		t.Fatalf("following %s", follows())
	}
	m.standby[id(1, 3)].lag = 42 // progress a standby made
	added, gone, warm = m.setStandbys(map[processor.TaskID]bool{id(1, 3): true, id(1, 4): true}, nil)
	if fmt.Sprint(added, gone, warm) != "[1_4] [0_3 1_5] []" {
		t.Fatalf("second assignment: added %v, gone %v, warm-ups %v", added, gone, warm)
	}
	if m.standby[id(1, 3)].lag != 42 || m.standby[id(1, 4)].lag != -1 {
		t.Fatalf("a kept standby lost its state or a new one has some: %+v %+v", *m.standby[id(1, 3)], *m.standby[id(1, 4)])
	}
	if follows() != "[1_3 1_4] []" {
		t.Fatalf("following %s", follows())
	}
	m.removeStandby(id(1, 4)) // the thread's active task takes it over
	if follows() != "[1_3] []" {
		t.Fatalf("following after a standby became active: %s", follows())
	}
	m.clear()
	if len(m.standby) != 0 || follows() != "[] []" {
		t.Fatalf("after clear: %d standbys, following %s", len(m.standby), follows())
	}
}

// The task registry moves a task from assigned to running: its partitions
// paused, pending until the committed offsets are read (the task then
// starts at the committed stream time), restoring while it has changelogs
// to read, then running from the committed offsets (the beginning when
// nothing was committed), its partitions unpaused and their buffers empty;
// a revoked partition's task is returned once it has none left.
func TestTaskRegistryTransitions(t *testing.T) {
	r := newRig(t, kclienttest.NewCluster(), countTopology(t, nil), false, "")
	th := NewThread(0, r.cfg)
	th.reset()
	th.tm.reset(nil, nil, th.stores, th.cache)
	m := &th.tm.reg
	tp := func(p int32) kclient.TP { return kclient.TP{Topic: testIn, Partition: p} }
	var added []*task
	for p := range int32(2) {
		id := processor.TaskID{Subtopology: 0, Partition: p}
		rtt, err := th.tm.newRTTask(id)
		if err != nil {
			t.Fatal(err)
		}
		tk := m.addTask(id, rtt)
		m.addPartition(tk, tp(p), nil)
		added = append(added, tk)
	}
	if paused := m.pause(added); fmt.Sprint(paused) != fmt.Sprint([]kclient.TP{tp(0), tp(1)}) || !m.parts[tp(0)].paused {
		t.Fatalf("paused %v", paused)
	}
	pending, starting := m.toStart()
	if len(pending) != 2 || len(starting) != 0 || !m.starting() {
		t.Fatalf("new tasks: %d pending, %d starting", len(pending), len(starting))
	}
	m.readFor(pending, map[kclient.TP]int64{tp(0): 40, tp(1): -1}, map[kclient.TP]string{tp(0): encodeStreamTime(7000)})
	if _, starting = m.toStart(); len(starting) != 2 || added[0].t.StreamTime() != 7000 {
		t.Fatalf("after reading the committed offsets: %d starting, stream time %d", len(starting), added[0].t.StreamTime())
	}
	added[1].restoring = 1 // the restorer reads a changelog for it
	ready := m.restoring(starting)
	if len(ready) != 1 || ready[0] != added[0] || added[1].state != taskRestoring {
		t.Fatalf("ready %v, the restoring task's state %v", ready, added[1].state)
	}
	m.parts[tp(0)].buf = append(m.parts[tp(0)].buf, &rt.RawRecord{})
	if resumed := m.run(ready); fmt.Sprint(resumed) != fmt.Sprint([]kclient.TP{tp(0)}) || m.parts[tp(0)].paused || m.parts[tp(0)].size() != 0 {
		t.Fatalf("resumed %v, paused %v, buffered %d", resumed, m.parts[tp(0)].paused, m.parts[tp(0)].size())
	}
	if m.from(tp(0)) != 40 || m.from(tp(1)) != -2 {
		t.Fatalf("reading from %d and %d, want the committed 40 and the beginning (-2)", m.from(tp(0)), m.from(tp(1)))
	}
	if m.starting() || added[0].state != taskRunning {
		t.Fatal("a task still starting")
	}
	if closed := m.revokePartitions([]kclient.TP{tp(1)}); len(closed) != 1 || closed[0] != added[1] {
		t.Fatalf("revoking partition 1 closes %v", closed)
	}
	th.tm.closeAll(false)
}
