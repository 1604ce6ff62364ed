package assign

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/processor"
)

// benchGroup is a group of 200 instances (one thread each) running 5,000
// partitions × 3 sub-topologies (15,000 tasks) with one standby each, as a
// rebalance after one instance died and a new one joined finds them: each
// owning its share, reporting the state of its tasks and standbys.
func benchGroup() ([]Member, []processor.TaskID) {
	const parts, subs, instances = 5000, 3, 200
	members := make([]Member, instances)
	for i := range members {
		members[i] = Member{ID: fmt.Sprintf("member-%03d-%s", i, "0123456789abcdef0123456789abcdef"),
			Process: fmt.Sprintf("process-%03d", i), State: map[processor.TaskID]int64{}}
	}
	var tasks []processor.TaskID
	for s := range subs {
		for p := range int32(parts) {
			id := processor.TaskID{Subtopology: s, Partition: p}
			tasks = append(tasks, id)
			n := s*parts + int(p)
			a, b := n%instances, (n+1)%instances
			members[a].Owned = append(members[a].Owned, id)
			members[a].State[id] = 1 << 30
			members[b].Standby = append(members[b].Standby, id)
			members[b].State[id] = 1<<30 - 500
		}
	}
	// Instance 0 died (its members gone); a new one, with no state, joins.
	members[0] = Member{ID: "member-new", Process: "process-new", State: map[processor.TaskID]int64{}}
	return members, tasks
}

// BenchmarkAssign assigns the 15,000 tasks of benchGroup (the issue's
// bound: under a second).
func BenchmarkAssign(b *testing.B) {
	members, tasks := benchGroup()
	o := Options{Standbys: 1, AcceptableLag: 10_000, MaxWarmups: 2}
	var a Assignment
	for b.Loop() {
		a = Assign(members, tasks, o)
	}
	active, standby := 0, 0
	for _, ts := range a.Active {
		active += len(ts)
	}
	for _, ts := range a.Standby {
		standby += len(ts)
	}
	if active != len(tasks) || standby < len(tasks) {
		b.Fatalf("%d active and %d standby tasks of %d", active, standby, len(tasks))
	}
}
