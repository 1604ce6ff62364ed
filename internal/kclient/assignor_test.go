package kclient

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The task assignor over random memberships, ownerships and states: every task
// goes to exactly one member, shares differ by at most one, a member keeps
// what it owns up to its share, and a group that did not change keeps its
// assignment exactly (no task moves).
func TestAssignTasksProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		n := int32(rng.IntN(40))
		m := 1 + rng.IntN(8)
		members := make([]taskMember, m)
		owner := map[int32]bool{}
		for i := range members {
			members[i].id = fmt.Sprintf("member-%d", rng.IntN(1000))
			if rng.IntN(2) == 0 {
				members[i].process = fmt.Sprintf("proc-%d", rng.IntN(3))
			}
			if rng.IntN(2) == 0 {
				members[i].state = map[int32]int64{}
				for p := range n {
					if rng.IntN(3) == 0 {
						members[i].state[p] = int64(rng.IntN(4))
					}
				}
			}
			for p := range n {
				if !owner[p] && rng.IntN(m+1) == 0 {
					owner[p] = true
					members[i].owned = append(members[i].owned, p)
				}
			}
		}
		ids := map[string]bool{}
		for i := range members {
			for ids[members[i].id] {
				members[i].id += "x"
			}
			ids[members[i].id] = true
		}
		got := assignTasks(members, n)
		seen := map[int32]string{}
		lo, hi := int(n), 0
		for _, mb := range members {
			ts := got[mb.id]
			lo, hi = min(lo, len(ts)), max(hi, len(ts))
			for _, p := range ts {
				if o, dup := seen[p]; dup {
					t.Fatalf("round %d: task %d on %s and %s", round, p, o, mb.id)
				}
				seen[p] = mb.id
			}
			kept := 0
			for _, p := range mb.owned {
				if slices.Contains(ts, p) {
					kept++
				}
			}
			if kept < min(len(mb.owned), len(ts)) {
				t.Fatalf("round %d: %s owned %v, got %v: kept %d of them", round, mb.id, mb.owned, ts, kept)
			}
		}
		if len(seen) != int(n) {
			t.Fatalf("round %d: %d of %d tasks assigned", round, len(seen), n)
		}
		if hi-lo > 1 {
			t.Fatalf("round %d: shares from %d to %d", round, lo, hi)
		}
		// Standbys: never on the active's instance, never two of a task
		// on one instance, as many as other instances allow.
		replicas := rng.IntN(3)
		standby := assignStandbys(members, got, n, replicas)
		instances := map[string]bool{}
		for _, mb := range members {
			instances[mb.instance()] = true
		}
		copies := map[int32][]string{}
		for _, mb := range members {
			for _, p := range standby[mb.id] {
				copies[p] = append(copies[p], mb.instance())
			}
		}
		for p := range n {
			on := append([]string{members[slices.IndexFunc(members, func(m taskMember) bool { return m.id == seen[p] })].instance()}, copies[p]...)
			if len(on) != len(slices.Compact(slices.Sorted(slices.Values(on)))) {
				t.Fatalf("round %d: task %d active and standby on instances %v", round, p, on)
			}
			if want := min(replicas, len(instances)-1); len(copies[p]) != want {
				t.Fatalf("round %d: task %d has %d standbys, want %d", round, p, len(copies[p]), want)
			}
		}
		// The same group again, owning what it was given: nothing moves.
		again := make([]taskMember, m)
		for i, mb := range members {
			again[i] = taskMember{id: mb.id, process: mb.process, owned: got[mb.id], state: mb.state, standby: standby[mb.id]}
		}
		if fmt.Sprint(assignTasks(again, n)) != fmt.Sprint(got) {
			t.Fatalf("round %d: an unchanged group moved tasks: %v then %v", round, got, assignTasks(again, n))
		}
		if s2 := assignStandbys(again, got, n, replicas); fmt.Sprint(s2) != fmt.Sprint(standby) {
			t.Fatalf("round %d: an unchanged group moved standbys: %v then %v", round, standby, s2)
		}
	}
}

