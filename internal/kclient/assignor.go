package kclient

import (
	"cmp"
	"maps"
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
type taskAssignor struct{}

// taskAssignorProtocol names the assignor in the group protocol.
const taskAssignorProtocol = "eddy-tasks"

func (taskAssignor) ProtocolName() string { return taskAssignorProtocol }
func (taskAssignor) IsCooperative() bool  { return true }

func (taskAssignor) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, t := range slices.Sorted(maps.Keys(current)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic, o.Partitions = t, slices.Sorted(slices.Values(current[t]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	return meta.AppendTo(nil)
}

func (taskAssignor) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (a taskAssignor) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(a, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

// taskMember is one member as the assignor sees it.
type taskMember struct {
	id    string
	owned []int32 // tasks it owns now (its claim of the newest generation)
}

// Balance implements kgo.ConsumerBalancerBalance.
func (taskAssignor) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	type joined struct {
		m          *kmsg.JoinGroupResponseMember
		topics     []string
		generation int32
		owned      []int32
	}
	var js []joined
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		j := joined{m: m, topics: meta.Topics, generation: meta.Generation}
		for _, o := range meta.OwnedPartitions {
			j.owned = append(j.owned, o.Partitions...)
		}
		slices.Sort(j.owned)
		j.owned = slices.Compact(j.owned)
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
		members[i].id = j.m.MemberID
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
// to its share, the rest go to the members below theirs. Shares are n/m,
// and n/m+1 for the first n%m members ordered by how many tasks they own
// (most first), then by id. The result is by member id, each member's
// tasks in order.
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
		for _, p := range m.owned {
			if len(out[m.id]) < share[m.id] && !taken[p] {
				out[m.id] = append(out[m.id], p)
				taken[p] = true
			}
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
