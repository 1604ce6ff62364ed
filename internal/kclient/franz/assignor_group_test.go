//go:build !eddy_librdkafka

package franz

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
)

// groupMember is a member of a kfake group in a test: what it owns and
// follows, as its rebalances said.
type groupMember struct {
	t       *testing.T
	c       *Member
	mu      sync.Mutex
	owned   []int32
	standby []processor.TaskID // of the last assignment
	warmup  []processor.TaskID // of the last assignment
	log     []string
	stop    chan struct{}
	done    chan struct{}
}

// startMember joins the group of cfg on topic "in", telling the assignor
// state at each join, and serves the member until end.
func startMember(t *testing.T, cfg kclient.Config, state func() kclient.MemberState) *groupMember {
	return startMemberOn(t, newTestMember(t, cfg), state)
}

// newTestMember is a member on cfg.
func newTestMember(t *testing.T, cfg kclient.Config) *Member {
	c, err := ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return NewMember(c)
}

// startMemberOn is startMember with a member made by the caller.
func startMemberOn(t *testing.T, mem *Member, state func() kclient.MemberState) *groupMember {
	m := &groupMember{t: t, c: mem, stop: make(chan struct{}), done: make(chan struct{})}
	mem.ReportState(state)
	err := mem.Subscribe([]string{"in"}, func(rb kclient.Rebalance) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, tp := range rb.Revoked {
			m.owned = slices.DeleteFunc(m.owned, func(p int32) bool { return p == tp.Partition })
			m.log = append(m.log, fmt.Sprintf("-%d", tp.Partition))
		}
		if len(rb.Revoked) == 0 {
			m.standby, m.warmup = rb.Standby, rb.Warmup
		}
		for _, tp := range rb.Assigned {
			m.owned = append(m.owned, tp.Partition)
			m.log = append(m.log, fmt.Sprintf("+%d", tp.Partition))
		}
		slices.Sort(m.owned)
		return nil
	}, func([]kclient.TP) error { return nil }, func([]kclient.TP) {})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			if err := mem.Serve(20 * time.Millisecond); err != nil {
				t.Errorf("%v", err)
				return
			}
		}
	}()
	return m
}

// tasks returns offsets by partition as the offsets of sub-topology 0's
// tasks.
func tasks(offsets map[int32]int64) map[processor.TaskID]int64 {
	out := make(map[processor.TaskID]int64, len(offsets))
	for p, off := range offsets {
		out[processor.TaskID{Partition: p}] = off
	}
	return out
}

func (m *groupMember) owns() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.owned)
}

// waitFor waits until what (of the member, read under its lock) is want.
func (m *groupMember) waitFor(what string, want string, get func() string) {
	m.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.mu.Lock()
		got := get()
		log := slices.Clone(m.log)
		m.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s %s, want %s (rebalances: %v)", what, got, want, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *groupMember) waitOwns(want []int32) {
	m.t.Helper()
	m.waitFor("owns", fmt.Sprint(want), func() string { return fmt.Sprint(m.owned) })
}

func (m *groupMember) end() {
	close(m.stop)
	<-m.done
	m.c.Close()
}

// Through a real group protocol exchange (franz-go's embedded broker): a
// member's reported state reaches the leader's assignor, and a member that
// joins takes over the tasks whose state its instance holds, the old owner
// revoking them first (cooperatively: it keeps its other tasks throughout);
// each instance gets the other's tasks as standbys.
func TestGroupPlacesTasksByReportedState(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := kclient.Config{"bootstrap.servers": c.ListenAddrs()[0], "group.id": "g",
		"session.timeout.ms": "6000", "heartbeat.interval.ms": "100", kclient.Subtopologies: [][]string{{"in"}}}
	static := func(name string, offsets map[int32]int64) func() kclient.MemberState {
		return func() kclient.MemberState {
			return kclient.MemberState{Process: name, Offsets: tasks(offsets), Standbys: 1}
		}
	}
	a := startMember(t, cfg, static("a", map[int32]int64{0: 50, 1: 50, 2: 50, 3: 50}))
	defer a.end()
	a.waitOwns([]int32{0, 1, 2, 3})
	// b's instance holds state of tasks 1 and 3, nearly as far along as a's.
	b := startMember(t, cfg, static("b", map[int32]int64{1: 49, 3: 48}))
	defer b.end()
	b.waitOwns([]int32{1, 3})
	a.waitOwns([]int32{0, 2})
	// Each follows the other's tasks as a standby.
	a.waitFor("standbys", "[0_1 0_3]", func() string { return fmt.Sprint(a.standby) })
	b.waitFor("standbys", "[0_0 0_2]", func() string { return fmt.Sprint(b.standby) })
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.log[4:] {
		if e[0] == '-' && e != "-1" && e != "-3" {
			t.Fatalf("a revoked a task it keeps: rebalances %v", a.log)
		}
	}
}

// Scaling out with warm-ups through the real protocol: a member of a new
// instance with no state gets none of the stateful tasks at first, only
// warm-ups of two of the two it is to get (at most two warm-ups); when its
// state catches up and it asks for a rebalance (Rejoin), the tasks move to
// it, the old owner revoking only those.
func TestGroupWarmsUpThenMoves(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := kclient.Config{"bootstrap.servers": c.ListenAddrs()[0], "group.id": "g",
		"session.timeout.ms": "6000", "heartbeat.interval.ms": "100", kclient.Subtopologies: [][]string{{"in"}}}
	full := map[int32]int64{0: 1000, 1: 1000, 2: 1000, 3: 1000}
	a := startMember(t, cfg, func() kclient.MemberState {
		return kclient.MemberState{Process: "a", Offsets: tasks(full), AcceptableRecoveryLag: 10, MaxWarmups: 2}
	})
	defer a.end()
	a.waitOwns([]int32{0, 1, 2, 3})

	var mu sync.Mutex // guards bState and bMember
	bState := map[int32]int64{}
	var bMember *groupMember
	b := startMember(t, cfg, func() kclient.MemberState {
		mu.Lock()
		defer mu.Unlock()
		s := kclient.MemberState{Process: "b", Offsets: tasks(bState), AcceptableRecoveryLag: 10, MaxWarmups: 2}
		if bMember != nil {
			bMember.mu.Lock()
			s.Warmup, s.Standby = slices.Clone(bMember.warmup), slices.Clone(bMember.standby)
			bMember.mu.Unlock()
		}
		return s
	})
	mu.Lock()
	bMember = b
	mu.Unlock()
	defer b.end()
	b.waitFor("warm-ups", "[0_2 0_3]", func() string { return fmt.Sprint(b.warmup) })
	if got := b.owns(); len(got) != 0 {
		t.Fatalf("b owns %v before its warm-ups caught up", got)
	}
	a.waitOwns([]int32{0, 1, 2, 3})

	// b's warm-ups catch up; it asks for a rebalance.
	mu.Lock()
	bState[2], bState[3] = 995, 1000
	mu.Unlock()
	b.c.Rejoin()
	b.waitOwns([]int32{2, 3})
	a.waitOwns([]int32{0, 1})
	b.waitFor("warm-ups", "[]", func() string { return fmt.Sprint(b.warmup) })
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.log[4:] {
		if e[0] == '-' && e != "-2" && e != "-3" {
			t.Fatalf("a revoked a task it keeps: rebalances %v", a.log)
		}
	}
}
