package assign

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
)

// member is one member as the algorithm sees it: tasks are dense indices
// (0…n-1) into the sorted task list.
type member struct {
	id      string
	process string  // its instance (MemberState.Process; "": its own)
	owned   []int32 // tasks it owns now (its claim of the newest generation)
	standby []int32 // its standby tasks now (warm-ups included)
	warmup  []int32 // its warm-ups now: tasks it is to get once caught up
	// state: how far its instance's local state of each task has read the
	// task's changelogs (MemberState.Offsets; nil: none known).
	state map[int32]int64
	// tags: its instance's client tags (MemberState.Tags).
	tags map[string]string
}

// instance returns the member's instance: its process, or itself.
func (m member) instance() string {
	if m.process != "" {
		return m.process
	}
	return "member " + m.id
}

// options are Options, as the algorithm reads them.
type options struct {
	standbys      int
	acceptableLag int64
	maxWarmups    int
}

// groupAssignment is the assignor's decision, each part by member id with
// the member's tasks in order: its active tasks; the tasks it follows
// (standbys, and warm-ups); the tasks held for it (warmup: tasks it is to
// get once caught up, which it claims at its next join; it follows those it
// has a warm-up or standby copy of); and followUp, true when a task moves
// from one member to another, which takes two rebalances (the old owner
// revokes it, the next one gives it to the new).
type groupAssignment struct {
	active, standby, warmup map[string][]int32
	followUp                bool
}

// assignGroup assigns tasks 0…n-1 to members as Kafka Streams' assignor
// does with warm-ups (KIP-441). The target is the balanced, sticky,
// state-aware assignment (assignTasks) of what the members own, a task
// held for a member counting as that member's (its claim, MemberState's
// Warmup): so the target stays put while warm-ups catch up. A stateful
// task the target moves to an instance that holds its state too far
// behind stays with its owner (holdForWarmup) while a warm-up copy
// catches up there (assignWarmups, at most o.maxWarmups at once);
// standbys as assignStandbys places them.
func assignGroup(members []member, n int32, groups []int32, o options) groupAssignment {
	target := assignTasks(withClaims(members, n), n, groups)
	active, held := target, map[int32]string(nil)
	if o.maxWarmups > 0 {
		active, held = holdForWarmup(members, target, n, o.acceptableLag)
	}
	standby := assignStandbys(members, active, n, o.standbys)
	followed, warmup := assignWarmups(members, held, standby, o.maxWarmups)
	for id, ps := range followed {
		standby[id] = slices.Compact(slices.Sorted(slices.Values(append(standby[id], ps...))))
	}
	owner := map[int32]string{}
	for _, m := range members {
		for _, p := range m.owned {
			owner[p] = m.id
		}
	}
	followUp := false
	for id, ps := range active {
		for _, p := range ps {
			if o, ok := owner[p]; ok && o != id {
				followUp = true
			}
		}
	}
	return groupAssignment{active: active, standby: standby, warmup: warmup, followUp: followUp}
}

// withClaims returns members as the target assignment sees them: a task
// (0…n-1) a member claims (held for it at the last rebalance) is its own,
// not its owner's, unless an owner is of the claimant's instance. Of two
// claimants of a task, the first by id has it.
func withClaims(members []member, n int32) []member {
	claimant := map[int32]int{} // task → its claimant's index
	for i, m := range members {
		for _, p := range m.warmup {
			if c, ok := claimant[p]; p < n && (!ok || m.id < members[c].id) {
				claimant[p] = i
			}
		}
	}
	if len(claimant) == 0 {
		return members
	}
	ownedOn := map[int32][]string{} // task → the instances of its owners
	for _, m := range members {
		for _, p := range m.owned {
			ownedOn[p] = append(ownedOn[p], m.instance())
		}
	}
	out := make([]member, len(members))
	for i, m := range members {
		out[i] = m
		out[i].owned = slices.Clone(m.owned)
	}
	for p, c := range claimant {
		if slices.Contains(ownedOn[p], members[c].instance()) {
			continue
		}
		for i := range out {
			out[i].owned = slices.DeleteFunc(out[i].owned, func(q int32) bool { return q == p })
		}
		out[c].owned = append(out[c].owned, p)
	}
	for i := range out {
		slices.Sort(out[i].owned)
	}
	return out
}

