package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-go/eddy/processor"
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
		members := make([]member, m)
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
		got := assignTasks(members, n, nil)
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
			on := append([]string{members[slices.IndexFunc(members, func(m member) bool { return m.id == seen[p] })].instance()}, copies[p]...)
			if len(on) != len(slices.Compact(slices.Sorted(slices.Values(on)))) {
				t.Fatalf("round %d: task %d active and standby on instances %v", round, p, on)
			}
			if want := min(replicas, len(instances)-1); len(copies[p]) != want {
				t.Fatalf("round %d: task %d has %d standbys, want %d", round, p, len(copies[p]), want)
			}
		}
		// The same group again, owning what it was given: nothing moves.
		again := make([]member, m)
		for i, mb := range members {
			again[i] = member{id: mb.id, process: mb.process, owned: got[mb.id], state: mb.state, standby: standby[mb.id]}
		}
		if fmt.Sprint(assignTasks(again, n, nil)) != fmt.Sprint(got) {
			t.Fatalf("round %d: an unchanged group moved tasks: %v then %v", round, got, assignTasks(again, n, nil))
		}
		if s2 := assignStandbys(again, got, n, replicas); fmt.Sprint(s2) != fmt.Sprint(standby) {
			t.Fatalf("round %d: an unchanged group moved standbys: %v then %v", round, standby, s2)
		}
	}
}

// The whole assignment with standbys and warm-ups over random groups:
// every task on exactly one active member; no task's copies (active,
// standbys, warm-ups) twice on one instance; a stateful task moves to
// another instance only when that instance is caught up on it (else it
// stays and a warm-up copy goes there, at most the maximum at once); an
// unchanged group moves nothing; and as warm-ups catch up, round after
// round, every held task moves and the shares end balanced.
func TestAssignGroupProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 1500 {
		n := int32(rng.IntN(30))
		groups := randomGroups(rng, n)
		procs := 1 + rng.IntN(4)
		o := options{standbys: rng.IntN(3), acceptableLag: int64(rng.IntN(3)) * 50, maxWarmups: rng.IntN(4)}
		// Each instance's state of each task, shared by its members.
		state := make([]map[int32]int64, procs)
		for i := range state {
			state[i] = map[int32]int64{}
			for p := range n {
				if rng.IntN(2) == 0 {
					state[i][p] = int64(rng.IntN(400))
				}
			}
		}
		// Each instance's zone (its client tag; "" none).
		zones := make([]string, procs)
		for i := range zones {
			zones[i] = []string{"", "a", "b", "c"}[rng.IntN(4)]
		}
		var members []member
		for i := range 1 + rng.IntN(7) {
			proc := rng.IntN(procs)
			m := member{id: fmt.Sprintf("m%02d", i), process: fmt.Sprintf("proc-%d", proc), state: state[proc]}
			if zones[proc] != "" {
				m.tags = map[string]string{"zone": zones[proc]}
			}
			members = append(members, m)
		}
		owned := map[int32]bool{}
		for p := range n {
			if rng.IntN(3) > 0 {
				i := rng.IntN(len(members))
				members[i].owned = append(members[i].owned, p)
				owned[p] = true
				// An owner's instance holds its task's state furthest along.
				if _, ok := members[i].state[p]; ok || rng.IntN(2) == 0 {
					members[i].state[p] = 1000
				}
			}
		}
		ga := assignGroup(members, n, groups, o)
		checkAssignment(t, round, members, n, o, ga)
		checkStandbyZones(t, round, members, n, o, ga)
		// Unchanged (each member owning what it was given): nothing moves.
		again := rejoined(members, ga)
		g2 := assignGroup(again, n, groups, o)
		if g2.followUp {
			t.Fatalf("round %d: an unchanged group asked for a follow-up rebalance: %+v\nfirst %+v\nmembers %+v\nagain %+v, opts %+v", round, g2, ga, members, again, o)
		}
		if g2.followUp = ga.followUp; fmt.Sprint(g2) != fmt.Sprint(ga) {
			t.Fatalf("round %d: an unchanged group changed its assignment:\n%+v\nthen\n%+v\nmembers %+v\nagain %+v\nopts %+v", round, ga, g2, members, again, o)
		}
		// Warm-ups catch up, one rebalance after another: everything held
		// moves, and the shares end within one of each other.
		cur, g := again, ga
		for step := 0; ; step++ {
			if step > int(n)+2 {
				t.Fatalf("round %d: warm-ups still pending after %d rebalances: %+v", round, step, g)
			}
			pending := false
			for id, ps := range g.warmup {
				i := slices.IndexFunc(cur, func(m member) bool { return m.id == id })
				for _, p := range ps {
					pending = true
					// A copy the instance follows catches up (every
					// member of the instance sees its state).
					if slices.ContainsFunc(cur, func(m member) bool {
						return m.instance() == cur[i].instance() && slices.Contains(g.standby[m.id], p)
					}) {
						cur[i].state[p] = 1000
					}
				}
			}
			if !pending {
				break
			}
			g = assignGroup(cur, n, groups, o)
			checkAssignment(t, round, cur, n, o, g)
			cur = rejoined(cur, g)
			g = assignGroup(cur, n, groups, o) // the follow-up
			checkAssignment(t, round, cur, n, o, g)
			cur = rejoined(cur, g)
		}
		lo, hi := int(n), 0
		for _, m := range cur {
			lo, hi = min(lo, len(g.active[m.id])), max(hi, len(g.active[m.id]))
		}
		if hi-lo > 1 {
			t.Fatalf("round %d: after the warm-ups, shares from %d to %d: %v", round, lo, hi, g.active)
		}
	}
}

