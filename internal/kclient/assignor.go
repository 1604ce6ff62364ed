package kclient

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// taskAssignor is eddy's group assignor on the classic protocol, run by
// the group's leader, cooperative (KIP-429):
//
//   - it assigns tasks as units — partition p of every topic a member reads
//     goes to one member — so co-partitioned topics stay together, as
//     Kafka Streams places a task;
//   - it is sticky: a member keeps the tasks it owns (reported in its
//     metadata) up to its share, so a membership change moves only what
//     balance requires, and the members' other tasks go on processing
//     through the rebalance;
//   - it is state-aware: a task no member keeps goes, among the members
//     with room, to one whose instance holds its state furthest along its
//     changelogs (each member's user data, MemberState, as Kafka Streams'
//     task offset sums), so a restarted instance gets its tasks back and a
//     dead one's go where a restore reads least;
//   - it balances: every member gets n/m tasks, the first n%m one more
//     (members owning more tasks first, to move the fewest);
//   - a task moving from one member to another is not given to the new
//     owner in the same rebalance (kgo's AdjustCooperative): the old
//     owner revokes it (committing first) and rejoins, and the follow-up
//     rebalance gives it to the new owner.
//
// Members offer range too, so that a group mixing eddy's client with
// librdkafka's (a rolling upgrade) agrees on a protocol (then eagerly); a
// group of eddy members uses this one.
type taskAssignor struct {
	// state is what this member tells the leader (nil: nothing).
	state func() MemberState

	mu sync.Mutex // guards got
	// got: the standbys, warm-ups and follow-up of the last assignment,
	// until the member hands them to the stream thread (take).
	got memberAssignment
}

// taskAssignorProtocol names the assignor in the group protocol.
const taskAssignorProtocol = "eddy-tasks"

func (*taskAssignor) ProtocolName() string { return taskAssignorProtocol }
func (*taskAssignor) IsCooperative() bool  { return true }

func (a *taskAssignor) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, t := range slices.Sorted(maps.Keys(current)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic, o.Partitions = t, slices.Sorted(slices.Values(current[t]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	if a.state != nil {
		meta.UserData = encodeMemberState(a.state())
	}
	return meta.AppendTo(nil)
}

func (a *taskAssignor) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var ka kmsg.ConsumerMemberAssignment
	if err := ka.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("kclient: reading the group's assignment: %w", err)
	}
	got, err := decodeMemberAssignment(ka.UserData)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.got = got
	a.mu.Unlock()
	out := make(map[string][]int32, len(ka.Topics))
	for _, t := range ka.Topics {
		out[t.Topic] = t.Partitions
	}
	return out, nil
}

// take returns what the assignment parsed last says beside the member's
// partitions, once: nothing when the group's assignment came from another
// assignor.
func (a *taskAssignor) take() memberAssignment {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.got
	a.got = memberAssignment{}
	return got
}

func (a *taskAssignor) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(a, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

// userDataVersion is the version of the assignor's user data: a
// member's MemberState in its join, its standbys, warm-ups and follow-up
// in its assignment. A member's state is written at memberStateVersion
// (the client tags added to version 2); one of version 2, from an
// instance not upgraded yet, reads as a state without tags.
const (
	userDataVersion    = 2
	memberStateVersion = 3
)

// encodeMemberState writes s as a member's user data: the version byte,
// the process (length and bytes), the standby replicas wanted, the
// acceptable recovery lag, the warm-ups allowed, the tasks' offset sums (a
// count, then per task the uvarint step from the previous partition and
// the sum as a varint), the standby and the warm-up tasks (each a count
// and steps), then the tags (a count, then each key and value, length and
// bytes, in key order). A thousand tasks take a few kilobytes.
func encodeMemberState(s MemberState) []byte {
	b := []byte{memberStateVersion}
	b = binary.AppendUvarint(b, uint64(len(s.Process)))
	b = append(b, s.Process...)
	b = binary.AppendUvarint(b, uint64(max(s.Standbys, 0)))
	b = binary.AppendUvarint(b, uint64(max(s.AcceptableRecoveryLag, 0)))
	b = binary.AppendUvarint(b, uint64(max(s.MaxWarmups, 0)))
	parts := slices.Sorted(maps.Keys(s.Offsets))
	b = binary.AppendUvarint(b, uint64(len(parts)))
	prev := int32(0)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(p-prev))
		b = binary.AppendVarint(b, s.Offsets[p])
		prev = p
	}
	b = appendPartitions(b, s.Standby)
	b = appendPartitions(b, s.Warmup)
	b = binary.AppendUvarint(b, uint64(len(s.Tags)))
	for _, k := range slices.Sorted(maps.Keys(s.Tags)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(s.Tags[k])))
		b = append(b, s.Tags[k]...)
	}
	return b
}

