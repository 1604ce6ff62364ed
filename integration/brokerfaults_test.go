package integration_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
)

// Broker faults: the app heals by itself. Three worker processes run a
// running count and sum per key (caching off, so every update is in the
// output) on a Kafka cluster of the test's own while input keeps flowing;
// brokers are SIGKILLed and restarted on their data, each fault placed by
// committed progress. No worker exits or is restarted, and the committed
// output is exact.

// sumApp is the running-sum application under test.
type sumApp struct {
	*wordApp
	values map[string][]int64 // each key's input values, in order
}

func newSumApp(t *testing.T, brokers string, partitions int32) *sumApp {
	a := &sumApp{wordApp: newWordApp(t, brokers, partitions), values: map[string][]int64{}}
	a.internal = nil // no repartition
	return a
}

// records returns n new input records: 50 keys, values 1..100.
func (a *sumApp) records(n int) []kafkatest.Record {
	i64 := serde.Int64()
	recs := make([]kafkatest.Record, 0, n)
	for range n {
		k := fmt.Sprintf("key-%02d", a.rng.IntN(50))
		v := int64(1 + a.rng.IntN(100))
		a.values[k] = append(a.values[k], v)
		b, _ := i64.Serialize(a.input, v)
		recs = append(recs, kafkatest.Record{Key: []byte(k), Value: b})
	}
	return recs
}

// updates returns each key's committed "<count>:<sum>" updates, in order.
func (a *sumApp) updates() map[string][]string {
	out := map[string][]string{}
	for _, r := range kafkatest.ConsumeAll(a.t, a.brokers, a.output) {
		out[string(r.Key)] = append(out[string(r.Key)], string(r.Value))
	}
	return out
}

// checkExact: every key's updates are exactly 1:v1, 2:v1+v2, … — no
// duplicate, no gap — ending at the batch result.
func (a *sumApp) checkExact() {
	a.t.Helper()
	got := a.updates()
	bad := 0
	for k, vs := range a.values {
		seq := got[k]
		ok := len(seq) == len(vs)
		var sum int64
		for i := 0; ok && i < len(vs); i++ {
			sum += vs[i]
			ok = seq[i] == fmt.Sprintf("%d:%d", i+1, sum)
		}
		if !ok {
			if bad++; bad <= 5 {
				a.t.Errorf("key %s: %d updates (want %d), %s", k, len(seq), len(vs), firstDiff(seq, vs))
			}
		}
	}
	if bad > 0 {
		a.t.Fatalf("%d of %d keys not exact", bad, len(a.values))
	}
}

// checkNothingLost: every key's last update counts at least its records
// and sums at least their values (at-least-once may count some twice).
func (a *sumApp) checkNothingLost() {
	a.t.Helper()
	got := a.updates()
	for k, vs := range a.values {
		var want int64
		for _, v := range vs {
			want += v
		}
		seq := got[k]
		var n, sum int64
		if len(seq) > 0 {
			fmt.Sscanf(seq[len(seq)-1], "%d:%d", &n, &sum)
		}
		if n < int64(len(vs)) || sum < want {
			a.t.Fatalf("key %s: last update %d:%d, below the batch result %d:%d", k, n, sum, len(vs), want)
		}
	}
}

func firstDiff(seq []string, vs []int64) string {
	var sum int64
	for i, v := range vs {
		sum += v
		want := fmt.Sprintf("%d:%d", i+1, sum)
		if i >= len(seq) || seq[i] != want {
			got := "nothing"
			if i < len(seq) {
				got = seq[i]
			}
			return fmt.Sprintf("update %d is %s, want %s", i+1, got, want)
		}
	}
	return fmt.Sprintf("%d extra updates after %d:%d", len(seq)-len(vs), len(vs), sum)
}

// progress samples the group's committed input in the background and
// measures stalls: spans without new committed input while input was
// pending.
type progress struct {
	mu        sync.Mutex
	committed int64
	sampled   time.Time // when committed was last read
	lastMove  time.Time
	maxStall  time.Duration
	failed    int   // samples that could not be read
	lastErr   error // why the last one could not
	stop      chan struct{}
	done      chan struct{}
}