// holdForWarmup keeps with its owner each task target would move to a
// member of another instance whose state of the task is more than lag
// changelog records behind the furthest a member reports (its owner's, as
// a rule). Only stateful tasks are held: those whose owner reports state
// of them. It returns the assignment with the held tasks back with their
// owners, and for each held task the member it is held for.
func holdForWarmup(members []member, target map[string][]int32, n int32, lag int64) (map[string][]int32, map[int32]string) {
	byID := make(map[string]member, len(members))
	owner := map[int32]member{}
	furthest := map[int32]int64{}
	for _, m := range members {
		byID[m.id] = m
		for _, p := range m.owned {
			owner[p] = m
		}
		for p, off := range m.state {
			if cur, ok := furthest[p]; !ok || off > cur {
				furthest[p] = off
			}
		}
	}
	active := make(map[string][]int32, len(target))
	held := map[int32]string{}
	for id, ps := range target {
		t := byID[id]
		for _, p := range ps {
			c, owned := owner[p]
			_, stateful := c.state[p]
			off, has := t.state[p]
			if !owned || c.id == id || c.instance() == t.instance() || !stateful || has && furthest[p]-off <= lag {
				active[id] = append(active[id], p)
				continue
			}
			active[c.id] = append(active[c.id], p)
			held[p] = id
		}
	}
	for id := range active {
		slices.Sort(active[id])
	}
	return active, held
}

// assignWarmups decides which held tasks (held: the member each is held
// for) get a copy on their member's instance to catch up with: a task the
// instance already follows as a standby needs none (that standby's member
// follows it), the others at most max at once — those the member follows
// already (last round's warm-ups) first, then those of which its instance
// holds the most state, then in order. It returns the warm-up copies to
// follow (besides the standbys), and every held task as the claim of the
// member it is held for.
func assignWarmups(members []member, held map[int32]string, standby map[string][]int32, max int) (followed, claims map[string][]int32) {
	followed, claims = map[string][]int32{}, map[string][]int32{}
	if len(held) == 0 {
		return followed, claims
	}
	byID := make(map[string]member, len(members))
	for _, m := range members {
		byID[m.id] = m
	}
	tasks := slices.Sorted(maps.Keys(held))
	slices.SortStableFunc(tasks, func(a, b int32) int {
		ma, mb := byID[held[a]], byID[held[b]]
		if ha, hb := slices.Contains(ma.standby, a), slices.Contains(mb.standby, b); ha != hb {
			if ha {
				return -1
			}
			return 1
		}
		return cmp.Compare(mb.state[b], ma.state[a])
	})
	placed := 0
	for _, p := range tasks {
		t := byID[held[p]]
		claims[t.id] = append(claims[t.id], p)
		covered := slices.ContainsFunc(members, func(m member) bool {
			return m.instance() == t.instance() && slices.Contains(standby[m.id], p)
		})
		if !covered && placed < max {
			followed[t.id] = append(followed[t.id], p)
			placed++
		}
	}
	for id := range claims {
		slices.Sort(claims[id])
	}
	for id := range followed {
		slices.Sort(followed[id])
	}
	return followed, claims
}

