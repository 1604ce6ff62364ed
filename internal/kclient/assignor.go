package kclient

import (
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// taskAssignor is eddy's group assignor on the classic protocol, run by
// the group's leader: it assigns tasks as units — partition p of every
// topic a member reads goes to one member — so co-partitioned topics stay
// together, as Kafka Streams places a task. The tasks (partition numbers)
// are split into contiguous ranges over the members sorted by member id,
// which for topics of equal partition counts is exactly what librdkafka's
// range assignment gave. It is eager: every rebalance revokes everything
// first.
//
// Members offer range too, so that a group mixing eddy's client with
// librdkafka's (a rolling upgrade) still agrees on a protocol; a group of
// eddy members uses this one.
type taskAssignor struct{}

// taskAssignorProtocol names the assignor in the group protocol.
const taskAssignorProtocol = "eddy-tasks"

func (taskAssignor) ProtocolName() string { return taskAssignorProtocol }
func (taskAssignor) IsCooperative() bool  { return false }

func (taskAssignor) JoinGroupMetadata(interests []string, _ map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
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

// Balance implements kgo.ConsumerBalancerBalance.
func (taskAssignor) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	type member struct {
		m      *kmsg.JoinGroupResponseMember
		topics []string
	}
	var members []member
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		members = append(members, member{m, meta.Topics})
	})
	slices.SortFunc(members, func(x, y member) int { return strings.Compare(x.m.MemberID, y.m.MemberID) })
	plan := b.NewPlan()
	for p, to := range assignTasks(len(members), topics) {
		mb := members[to]
		for _, t := range mb.topics {
			if n, ok := topics[t]; ok && int32(p) < n {
				plan.AddPartition(mb.m, t, int32(p))
			}
		}
	}
	return plan
}

// assignTasks gives each task (a partition number, up to the largest
// partition count of topics) the index of its member: contiguous ranges,
// the first members one task more when they do not divide evenly.
func assignTasks(members int, topics map[string]int32) []int {
	var n int32
	for _, c := range topics {
		n = max(n, c)
	}
	if members == 0 {
		return nil
	}
	out := make([]int, n)
	per, extra := int(n)/members, int(n)%members
	p := 0
	for m := range members {
		take := per
		if m < extra {
			take++
		}
		for range take {
			out[p] = m
			p++
		}
	}
	return out
}