func watchProgress(t *testing.T, a *sumApp) *progress {
	p := &progress{lastMove: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			// A client per sample: one that lived through a broker's death
			// can keep asking a stale coordinator.
			cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(a.brokers, ",")...))
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := kadm.NewClient(cl).FetchOffsets(ctx, a.app)
			cancel()
			cl.Close()
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				p.mu.Lock()
				p.failed, p.lastErr = p.failed+1, err
				p.mu.Unlock()
				continue // the broker is down
			}
			var n int64
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Topic == a.input && o.At > 0 {
					n += o.At
				}
			})
			p.mu.Lock()
			now := time.Now()
			p.sampled = now
			// A stall is the span between two increases of the committed
			// input (the feed never stops, so input is always pending);
			// it spans the outages, when nothing can be read.
			if n > p.committed {
				p.maxStall = max(p.maxStall, now.Sub(p.lastMove))
				p.committed, p.lastMove = n, now
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *progress) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *progress) snapshot() (int64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed, p.maxStall
}

// waitResumed waits until the committed input grows past what it was when
// the broker came back (read after back), or reaches all input (total; in a
// cluster, processing may finish while a broker is down), returning how long
// after back that happened.
func (p *progress) waitResumed(t *testing.T, back time.Time, total int64, timeout time.Duration, workers []*worker) time.Duration {
	t.Helper()
	base := int64(-1)
	for time.Since(back) < timeout {
		p.mu.Lock()
		n, at := p.committed, p.sampled
		p.mu.Unlock()
		switch {
		case n >= total:
			return time.Since(back)
		case base < 0 && at.After(back):
			base = n
		case base >= 0 && n > base:
			return time.Since(back)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Ask each worker for its goroutines (SIGQUIT: Go prints them all to
	// the log and exits), so the log says where it hangs.
	for _, w := range workers {
		w.cmd.Process.Signal(syscall.SIGQUIT)
	}
	// Wait (up to 10s) until every log holds a dump that stopped growing.
	size := func(w *worker) int64 {
		b, err := os.ReadFile(w.log)
		if err != nil || !strings.Contains(string(b), "goroutine ") {
			return -1
		}
		return int64(len(b))
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		before := make([]int64, len(workers))
		for i, w := range workers {
			before[i] = size(w)
		}
		time.Sleep(200 * time.Millisecond) // poll interval
		settled := true
		for i, w := range workers {
			settled = settled && before[i] >= 0 && size(w) == before[i]
		}
		if settled {
			break
		}
	}
	for _, w := range workers {
		if b, err := os.ReadFile(w.log); err == nil {
			if i := strings.Index(string(b), "goroutine "); i >= 0 {
				t.Logf("goroutines of %s:\n%s", w.name, b[i:])
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Fatalf("processing did not resume within %v of the broker coming back (committed input %d; %d samples failed, the last with %v)", timeout, p.committed, p.failed, p.lastErr)
	return 0
}

// fedSoFar: input records acknowledged so far, over every feed.
func (a *wordApp) fedSoFar() int {
	n := int(a.fed) - int(a.phaseLines)
	if len(a.feeds) > 0 {
		n += a.feeds[len(a.feeds)-1].Produced()
	}
	return n
}

// outage is one broker fault: which node, when (committed fraction), how
// long it stays down.
type outage struct {
	node     func() int
	at       float64
	down     time.Duration
	describe string
}

// runOutages runs three workers under guarantee through the outages and
// reports what it saw; the caller checks the output.
func runOutages(t *testing.T, c *scriptCluster, a *sumApp, extra []string, records, rate int, outages []outage) {
	t.Helper()
	args := append([]string{"-topology", "sum", "-cache=false"}, extra...)
	w := []*worker{a.start("p0", args...), a.start("p1", args...), a.start("p2", args...)}
	prog := watchProgress(t, a)
	a.feedRecords(rate, a.records(records)...)
	for _, o := range outages {
		var node int
		a.strike(o.describe, o.at, o.at+0.3, func() {
			node = o.node()
			c.kill(node)
		})
		time.Sleep(o.down) // the outage itself: the fault's length, not a wait for progress
		c.restart(node)
		resumed := prog.waitResumed(t, time.Now(), int64(records), 3*time.Minute, w)
		t.Logf("node %d back after %v down; committed input moved again %v later", node, o.down, resumed.Round(100*time.Millisecond))
	}
	a.waitDone(5 * time.Minute)
	_, stall := prog.snapshot()
	for _, x := range w {
		if x.cmd.ProcessState != nil {
			t.Fatalf("worker %s exited during the outages; log:\n%s", x.name, tail(x.log))
		}
	}
	var restored int64
	var warnings int
	for _, x := range w {
		restored += x.restored()
		warnings += len(x.entriesAt("warn"))
	}
	for _, x := range w {
		x.stop(t)
	}
	t.Logf("longest stall with input pending: %v; warnings logged by the workers: %d; changelog records restored: %d",
		stall.Round(100*time.Millisecond), warnings, restored)
}

// Single broker, exactly-once: SIGKILLed, down 15 s, restarted on its data;
// twice. Output exact.
func TestBrokerRestartsExactlyOnce(t *testing.T) {
	realBroker(t)
	t.Parallel() // a cluster of its own; mostly waiting out outages
	c := startScriptCluster(t, 1)
	a := newSumApp(t, c.bootstrap(), 4)
	one := func() int { return 1 }
	runOutages(t, c, a, []string{"-guarantee", "exactly_once"}, 20_000, 500, []outage{
		{one, 0.15, 15 * time.Second, "SIGKILL of the broker (1st outage)"},
		{one, 0.55, 15 * time.Second, "SIGKILL of the broker (2nd outage)"},
	})
	a.checkExact()
}

// The same under at-least-once: nothing lost.
func TestBrokerRestartsAtLeastOnce(t *testing.T) {
	realBroker(t)
	t.Parallel() // a cluster of its own; mostly waiting out outages
	c := startScriptCluster(t, 1)
	a := newSumApp(t, c.bootstrap(), 4)
	one := func() int { return 1 }
	runOutages(t, c, a, []string{"-guarantee", "at_least_once", "-commit", "500ms"}, 20_000, 500, []outage{
		{one, 0.15, 15 * time.Second, "SIGKILL of the broker (1st outage)"},
		{one, 0.55, 15 * time.Second, "SIGKILL of the broker (2nd outage)"},
	})
	a.checkNothingLost()
}

// An outage longer than the transaction timeout: the broker aborts the open
// transactions when it comes back; the app recovers by itself, exactly.
func TestBrokerDownLongerThanTransactionTimeout(t *testing.T) {
	realBroker(t)
	t.Parallel() // a cluster of its own; mostly waiting out outages
	c := startScriptCluster(t, 1)
	a := newSumApp(t, c.bootstrap(), 4)
	one := func() int { return 1 }
	runOutages(t, c, a, []string{"-guarantee", "exactly_once", "-transaction-timeout", "10s"}, 12_000, 400, []outage{
		{one, 0.2, 30 * time.Second, "SIGKILL of the broker for 30s (transaction timeout 10s)"},
	})
	a.checkExact()
}

// Three brokers (replication factor 3, min.insync.replicas 2): the broker
// leading the first input partition and its changelog partition is
// SIGKILLed, and later restarted. Leadership fails over; output exact.
func TestLeaderFailoverInThreeBrokerCluster(t *testing.T) {
	realBroker(t)
	c := startScriptCluster(t, 3)
	a := newSumApp(t, c.bootstrap(), 4)
	leader := func() int {
		n := c.leader(a.input, 0)
		t.Logf("input partition 0 is led by node %d; its changelog partition by node %d", n, c.leader(a.app+"-sums-changelog", 0))
		return n
	}
	runOutages(t, c, a, []string{"-guarantee", "exactly_once"}, 16_000, 400, []outage{
		{leader, 0.2, 10 * time.Second, "SIGKILL of the input's leader"},
	})
	a.checkExact()
}

// entriesAt returns the worker's JSON log lines at a level.
func (w *worker) entriesAt(level string) []map[string]any {
	var out []map[string]any
	for _, e := range w.all() {
		if e["level"] == level {
			out = append(out, e)
		}
	}
	return out
}
