package franz

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/assign"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
)

// taskBalancer carries eddy's assignor (internal/assign) over the classic
// group protocol, run by the group's leader, cooperative (KIP-429): a
// member's join says which partitions it owns and, in its user data
// (MemberState), its instance, how far its instance's local state of each
// task has read the task's changelogs, the tasks it follows and those held
// for it; the leader's assignment gives each member the partitions of its
// tasks and, in the assignment's user data, its standby and warm-up tasks
// and whether a follow-up rebalance is due. A task moving from one member
// to another is not given to the new owner in the same rebalance (kgo's
// AdjustCooperative): the old owner revokes it (committing first) and
// rejoins, and the follow-up rebalance gives it to the new owner.
//
// Two versions, negotiated as group protocols (the coordinator picks one
// every member offers): eddy-tasks-2, where a task is a sub-topology on
// one partition number (what Kafka Streams calls a task, 1_3) and the
// tasks of each sub-topology are placed independently; and eddy-tasks,
// the releases before it, where a task was a partition number over every
// sub-topology. Members offer both (and range, for a group mixing eddy's
// client with librdkafka's): during a rolling upgrade from a release that
// knows only eddy-tasks the group keeps to it, reading and writing its
// formats, and moves to eddy-tasks-2 once every member offers it.
type taskBalancer struct {
	version int
	// subtopologies: the source topics of each sub-topology, by id.
	subtopologies [][]string
	// state is what this member tells the leader (nil: nothing).
	state func() kclient.MemberState
	// got: the assignment's extras (shared by the versions).
	got *assignmentExtras
}

// assignmentExtras keeps what the last assignment said beside the member's
// partitions until the member hands it to the stream thread (take).
type assignmentExtras struct {
	mu  sync.Mutex // guards got
	got memberAssignment
}

// The protocol names of the versions.
const (
	taskProtocol       = "eddy-tasks-2"
	legacyTaskProtocol = "eddy-tasks"
)

// taskBalancers returns both versions, the newer first (preferred), over
// one member's topology and state.
func taskBalancers(subtopologies [][]string, state func() kclient.MemberState) (extras *assignmentExtras, balancers []kgo.GroupBalancer) {
	extras = &assignmentExtras{}
	return extras, []kgo.GroupBalancer{
		&taskBalancer{version: 2, subtopologies: subtopologies, state: state, got: extras},
		&taskBalancer{version: 1, subtopologies: subtopologies, state: state, got: extras},
	}
}

func (b *taskBalancer) ProtocolName() string {
	if b.version == 1 {
		return legacyTaskProtocol
	}
	return taskProtocol
}

func (*taskBalancer) IsCooperative() bool { return true }

