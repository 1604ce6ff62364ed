// Package assign is eddy's task assignor: it decides which member of a
// group runs each task (a sub-topology on one partition number, as Kafka
// Streams defines it), which members follow each task's changelogs as
// standby replicas, and which tasks wait for a warm-up copy to catch up
// before they move (KIP-441). It is pure: members and their states in, an
// assignment out, no client types. internal/kclient carries its input and
// output over the classic group protocol; a broker-side assignment (the
// streams group protocol, KIP-1071) replaces it.
//
// Entry point: Assign.
//
//	a := assign.Assign(members, tasks, assign.Options{Standbys: 1, AcceptableLag: 10_000, MaxWarmups: 2})
//	// a.Active["member-1"] == []processor.TaskID{{0, 1}, {1, 3}}
package assign

import (
	"cmp"
	"slices"

	"github.com/eddy-go/eddy/processor"
)

// Member is one member of the group (a stream thread) as the assignor sees
// it.
type Member struct {
	ID string
	// Process is the member's instance: its stream threads share the
	// instance's local state ("": the member is an instance of its own).
	Process string
	// Owned are the tasks it runs now (its claim of the newest
	// generation); Standby the tasks it follows now (standbys and
	// warm-ups); Warmup the tasks held for it at the last rebalance,
	// which it is to get once its instance caught up on them.
	Owned, Standby, Warmup []processor.TaskID
	// State is how far its instance's local state of each task has read
	// the task's changelogs (the sum of its stores' changelog offsets; a
	// task missing: no state of it).
	State map[processor.TaskID]int64
	// Tags are its instance's client tags, which standby placement
	// spreads over.
	Tags map[string]string
}

// Options are the group-wide settings.
type Options struct {
	// Standbys is how many standby copies of each task to place.
	Standbys int
	// AcceptableLag is how far (changelog records) an instance's state of
	// a stateful task may be behind the furthest for the task to move
	// there at once.
	AcceptableLag int64
	// MaxWarmups is how many warm-up copies may run at once (0: tasks move
	// at once).
	MaxWarmups int
}

// Assignment is the assignor's decision, by member id, each member's tasks
// in order.
type Assignment struct {
	// Active: the tasks each member runs.
	Active map[string][]processor.TaskID
	// Standby: the tasks each member follows (standbys, and warm-ups).
	Standby map[string][]processor.TaskID
	// Warmup: the tasks held for each member (it is to get them once
	// caught up; it follows those it has a warm-up or standby copy of).
	Warmup map[string][]processor.TaskID
	// FollowUp: a task moves from one member to another, which takes two
	// rebalances (the old owner revokes it, the next one gives it to the
	// new).
	FollowUp bool
}

// Compare orders task ids by sub-topology, then partition.
func Compare(a, b processor.TaskID) int {
	if c := cmp.Compare(a.Subtopology, b.Subtopology); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// Assign assigns tasks to members as Kafka Streams' assignor does with
// warm-ups (KIP-441): balanced (every member's count within one of the
// others', and each sub-topology's tasks spread the same way, so a heavy
// sub-topology is not piled on a few members), sticky (a member keeps
// what it owns up to its share), state-aware (a task nobody keeps goes
// where its state is furthest along), a stateful task that would move to
// an instance too far behind on it held where it is while a warm-up copy
// catches up there, and standby copies on other instances, spread over
// the client tags. Tasks a member reports that are not in tasks are
// ignored. Given an unchanged group (each member owning and following
// what it was given), it returns the same assignment.
func Assign(members []Member, tasks []processor.TaskID, o Options) Assignment {
	ts := slices.SortedFunc(slices.Values(tasks), Compare)
	ts = slices.Compact(ts)
	index := make(map[processor.TaskID]int32, len(ts))
	var groups []int32 // the first task of each sub-topology
	for i, id := range ts {
		index[id] = int32(i)
		if i == 0 || ts[i-1].Subtopology != id.Subtopology {
			groups = append(groups, int32(i))
		}
	}
	dense := func(ids []processor.TaskID) []int32 {
		var out []int32
		for _, id := range ids {
			if i, ok := index[id]; ok {
				out = append(out, i)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	ms := make([]member, len(members))
	for i, m := range members {
		ms[i] = member{id: m.ID, process: m.Process, owned: dense(m.Owned), standby: dense(m.Standby), warmup: dense(m.Warmup), tags: m.Tags}
		if m.State != nil {
			ms[i].state = make(map[int32]int64, len(m.State))
			for id, off := range m.State {
				if i2, ok := index[id]; ok {
					ms[i].state[i2] = off
				}
			}
		}
	}
	// A task two members claim is the claim of the first by id (callers
	// give each task to one claimant; kclient resolves generations).
	claimed := map[int32]bool{}
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ms[a].id, ms[b].id) })
	for _, i := range order {
		ms[i].owned = slices.DeleteFunc(ms[i].owned, func(p int32) bool {
			if claimed[p] {
				return true
			}
			claimed[p] = true
			return false
		})
	}
	g := assignGroup(ms, int32(len(ts)), groups, options{standbys: o.Standbys, acceptableLag: o.AcceptableLag, maxWarmups: o.MaxWarmups})
	ids := func(ps []int32) []processor.TaskID {
		out := make([]processor.TaskID, len(ps))
		for i, p := range ps {
			out[i] = ts[p]
		}
		return out
	}
	out := Assignment{Active: map[string][]processor.TaskID{}, Standby: map[string][]processor.TaskID{},
		Warmup: map[string][]processor.TaskID{}, FollowUp: g.followUp}
	for id, ps := range g.active {
		out.Active[id] = ids(ps)
	}
	for id, ps := range g.standby {
		if len(ps) > 0 {
			out.Standby[id] = ids(ps)
		}
	}
	for id, ps := range g.warmup {
		if len(ps) > 0 {
			out.Warmup[id] = ids(ps)
		}
	}
	return out
}