// checkStandbyZones checks rack-aware standbys: with one standby, a task's
// standby is in another zone than its active whenever an instance of
// another zone is in the group.
func checkStandbyZones(t *testing.T, round int, members []member, n int32, o options, ga groupAssignment) {
	t.Helper()
	if o.standbys != 1 {
		return
	}
	zoneOf := func(id string) string {
		i := slices.IndexFunc(members, func(m member) bool { return m.id == id })
		return members[i].tags["zone"]
	}
	for p := range n {
		var active, standby string
		for id, ps := range ga.active {
			if slices.Contains(ps, p) {
				active = id
			}
		}
		for id, ps := range ga.standby {
			if slices.Contains(ps, p) && !slices.Contains(ga.warmup[id], p) {
				standby = id
			}
		}
		if active == "" || standby == "" {
			continue
		}
		i := slices.IndexFunc(members, func(m member) bool { return m.id == active })
		other := slices.ContainsFunc(members, func(m member) bool {
			return m.instance() != members[i].instance() && m.tags["zone"] != "" && m.tags["zone"] != zoneOf(active)
		})
		if other && (zoneOf(standby) == "" || zoneOf(standby) == zoneOf(active)) {
			t.Fatalf("round %d: task %d active in zone %q, its standby in zone %q, though the group has another zone: %+v\nmembers %+v", round, p, zoneOf(active), zoneOf(standby), ga, members)
		}
	}
}

// Scaling out with state (KIP-441): a joining instance with no state
// gets no stateful task at once; the tasks balance would give it stay
// where they are while warm-ups (at most two) catch up there; each moves
// once its warm-up is within the acceptable lag (the move takes a
// follow-up rebalance), and the next warm-up starts.
func TestAssignGroupWarmsUpBeforeMoving(t *testing.T) {
	o := options{acceptableLag: 100, maxWarmups: 2}
	full := map[int32]int64{0: 5000, 1: 5000, 2: 5000, 3: 5000, 4: 5000, 5: 5000}
	a := member{id: "a", process: "A", owned: []int32{0, 1, 2, 3, 4, 5}, state: full}
	b := member{id: "b", process: "B", state: map[int32]int64{}}
	g := assignGroup([]member{a, b}, 6, nil, o)
	if fmt.Sprint(g.active, g.standby, g.warmup, g.followUp) != "map[a:[0 1 2 3 4 5]] map[b:[3 4]] map[b:[3 4 5]] false" {
		t.Fatalf("b joins: active %v, followed %v, held %v, follow-up %v", g.active, g.standby, g.warmup, g.followUp)
	}
	// The same again while the warm-ups read: nothing changes.
	members := rejoined([]member{a, b}, g)
	members[1].state[3], members[1].state[4] = 2000, 4000
	if g2 := assignGroup(members, 6, nil, o); fmt.Sprint(g2) != fmt.Sprint(g) {
		t.Fatalf("warm-ups behind: %+v, want %+v", g2, g)
	}
	// Task 4's warm-up is caught up (within 100 records): it moves, in
	// two steps; 3 and 5 stay, held for b.
	members[1].state[4] = 4950
	g = assignGroup(members, 6, nil, o)
	if fmt.Sprint(g.active, g.warmup, g.followUp) != "map[a:[0 1 2 3 5] b:[4]] map[b:[3 5]] true" {
		t.Fatalf("one warm-up caught up: active %v, held %v, follow-up %v", g.active, g.warmup, g.followUp)
	}
	if !slices.Contains(g.standby["b"], 5) {
		t.Fatalf("the next warm-up (5) does not start: b follows %v", g.standby["b"])
	}
	// Both caught up: balanced, nothing held.
	members = rejoined(members, g)
	members[1].state[3], members[1].state[5] = 5000, 5000
	g = assignGroup(members, 6, nil, o)
	if fmt.Sprint(g.active, g.warmup) != "map[a:[0 1 2] b:[3 4 5]] map[]" {
		t.Fatalf("all caught up: active %v, held %v", g.active, g.warmup)
	}
	// Without warm-ups allowed, the tasks move at once.
	g = assignGroup([]member{a, b}, 6, nil, options{acceptableLag: 100})
	if fmt.Sprint(g.active, g.followUp) != "map[a:[0 1 2] b:[3 4 5]] true" {
		t.Fatalf("no warm-ups: active %v, follow-up %v", g.active, g.followUp)
	}
}

