package franz

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
)

// Member state in user data: what is encoded decodes the same; the
// legacy versions (eddy-tasks', by partition number) decode as tasks 0_p
// holding the sums of the partition's tasks; another client's user data, a
// truncated or padded one is an error.
func TestMemberStateEncoding(t *testing.T) {
	id := func(s int, p int32) processor.TaskID { return processor.TaskID{Subtopology: s, Partition: p} }
	s := kclient.MemberState{Process: "proc-1", Offsets: map[processor.TaskID]int64{id(0, 0): 0, id(0, 3): 1 << 40, id(1, 3): 5, id(2, 7): 12, id(2, 4999): 5},
		Standbys: 2, Standby: []processor.TaskID{id(0, 1), id(1, 4), id(1, 9)}, Warmup: []processor.TaskID{id(1, 4)},
		AcceptableRecoveryLag: 10_000, MaxWarmups: 2, Tags: map[string]string{"zone": "eu-west-1a", "cluster": "k1"}}
	b := encodeMemberState(s)
	got, err := decodeMemberState(b)
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", s) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, s)
	}
	// eddy-tasks' version 3: by partition number, the unit 0_p.
	legacy := s
	legacy.Offsets = map[processor.TaskID]int64{id(0, 0): 0, id(0, 3): 1<<40 + 5, id(0, 7): 12, id(0, 4999): 5}
	legacy.Standby, legacy.Warmup = []processor.TaskID{id(0, 1), id(0, 4), id(0, 9)}, []processor.TaskID{id(0, 4)}
	l3 := encodeLegacyMemberState(s)
	if l3[0] != 3 {
		t.Fatalf("legacy member state of version %d, want 3", l3[0])
	}
	if got, err := decodeMemberState(l3); err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", legacy) {
		t.Fatalf("legacy decoded %+v, %v; want %+v", got, err, legacy)
	}
	// Version 2, before tags (eddy-tasks of an older release), reads as a
	// state without tags.
	s.Tags, legacy.Tags = nil, nil
	l2 := encodeLegacyMemberState(s)
	l2 = append([]byte{2}, l2[1:len(l2)-1]...) // no tag count
	if got, err := decodeMemberState(l2); err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", legacy) {
		t.Fatalf("version 2 decoded %+v, %v; want %+v", got, err, legacy)
	}
	sb := encodeMemberAssignment([]processor.TaskID{id(1, 3), id(0, 1), id(1, 0)}, []processor.TaskID{id(1, 3)}, true)
	if got, err := decodeMemberAssignment(sb); err != nil || fmt.Sprint(got.standby, got.warmup, got.followUp) != "[0_1 1_0 1_3] [1_3] true" {
		t.Fatalf("assignment decoded %+v, %v", got, err)
	}
	if got, err := decodeMemberAssignment(nil); err != nil || got.standby != nil || got.warmup != nil || got.followUp {
		t.Fatalf("no user data decoded as %+v, %v", got, err)
	}
	// eddy-tasks' assignment: by topic and partition number, each
	// partition the tasks of its number.
	lsb := encodeLegacyMemberAssignment(map[string][]int32{"b": {3, 1}, "a": {0}}, map[string][]int32{"b": {3}}, true)
	every := func(_ string, p int32) []processor.TaskID { return []processor.TaskID{id(0, p), id(1, p)} }
	if got, err := decodeLegacyMemberAssignment(lsb, every); err != nil || fmt.Sprint(got.standby, got.warmup, got.followUp) != "[0_0 0_1 0_3 1_0 1_1 1_3] [0_3 1_3] true" {
		t.Fatalf("legacy assignment decoded %+v, %v", got, err)
	}
	for _, bad := range [][]byte{sb[:len(sb)-1], append(slices.Clone(sb), 0), {assignmentVersion, 2, 0, 0}, {1, 0, 0, 0}, lsb,
		{assignmentVersion, 0, 2, 0, 1, 0, 0, 0}} { // the same task twice
		if _, err := decodeMemberAssignment(bad); err == nil {
			t.Fatalf("assignment % x decoded", bad)
		}
	}
	for _, bad := range [][]byte{nil, {}, {2}, b[:len(b)-1], append(slices.Clone(b), 0), []byte("range")} {
		if _, err := decodeMemberState(bad); err == nil {
			t.Fatalf("decoding % x: no error", bad)
		}
	}
	// 15,000 tasks with large offsets stay small enough for a join.
	big := kclient.MemberState{Process: "p", Offsets: map[processor.TaskID]int64{}}
	for s := range 3 {
		for p := range int32(5000) {
			big.Offsets[id(s, p)] = 1 << 33
		}
	}
	if n := len(encodeMemberState(big)); n > 120_000 {
		t.Fatalf("15,000 tasks encode to %d bytes", n)
	}
}

