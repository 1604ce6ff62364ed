//go:build !eddy_librdkafka

package franz

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
)

// A probe asks its member to rejoin only a rebalance under way: in a
// stable group it does nothing; once another member's join reached the
// coordinator it makes the member rejoin at once (the heartbeat interval is
// two minutes: without the probe the group would wait that long), and the
// two members share the partitions.
func TestProbeRejoinsOnlyARebalanceUnderWay(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"), kfake.SeedTopics(1, "notices"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var mu sync.Mutex
	beats := map[string]int32{} // member id → latest heartbeat generation
	joined := map[string]bool{} // member ids that joined with their id
	cluster.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.HeartbeatRequest)
		mu.Lock()
		beats[req.MemberID] = max(beats[req.MemberID], req.Generation)
		mu.Unlock()
		return nil, nil, false
	})
	cluster.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.JoinGroupRequest)
		mu.Lock()
		if req.MemberID != "" {
			joined[req.MemberID] = true
		}
		mu.Unlock()
		return nil, nil, false
	})
	cfg := func() kclient.Config {
		return kclient.Config{"bootstrap.servers": cluster.ListenAddrs()[0], "group.id": "probe",
			"heartbeat.interval.ms": 120000, "session.timeout.ms": 240000}
	}
	// Notices that are sent but not read: the test probes by hand.
	conf, err := ParseConfig(cfg())
	if err != nil {
		t.Fatal(err)
	}
	notices, err := NewNotices(conf, "notices", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer notices.Close()
	state := func() kclient.MemberState { return kclient.MemberState{} }
	start := func() (*groupMember, *Member) {
		mem := newTestMember(t, cfg())
		mem.UseNotices(notices)
		return startMemberOn(t, mem, state), mem
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute) // half the heartbeat interval
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within a minute", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	a, am := start()
	defer a.end()
	a.waitOwns([]int32{0, 1})
	// franz-go heartbeats once half a second after a rebalance: past it,
	// only a probe tells a of the next one.
	wait("heartbeat of a after its join", func() bool {
		id, gen := am.cl.GroupMetadata()
		mu.Lock()
		defer mu.Unlock()
		return beats[id] >= gen && gen > 0
	})
	if am.probe() {
		t.Fatal("a probe in a stable group asked to rejoin")
	}
	aID, _ := am.cl.GroupMetadata()
	b, _ := start()
	defer b.end()
	wait("b's join at the coordinator", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range joined {
			if id != aID {
				return true
			}
		}
		return false
	})
	// The group waits for a to rejoin (the coordinator's
	// PreparingRebalance): a's commits for its generation still go
	// through, so its thread need not hold them back.
	if am.Rebalancing() {
		t.Error("a reports a rebalance to hold commits for while the group only waits for it to join")
	}
	aID, aGen := am.cl.GroupMetadata()
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.MemberID, commit.Generation = "probe", aID, aGen
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "in"
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	resp, err := commit.RequestWith(context.Background(), am.cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		t.Errorf("a commit while the group waits for a's join: %v", err)
	}
	if !am.probe() {
		t.Fatal("a probe while b joined did not ask to rejoin")
	}
	wait("a and b with a partition each", func() bool { return len(a.owns()) == 1 && len(b.owns()) == 1 })
}

// A member reports a rebalance to hold commits for only while its
// SyncGroup is under way (the coordinator refuses commits then), not from
// its JoinGroup on; a failed SyncGroup ends it too.
func TestMemberRebalancingOnlyWhileItsSyncGroupIsUnderWay(t *testing.T) {
	m := &Member{}
	h := memberHook{m}
	write := func(key kmsg.Key) { h.OnBrokerWrite(kgo.BrokerMetadata{}, int16(key), 0, 0, 0, nil) }
	answer := func(key kmsg.Key, err error) {
		h.OnBrokerE2E(kgo.BrokerMetadata{}, int16(key), kgo.BrokerE2E{ReadErr: err})
	}
	for i, step := range []struct {
		do                   func()
		joining, rebalancing bool
	}{
		{func() { write(kmsg.JoinGroup) }, true, false},
		{func() { answer(kmsg.JoinGroup, nil) }, true, false},
		{func() { write(kmsg.SyncGroup) }, true, true},
		{func() { answer(kmsg.SyncGroup, nil) }, false, false},
		{func() { write(kmsg.JoinGroup); write(kmsg.SyncGroup) }, true, true},
		{func() { answer(kmsg.SyncGroup, errors.New("connection reset")) }, false, false},
	} {
		step.do()
		if m.joining.Load() != step.joining || m.Rebalancing() != step.rebalancing {
			t.Errorf("step %d: joining %v, rebalancing %v; want %v, %v", i, m.joining.Load(), m.Rebalancing(), step.joining, step.rebalancing)
		}
	}
}

// An offset commit the coordinator refuses because the group completed a
// rebalance meanwhile (ILLEGAL_GENERATION) is sent again for the member's
// new generation once it has synced; one refused for a generation that
// never moves on is returned as refused.
func TestCommitThroughRebalanceSendsForTheNewGeneration(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	m := newTestMember(t, kclient.Config{"bootstrap.servers": cluster.ListenAddrs()[0], "group.id": "regen"})
	a := startMemberOn(t, m, func() kclient.MemberState { return kclient.MemberState{} })
	defer a.end()
	a.waitOwns([]int32{0, 1})
	id, gen := m.cl.GroupMetadata()

	type sent struct {
		id  string
		gen int32
	}
	var sends []sent
	err = m.commitThroughRebalance(context.Background(), id, gen, func(id string, gen int32) error {
		sends = append(sends, sent{id, gen})
		if len(sends) == 1 {
			m.cl.ForceRebalance() // the group moves to the next generation
			return kerr.IllegalGeneration
		}
		return nil
	})
	if err != nil {
		t.Fatalf("commit through a rebalance: %v", err)
	}
	if len(sends) != 2 || sends[1].id != id || sends[1].gen <= gen {
		t.Fatalf("sends %v, want the generation %d and then a later one", sends, gen)
	}

	_, now := m.cl.GroupMetadata()
	err = m.commitThroughRebalance(context.Background(), id, now, func(string, int32) error { return kerr.IllegalGeneration })
	if !errors.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("a generation that never moves on: %v, want ILLEGAL_GENERATION", err)
	}
}