// rejoined returns members as they join after getting ga: owning its
// active tasks (the moves' second step done), following its standbys.
func rejoined(members []member, ga groupAssignment) []member {
	out := make([]member, len(members))
	for i, m := range members {
		out[i] = member{id: m.id, process: m.process, owned: ga.active[m.id], standby: ga.standby[m.id], warmup: ga.warmup[m.id], state: m.state, tags: m.tags}
	}
	return out
}

func checkAssignment(t *testing.T, round int, members []member, n int32, o options, ga groupAssignment) {
	t.Helper()
	byID := map[string]member{}
	owner := map[int32]member{}
	furthest := map[int32]int64{}
	for _, m := range members {
		byID[m.id] = m
		for _, p := range m.owned {
			owner[p] = m
		}
		for p, off := range m.state {
			furthest[p] = max(furthest[p], off)
		}
	}
	active := map[int32]string{}
	for id, ps := range ga.active {
		for _, p := range ps {
			if o, dup := active[p]; dup {
				t.Fatalf("round %d: task %d active on %s and %s", round, p, o, id)
			}
			active[p] = id
			c, ok := owner[p]
			to := byID[id]
			if !ok || c.id == id || c.instance() == to.instance() {
				continue
			}
			if _, stateful := c.state[p]; !stateful || o.maxWarmups == 0 {
				continue
			}
			if off, ok := to.state[p]; !ok || furthest[p]-off > o.acceptableLag {
				t.Fatalf("round %d: stateful task %d moved from %s to %s, whose state is %d behind (acceptable %d)", round, p, c.id, id, furthest[p]-off, o.acceptableLag)
			}
		}
	}
	if len(active) != int(n) {
		t.Fatalf("round %d: %d of %d tasks active", round, len(active), n)
	}
	instances := map[string]bool{}
	for _, m := range members {
		instances[m.instance()] = true
	}
	copies := map[int32][]string{}
	for id, ps := range ga.standby {
		for _, p := range ps {
			copies[p] = append(copies[p], byID[id].instance())
		}
	}
	warm := 0 // held tasks followed by the member they are held for
	for id, ps := range ga.warmup {
		for _, p := range ps {
			if byID[id].instance() == byID[active[p]].instance() {
				t.Fatalf("round %d: task %d held on %s for %s, of the same instance", round, p, active[p], id)
			}
			if slices.Contains(ga.standby[id], p) {
				warm++
			}
		}
	}
	for p := range n {
		on := append([]string{byID[active[p]].instance()}, copies[p]...)
		if len(on) != len(slices.Compact(slices.Sorted(slices.Values(on)))) {
			t.Fatalf("round %d: task %d has two copies on one instance: %v", round, p, on)
		}
		if want := min(o.standbys, len(instances)-1); len(copies[p]) < want {
			t.Fatalf("round %d: task %d has %d standbys, want %d", round, p, len(copies[p]), want)
		}
	}
	if o.standbys == 0 && warm > o.maxWarmups { // (standbys serve as warm-ups beyond the maximum)
		t.Fatalf("round %d: %d warm-ups, at most %d allowed", round, warm, o.maxWarmups)
	}
}