// assignStandbys places replicas standby copies of each task (0…n-1):
// never on the instance of its active (assigned) nor twice on one
// instance. A copy goes to the member whose instance spreads the task
// over the most client tags (a tag counts when the instance's value of it
// is one that neither the active's instance nor the task's copies placed
// so far have: Kafka Streams' rack-aware standbys, KIP-708); then a member
// keeps a standby it has; then to the member whose instance holds the
// task's state furthest along, then to the member with the fewest tasks
// (active and standby), then by id. A task with fewer other instances
// than replicas gets fewer copies. The result is by member id, each
// member's standbys in order.
func assignStandbys(members []member, assigned map[string][]int32, n int32, replicas int) map[string][]int32 {
	out := map[string][]int32{}
	if replicas <= 0 || len(members) == 0 {
		return out
	}
	// Members by index: their instances (numbered), loads, and, for the
	// task at hand, their state of it and whether they follow it (filled
	// from the task's holders only, and cleared after it).
	inst := make([]int, len(members))
	instances := map[string]int{}
	load := make([]int, len(members))
	tagged := false
	activeOn := make([]int, n) // the member running each task
	for i := range activeOn {
		activeOn[i] = -1
	}
	type holder struct {
		member int
		off    int64
		state  bool
	}
	holders := make([][]holder, n)
	for i, m := range members {
		in, ok := instances[m.instance()]
		if !ok {
			in = len(instances)
			instances[m.instance()] = in
		}
		inst[i] = in
		load[i] = len(assigned[m.id])
		tagged = tagged || len(m.tags) > 0
		for _, p := range assigned[m.id] {
			activeOn[p] = i
		}
		for p, off := range m.state {
			if p >= 0 && p < n {
				holders[p] = append(holders[p], holder{member: i, off: off, state: true})
			}
		}
		for _, p := range m.standby {
			if p >= 0 && p < n {
				holders[p] = append(holders[p], holder{member: i})
			}
		}
	}
	off := make([]int64, len(members))
	hasState := make([]bool, len(members))
	follows := make([]bool, len(members))
	used := make([]int32, len(instances)) // the task (+1) an instance has a copy of
	for p := range n {
		for _, h := range holders[p] {
			if h.state {
				off[h.member], hasState[h.member] = h.off, true
			} else {
				follows[h.member] = true
			}
		}
		// better reports whether member i is a better home than j for a
		// standby copy of p, their tags aside.
		better := func(i, j int) bool {
			if follows[i] != follows[j] {
				return follows[i]
			}
			if hasState[i] != hasState[j] {
				return hasState[i]
			}
			if off[i] != off[j] {
				return off[i] > off[j]
			}
			if load[i] != load[j] {
				return load[i] < load[j]
			}
			return members[i].id < members[j].id
		}
		var spread tagSpread
		if a := activeOn[p]; a >= 0 {
			used[inst[a]] = p + 1
			spread.add(members[a].tags)
		}
		for range replicas {
			best, bestSpread := -1, 0
			for i, m := range members {
				if used[inst[i]] == p+1 {
					continue
				}
				sp := 0
				if tagged {
					sp = spread.of(m.tags)
				}
				if best < 0 || sp > bestSpread || (sp == bestSpread && better(i, best)) {
					best, bestSpread = i, sp
				}
			}
			if best < 0 {
				break // no other instance left
			}
			m := members[best]
			out[m.id] = append(out[m.id], p)
			load[best]++
			used[inst[best]] = p + 1
			spread.add(m.tags)
		}
		for _, h := range holders[p] {
			off[h.member], hasState[h.member], follows[h.member] = 0, false, false
		}
	}
	return out
}

// tagSpread is the client tag values a task's copies (active and
// standbys) have so far, by tag.
type tagSpread map[string]map[string]bool

// add counts the tags of an instance given a copy of the task.
func (s *tagSpread) add(tags map[string]string) {
	for k, v := range tags {
		if *s == nil {
			*s = tagSpread{}
		}
		if (*s)[k] == nil {
			(*s)[k] = map[string]bool{}
		}
		(*s)[k][v] = true
	}
}

// of returns how many of an instance's tags have a value no copy of the
// task has yet.
func (s tagSpread) of(tags map[string]string) int {
	n := 0
	for k, v := range tags {
		if !s[k][v] {
			n++
		}
	}
	return n
}