// decodeMemberState reads what encodeMemberState wrote; anything else
// (another version, another client's user data, nothing) is an error, and
// the assignor then places the member's tasks without its state.
func decodeMemberState(b []byte) (MemberState, error) {
	r := userData{b: b}
	v := r.version(userDataVersion, memberStateVersion)
	var s MemberState
	s.Process = string(r.bytes())
	s.Standbys = int(min(r.uvarint(), 1<<16))
	s.AcceptableRecoveryLag = int64(min(r.uvarint(), math.MaxInt64))
	s.MaxWarmups = int(min(r.uvarint(), 1<<20))
	n := r.count()
	s.Offsets = make(map[int32]int64, n)
	p := uint64(0)
	for range n {
		p += r.uvarint()
		off := r.varint()
		if p > math.MaxInt32 {
			r.fail()
		}
		s.Offsets[int32(p)] = off
	}
	s.Standby = r.partitions()
	s.Warmup = r.partitions()
	if v >= 3 {
		if n := r.count(); n > 0 {
			s.Tags = make(map[string]string, n)
			for range n {
				k := string(r.bytes())
				s.Tags[k] = string(r.bytes())
			}
		}
	}
	if err := r.end(); err != nil {
		return MemberState{}, fmt.Errorf("kclient: member state: %w", err)
	}
	return s, nil
}

// memberAssignment is what a member's assignment says beside its
// partitions: the partitions it follows as standbys (warm-ups included),
// the warm-ups among them, and whether a task is moving between members in
// two steps (followUp: the member rejoins at once, so that the follow-up
// rebalance that completes the move does not wait for heartbeats).
type memberAssignment struct {
	standby, warmup []TP
	followUp        bool
}

// encodeMemberAssignment writes an assignment's user data: the version
// byte, a flags byte (1: follow-up), then the standby and the warm-up
// partitions, each as the number of topics and per topic its name and
// partitions.
func encodeMemberAssignment(standby, warmup map[string][]int32, followUp bool) []byte {
	b := []byte{userDataVersion, 0}
	if followUp {
		b[1] = 1
	}
	for _, byTopic := range []map[string][]int32{standby, warmup} {
		b = binary.AppendUvarint(b, uint64(len(byTopic)))
		for _, t := range slices.Sorted(maps.Keys(byTopic)) {
			b = binary.AppendUvarint(b, uint64(len(t)))
			b = append(b, t...)
			b = appendPartitions(b, slices.Sorted(slices.Values(byTopic[t])))
		}
	}
	return b
}

// decodeMemberAssignment reads what encodeMemberAssignment wrote. No user
// data is no standby, warm-up or follow-up.
func decodeMemberAssignment(b []byte) (memberAssignment, error) {
	if len(b) == 0 {
		return memberAssignment{}, nil
	}
	r := userData{b: b}
	r.version(userDataVersion)
	var out memberAssignment
	switch flags := r.byte(); flags {
	case 0, 1:
		out.followUp = flags == 1
	default:
		r.fail()
	}
	for _, into := range []*[]TP{&out.standby, &out.warmup} {
		for range r.count() {
			t := string(r.bytes())
			for _, p := range r.partitions() {
				*into = append(*into, TP{Topic: t, Partition: p})
			}
		}
	}
	if err := r.end(); err != nil {
		return memberAssignment{}, fmt.Errorf("kclient: standby assignment: %w", err)
	}
	return out, nil
}

// appendPartitions appends ascending partitions: a count, then each as the
// step from the previous.
func appendPartitions(b []byte, ps []int32) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	prev := int32(0)
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p-prev))
		prev = p
	}
	return b
}

// userData reads the assignor's user data; the first thing that does not
// fit is kept as its error, and every read after it returns zero.
type userData struct {
	b   []byte
	err error
}

var errUserData = errors.New("not eddy's user data, or of another version, or cut short")

func (r *userData) fail() {
	if r.err == nil {
		r.err = errUserData
	}
	r.b = nil
}

func (r *userData) version(accepted ...byte) byte {
	if len(r.b) == 0 || !slices.Contains(accepted, r.b[0]) {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *userData) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *userData) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *userData) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a number of items, each at least a byte long.
func (r *userData) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *userData) bytes() []byte {
	n := r.count()
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *userData) partitions() []int32 {
	n := r.count()
	out := make([]int32, 0, n)
	p := uint64(0)
	for range n {
		if p += r.uvarint(); p > math.MaxInt32 {
			r.fail()
			return nil
		}
		out = append(out, int32(p))
	}
	return out
}

func (r *userData) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	return r.err
}