// A member joining takes its share from the others; a member leaving
// leaves its tasks to the others; no other task moves.
func TestAssignTasksMovesOnlyWhatBalanceNeeds(t *testing.T) {
	two := assignTasks([]taskMember{{id: "a"}, {id: "b"}}, 6)
	if fmt.Sprint(two) != "map[a:[0 1 2] b:[3 4 5]]" {
		t.Fatalf("two members: %v", two)
	}
	three := assignTasks([]taskMember{{id: "a", owned: two["a"]}, {id: "b", owned: two["b"]}, {id: "c"}}, 6)
	if fmt.Sprint(three) != "map[a:[0 1] b:[3 4] c:[2 5]]" {
		t.Fatalf("a third member joins: %v", three)
	}
	left := assignTasks([]taskMember{{id: "a", owned: three["a"]}, {id: "c", owned: three["c"]}}, 6)
	if fmt.Sprint(left) != "map[a:[0 1 3] c:[2 4 5]]" {
		t.Fatalf("b leaves: %v", left)
	}
}

// A task nobody keeps goes, among the members with room, to the one whose
// instance's state of it is furthest along; a restarted instance (a new
// member, owning nothing) gets back the tasks whose state it kept.
func TestAssignTasksFollowsState(t *testing.T) {
	// b died; a keeps its three; c and d hold state of b's tasks 3 and 5,
	// d the newer copy of 3.
	got := assignTasks([]taskMember{
		{id: "a", owned: []int32{0, 1, 2}},
		{id: "c", state: map[int32]int64{3: 100, 5: 40}},
		{id: "d", state: map[int32]int64{3: 250}},
	}, 6)
	if fmt.Sprint(got) != "map[a:[0 1] c:[2 5] d:[3 4]]" {
		t.Fatalf("b's tasks by state: %v", got)
	}
	// Restart: "b2" is b back on its old state directory with tasks 3-5;
	// a took them over meanwhile but holds less of them.
	got = assignTasks([]taskMember{
		{id: "a", owned: []int32{0, 1, 2, 3, 4, 5}, state: map[int32]int64{0: 9, 1: 9, 2: 9, 3: 1, 4: 1, 5: 1}},
		{id: "b2", state: map[int32]int64{3: 70, 4: 80, 5: 90}},
	}, 6)
	if fmt.Sprint(got) != "map[a:[0 1 2] b2:[3 4 5]]" {
		t.Fatalf("restarted instance: %v", got)
	}
	// An instance owning every task gives up, to one that restarts, the
	// tasks whose state that one kept, not the first ones.
	got = assignTasks([]taskMember{
		{id: "a", owned: []int32{0, 1, 2, 3, 4, 5}, state: map[int32]int64{0: 9, 1: 9, 2: 9, 3: 9, 4: 9, 5: 9}},
		{id: "b2", state: map[int32]int64{0: 8, 2: 7, 4: 8}},
	}, 6)
	if fmt.Sprint(got) != "map[a:[1 3 5] b2:[0 2 4]]" {
		t.Fatalf("restarted instance, first tasks: %v", got)
	}
	// Without any state, the tasks fill the members in order.
	got = assignTasks([]taskMember{{id: "a"}, {id: "b"}}, 4)
	if fmt.Sprint(got) != "map[a:[0 1] b:[2 3]]" {
		t.Fatalf("no state: %v", got)
	}
}

// Member state in user data: what is encoded decodes the same; another
// client's user data, a truncated or padded one is an error.
func TestMemberStateEncoding(t *testing.T) {
	s := MemberState{Process: "proc-1", Offsets: map[int32]int64{0: 0, 3: 1 << 40, 7: 12, 4999: 5}, Standbys: 2, Standby: []int32{1, 4, 9}}
	b := encodeMemberState(s)
	got, err := decodeMemberState(b)
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", s) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, s)
	}
	sb := encodeStandbys(map[string][]int32{"b": {3, 1}, "a": {0}})
	if tps, err := decodeStandbys(sb); err != nil || fmt.Sprint(tps) != "[a-0 b-1 b-3]" {
		t.Fatalf("standbys decoded %v, %v", tps, err)
	}
	if _, err := decodeStandbys(sb[:len(sb)-1]); err == nil {
		t.Fatal("a cut standby assignment decoded")
	}
	for _, bad := range [][]byte{nil, {}, {2}, b[:len(b)-1], append(slices.Clone(b), 0), []byte("range")} {
		if _, err := decodeMemberState(bad); err == nil {
			t.Fatalf("decoding % x: no error", bad)
		}
	}
	// 5,000 tasks with large offsets stay small enough for a join.
	big := MemberState{Process: "p", Offsets: map[int32]int64{}}
	for p := range int32(5000) {
		big.Offsets[p] = 1 << 33
	}
	if n := len(encodeMemberState(big)); n > 40_000 {
		t.Fatalf("5,000 tasks encode to %d bytes", n)
	}
}