// A member joining takes its share from the others; a member leaving
// leaves its tasks to the others; no other task moves.
func TestAssignTasksMovesOnlyWhatBalanceNeeds(t *testing.T) {
	two := assignTasks([]member{{id: "a"}, {id: "b"}}, 6, nil)
	if fmt.Sprint(two) != "map[a:[0 1 2] b:[3 4 5]]" {
		t.Fatalf("two members: %v", two)
	}
	three := assignTasks([]member{{id: "a", owned: two["a"]}, {id: "b", owned: two["b"]}, {id: "c"}}, 6, nil)
	if fmt.Sprint(three) != "map[a:[0 1] b:[3 4] c:[2 5]]" {
		t.Fatalf("a third member joins: %v", three)
	}
	left := assignTasks([]member{{id: "a", owned: three["a"]}, {id: "c", owned: three["c"]}}, 6, nil)
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
	got := assignTasks([]member{
		{id: "a", owned: []int32{0, 1, 2}},
		{id: "c", state: map[int32]int64{3: 100, 5: 40}},
		{id: "d", state: map[int32]int64{3: 250}},
	}, 6, nil)
	if fmt.Sprint(got) != "map[a:[0 1] c:[2 5] d:[3 4]]" {
		t.Fatalf("b's tasks by state: %v", got)
	}
	// Restart: "b2" is b back on its old state directory with tasks 3-5;
	// a took them over meanwhile but holds less of them.
	got = assignTasks([]member{
		{id: "a", owned: []int32{0, 1, 2, 3, 4, 5}, state: map[int32]int64{0: 9, 1: 9, 2: 9, 3: 1, 4: 1, 5: 1}},
		{id: "b2", state: map[int32]int64{3: 70, 4: 80, 5: 90}},
	}, 6, nil)
	if fmt.Sprint(got) != "map[a:[0 1 2] b2:[3 4 5]]" {
		t.Fatalf("restarted instance: %v", got)
	}
	// An instance owning every task gives up, to one that restarts, the
	// tasks whose state that one kept, not the first ones.
	got = assignTasks([]member{
		{id: "a", owned: []int32{0, 1, 2, 3, 4, 5}, state: map[int32]int64{0: 9, 1: 9, 2: 9, 3: 9, 4: 9, 5: 9}},
		{id: "b2", state: map[int32]int64{0: 8, 2: 7, 4: 8}},
	}, 6, nil)
	if fmt.Sprint(got) != "map[a:[1 3 5] b2:[0 2 4]]" {
		t.Fatalf("restarted instance, first tasks: %v", got)
	}
	// Without any state, the tasks fill the members in order.
	got = assignTasks([]member{{id: "a"}, {id: "b"}}, 4, nil)
	if fmt.Sprint(got) != "map[a:[0 1] b:[2 3]]" {
		t.Fatalf("no state: %v", got)
	}
}

// randomGroups splits n tasks into up to four sub-topologies (nil: one).
func randomGroups(rng *rand.Rand, n int32) []int32 {
	if n == 0 || rng.IntN(4) == 0 {
		return nil
	}
	groups := []int32{0}
	for p := int32(1); p < n; p++ {
		if len(groups) < 4 && rng.IntN(int(n)) < 3 {
			groups = append(groups, p)
		}
	}
	return groups
}

// With several sub-topologies: every task on one member, the members'
// counts within one of each other both in all and within each
// sub-topology, a member keeps what it owns of a sub-topology up to its
// quota there, and an unchanged group moves nothing.
func TestAssignTasksBalancesEachSubtopology(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 3000 {
		n := int32(rng.IntN(40))
		groups := randomGroups(rng, n)
		members := make([]member, 1+rng.IntN(9))
		owner := map[int32]bool{}
		for i := range members {
			members[i].id = fmt.Sprintf("m%02d", i)
			if rng.IntN(2) == 0 {
				members[i].state = map[int32]int64{}
				for p := range n {
					if rng.IntN(3) == 0 {
						members[i].state[p] = int64(rng.IntN(4))
					}
				}
			}
			for p := range n {
				if !owner[p] && rng.IntN(len(members)+1) == 0 {
					owner[p] = true
					members[i].owned = append(members[i].owned, p)
				}
			}
		}
		got := assignTasks(members, n, groups)
		bounds := append(slices.Clone(groups), n)
		if len(groups) == 0 {
			bounds = []int32{0, n}
		}
		seen := map[int32]bool{}
		lo, hi := int(n), 0
		for _, mb := range members {
			lo, hi = min(lo, len(got[mb.id])), max(hi, len(got[mb.id]))
			for _, p := range got[mb.id] {
				if seen[p] {
					t.Fatalf("round %d: task %d twice: %v", round, p, got)
				}
				seen[p] = true
			}
		}
		if len(seen) != int(n) || hi-lo > 1 {
			t.Fatalf("round %d: %d of %d tasks assigned, shares %d to %d: %v", round, len(seen), n, lo, hi, got)
		}
		for g := 0; g+1 < len(bounds); g++ {
			in := func(p int32) bool { return p >= bounds[g] && p < bounds[g+1] }
			glo, ghi := int(n), 0
			for _, mb := range members {
				c := 0
				for _, p := range got[mb.id] {
					if in(p) {
						c++
					}
				}
				glo, ghi = min(glo, c), max(ghi, c)
				owned, kept := 0, 0
				for _, p := range mb.owned {
					if in(p) {
						owned++
						if slices.Contains(got[mb.id], p) {
							kept++
						}
					}
				}
				if kept < min(owned, c) {
					t.Fatalf("round %d: %s owned %d of sub-topology %d and got %d of it, but kept only %d: owned %v, got %v", round, mb.id, owned, g, c, kept, mb.owned, got[mb.id])
				}
			}
			if ghi-glo > 1 {
				t.Fatalf("round %d: sub-topology %d (tasks %d…%d) spread from %d to %d a member: %v", round, g, bounds[g], bounds[g+1]-1, glo, ghi, got)
			}
		}
		again := make([]member, len(members))
		for i, mb := range members {
			again[i] = member{id: mb.id, owned: got[mb.id], state: mb.state}
		}
		if g2 := assignTasks(again, n, groups); fmt.Sprint(g2) != fmt.Sprint(got) {
			t.Fatalf("round %d: an unchanged group moved tasks: %v then %v", round, got, g2)
		}
	}
}

