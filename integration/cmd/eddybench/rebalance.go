package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The rebalance workload: a count per key over -rebalance-keys distinct
// keys (the state), -rebalance-partitions partitions, exactly-once, input
// flowing at -rebalance-rate records/s, while the group changes: a second
// instance joins, a third joins, one stops gracefully, one is SIGKILLed.
// Each system runs it with its defaults and with one standby replica; the
// session timeout is -rebalance-session for both (the SIGKILL's first
// pause is that timeout, whoever the system). For each event it measures,
// from the output (read committed, as it becomes visible): how many
// partitions' output paused longer than a second, the longest pause, the
// changelog records the instances restored, the time until every
// partition's output flowed again (its last pause over a second ended),
// and the time until the assignment was balanced (every instance holding
// its share of the input partitions). The output is checked at the end:
// each key's last count sums to the input.
//
// A count per key writes output partition p from task p (the same key,
// the same partitioner, as many partitions): a partition's output is its
// task's.

type rbOptions struct {
	keys, rate, partitions int
	session                time.Duration
	// cases: the cases to run, by workload (statecount, regroupcount).
	cases string
}

// rbEvent is what one event did to the group.
type rbEvent struct {
	name string
	// paused: the partitions whose output paused longer than a second;
	// longest the longest pause; flowing when the last pause over a
	// second ended, after the event (0: none); balanced when the
	// assignment was balanced, after the event (-1: not within the wait).
	paused            int
	longest           time.Duration
	flowing, balanced time.Duration
	restored          int64
	// steady: the longest pause of any partition in the 3 s before the
	// event (the system's own jitter, to read longest against).
	steady time.Duration
	// where: the longest pause's partition and when it ended, after the
	// event (to find it in the instances' logs).
	where pauseAt
	at    time.Time
}

type rbRun struct {
	sys      string
	standbys int
	events   []rbEvent
	err      string
	output   string
}

// rbCase is one topology and sequence of events of the rebalance
// workload.
type rbCase struct {
	name string
	// workload: the topology (statecount: a count per key, one
	// sub-topology; regroupcount: the same count after a repartition by
	// key, two sub-topologies).
	workload   string
	partitions int
	// events: the instances started in turn after the first (scale-outs),
	// then a graceful stop of the last and a SIGKILL of the one before.
	scaleTo int
}

func (b *bench) rebalanceWorkload() {
	o := b.o.rb
	cases := []rbCase{
		{name: "a count per key", workload: "statecount", partitions: o.partitions, scaleTo: 3},
		// Two partitions, four tasks: the third and fourth instances
		// scale past the partition count.
		{name: "a count per key after a repartition (two sub-topologies), scaled past the partition count", workload: "regroupcount", partitions: 2, scaleTo: 4},
	}
	for _, c := range cases {
		if !b.o.want(b.o.rb.cases, c.workload) {
			continue
		}
		fmt.Printf("rebalance: %s over %d keys, %d partitions, exactly-once, input at %d records/s, session timeout %v\n",
			c.name, o.keys, c.partitions, o.rate, o.session)
		var runs []rbRun
		for _, sys := range []string{"eddy", "kstreams"} {
			if !b.o.want(b.o.systems, sys) {
				continue
			}
			for _, sb := range []int{0, 1} {
				r := b.rebalanceRun(c, sys, sb)
				runs = append(runs, r)
				if r.err != "" {
					fmt.Printf("  rebalance %-8s standbys %d failed: %s\n", sys, sb, r.err)
					continue
				}
				for _, e := range r.events {
					fmt.Printf("  rebalance %-8s standbys %d  %-14s %d partitions paused > 1 s, longest %.2f s (partition %d, ended %.2f s after the event at %s; %.2f s in the 3 s before), restored %d records, all flowing after %s, balanced after %s\n",
						sys, sb, e.name, e.paused, e.longest.Seconds(), e.where.partition, e.where.ended.Seconds(), e.at.UTC().Format("15:04:05.000"), e.steady.Seconds(), e.restored, secs(e.flowing), secs(e.balanced))
				}
				fmt.Printf("  rebalance %-8s standbys %d  output: %s\n", sys, sb, r.output)
			}
		}
		fmt.Printf("\n%s:\n\n| event | system | standbys | partitions paused > 1 s | longest pause s | longest in the 3 s before s | records restored | all flowing after s | balanced after s |\n|---|---|---|---|---|---|---|---|---|\n", c.name)
		if len(runs) == 0 {
			continue
		}
		for i := range runs[0].events {
			for _, r := range runs {
				if r.err != "" || i >= len(r.events) {
					continue
				}
				e := r.events[i]
				name := map[string]string{"eddy": "eddy", "kstreams": "Kafka Streams"}[r.sys]
				fmt.Printf("| %s | %s | %d | %d | %.2f | %.2f | %d | %s | %s |\n", e.name, name, r.standbys, e.paused, e.longest.Seconds(), e.steady.Seconds(), e.restored, secs(e.flowing), secs(e.balanced))
			}
		}
		fmt.Println()
	}
}

