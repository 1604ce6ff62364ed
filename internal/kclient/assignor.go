package kclient

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

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

func (*taskAssignor) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (a *taskAssignor) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(a, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

// memberStateVersion is the version of MemberState's encoding in a
// member's user data.
const memberStateVersion = 1

// encodeMemberState writes s as a member's user data: a version byte, the
// process (length and bytes), the number of tasks, then each task as the
// uvarint step from the previous partition and its offset sum as a varint.
// A thousand tasks take a few kilobytes.
func encodeMemberState(s MemberState) []byte {
	b := []byte{memberStateVersion}
	b = binary.AppendUvarint(b, uint64(len(s.Process)))
	b = append(b, s.Process...)
	b = binary.AppendUvarint(b, uint64(len(s.Offsets)))
	prev := int32(0)
	for _, p := range slices.Sorted(maps.Keys(s.Offsets)) {
		b = binary.AppendUvarint(b, uint64(p-prev))
		b = binary.AppendVarint(b, s.Offsets[p])
		prev = p
	}
	return b
}

// decodeMemberState reads what encodeMemberState wrote; anything else
// (another version, another client's user data, nothing) is an error, and
// the assignor then places the member's tasks without its state.
func decodeMemberState(b []byte) (MemberState, error) {
	var s MemberState
	bad := func(what string) (MemberState, error) {
		return MemberState{}, fmt.Errorf("kclient: member state: %s", what)
	}
	if len(b) == 0 || b[0] != memberStateVersion {
		return bad("not eddy's, or of another version")
	}
	b = b[1:]
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return bad("process")
	}
	s.Process, b = string(b[n:n+int(l)]), b[n+int(l):]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return bad("task count")
	}
	b = b[n:]
	s.Offsets = make(map[int32]int64, count)
	p := int64(0)
	for range count {
		step, n := binary.Uvarint(b)
		if n <= 0 {
			return bad("task")
		}
		b = b[n:]
		off, n := binary.Varint(b)
		if n <= 0 {
			return bad("offset sum")
		}
		b = b[n:]
		if p += int64(step); p > math.MaxInt32 {
			return bad("task")
		}
		s.Offsets[int32(p)] = off
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return s, nil
}

// taskMember is one member as the assignor sees it.
type taskMember struct {
	id    string
	owned []int32 // tasks it owns now (its claim of the newest generation)
	// state: how far its instance's local state of each task has read the
	// task's changelogs (MemberState.Offsets; nil: none known).
	state map[int32]int64
}

// Balance implements kgo.ConsumerBalancerBalance.
func (*taskAssignor) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	type joined struct {
		m          *kmsg.JoinGroupResponseMember
		topics     []string
		generation int32
		owned      []int32
		state      map[int32]int64
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
			j.state = s.Offsets
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
	for i, j := range js {
		members[i].id, members[i].state = j.m.MemberID, j.state
		for _, p := range j.owned {
			if p < n && claim[p] == i {
				members[i].owned = append(members[i].owned, p)
			}
		}
	}
	assigned := assignTasks(members, n)
	plan := b.NewPlan()
	for _, j := range js {
		for _, p := range assigned[j.m.MemberID] {
			for _, t := range j.topics {
				if c, ok := topics[t]; ok && p < c {
					plan.AddPartition(j.m, t, p)
				}
			}
		}
	}
	plan.AdjustCooperative(b)
	return plan
}

// assignTasks gives the tasks 0…n-1 to members: each keeps what it owns up
// to its share (keepOrder says which, when it owns more); a task nobody keeps goes to a member below its share whose
// state of it is furthest along (then to the member with fewest tasks so
// far, then by id); the rest fill the members below their shares in order.
// Shares are n/m, and n/m+1 for the first n%m members ordered by how many
// tasks they own (most first), then by id. The result is by member id,
// each member's tasks in order.
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
// tasks another member's instance holds state of, closest to m's own, come
// last (they are the first m gives up when it owns more than its share),
// and the tasks no other instance holds state of come first, in order.
func keepOrder(m taskMember, members []taskMember) []int32 {
	if len(m.state) == 0 {
		return m.owned
	}
	gap := make(map[int32]int64, len(m.owned))
	for _, p := range m.owned {
		gap[p] = math.MaxInt64
		for _, o := range members {
			if off, ok := o.state[p]; ok && o.id != m.id {
				gap[p] = min(gap[p], m.state[p]-off)
			}
		}
	}
	out := slices.Clone(m.owned)
	slices.SortStableFunc(out, func(a, b int32) int { return cmp.Compare(gap[b], gap[a]) })
	return out
}