// More members than partitions: with two sub-topologies over four
// partitions (eight tasks), eight members get one task each and four get
// one of each sub-topology, as Kafka Streams places them; the old unit of
// a partition number over every sub-topology left four of eight idle.
func TestAssignSpreadsSubtopologiesPastThePartitionCount(t *testing.T) {
	var tasks []processor.TaskID
	for s := range 2 {
		for p := range int32(4) {
			tasks = append(tasks, processor.TaskID{Subtopology: s, Partition: p})
		}
	}
	for _, tc := range []struct {
		members int
		want    string
	}{
		{8, "map[m0:[0_0] m1:[0_1] m2:[0_2] m3:[0_3] m4:[1_0] m5:[1_1] m6:[1_2] m7:[1_3]]"},
		{4, "map[m0:[0_0 1_0] m1:[0_1 1_1] m2:[0_2 1_2] m3:[0_3 1_3]]"},
	} {
		members := make([]Member, tc.members)
		for i := range members {
			members[i] = Member{ID: fmt.Sprintf("m%d", i), Process: fmt.Sprintf("p%d", i)}
		}
		a := Assign(members, tasks, Options{})
		if got := fmt.Sprint(a.Active); got != tc.want {
			t.Errorf("%d members: %s, want %s", tc.members, got, tc.want)
		}
		// Rejoining with what they got: nothing moves.
		for i := range members {
			members[i].Owned = a.Active[members[i].ID]
		}
		if again := Assign(members, tasks, Options{}); fmt.Sprint(again.Active) != fmt.Sprint(a.Active) || again.FollowUp {
			t.Errorf("%d members rejoining: %v (follow-up %v), want %v", tc.members, again.Active, again.FollowUp, a.Active)
		}
	}
}

// A sub-topology spreads over instances before their threads: four
// instances of two threads each, two sub-topologies over four partitions,
// give every thread one task and every instance one task of each
// sub-topology.
func TestAssignSpreadsSubtopologiesOverInstancesFirst(t *testing.T) {
	var tasks []processor.TaskID
	for s := range 2 {
		for p := range int32(4) {
			tasks = append(tasks, processor.TaskID{Subtopology: s, Partition: p})
		}
	}
	var members []Member
	for i := range 4 {
		for th := range 2 {
			// Member ids ordering an instance's threads together: by id
			// alone, the first four members are two instances' threads.
			members = append(members, Member{ID: fmt.Sprintf("m%d%d", i, th), Process: fmt.Sprintf("p%d", i)})
		}
	}
	a := Assign(members, tasks, Options{})
	perInstance := map[string][2]int{}
	for _, m := range members {
		if len(a.Active[m.ID]) != 1 {
			t.Fatalf("%s (of %s) runs %v, want one task: %v", m.ID, m.Process, a.Active[m.ID], a.Active)
		}
		c := perInstance[m.Process]
		c[a.Active[m.ID][0].Subtopology]++
		perInstance[m.Process] = c
	}
	for p, c := range perInstance {
		if c != [2]int{1, 1} {
			t.Errorf("instance %s runs %d tasks of sub-topology 0 and %d of 1, want one of each: %v", p, c[0], c[1], a.Active)
		}
	}
}
