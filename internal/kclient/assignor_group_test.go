//go:build !eddy_librdkafka

package kclient

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

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
	cfg := Config{"bootstrap.servers": c.ListenAddrs()[0], "group.id": "g",
		"session.timeout.ms": "6000", "heartbeat.interval.ms": "100"}

	type member struct {
		c       Consumer
		mu      sync.Mutex
		owned   []int32
		standby []TP // of the last assignment
		log     []string
		stop    chan struct{}
		done    chan struct{}
	}
	start := func(name string, state map[int32]int64) *member {
		cons, err := NewGroupConsumer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &member{c: cons, stop: make(chan struct{}), done: make(chan struct{})}
		cons.(StateReporter).ReportState(func() MemberState { return MemberState{Process: name, Offsets: state, Standbys: 1} })
		err = cons.Subscribe([]string{"in"}, func(rb Rebalance) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, tp := range rb.Revoked {
				m.owned = slices.DeleteFunc(m.owned, func(p int32) bool { return p == tp.Partition })
				m.log = append(m.log, fmt.Sprintf("-%d", tp.Partition))
			}
			if len(rb.Revoked) == 0 {
				m.standby = rb.Standby
			}
			for _, tp := range rb.Assigned {
				m.owned = append(m.owned, tp.Partition)
				m.log = append(m.log, fmt.Sprintf("+%d", tp.Partition))
			}
			slices.Sort(m.owned)
			return nil
		})
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
				if _, err := cons.Poll(20 * time.Millisecond); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
		}()
		return m
	}
	owns := func(m *member) []int32 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return slices.Clone(m.owned)
	}
	waitOwns := func(m *member, want []int32) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !slices.Equal(owns(m), want) {
			if time.Now().After(deadline) {
				t.Fatalf("owns %v, want %v (rebalances: %v)", owns(m), want, m.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	end := func(m *member) {
		close(m.stop)
		<-m.done
		m.c.Close()
	}

	a := start("a", map[int32]int64{0: 50, 1: 50, 2: 50, 3: 50})
	defer end(a)
	waitOwns(a, []int32{0, 1, 2, 3})
	// b's instance holds state of tasks 1 and 3, nearly as far along as a's.
	b := start("b", map[int32]int64{1: 49, 3: 48})
	defer end(b)
	waitOwns(b, []int32{1, 3})
	waitOwns(a, []int32{0, 2})
	// Each follows the other's tasks as a standby.
	for _, w := range []struct {
		m    *member
		want string
	}{{a, "[in-1 in-3]"}, {b, "[in-0 in-2]"}} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			w.m.mu.Lock()
			got := fmt.Sprint(w.m.standby)
			w.m.mu.Unlock()
			if got == w.want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("standbys %s, want %s", got, w.want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.log[4:] {
		if e[0] == '-' && e != "-1" && e != "-3" {
			t.Fatalf("a revoked a task it keeps: rebalances %v", a.log)
		}
	}
}
