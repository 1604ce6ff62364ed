package engine

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/processor"
)

// The task manager owns the thread's standbys and warm-ups: a new
// assignment's standbys replace the old (the ones gone are returned for
// their reading to stop, the kept ones keep their progress), claimed
// partitions mark warm-ups, and what a group member's join reports
// (following) always matches; clearing forgets it all.
func TestTaskManagerStandbys(t *testing.T) {
	var m taskManager
	m.clear()
	id := func(sub int, p int32) processor.TaskID { return processor.TaskID{Subtopology: sub, Partition: p} }
	follows := func() string {
		f := m.following.Load()
		return fmt.Sprint(f.standby, f.claims)
	}
	added, gone, warm := m.setStandbys(map[processor.TaskID]bool{id(1, 3): true, id(0, 3): true, id(1, 5): true}, map[int32]bool{5: true, 7: true})
	if fmt.Sprint(added, gone, warm) != "[0_3 1_3 1_5] [] [1_5]" {
		t.Fatalf("first assignment: added %v, gone %v, warm-ups %v", added, gone, warm)
	}
	if follows() != "[3 5] [5 7]" {
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
	if follows() != "[3 4] []" {
		t.Fatalf("following %s", follows())
	}
	m.removeStandby(id(1, 4)) // the thread's active task takes it over
	if follows() != "[3] []" {
		t.Fatalf("following after a standby became active: %s", follows())
	}
	m.clear()
	if len(m.standby) != 0 || follows() != "[] []" {
		t.Fatalf("after clear: %d standbys, following %s", len(m.standby), follows())
	}
}