func secs(d time.Duration) string {
	if d < 0 {
		return "not within the wait"
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}

// rbInstance is one instance of the app under measurement.
type rbInstance struct {
	name   string
	p      *childProc
	remove func()
}

// rebalanceRun runs a case's events on one system with standbys replicas.
func (b *bench) rebalanceRun(c rbCase, sys string, standbys int) rbRun {
	o := b.o.rb
	run := rbRun{sys: sys, standbys: standbys}
	nonce := time.Now().UnixNano() % 1e6
	in := b.topic(fmt.Sprintf("rb-in-%s-%s-%d-%d", c.workload, sys, standbys, nonce))
	app := b.topic(fmt.Sprintf("rb-%s-%s-%d-%d", c.workload, sys, standbys, nonce))
	out := app + "-out"
	keys := o.keys
	b.loadPartitions(in, int32(c.partitions), keys, func(i int) *kgo.Record {
		return &kgo.Record{Key: fmt.Appendf(nil, "key-%010d", i), Value: []byte("1")}
	})
	b.create(out, int32(c.partitions))
	w := workload{name: c.workload, inputs: []string{in}, repartition: c.workload == "regroupcount"}

	instances := map[string]*rbInstance{}
	start := func(name string) *rbInstance {
		state, remove := stateDir("eddybench-rb-")
		inst := &rbInstance{name: name, remove: remove, p: startChild(b.rebalanceCommand(c.workload, sys, app, in, out, state, standbys))}
		instances[name] = inst
		return inst
	}
	defer func() {
		for _, inst := range instances {
			inst.p.stop()
			inst.remove()
		}
	}()

	// The state: the first instance counts every key once.
	first := start("a")
	if err := first.p.waitRunning(3 * time.Minute); err != nil {
		run.err = err.Error()
		return run
	}
	if err := b.waitCaughtUp(app, w, first.p, 30*time.Minute); err != nil {
		run.err = "building the state: " + err.Error()
		return run
	}

	// The output, watched from here; the input, flowing from here.
	watch := b.watchOutput(out, int32(c.partitions))
	defer watch.stop()
	ctx, stopFeed := context.WithCancel(context.Background())
	fed := make(chan int, 1)
	go func() { fed <- b.feedKeys(ctx, in, keys, o.rate) }()
	time.Sleep(10 * time.Second) // steady flow before the first event

	members := 1
	event := func(name string, want int, do func() error) bool {
		restored := map[string]int64{}
		for n, inst := range instances {
			restored[n] = inst.p.restored.Load()
		}
		at := time.Now()
		_, steady, _, _ := watch.pauses(at.Add(-3*time.Second), at, time.Second)
		if err := do(); err != nil {
			run.err = name + ": " + err.Error()
			return false
		}
		members = want
		balanced := b.waitBalanced(app, members, at, 90*time.Second)
		// Every partition flowing for 3 s after balance (or the wait).
		end := watch.waitFlowing(3*time.Second, 60*time.Second)
		e := rbEvent{name: name, balanced: balanced, steady: steady, at: at}
		e.paused, e.longest, e.flowing, e.where = watch.pauses(at, end, time.Second)
		for n, inst := range instances {
			e.restored += inst.p.restored.Load() - restored[n]
		}
		run.events = append(run.events, e)
		return true
	}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}[:c.scaleTo]
	ok := true
	for i := 1; ok && i < len(names); i++ {
		ok = event(fmt.Sprintf("scale %d → %d", i, i+1), i+1, func() error { return start(names[i]).p.waitRunning(3 * time.Minute) })
	}
	ok = ok && event("graceful stop", len(names)-1, func() error {
		instances[names[len(names)-1]].p.stopAndCommitStats() // SIGTERM, and wait for the exit
		return nil
	}) && event("SIGKILL", len(names)-2, func() error {
		instances[names[len(names)-2]].p.stop()
		return nil
	})
	stopFeed()
	n := <-fed
	if !ok {
		return run
	}
	if err := b.waitCaughtUp(app, w, first.p, 10*time.Minute); err != nil {
		run.err = "catching up after the events: " + err.Error()
		return run
	}
	w.expect.sum = int64(keys + n)
	found, err := b.verify(out, w)
	if err != nil {
		run.err = err.Error()
		return run
	}
	run.output = found
	return run
}