// BenchmarkAssignGroup balances, as the group's leader does, 5,000
// partitions × 3 sub-topologies (15,000 tasks) with one standby each over
// 200 instances (one thread each), as a rebalance after one instance died
// and a new one joined finds them: each owning its share, reporting the
// state of its tasks and standbys in its join. It runs the protocol's
// whole Balance (decoding every join, placing the tasks, turning them into
// partitions and user data) and reports the largest member's join
// metadata (bytes/member) and assignment (bytes/assignment).
func BenchmarkAssignGroup(b *testing.B) {
	const parts, subs, instances = 5000, 3, 200
	topology := [][]string{{"orders"}, {"app-by-customer-repartition"}, {"app-totals-repartition"}}
	topics := map[string]int32{}
	for _, ts := range topology {
		topics[ts[0]] = parts
	}
	states := make([]kclient.MemberState, instances)
	owned := make([]map[string][]int32, instances)
	for i := range states {
		states[i] = kclient.MemberState{Process: fmt.Sprintf("process-%03d", i), Offsets: map[processor.TaskID]int64{}, Standbys: 1,
			AcceptableRecoveryLag: 10_000, MaxWarmups: 2}
		owned[i] = map[string][]int32{}
	}
	for s := range subs {
		for p := range int32(parts) {
			id := processor.TaskID{Subtopology: s, Partition: p}
			n := s*parts + int(p)
			a, sb := n%instances, (n+1)%instances
			owned[a][topology[s][0]] = append(owned[a][topology[s][0]], p)
			states[a].Offsets[id] = 1 << 30
			states[sb].Standby = append(states[sb].Standby, id)
			states[sb].Offsets[id] = 1<<30 - 500
		}
	}
	// Instance 0 died (its member gone); a new one, with no state, joins.
	states[0], owned[0] = kclient.MemberState{Process: "process-new", Standbys: 1, AcceptableRecoveryLag: 10_000, MaxWarmups: 2}, nil
	interests := []string{"app-by-customer-repartition", "app-totals-repartition", "orders"}
	var members []kmsg.JoinGroupResponseMember
	biggest := 0
	for i, s := range states {
		tb := &taskBalancer{version: 2, subtopologies: topology, state: func() kclient.MemberState { return s }, got: &assignmentExtras{}}
		meta := tb.JoinGroupMetadata(interests, owned[i], 7)
		biggest = max(biggest, len(meta))
		m := kmsg.NewJoinGroupResponseMember()
		m.MemberID, m.ProtocolMetadata = fmt.Sprintf("member-%03d-%s", i, "0123456789abcdef0123456789abcdef"), meta
		members = append(members, m)
	}
	tb := &taskBalancer{version: 2, subtopologies: topology, got: &assignmentExtras{}}
	var sync []kmsg.SyncGroupRequestGroupAssignment
	for b.Loop() {
		mb, _, err := tb.MemberBalancer(members)
		if err != nil {
			b.Fatal(err)
		}
		into, err := mb.(*kgo.ConsumerBalancer).BalanceOrError(topics)
		if err != nil {
			b.Fatal(err)
		}
		sync = into.IntoSyncAssignment()
	}
	largest := 0
	for _, a := range sync {
		largest = max(largest, len(a.MemberAssignment))
	}
	b.ReportMetric(float64(biggest), "bytes/member")
	b.ReportMetric(float64(largest), "bytes/assignment")
}
