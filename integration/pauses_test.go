package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// outputFlow watches an output topic as a read_committed consumer sees
// it: when records of each partition became visible, to read how long a
// partition's output paused.
type outputFlow struct {
	mu sync.Mutex
	at map[int32][]time.Time // arrivals per partition, one per fetch
}

func watchOutput(t *testing.T, brokers, topic string) *outputFlow {
	t.Helper()
	f := &outputFlow{at: map[int32][]time.Time{}}
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(20*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			f.mu.Lock()
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				if len(p.Records) > 0 {
					f.at[p.Partition] = append(f.at[p.Partition], now)
				}
			})
			f.mu.Unlock()
		}
	}()
	return f
}

// flowingSince reports whether every one of n partitions has shown output
// after at.
func (f *outputFlow) flowingSince(at time.Time, n int32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range n {
		a := f.at[p]
		if len(a) == 0 || !a[len(a)-1].After(at) {
			return false
		}
	}
	return true
}

// waitFlowing waits until every partition showed output after at.
func (f *outputFlow) waitFlowing(t *testing.T, at time.Time, n int32) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !f.flowingSince(at, n) {
		if time.Now().After(deadline) {
			t.Fatalf("the output of some partition did not flow within 3m of %s", at.Format("15:04:05.000"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// longestPause returns the longest time any partition's output stood still
// within [from, to] (a pause that began before from counts from its start),
// and its partition.
func (f *outputFlow) longestPause(from, to time.Time) (time.Duration, int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var longest time.Duration
	var where int32 = -1
	for p, a := range f.at {
		for i := 1; i < len(a); i++ {
			if a[i].Before(from) || a[i-1].After(to) {
				continue
			}
			if gap := a[i].Sub(a[i-1]); gap > longest {
				longest, where = gap, p
			}
		}
	}
	return longest, where
}

// feedContinuously writes new lines at perSecond a second until the
// returned stop is called (which waits for them to be acknowledged): input
// that flows for as long as a test needs. The lines are counted into the
// batch result as they are written; nothing else may write lines meanwhile.
func (a *wordApp) feedContinuously(perSecond int) (stop func()) {
	a.t.Helper()
	cl := kafkatest.Client(a.t, a.brokers, kgo.ProducerLinger(5*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const tick = 50 * time.Millisecond
	chunk := max(1, perSecond*int(tick/time.Millisecond)/1000)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-t.C:
			}
			recs := a.newLines(chunk)
			krs := make([]*kgo.Record, len(recs))
			for i, r := range recs {
				krs[i] = &kgo.Record{Topic: a.input, Key: r.Key, Value: r.Value}
			}
			if err := cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
				done <- err
				return
			}
			a.fed += int64(chunk)
		}
	}()
	return func() {
		a.t.Helper()
		cancel()
		if err := <-done; err != nil {
			a.t.Fatalf("feeding %s: %v", a.input, err)
		}
	}
}

// Scaling out under exactly-once, ten times over: each time a new instance
// (a fresh state directory) joins an instance holding all six tasks, warms
// up copies of its share from offset 0 of changelogs of over 40k records each,
// and takes them over, while input keeps flowing. No partition's output
// may stand still longer than 0.5 s in any repetition, from the join until
// every partition flows again after the assignment is balanced (a stream
// thread that waited 5 s on its producer's metadata, issue 66, paused all
// of its partitions), and the output stays exact.
func TestScaleOutWithWarmUpsFromZeroPausesNoPartition(t *testing.T) {
	brokers := realBroker(t)
	const parts = 6
	a := newWordApp(t, brokers, parts)
	args := []string{"-guarantee", "exactly_once", "-cache=false"}
	a.produce(100_000) // 300,000 count updates: ~50k records per changelog partition
	flow := watchOutput(t, brokers, a.output)
	w0 := a.start("p0", args...)
	w0.waitRunning(t, 2*time.Minute)
	kafkatest.WaitCaughtUp(t, brokers, a.app, 5*time.Minute, append([]string{a.input}, a.internal...)...)
	changelog := a.app + "-counts-changelog"
	for p, end := range kafkatest.EndOffsets(t, brokers, changelog) {
		if end < 40_000 {
			t.Fatalf("changelog partition %d holds %d records before the scale-outs; want at least 40k", p, end)
		}
	}
	stop := a.feedContinuously(1_500)
	var pauses []string
	worst := time.Duration(0)
	for i := range 10 {
		flow.waitFlowing(t, time.Now(), parts)
		from := time.Now()
		w1 := a.start(fmt.Sprintf("p1-%d", i), args...)
		deadline := time.Now().Add(3 * time.Minute)
		for len(w1.countingPartitions(t)) < parts/2 || len(w1.inputPartitions(t)) < parts/2 {
			if time.Now().After(deadline) {
				t.Fatalf("repetition %d: p1 owns the tasks of partitions %v (input) and %v (counting) 3m after joining; want %d each; log:\n%s",
					i, w1.inputPartitions(t), w1.countingPartitions(t), parts/2, tail(w1.log))
			}
			time.Sleep(50 * time.Millisecond)
		}
		balanced := time.Now()
		flow.waitFlowing(t, balanced, parts)
		longest, where := flow.longestPause(from, time.Now())
		fromZero := 0
		for _, e := range w1.entries("following changelog for a standby task") {
			if e["from"] == float64(0) {
				fromZero++
			}
		}
		pauses = append(pauses, fmt.Sprintf("%.2f s (partition %d)", longest.Seconds(), where))
		t.Logf("repetition %d: balanced %.1f s after the join; %d warm-ups from offset 0; longest pause of any partition %.3f s (partition %d)",
			i, balanced.Sub(from).Seconds(), fromZero, longest.Seconds(), where)
		if fromZero == 0 {
			t.Errorf("repetition %d: p1 warmed up no task from offset 0; log:\n%s", i, tail(w1.log))
		}
		if longest > 500*time.Millisecond {
			t.Errorf("repetition %d: partition %d's output paused %.3f s (want at most 0.5 s); p1's log:\n%s", i, where, longest.Seconds(), tail(w1.log))
		}
		worst = max(worst, longest)
		w1.stop(t)
		deadline = time.Now().Add(3 * time.Minute)
		for len(w0.inputPartitions(t)) < parts || len(w0.countingPartitions(t)) < parts {
			if time.Now().After(deadline) {
				t.Fatalf("repetition %d: p0 owns the tasks of %v (input) and %v (counting) 3m after p1 stopped; want all %d", i, w0.inputPartitions(t), w0.countingPartitions(t), parts)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stop()
	a.waitDone(5 * time.Minute)
	w0.stop(t)
	t.Logf("longest pause per repetition: %s; worst %.3f s", strings.Join(pauses, ", "), worst.Seconds())
	for _, e := range w0.entries("stream thread waiting") {
		t.Logf("p0 waited: %v", e)
	}
	a.checkExactSequences()
}