// rebalanceCommand is the process of one instance of sys.
func (b *bench) rebalanceCommand(workload, sys, app, in, out, state string, standbys int) *exec.Cmd {
	session := fmt.Sprint(b.o.rb.session.Milliseconds())
	if sys == "kstreams" {
		if b.o.kstreams == "" {
			fail("kstreams: no classpath (-kstreams-classpath; scripts/bench.sh builds bench/kstreams)")
		}
		return exec.Command("java", "-cp", b.o.kstreams,
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile="+ksLog(state),
			fmt.Sprintf("-Deddy.standbys=%d", standbys), "-Deddy.session.timeout.ms="+session, "-Deddy.report.restored=true",
			"eddy.bench.KStreamsBench", workload, "exactly_once", b.o.brokers, app, state, "100", out, in)
	}
	return exec.Command(must(os.Executable()), "child", "-system", "eddy", "-workload", workload, "-guarantee", "exactly_once",
		"-brokers", b.o.brokers, "-app", app, "-state", state, "-commit-ms", "100", "-out", out, "-in", in,
		"-client", "session.timeout.ms="+session, fmt.Sprintf("-standbys=%d", standbys), "-report-restored")
}

// loadPartitions creates topic with partitions and writes recs(i) for i
// in [0, n) to it.
func (b *bench) loadPartitions(topic string, partitions int32, n int, rec func(i int) *kgo.Record) {
	saved := b.o.partitions
	b.o.partitions = int(partitions)
	defer func() { b.o.partitions = saved }()
	b.load(topic, n, rec)
}

// feedKeys writes records of random keys (of keys) to topic at rate a
// second until ctx ends, and returns how many it wrote.
func (b *bench) feedKeys(ctx context.Context, topic string, keys, rate int) int {
	rng := rand.New(rand.NewPCG(3, 4))
	const tick = 20 * time.Millisecond
	per := max(1, rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			if err := b.cl.Flush(context.Background()); err != nil {
				fail("feeding %s: %v", topic, err)
			}
			return n
		case <-t.C:
		}
		recs := make([]*kgo.Record, per)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%010d", rng.IntN(keys)), Value: []byte("1")}
		}
		if err := b.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			fail("feeding %s: %v", topic, err)
		}
		n += per
	}
}