// taskMember is one member as the assignor sees it.
type taskMember struct {
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
func (m taskMember) instance() string {
	if m.process != "" {
		return m.process
	}
	return "member " + m.id
}

// Balance implements kgo.ConsumerBalancerBalance.
func (*taskAssignor) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	type joined struct {
		m          *kmsg.JoinGroupResponseMember
		topics     []string
		generation int32
		owned      []int32
		state      MemberState
	}
	var js []joined
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		j := joined{m: m, topics: meta.Topics, generation: meta.Generation}
		for _, o := range meta.OwnedPartitions {
			j.owned = append(j.owned, o.Partitions...)
		}
		slices.Sort(j.owned)
		j.owned = slices.Compact(j.owned)
		if s, err := decodeMemberState(meta.UserData); err == nil {
			j.state = s
		}
		js = append(js, j)
	})
	// A task two members claim is the claim of the newer generation's.
	claim := map[int32]int{}
	for i, j := range js {
		for _, p := range j.owned {
			if o, ok := claim[p]; !ok || js[o].generation < j.generation {
				claim[p] = i
			}
		}
	}
	var n int32
	for _, c := range topics {
		n = max(n, c)
	}
	members := make([]taskMember, len(js))
	var o groupOptions
	for i, j := range js {
		members[i] = taskMember{id: j.m.MemberID, process: j.state.Process, state: j.state.Offsets, standby: j.state.Standby, warmup: j.state.Warmup, tags: j.state.Tags}
		o.standbys = max(o.standbys, j.state.Standbys)
		o.acceptableLag = max(o.acceptableLag, j.state.AcceptableRecoveryLag)
		o.maxWarmups = max(o.maxWarmups, j.state.MaxWarmups)
		for _, p := range j.owned {
			if p < n && claim[p] == i {
				members[i].owned = append(members[i].owned, p)
			}
		}
	}
	ga := assignGroup(members, n, o)
	plan := b.NewPlan()
	extra := make(map[string][2]map[string][]int32, len(js)) // standbys and warm-ups by topic
	for _, j := range js {
		byTopic := func(tasks []int32) map[string][]int32 {
			out := map[string][]int32{}
			for _, p := range tasks {
				for _, t := range j.topics {
					if c, ok := topics[t]; ok && p < c {
						out[t] = append(out[t], p)
					}
				}
			}
			return out
		}
		for t, ps := range byTopic(ga.active[j.m.MemberID]) {
			for _, p := range ps {
				plan.AddPartition(j.m, t, p)
			}
		}
		extra[j.m.MemberID] = [2]map[string][]int32{byTopic(ga.standby[j.m.MemberID]), byTopic(ga.warmup[j.m.MemberID])}
	}
	plan.AdjustCooperative(b)
	return taskPlan{plan: plan, extra: extra, followUp: ga.followUp}
}

// taskPlan is the assignment the leader sends: each member's partitions,
// and in the assignment's user data its standby and warm-up partitions
// and whether a follow-up rebalance is due.
type taskPlan struct {
	plan     *kgo.BalancePlan
	extra    map[string][2]map[string][]int32 // by member: standbys and warm-ups, by topic
	followUp bool
}

func (p taskPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	var out []kmsg.SyncGroupRequestGroupAssignment
	for member, assignment := range p.plan.AsMemberIDMap() {
		ka := kmsg.NewConsumerMemberAssignment()
		for _, t := range slices.Sorted(maps.Keys(assignment)) {
			at := kmsg.NewConsumerMemberAssignmentTopic()
			at.Topic, at.Partitions = t, slices.Sorted(slices.Values(assignment[t]))
			ka.Topics = append(ka.Topics, at)
		}
		if e := p.extra[member]; len(e[0]) > 0 || len(e[1]) > 0 || p.followUp {
			ka.UserData = encodeMemberAssignment(e[0], e[1], p.followUp)
		}
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID, sa.MemberAssignment = member, ka.AppendTo(nil)
		out = append(out, sa)
	}
	return out
}

