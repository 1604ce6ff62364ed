package kclient

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The task assignor over random memberships and ownerships: every task
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
		// The same group again, owning what it was given: nothing moves.
		again := make([]taskMember, m)
		for i, mb := range members {
			again[i] = taskMember{id: mb.id, owned: got[mb.id]}
		}
		if fmt.Sprint(assignTasks(again, n)) != fmt.Sprint(got) {
			t.Fatalf("round %d: an unchanged group moved tasks: %v then %v", round, got, assignTasks(again, n))
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
