package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The placement workload: more stream threads than partitions. A word
// count (words read and repartitioned by word, then counted: two
// sub-topologies) over 4 partitions has 8 tasks; each system runs it with
// 8 instances of one stream thread, then 4 instances of two, all started
// together, exactly-once, lines flowing at 2,000 a second. Once every
// instance's tasks have stayed the same for 10 s it reports, per thread,
// the tasks it runs and the records it processed in the next 10 s, and how
// many threads ran no task or processed nothing.

// threadTasks is one stream thread as a child's last "TASKS" line says.
type threadTasks struct {
	tasks     string // comma-separated ids, "-" none
	processed int64
}

// parseTasks reads "TASKS ids:n ids:n …".
func parseTasks(line string) ([]threadTasks, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "TASKS" {
		return nil, false
	}
	var out []threadTasks
	for _, t := range f[1:] {
		ids, n, ok := strings.Cut(t, ":")
		if !ok {
			return nil, false
		}
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, threadTasks{tasks: ids, processed: v})
	}
	return out, true
}

type placementRow struct {
	layout, system string
	threads        int
	// idle: threads that ran no task or processed nothing in the window.
	idle    int
	err     string
	perThrd []string
}

func (b *bench) placementWorkload() {
	const partitions, rate = 4, 2_000
	fmt.Printf("placement: word count (two sub-topologies, 8 tasks) over %d partitions, exactly-once, %d lines/s, instances started together\n", partitions, rate)
	var rows []placementRow
	for _, layout := range [][2]int{{8, 1}, {4, 2}} {
		for _, sys := range []string{"eddy", "kstreams"} {
			if !b.o.want(b.o.systems, sys) {
				continue
			}
			r := b.placementRun(sys, layout[0], layout[1], partitions, rate)
			rows = append(rows, r)
			if r.err != "" {
				fmt.Printf("  placement %-8s %s failed: %s\n", sys, r.layout, r.err)
				continue
			}
			fmt.Printf("  placement %-8s %s: %d of %d threads idle; %s\n", sys, r.layout, r.idle, r.threads, strings.Join(r.perThrd, "; "))
		}
	}
	fmt.Printf("\n| instances × threads | system | stream threads | threads idle (no task, or no record in 10 s) | tasks and records per thread |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		name := map[string]string{"eddy": "eddy", "kstreams": "Kafka Streams"}[r.system]
		if r.err != "" {
			fmt.Printf("| %s | %s | — | failed: %s | |\n", r.layout, name, r.err)
			continue
		}
		fmt.Printf("| %s | %s | %d | %d | %s |\n", r.layout, name, r.threads, r.idle, strings.Join(r.perThrd, "; "))
	}
	fmt.Println()
}

// placementRun runs one system with instances × threads.
func (b *bench) placementRun(sys string, instances, threads, partitions, rate int) placementRow {
	row := placementRow{layout: fmt.Sprintf("%d × %d", instances, threads), system: sys, threads: instances * threads}
	nonce := time.Now().UnixNano() % 1e6
	in := b.topic(fmt.Sprintf("pl-lines-%s-%d-%d", sys, instances, nonce))
	app := b.topic(fmt.Sprintf("pl-%s-%d-%d", sys, instances, nonce))
	out := app + "-out"
	b.create(in, int32(partitions))
	b.create(out, int32(partitions))
	var procs []*childProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for range instances {
		state, remove := stateDir("eddybench-pl-")
		defer remove()
		procs = append(procs, startChild(b.placementCommand(sys, app, in, out, state, threads)))
	}
	for _, p := range procs {
		if err := p.waitRunning(3 * time.Minute); err != nil {
			row.err = err.Error()
			return row
		}
	}
	ctx, stopFeed := context.WithCancel(context.Background())
	defer stopFeed()
	go b.feedLines(ctx, in, rate)
	// Settled: no instance's tasks changed for 10 s.
	last, since := "", time.Now()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Since(since) < 10*time.Second {
		if time.Now().After(deadline) {
			row.err = "the assignment did not settle within 5 minutes"
			return row
		}
		var sig strings.Builder
		for _, p := range procs {
			for _, t := range p.threadTasks() {
				sig.WriteString(t.tasks + ";")
			}
			sig.WriteString("|")
		}
		if s := sig.String(); s != last {
			last, since = s, time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	before := make([][]threadTasks, len(procs))
	for i, p := range procs {
		before[i] = p.threadTasks()
	}
	time.Sleep(10 * time.Second)
	for i, p := range procs {
		after := p.threadTasks()
		for j, t := range after {
			n := t.processed
			if j < len(before[i]) {
				n -= before[i][j].processed
			}
			if t.tasks == "-" || n == 0 {
				row.idle++
			}
			row.perThrd = append(row.perThrd, fmt.Sprintf("%s %d", t.tasks, n))
		}
	}
	return row
}

// placementCommand is one instance of sys with threads stream threads,
// reporting its threads' tasks.
func (b *bench) placementCommand(sys, app, in, out, state string, threads int) *exec.Cmd {
	if sys == "kstreams" {
		if b.o.kstreams == "" {
			fail("kstreams: no classpath (-kstreams-classpath; scripts/bench.sh builds bench/kstreams)")
		}
		return exec.Command("java", "-cp", b.o.kstreams,
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile="+ksLog(state),
			fmt.Sprintf("-Deddy.threads=%d", threads), "-Deddy.report.tasks=true",
			"eddy.bench.KStreamsBench", "wordcount", "exactly_once", b.o.brokers, app, state, "100", out, in)
	}
	return exec.Command(must(os.Executable()), "child", "-system", "eddy", "-workload", "wordcount", "-guarantee", "exactly_once",
		"-brokers", b.o.brokers, "-app", app, "-state", state, "-commit-ms", "100", "-out", out, "-in", in,
		fmt.Sprintf("-threads=%d", threads), "-report-tasks")
}

// feedLines writes lines of words to topic at rate a second until ctx
// ends.
func (b *bench) feedLines(ctx context.Context, topic string, rate int) {
	rng := rand.New(rand.NewPCG(5, 6))
	const tick = 20 * time.Millisecond
	per := max(1, rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		recs := make([]*kgo.Record, per)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "l%d", i), Value: line(rng)}
			i++
		}
		b.cl.ProduceSync(ctx, recs...)
	}
}