// groupOptions are the group-wide settings of the assignor, the largest
// the members report (MemberState).
type groupOptions struct {
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
func assignGroup(members []taskMember, n int32, o groupOptions) groupAssignment {
	target := assignTasks(withClaims(members, n), n)
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
func withClaims(members []taskMember, n int32) []taskMember {
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
	out := make([]taskMember, len(members))
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
func holdForWarmup(members []taskMember, target map[string][]int32, n int32, lag int64) (map[string][]int32, map[int32]string) {
	byID := make(map[string]taskMember, len(members))
	owner := map[int32]taskMember{}
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
func assignWarmups(members []taskMember, held map[int32]string, standby map[string][]int32, max int) (followed, claims map[string][]int32) {
	followed, claims = map[string][]int32{}, map[string][]int32{}
	if len(held) == 0 {
		return followed, claims
	}
	byID := make(map[string]taskMember, len(members))
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
		covered := slices.ContainsFunc(members, func(m taskMember) bool {
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
func assignStandbys(members []taskMember, assigned map[string][]int32, n int32, replicas int) map[string][]int32 {
	out := map[string][]int32{}
	if replicas <= 0 {
		return out
	}
	instanceOf := make(map[string]string, len(members))
	load := make(map[string]int, len(members))
	activeOn := make([]int, n) // the member running each task
	for i := range activeOn {
		activeOn[i] = -1
	}
	for i, m := range members {
		instanceOf[m.id] = m.instance()
		load[m.id] = len(assigned[m.id])
		for _, p := range assigned[m.id] {
			activeOn[p] = i
		}
	}
	for p := range n {
		used := map[string]bool{}
		var spread tagSpread
		if a := activeOn[p]; a >= 0 {
			used[instanceOf[members[a].id]] = true
			spread.add(members[a].tags)
		}
		for range replicas {
			best, bestSpread := -1, 0
			for i, m := range members {
				if used[instanceOf[m.id]] {
					continue
				}
				sp := spread.of(m.tags)
				if best < 0 || sp > bestSpread || (sp == bestSpread && betterStandby(m, members[best], p, load)) {
					best, bestSpread = i, sp
				}
			}
			if best < 0 {
				break // no other instance left
			}
			m := members[best]
			out[m.id] = append(out[m.id], p)
			load[m.id]++
			used[instanceOf[m.id]] = true
			spread.add(m.tags)
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

// betterStandby reports whether m is a better home than o for a standby
// copy of task p, their tags aside (see assignStandbys).
func betterStandby(m, o taskMember, p int32, load map[string]int) bool {
	if mh, oh := slices.Contains(m.standby, p), slices.Contains(o.standby, p); mh != oh {
		return mh
	}
	ms, mok := m.state[p]
	os, ook := o.state[p]
	if mok != ook {
		return mok
	}
	if ms != os {
		return ms > os
	}
	if load[m.id] != load[o.id] {
		return load[m.id] < load[o.id]
	}
	return m.id < o.id
}

// assignTasks gives the tasks 0…n-1 to members: each keeps what it owns up
// to its share (keepOrder says which, when it owns more); a task nobody
// keeps goes to a member below its share whose state of it is furthest
// along (then to the member with fewest tasks so far, then by id); the rest
// fill the members below their shares in order. Shares are n/m, and n/m+1
// for the first n%m members ordered by how many tasks they own (most
// first), then by id. The result is by member id, each member's tasks in
// order; given what it returned as what the members own, it returns the
// same.
func assignTasks(members []taskMember, n int32) map[string][]int32 {
	out := make(map[string][]int32, len(members))
	if len(members) == 0 {
		return out
	}
	order := slices.Clone(members)
	slices.SortFunc(order, func(a, b taskMember) int {
		if c := cmp.Compare(len(b.owned), len(a.owned)); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	base, extra := int(n)/len(order), int(n)%len(order)
	share := make(map[string]int, len(order))
	taken := make([]bool, n)
	for i, m := range order {
		share[m.id] = base
		if i < extra {
			share[m.id]++
		}
		for _, p := range keepOrder(m, order) {
			if len(out[m.id]) < share[m.id] && !taken[p] {
				out[m.id] = append(out[m.id], p)
				taken[p] = true
			}
		}
	}
	// Tasks nobody keeps, to where their state is.
	for p := range n {
		if taken[p] {
			continue
		}
		best := -1
		for i, m := range order {
			off, ok := m.state[p]
			if !ok || len(out[m.id]) >= share[m.id] {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := order[best]
			if bo := b.state[p]; off > bo || off == bo && len(out[m.id]) < len(out[b.id]) {
				best = i
			}
		}
		if best >= 0 {
			id := order[best].id
			out[id] = append(out[id], p)
			taken[p] = true
		}
	}
	next := int32(0)
	for _, m := range order {
		for len(out[m.id]) < share[m.id] {
			for taken[next] {
				next++
			}
			out[m.id] = append(out[m.id], next)
			taken[next] = true
		}
		slices.Sort(out[m.id])
	}
	return out
}

// keepOrder orders the tasks m owns by what moving each would cost: the
// tasks another instance holds state of, closest to m's own instance's,
// come last (they are the first m gives up when it owns more than its
// share), and the tasks no other instance holds state of come first, in
// order.
func keepOrder(m taskMember, members []taskMember) []int32 {
	gap := make(map[int32]int64, len(m.owned))
	for _, p := range m.owned {
		gap[p] = math.MaxInt64
		for _, o := range members {
			if o.instance() == m.instance() {
				continue
			}
			if off, ok := o.state[p]; ok {
				gap[p] = min(gap[p], m.state[p]-off)
			}
		}
	}
	out := slices.Clone(m.owned)
	slices.SortStableFunc(out, func(a, b int32) int { return cmp.Compare(gap[b], gap[a]) })
	return out
}