// assignTasks gives the tasks 0…n-1 to members, balanced as a whole and
// per sub-topology (groups: the first task of each, ascending; nil: one).
// Shares are n/m, and n/m+1 for the first n%m members ordered by how many
// tasks they own (most first), then by id. Within a sub-topology of k
// tasks each member gets k/m, and the k%m left over go to the members
// still furthest below their shares (then to those owning more of it, then
// in that order): the shares always add up (the members' needs never
// differ by more than one), and each sub-topology is spread over the
// members as evenly as the group itself, and over the instances before
// their threads. In each sub-topology a member
// keeps what it owns up to its quota (keepOrder says which, when it owns
// more); a task nobody keeps goes to a member below its quota whose state
// of it is furthest along (then to the member with fewest of them so far,
// then in that order); the rest fill the members below their quotas in
// order. The result is by member id, each member's tasks in order; given
// what it returned as what the members own, it returns the same.
func assignTasks(members []member, n int32, groups []int32) map[string][]int32 {
	out := make(map[string][]int32, len(members))
	if len(members) == 0 {
		return out
	}
	if len(groups) == 0 || groups[0] != 0 {
		groups = append([]int32{0}, groups...)
	}
	order := slices.Clone(members)
	slices.SortFunc(order, func(a, b member) int {
		if c := cmp.Compare(len(b.owned), len(a.owned)); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	m := len(order)
	// need: how many of the left-over tasks of the sub-topologies each
	// member is still to get, for its share.
	need := make([]int, m)
	bases := 0
	for g := range groups {
		bases += groupSize(groups, g, n) / m
	}
	for i := range order {
		need[i] = int(n)/m - bases
		if i < int(n)%m {
			need[i]++
		}
	}
	held := stateHolders(order, n)
	keep := make([][]int32, m)
	for i, mb := range order {
		keep[i] = keepOrder(mb, held)
	}
	taken := make([]bool, n)
	quota := make([]int, m)
	got := make([]int, m) // in the sub-topology at hand
	picked := make([]bool, m)
	inst := make([]string, m)
	for i, mb := range order {
		inst[i] = mb.instance()
	}
	for g, first := range groups {
		size := groupSize(groups, g, n)
		end := first + int32(size)
		in := func(p int32) bool { return p >= first && p < end }
		owns := make([]int, m)
		for i, mb := range order {
			for _, p := range mb.owned {
				if in(p) {
					owns[i]++
				}
			}
			quota[i], got[i] = size/m, 0
		}
		// The left-over tasks, one at a time: to the member furthest below
		// its share, then owning the most of them, then of the instance
		// with the fewest of the sub-topology's tasks so far (a
		// sub-topology spreads over instances before their threads), then
		// in order.
		perInstance := map[string]int{}
		for i := range order {
			perInstance[inst[i]] += quota[i]
			picked[i] = false
		}
		better := func(i, j int) bool {
			if need[i] != need[j] {
				return need[i] > need[j]
			}
			if owns[i] != owns[j] {
				return owns[i] > owns[j]
			}
			if a, b := perInstance[inst[i]], perInstance[inst[j]]; a != b {
				return a < b
			}
			return i < j
		}
		for range size % m {
			best := -1
			for i := range order {
				if !picked[i] && (best < 0 || better(i, best)) {
					best = i
				}
			}
			picked[best] = true
			quota[best]++
			need[best]--
			perInstance[inst[best]]++
		}
		for i, mb := range order {
			for _, p := range keep[i] {
				if in(p) && got[i] < quota[i] && !taken[p] {
					out[mb.id] = append(out[mb.id], p)
					taken[p] = true
					got[i]++
				}
			}
		}
		// Tasks nobody keeps, to where their state is.
		for p := first; p < end; p++ {
			if taken[p] {
				continue
			}
			best := -1
			for i, mb := range order {
				off, ok := mb.state[p]
				if !ok || got[i] >= quota[i] {
					continue
				}
				if best < 0 {
					best = i
					continue
				}
				if bo := order[best].state[p]; off > bo || off == bo && got[i] < got[best] {
					best = i
				}
			}
			if best >= 0 {
				out[order[best].id] = append(out[order[best].id], p)
				taken[p] = true
				got[best]++
			}
		}
		next := first
		for i, mb := range order {
			for got[i] < quota[i] {
				for taken[next] {
					next++
				}
				out[mb.id] = append(out[mb.id], next)
				taken[next] = true
				got[i]++
			}
		}
	}
	for id := range out {
		slices.Sort(out[id])
	}
	return out
}

// groupSize is how many tasks sub-topology g has (groups: the first task
// of each; n tasks in all).
func groupSize(groups []int32, g int, n int32) int {
	if g+1 < len(groups) {
		return int(groups[g+1] - groups[g])
	}
	return int(n - groups[g])
}

// keepOrder orders the tasks m owns by what moving each would cost: the
// tasks another instance holds state of, closest to m's own instance's,
// come last (they are the first m gives up when it owns more than its
// share), and the tasks no other instance holds state of come first, in
// order. held: each task's members with state of it (stateHolders).
func keepOrder(m member, held [][]stateHolder) []int32 {
	gap := make(map[int32]int64, len(m.owned))
	for _, p := range m.owned {
		gap[p] = math.MaxInt64
		if int(p) >= len(held) {
			continue
		}
		for _, h := range held[p] {
			if h.instance != m.instance() {
				gap[p] = min(gap[p], m.state[p]-h.off)
			}
		}
	}
	out := slices.Clone(m.owned)
	slices.SortStableFunc(out, func(a, b int32) int { return cmp.Compare(gap[b], gap[a]) })
	return out
}

// stateHolder is a member's instance holding state of a task, and how far.
type stateHolder struct {
	instance string
	off      int64
}

// stateHolders returns, for each task 0…n-1, the members holding state of
// it.
func stateHolders(members []member, n int32) [][]stateHolder {
	held := make([][]stateHolder, n)
	for _, m := range members {
		for p, off := range m.state {
			if p >= 0 && p < n {
				held[p] = append(held[p], stateHolder{instance: m.instance(), off: off})
			}
		}
	}
	return held
}
