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
		procs := 1 + rng.IntN(4)
		o := groupOptions{standbys: rng.IntN(3), acceptableLag: int64(rng.IntN(3)) * 50, maxWarmups: rng.IntN(4)}
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
		var members []taskMember
		for i := range 1 + rng.IntN(7) {
			proc := rng.IntN(procs)
			m := taskMember{id: fmt.Sprintf("m%02d", i), process: fmt.Sprintf("proc-%d", proc), state: state[proc]}
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
		ga := assignGroup(members, n, o)
		checkAssignment(t, round, members, n, o, ga)
		checkStandbyZones(t, round, members, n, o, ga)
		// Unchanged (each member owning what it was given): nothing moves.
		again := rejoined(members, ga)
		g2 := assignGroup(again, n, o)
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
				i := slices.IndexFunc(cur, func(m taskMember) bool { return m.id == id })
				for _, p := range ps {
					pending = true
					// A copy the instance follows catches up (every
					// member of the instance sees its state).
					if slices.ContainsFunc(cur, func(m taskMember) bool {
						return m.instance() == cur[i].instance() && slices.Contains(g.standby[m.id], p)
					}) {
						cur[i].state[p] = 1000
					}
				}
			}
			if !pending {
				break
			}
			g = assignGroup(cur, n, o)
			checkAssignment(t, round, cur, n, o, g)
			cur = rejoined(cur, g)
			g = assignGroup(cur, n, o) // the follow-up
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
func checkStandbyZones(t *testing.T, round int, members []taskMember, n int32, o groupOptions, ga groupAssignment) {
	t.Helper()
	if o.standbys != 1 {
		return
	}
	zoneOf := func(id string) string {
		i := slices.IndexFunc(members, func(m taskMember) bool { return m.id == id })
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
		i := slices.IndexFunc(members, func(m taskMember) bool { return m.id == active })
		other := slices.ContainsFunc(members, func(m taskMember) bool {
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
	o := groupOptions{acceptableLag: 100, maxWarmups: 2}
	full := map[int32]int64{0: 5000, 1: 5000, 2: 5000, 3: 5000, 4: 5000, 5: 5000}
	a := taskMember{id: "a", process: "A", owned: []int32{0, 1, 2, 3, 4, 5}, state: full}
	b := taskMember{id: "b", process: "B", state: map[int32]int64{}}
	g := assignGroup([]taskMember{a, b}, 6, o)
	if fmt.Sprint(g.active, g.standby, g.warmup, g.followUp) != "map[a:[0 1 2 3 4 5]] map[b:[3 4]] map[b:[3 4 5]] false" {
		t.Fatalf("b joins: active %v, followed %v, held %v, follow-up %v", g.active, g.standby, g.warmup, g.followUp)
	}
	// The same again while the warm-ups read: nothing changes.
	members := rejoined([]taskMember{a, b}, g)
	members[1].state[3], members[1].state[4] = 2000, 4000
	if g2 := assignGroup(members, 6, o); fmt.Sprint(g2) != fmt.Sprint(g) {
		t.Fatalf("warm-ups behind: %+v, want %+v", g2, g)
	}
	// Task 4's warm-up is caught up (within 100 records): it moves, in
	// two steps; 3 and 5 stay, held for b.
	members[1].state[4] = 4950
	g = assignGroup(members, 6, o)
	if fmt.Sprint(g.active, g.warmup, g.followUp) != "map[a:[0 1 2 3 5] b:[4]] map[b:[3 5]] true" {
		t.Fatalf("one warm-up caught up: active %v, held %v, follow-up %v", g.active, g.warmup, g.followUp)
	}
	if !slices.Contains(g.standby["b"], 5) {
		t.Fatalf("the next warm-up (5) does not start: b follows %v", g.standby["b"])
	}
	// Both caught up: balanced, nothing held.
	members = rejoined(members, g)
	members[1].state[3], members[1].state[5] = 5000, 5000
	g = assignGroup(members, 6, o)
	if fmt.Sprint(g.active, g.warmup) != "map[a:[0 1 2] b:[3 4 5]] map[]" {
		t.Fatalf("all caught up: active %v, held %v", g.active, g.warmup)
	}
	// Without warm-ups allowed, the tasks move at once.
	g = assignGroup([]taskMember{a, b}, 6, groupOptions{acceptableLag: 100})
	if fmt.Sprint(g.active, g.followUp) != "map[a:[0 1 2] b:[3 4 5]] true" {
		t.Fatalf("no warm-ups: active %v, follow-up %v", g.active, g.followUp)
	}
}

// rejoined returns members as they join after getting ga: owning its
// active tasks (the moves' second step done), following its standbys.
func rejoined(members []taskMember, ga groupAssignment) []taskMember {
	out := make([]taskMember, len(members))
	for i, m := range members {
		out[i] = taskMember{id: m.id, process: m.process, owned: ga.active[m.id], standby: ga.standby[m.id], warmup: ga.warmup[m.id], state: m.state, tags: m.tags}
	}
	return out
}

func checkAssignment(t *testing.T, round int, members []taskMember, n int32, o groupOptions, ga groupAssignment) {
	t.Helper()
	byID := map[string]taskMember{}
	owner := map[int32]taskMember{}
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
	s := MemberState{Process: "proc-1", Offsets: map[int32]int64{0: 0, 3: 1 << 40, 7: 12, 4999: 5}, Standbys: 2, Standby: []int32{1, 4, 9}, Warmup: []int32{4},
		AcceptableRecoveryLag: 10_000, MaxWarmups: 2, Tags: map[string]string{"zone": "eu-west-1a", "cluster": "k1"}}
	b := encodeMemberState(s)
	got, err := decodeMemberState(b)
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", s) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, s)
	}
	// A member of the version before tags (an instance not upgraded yet)
	// reads as one without tags.
	s.Tags = nil
	v2 := encodeMemberState(s)
	v2 = append([]byte{userDataVersion}, v2[1:len(v2)-1]...) // no tag count
	if got, err := decodeMemberState(v2); err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", s) {
		t.Fatalf("version 2 decoded %+v, %v; want %+v", got, err, s)
	}
	sb := encodeMemberAssignment(map[string][]int32{"b": {3, 1}, "a": {0}}, map[string][]int32{"b": {3}}, true)
	if got, err := decodeMemberAssignment(sb); err != nil || fmt.Sprint(got.standby, got.warmup, got.followUp) != "[a-0 b-1 b-3] [b-3] true" {
		t.Fatalf("assignment decoded %+v, %v", got, err)
	}
	if got, err := decodeMemberAssignment(nil); err != nil || got.standby != nil || got.warmup != nil || got.followUp {
		t.Fatalf("no user data decoded as %+v, %v", got, err)
	}
	for _, bad := range [][]byte{sb[:len(sb)-1], append(slices.Clone(sb), 0), {userDataVersion, 2, 0, 0}, {1, 0, 0, 0}} {
		if _, err := decodeMemberAssignment(bad); err == nil {
			t.Fatalf("assignment % x decoded", bad)
		}
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

// BenchmarkAssignGroup assigns 5,000 tasks with one standby each over 200
// instances (one thread each) as a rebalance after one instance died and
// a new one joined finds them: each owning its share, reporting the state
// of its tasks and standbys. It reports the largest member's join
// metadata (bytes/member) and the assignment's user data (bytes/assignment).
func BenchmarkAssignGroup(b *testing.B) {
	const n, instances = 5000, 200
	members := make([]taskMember, instances)
	for i := range members {
		members[i] = taskMember{id: fmt.Sprintf("member-%03d-%s", i, "0123456789abcdef0123456789abcdef"), process: fmt.Sprintf("process-%03d", i), state: map[int32]int64{}}
	}
	for p := range int32(n) {
		a, s := int(p)%instances, (int(p)+1)%instances
		members[a].owned = append(members[a].owned, p)
		members[a].state[p] = 1 << 30
		members[s].standby = append(members[s].standby, p)
		members[s].state[p] = 1<<30 - 500
	}
	// Instance 0 died (its members gone); a new one, with no state, joins.
	members[0] = taskMember{id: "member-new", process: "process-new", state: map[int32]int64{}}
	o := groupOptions{standbys: 1, acceptableLag: 10_000, maxWarmups: 2}
	biggest := 0
	for _, m := range members {
		s := MemberState{Process: m.process, Offsets: m.state, Standbys: 1, Standby: m.standby, AcceptableRecoveryLag: 10_000, MaxWarmups: 2}
		biggest = max(biggest, len(encodeMemberState(s)))
	}
	var g groupAssignment
	b.ResetTimer()
	for range b.N {
		g = assignGroup(members, n, o)
	}
	b.StopTimer()
	largest := 0
	for _, m := range members {
		sb := map[string][]int32{"orders": g.standby[m.id], "orders-repartition": g.standby[m.id]}
		largest = max(largest, len(encodeMemberAssignment(sb, map[string][]int32{"orders": g.warmup[m.id]}, g.followUp)))
	}
	b.ReportMetric(float64(biggest), "bytes/member")
	b.ReportMetric(float64(largest), "bytes/assignment")
}