// waitBalanced waits until the group has members members, stable, each
// holding its share of the partitions it reads (of every topic: tasks of
// different sub-topologies read different topics; shares differ by one at
// most), and returns how long after at that was (-1: not within timeout).
func (b *bench) waitBalanced(group string, members int, at time.Time, timeout time.Duration) time.Duration {
	deadline := at.Add(timeout)
	for time.Now().Before(deadline) {
		gs, err := b.adm.DescribeGroups(context.Background(), group)
		if g, ok := gs[group]; err == nil && ok && g.Err == nil && g.State == "Stable" && len(g.Members) == members {
			var shares []int
			for _, m := range g.Members {
				n := 0
				if c, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range c.Topics {
						n += len(t.Partitions)
					}
				}
				shares = append(shares, n)
			}
			if slices.Max(shares)-slices.Min(shares) <= 1 && slices.Min(shares) > 0 {
				return time.Since(at)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

// outputWatch reads a topic's committed records as they become visible
// and keeps, per partition, when records arrived.
type outputWatch struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards arrivals
	arrivals map[int32][]time.Time
}

func (b *bench) watchOutput(topic string, partitions int32) *outputWatch {
	offsets := map[int32]kgo.Offset{}
	for p := range partitions {
		offsets[p] = kgo.NewOffset().AtEnd()
	}
	cl := must(kgo.NewClient(kgo.SeedBrokers(strings.Split(b.o.brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond)))
	ctx, cancel := context.WithCancel(context.Background())
	w := &outputWatch{cl: cl, cancel: cancel, done: make(chan struct{}), arrivals: map[int32][]time.Time{}}
	for p := range partitions {
		w.arrivals[p] = nil
	}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			w.mu.Lock()
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				if len(p.Records) > 0 {
					w.arrivals[p.Partition] = append(w.arrivals[p.Partition], now)
				}
			})
			w.mu.Unlock()
		}
	}()
	// Let it find the ends before anything is measured.
	time.Sleep(time.Second)
	return w
}

func (w *outputWatch) stop() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

// waitFlowing waits until every partition's output has flowed (each had
// output within the last second) for steady in a row, or until timeout;
// it returns the time then.
func (w *outputWatch) waitFlowing(steady, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	var since time.Time
	for time.Now().Before(deadline) {
		now := time.Now()
		all := true
		w.mu.Lock()
		for _, ts := range w.arrivals {
			if len(ts) == 0 || now.Sub(ts[len(ts)-1]) > time.Second {
				all = false
			}
		}
		w.mu.Unlock()
		switch {
		case !all:
			since = time.Time{}
		case since.IsZero():
			since = now
		case now.Sub(since) >= steady:
			return now
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now()
}

// pauseAt places a pause: its partition, and when it ended after the
// window's start.
type pauseAt struct {
	partition int32
	ended     time.Duration
}

// pauses returns, over [from, to], how many partitions' output paused
// longer than over, the longest pause (a pause running at from counts from
// the partition's last output before it) and where it was, and when,
// after from, the last pause longer than over ended (0: none).
func (w *outputWatch) pauses(from, to time.Time, over time.Duration) (paused int, longest, flowing time.Duration, where pauseAt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for part, ts := range w.arrivals {
		prev := from
		if i, _ := slices.BinarySearchFunc(ts, from, func(a, b time.Time) int { return a.Compare(b) }); i > 0 {
			prev = ts[i-1]
		}
		worst := time.Duration(0)
		for _, t := range ts {
			if t.Before(from) || t.After(to) {
				continue
			}
			gap := t.Sub(prev)
			if gap > longest {
				longest, where = gap, pauseAt{part, t.Sub(from)}
			}
			worst = max(worst, gap)
			if gap > over {
				flowing = max(flowing, t.Sub(from))
			}
			prev = t
		}
		if open := to.Sub(prev); open > longest {
			longest, where = open, pauseAt{part, to.Sub(from)}
		}
		worst = max(worst, to.Sub(prev))
		if worst > over {
			paused++
		}
	}
	return paused, longest, flowing, where
}