func (b *taskBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, t := range slices.Sorted(maps.Keys(current)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic, o.Partitions = t, slices.Sorted(slices.Values(current[t]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	if b.state != nil {
		s := b.state()
		if b.version == 1 {
			meta.UserData = encodeLegacyMemberState(s)
		} else {
			meta.UserData = encodeMemberState(s)
		}
	}
	return meta.AppendTo(nil)
}

func (b *taskBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var ka kmsg.ConsumerMemberAssignment
	if err := ka.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("kclient: reading the group's assignment: %w", err)
	}
	var got memberAssignment
	var err error
	if b.version == 1 {
		got, err = decodeLegacyMemberAssignment(ka.UserData, b.tasksOfPartition)
	} else {
		got, err = decodeMemberAssignment(ka.UserData)
	}
	if err != nil {
		return nil, err
	}
	b.got.mu.Lock()
	b.got.got = got
	b.got.mu.Unlock()
	out := make(map[string][]int32, len(ka.Topics))
	for _, t := range ka.Topics {
		out[t.Topic] = t.Partitions
	}
	return out, nil
}

// take returns what the assignment parsed last says beside the member's
// partitions, once: nothing when the group's assignment came from another
// assignor.
func (e *assignmentExtras) take() memberAssignment {
	e.mu.Lock()
	defer e.mu.Unlock()
	got := e.got
	e.got = memberAssignment{}
	return got
}

func (b *taskBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// subtopologyOf maps each source topic to its sub-topology.
func subtopologyOf(subtopologies [][]string) map[string]int {
	out := map[string]int{}
	for s, topics := range subtopologies {
		for _, t := range topics {
			if _, ok := out[t]; !ok {
				out[t] = s
			}
		}
	}
	return out
}

// tasksOfPartition returns the tasks of a partition of eddy-tasks'
// assignment: its unit, partition number p, spans every sub-topology's
// task p.
func (b *taskBalancer) tasksOfPartition(_ string, p int32) []processor.TaskID {
	out := []processor.TaskID{{Partition: p}}
	for s := 1; s < len(b.subtopologies); s++ {
		out = append(out, processor.TaskID{Subtopology: s, Partition: p})
	}
	return out
}

// Balance implements kgo.ConsumerBalancerBalance: the group's leader
// places the tasks (assign.Assign) and turns them into each member's
// partitions.
func (b *taskBalancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	type joined struct {
		m          *kmsg.JoinGroupResponseMember
		topics     []string
		generation int32
		owned      []processor.TaskID
		state      kclient.MemberState
	}
	subs := b.subtopologies
	if len(subs) == 0 {
		// No topology given: one sub-topology reading every topic.
		subs = [][]string{slices.Sorted(maps.Keys(topics))}
	}
	subOf := subtopologyOf(subs)
	// taskOf is the task of a partition: its sub-topology's, or with the
	// legacy unit its partition number's (sub-topology 0 stands for all).
	taskOf := func(t string, p int32) (processor.TaskID, bool) {
		if b.version == 1 {
			return processor.TaskID{Partition: p}, true
		}
		s, ok := subOf[t]
		return processor.TaskID{Subtopology: s, Partition: p}, ok
	}
	var js []joined
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		j := joined{m: m, topics: meta.Topics, generation: meta.Generation}
		for _, o := range meta.OwnedPartitions {
			for _, p := range o.Partitions {
				if id, ok := taskOf(o.Topic, p); ok {
					j.owned = append(j.owned, id)
				}
			}
		}
		slices.SortFunc(j.owned, assign.Compare)
		j.owned = slices.Compact(j.owned)
		if s, err := decodeMemberState(meta.UserData); err == nil {
			j.state = s
		}
		js = append(js, j)
	})
	// The tasks: each sub-topology on each partition number of its
	// topics (co-partitioned: as many partitions each); with the legacy
	// unit, each partition number of any topic.
	var tasks []processor.TaskID
	if b.version == 1 {
		var n int32
		for _, c := range topics {
			n = max(n, c)
		}
		for p := range n {
			tasks = append(tasks, processor.TaskID{Partition: p})
		}
	} else {
		for s, ts := range subs {
			var n int32
			for _, t := range ts {
				n = max(n, topics[t])
			}
			for p := range n {
				tasks = append(tasks, processor.TaskID{Subtopology: s, Partition: p})
			}
		}
	}
	// A task two members claim is the claim of the newer generation's.
	claim := map[processor.TaskID]int{}
	for i, j := range js {
		for _, id := range j.owned {
			if o, ok := claim[id]; !ok || js[o].generation < j.generation {
				claim[id] = i
			}
		}
	}
	members := make([]assign.Member, len(js))
	var o assign.Options
	for i, j := range js {
		members[i] = assign.Member{ID: j.m.MemberID, Process: j.state.Process, State: j.state.Offsets,
			Standby: j.state.Standby, Warmup: j.state.Warmup, Tags: j.state.Tags}
		o.Standbys = max(o.Standbys, j.state.Standbys)
		o.AcceptableLag = max(o.AcceptableLag, j.state.AcceptableRecoveryLag)
		o.MaxWarmups = max(o.MaxWarmups, j.state.MaxWarmups)
		for _, id := range j.owned {
			if claim[id] == i {
				members[i].Owned = append(members[i].Owned, id)
			}
		}
	}
	ga := assign.Assign(members, tasks, o)
	plan := cb.NewPlan()
	extra := make(map[string][]byte, len(js))
	for _, j := range js {
		for _, id := range ga.Active[j.m.MemberID] {
			for _, t := range j.topics {
				c, ok := topics[t]
				if !ok || id.Partition >= c {
					continue
				}
				if s, ok := subOf[t]; b.version == 1 || ok && s == id.Subtopology {
					plan.AddPartition(j.m, t, id.Partition)
				}
			}
		}
		standby, warmup := ga.Standby[j.m.MemberID], ga.Warmup[j.m.MemberID]
		if len(standby) == 0 && len(warmup) == 0 && !ga.FollowUp {
			continue
		}
		if b.version == 1 {
			byTopic := func(ids []processor.TaskID) map[string][]int32 {
				out := map[string][]int32{}
				for _, id := range ids {
					for _, t := range j.topics {
						if c, ok := topics[t]; ok && id.Partition < c {
							out[t] = append(out[t], id.Partition)
						}
					}
				}
				return out
			}
			extra[j.m.MemberID] = encodeLegacyMemberAssignment(byTopic(standby), byTopic(warmup), ga.FollowUp)
		} else {
			extra[j.m.MemberID] = encodeMemberAssignment(standby, warmup, ga.FollowUp)
		}
	}
	plan.AdjustCooperative(cb)
	return taskPlan{plan: plan, extra: extra}
}

// taskPlan is the assignment the leader sends: each member's partitions,
// and its assignment's user data.
type taskPlan struct {
	plan  *kgo.BalancePlan
	extra map[string][]byte // by member
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
		ka.UserData = p.extra[member]
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID, sa.MemberAssignment = member, ka.AppendTo(nil)
		out = append(out, sa)
	}
	return out
}
