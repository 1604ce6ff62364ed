package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// workload is one benchmark topology and its pre-loaded input.
type workload struct {
	name    string
	records int      // input records counted for the rate (the stream side for join)
	inputs  []string // topics, created and loaded once per bench
	// repartition: the group must also have committed a repartition topic.
	repartition bool
	unit        string // what a record is, for the table
	expect      expectation
}

type bench struct {
	o    options
	run  string
	cl   *kgo.Client
	adm  *kadm.Client
	rows []row
}

// row is one line of the result table.
type row struct {
	workload, guarantee string
	unit                string
	res                 map[string]result // by system
}

type result struct {
	ok      bool
	err     string
	rate    float64 // input records per second
	cpuPerM float64 // CPU seconds per million input records
	maxRSS  float64 // MiB
	// wall and cpu: the run's seconds, from the first record to the last
	// (a run that waits shows wall well above cpu); broker: the broker's
	// CPU seconds meanwhile (EDDY_KAFKA_PID; 0 when not known).
	wall, cpu, broker float64
	commitMs          [4]float64
	output            string // what verify found in the output
}

func newBench(o options) *bench {
	b := &bench{o: o, run: strconv.FormatInt(time.Now().Unix(), 36)}
	b.cl = must(kgo.NewClient(kgo.SeedBrokers(strings.Split(o.brokers, ",")...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000)))
	b.adm = kadm.NewClient(b.cl)
	return b
}

func (b *bench) close() { b.cl.Close() }

func (b *bench) topic(name string) string { return "bench-" + b.run + "-" + name }

func (b *bench) create(topic string, partitions int32) {
	resp := must(b.adm.CreateTopics(context.Background(), partitions, -1, nil, topic))
	if err := resp.Error(); err != nil {
		fail("creating %s: %v", topic, err)
	}
}

func (b *bench) scaled(n int) int { return max(1, int(float64(n)*b.o.scale)) }

var vocabulary = strings.Fields("the river does not hurry yet arrives an eddy is where turns back on itself and keeps what it carries streams of events like water are counted one record at a time once only even when stream interrupted turn count carry")

// line returns a 100-byte value of words.
func line(rng *rand.Rand) []byte {
	var v bytes.Buffer
	for v.Len() < 100 {
		v.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		v.WriteByte(' ')
	}
	return v.Bytes()[:100]
}

// load writes recs(i) for i in [0, n) to topic.
func (b *bench) load(topic string, n int, rec func(i int) *kgo.Record) {
	b.create(topic, int32(b.o.partitions))
	const chunk = 50_000
	for done := 0; done < n; done += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for i := done; i < min(n, done+chunk); i++ {
			r := rec(i)
			r.Topic = topic
			recs = append(recs, r)
		}
		if err := b.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			fail("loading %s: %v", topic, err)
		}
	}
}

// prepare creates and loads a workload's input topics.
func (b *bench) prepare(name string) workload {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Hour)
	start := time.Now()
	var w workload
	switch name {
	case "stateless":
		w = workload{name: name, records: b.scaled(1_000_000), inputs: []string{b.topic("stateless-in")}, unit: "records of 100 B"}
		w.expect.records = w.records
		b.load(w.inputs[0], w.records, func(i int) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: line(rng)}
		})
	case "wordcount":
		w = workload{name: name, records: b.scaled(100_000), inputs: []string{b.topic("lines")}, repartition: true, unit: "lines of ~19 words"}
		b.load(w.inputs[0], w.records, func(i int) *kgo.Record {
			l := line(rng)
			w.expect.sum += int64(len(strings.Fields(string(l))))
			return &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: l}
		})
	case "windowed":
		// 10,000 keys, event time advancing 6 ms a record: 30 minutes of
		// one-minute windows at full scale.
		w = workload{name: name, records: b.scaled(300_000), inputs: []string{b.topic("events")}, unit: "records, 10k keys"}
		w.expect.sum = int64(w.records)
		b.load(w.inputs[0], w.records, func(i int) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "key-%d", rng.IntN(10_000)), Value: []byte("1"),
				Timestamp: base.Add(time.Duration(i) * 6 * time.Millisecond)}
		})
	case "join":
		// A 10,000-key table (older timestamps: both systems read it first)
		// joined by a stream of records over those keys.
		w = workload{name: name, records: b.scaled(300_000), inputs: []string{b.topic("clicks"), b.topic("users")}, unit: "stream records, 10k-key table"}
		w.expect.records = w.records // every key is in the table
		b.load(w.inputs[1], 10_000, func(i int) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "key-%d", i), Value: bytes.Repeat([]byte{'u'}, 50),
				Timestamp: base.Add(-time.Hour)}
		})
		b.load(w.inputs[0], w.records, func(i int) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "key-%d", rng.IntN(10_000)), Value: bytes.Repeat([]byte{'c'}, 50),
				Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		})
	default:
		fail("unknown workload %q", name)
	}
	fmt.Printf("loaded %s (%d %s) in %v\n", name, w.records, w.unit, time.Since(start).Round(time.Millisecond))
	return w
}

func (b *bench) runAll() {
	for _, name := range []string{"stateless", "wordcount", "windowed", "join"} {
		if !b.o.want(b.o.only, name) {
			continue
		}
		w := b.prepare(name)
		for _, g := range []string{"at_least_once", "exactly_once"} {
			if !b.o.want(b.o.guarantees, g) {
				continue
			}
			r := row{workload: name, guarantee: g, unit: w.unit, res: map[string]result{}}
			var systems []string
			for _, sys := range []string{"ceiling", "ceiling-librdkafka", "eddy", "eddy-librdkafka", "kstreams"} {
				if b.o.want(b.o.systems, sys) && (!strings.HasPrefix(sys, "ceiling") || name == "stateless") &&
					(!strings.HasSuffix(sys, "librdkafka") || b.o.librdkafkaBin != "") {
					systems = append(systems, sys)
				}
			}
			// -repeat runs the systems in turns, and each keeps its median
			// run by rate (a failed run counts as the slowest).
			runs := map[string][]result{}
			for range max(b.o.repeat, 1) {
				for _, sys := range systems {
					res := b.runOne(w, sys, g)
					runs[sys] = append(runs[sys], res)
					fmt.Printf("  %-9s %-13s %-8s %s\n", name, g, sys, res)
				}
			}
			for sys, rs := range runs {
				r.res[sys] = median(rs)
			}
			b.rows = append(b.rows, r)
		}
	}
	if len(b.rows) > 0 {
		b.printTable()
		if b.o.svg != "" {
			if err := os.WriteFile(b.o.svg, []byte(chart(b.rows)), 0o644); err != nil {
				fail("writing %s: %v", b.o.svg, err)
			}
			fmt.Printf("chart written to %s\n", b.o.svg)
		}
	}
	if b.o.want(b.o.only, "latency") {
		b.latency()
	}
	if b.o.want(b.o.only, "async") {
		b.asyncWorkload()
	}
	if b.o.want(b.o.only, "state") {
		b.stateWorkload()
	}
	if b.o.want(b.o.only, "rebalance") {
		b.rebalanceWorkload()
	}
	if b.o.want(b.o.only, "placement") {
		b.placementWorkload()
	}
}

// median returns the run with the median rate (of an even count, the
// slower of the two middle ones); failed runs count as the slowest.
func median(rs []result) result {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b result) int {
		switch {
		case a.ok != b.ok:
			if a.ok {
				return 1
			}
			return -1
		case a.rate < b.rate:
			return -1
		case a.rate > b.rate:
			return 1
		}
		return 0
	})
	return sorted[(len(sorted)-1)/2]
}

func (r result) String() string {
	if !r.ok {
		return "failed: " + r.err
	}
	s := fmt.Sprintf("%.0f records/s, %.2f CPU-s per 1M, max RSS %.0f MiB, wall %.2f s on %.2f CPU-s (broker %.2f CPU-s)", r.rate, r.cpuPerM, r.maxRSS, r.wall, r.cpu, r.broker)
	if r.commitMs[2] > 0 {
		s += fmt.Sprintf(", commits p50 %.1f ms p99 %.1f ms (%.0f commits, %.0f over 40 ms)", r.commitMs[0], r.commitMs[1], r.commitMs[2], r.commitMs[3])
	}
	if r.output != "" {
		s += "; " + r.output
	}
	return s
}

// command returns the process that runs system sys on w.
func (b *bench) command(w workload, sys, g, app, out, state string) *exec.Cmd {
	commit := "1000"
	if g == "exactly_once" {
		commit = "100"
	}
	switch sys {
	case "kstreams":
		if b.o.kstreams == "" {
			fail("kstreams: no classpath (-kstreams-classpath; scripts/bench.sh builds bench/kstreams)")
		}
		// slf4j-simple writes StreamThread's per-commit debug line ("Committed
		// all active tasks ... in N ms") to a file, for commit durations
		// measured as eddy's are; everything else below a warning is off.
		args := append([]string{"-cp", b.o.kstreams,
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
			"-Dorg.slf4j.simpleLogger.log.org.apache.kafka.streams.processor.internals.StreamThread=debug",
			"-Dorg.slf4j.simpleLogger.logFile=" + ksLog(state),
			"eddy.bench.KStreamsBench", w.name, g, b.o.brokers, app, state, commit, out}, w.inputs...)
		return exec.Command("java", args...)
	default:
		self := must(os.Executable())
		if strings.HasSuffix(sys, "-librdkafka") {
			self, sys = b.o.librdkafkaBin, strings.TrimSuffix(sys, "-librdkafka")
			if sys == "ceiling" {
				sys = "ceiling-librdkafka"
			}
		}
		args := []string{"child", "-system", sys, "-workload", w.name, "-guarantee", g, "-brokers", b.o.brokers,
			"-app", app, "-state", state, "-commit-ms", commit, "-out", out, "-in", strings.Join(w.inputs, ","), "-client", b.o.client}
		return exec.Command(self, args...)
	}
}

// runOne runs one system on one workload and measures it.
func (b *bench) runOne(w workload, sys, g string) result {
	app := b.topic(fmt.Sprintf("%s-%s-%s-%d", w.name, sys, g, time.Now().UnixNano()%1e6))
	out := app + "-out"
	b.create(out, int32(b.o.partitions))
	state, remove := stateDir("eddybench-")
	defer remove()
	cmd := b.command(w, sys, g, app, out, state)
	p := startChild(cmd)
	defer p.stop()
	if err := p.waitRunning(3 * time.Minute); err != nil {
		return result{err: err.Error()}
	}
	t0, cpu0, broker0 := time.Now(), p.cpu(), brokerCPU()
	// A workload with one output record per input (stateless, join) is
	// done when all its output is readable; the others when their input
	// is committed. (Waiting for the commit alone rounds an at-least-once
	// run up to its next 1 s commit, a fifth of a five-second run.)
	var outAt, cpuOut, brokerOut atomic.Value
	stopWatch := make(chan struct{})
	if w.expect.records > 0 {
		go func() {
			for {
				select {
				case <-stopWatch:
					return
				case <-time.After(10 * time.Millisecond):
				}
				ends, err := b.adm.ListCommittedOffsets(context.Background(), out)
				if err != nil {
					continue
				}
				var n int64
				ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
				if n >= int64(w.expect.records) {
					outAt.Store(time.Now())
					cpuOut.Store(p.cpu())
					brokerOut.Store(brokerCPU())
					return
				}
			}
		}()
	}
	err := b.waitCaughtUp(app, w, p, 10*time.Minute)
	close(stopWatch)
	if err != nil {
		return result{err: err.Error()}
	}
	end, cpu1, broker1 := time.Now(), p.cpu(), brokerCPU()
	if at, ok := outAt.Load().(time.Time); ok && at.Before(end) {
		end, cpu1, broker1 = at, cpuOut.Load().(float64), brokerOut.Load().(float64)
	}
	el := end.Sub(t0).Seconds()
	cpu := cpu1 - cpu0
	res := result{ok: true, rate: float64(w.records) / el, cpuPerM: cpu / float64(w.records) * 1e6, maxRSS: p.maxRSS(),
		wall: el, cpu: cpu, broker: broker1 - broker0}
	res.commitMs = p.stopAndCommitStats()
	if sys == "kstreams" {
		res.commitMs = ksCommitStats(ksLog(state))
	}
	found, err := b.verify(out, w)
	if err != nil {
		return result{err: err.Error()}
	}
	res.output = found
	return res
}

// waitCaughtUp waits until the group has committed every input partition
// to its end (and a repartition topic, when the workload has one).
func (b *bench) waitCaughtUp(group string, w workload, p *childProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		lags, err := b.adm.Lag(context.Background(), group)
		if err == nil {
			if l, ok := lags[group]; ok && l.Error() == nil && caughtUp(l, w) {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("the process exited: %s", p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not caught up within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func caughtUp(l kadm.DescribedGroupLag, w workload) bool {
	for _, t := range w.inputs {
		if _, ok := l.Lag[t]; !ok {
			return false
		}
	}
	sawRepartition := false
	for topic, parts := range l.Lag {
		if strings.HasSuffix(topic, "-repartition") {
			sawRepartition = true
		}
		for _, p := range parts {
			if p.Err != nil || p.Lag > 0 || (p.End.Offset > 0 && p.Commit.At < 0) {
				return false
			}
		}
	}
	return sawRepartition || !w.repartition
}

// parseCommits reads the child's "COMMITS p50 p99 count slow" line.
func parseCommits(line string, stats *[4]float64) {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "COMMITS" {
		return
	}
	for i := range stats {
		stats[i], _ = strconv.ParseFloat(f[i+1], 64)
	}
}

// childProc is a system under measurement, as an OS process.
type childProc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
	done   chan struct{}
	// restored: the changelog records the process restored so far, as
	// its last "RESTORED n" line said (rebalance workload).
	restored atomic.Int64
	// tasks: its threads' tasks and records processed, as its last
	// "TASKS" line said (placement workload).
	tasks atomic.Pointer[[]threadTasks]
}

// threadTasks returns the threads' tasks of the process's last report.
func (p *childProc) threadTasks() []threadTasks {
	if t := p.tasks.Load(); t != nil {
		return *t
	}
	return nil
}

func startChild(cmd *exec.Cmd) *childProc {
	p := &childProc{cmd: cmd, lines: make(chan string, 16), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	stdout := must(cmd.StdoutPipe())
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		fail("starting %s: %v", cmd.Path, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if ts, ok := parseTasks(sc.Text()); ok {
				p.tasks.Store(&ts)
				continue
			}
			if n, ok := strings.CutPrefix(sc.Text(), "RESTORED "); ok {
				if v, err := strconv.ParseInt(n, 10, 64); err == nil {
					p.restored.Store(v)
				}
				continue
			}
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *childProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *childProc) tail() string {
	s := p.stderr.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

func (p *childProc) waitRunning(timeout time.Duration) error {
	t := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if l == "RUNNING" {
				return nil
			}
		case <-p.done:
			return fmt.Errorf("exited before running: %s", p.tail())
		case <-t:
			return fmt.Errorf("not running within %v", timeout)
		}
	}
}

// cpu returns the process's user+system CPU seconds (all threads).
func (p *childProc) cpu() float64 { return processCPU(p.cmd.Process.Pid) }

// brokerCPU returns the CPU seconds the broker process (EDDY_KAFKA_PID,
// which scripts/kafka.sh env exports) has used so far, 0 when not known.
func brokerCPU() float64 {
	pid, err := strconv.Atoi(os.Getenv("EDDY_KAFKA_PID"))
	if err != nil {
		return 0
	}
	return processCPU(pid)
}

// processCPU returns the CPU seconds process pid has used so far (user
// and system), 0 when it cannot be read.
func processCPU(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: utime is the 14th
	// field, stime the 15th (in clock ticks of 1/100 s).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// maxRSS returns the process's peak resident set so far, in MiB.
func (p *childProc) maxRSS() float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// stopAndCommitStats stops the process (SIGTERM) and returns the commit
// durations it reported on exit (eddy's child: p50 and p99 in ms, the
// number of commits and of those over 40.5 ms; Kafka Streams' come from its
// log, ksCommitStats).
func (p *childProc) stopAndCommitStats() [4]float64 {
	p.cmd.Process.Signal(syscall.SIGTERM)
	var stats [4]float64
	t := time.After(90 * time.Second)
	for {
		select {
		case l := <-p.lines:
			parseCommits(l, &stats)
		case <-p.done:
			for {
				select {
				case l := <-p.lines:
					parseCommits(l, &stats)
				default:
					return stats
				}
			}
		case <-t:
			p.cmd.Process.Kill()
			<-p.done
			return stats
		}
	}
}

func (p *childProc) stop() {
	if !p.exited() {
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (b *bench) printTable() {
	fmt.Printf("\n| workload | guarantee | ceiling rec/s (franz-go / librdkafka) | eddy rec/s | eddy (librdkafka) rec/s | Kafka Streams rec/s | eddy / Kafka Streams | eddy / eddy (librdkafka) | eddy CPU-s per 1M (librdkafka) | Kafka Streams CPU-s per 1M | eddy max RSS MiB (librdkafka) | Kafka Streams max RSS MiB | eddy RSS / KS |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	get := func(r row, sys string) (result, bool) {
		x, ok := r.res[sys]
		return x, ok && x.ok
	}
	num := func(r row, sys string, f func(result) float64, format string) string {
		x, ok := get(r, sys)
		if !ok {
			return "—"
		}
		return fmt.Sprintf(format, f(x))
	}
	ratio := func(r row, a, b string, f func(result) float64, format string) string {
		x, xok := get(r, a)
		y, yok := get(r, b)
		if !xok || !yok {
			return "—"
		}
		return fmt.Sprintf(format, f(x)/f(y))
	}
	rate := func(x result) float64 { return x.rate }
	cpu := func(x result) float64 { return x.cpuPerM }
	mem := func(x result) float64 { return x.maxRSS }
	for _, r := range b.rows {
		fmt.Printf("| %s (%s) | %s | %s / %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s (%s) | %s | %s |\n", r.workload, r.unit, r.guarantee,
			num(r, "ceiling", rate, "%.0f"), num(r, "ceiling-librdkafka", rate, "%.0f"),
			num(r, "eddy", rate, "%.0f"), num(r, "eddy-librdkafka", rate, "%.0f"), num(r, "kstreams", rate, "%.0f"),
			ratio(r, "eddy", "kstreams", rate, "**%.2f**"), ratio(r, "eddy", "eddy-librdkafka", rate, "%.2f"),
			num(r, "eddy", cpu, "%.2f"), num(r, "eddy-librdkafka", cpu, "%.2f"), num(r, "kstreams", cpu, "%.2f"),
			num(r, "eddy", mem, "%.0f"), num(r, "eddy-librdkafka", mem, "%.0f"), num(r, "kstreams", mem, "%.0f"),
			ratio(r, "eddy", "kstreams", mem, "%.2f"))
	}
	for _, r := range b.rows {
		for _, sys := range []string{"eddy", "eddy-librdkafka", "kstreams"} {
			if x, ok := r.res[sys]; ok && x.ok && r.guarantee == "exactly_once" && x.commitMs[2] > 0 {
				fmt.Printf("\n%s commit duration, %s exactly-once: p50 %.1f ms, p99 %.1f ms (%.0f commits, %.0f over 40 ms)",
					sys, r.workload, x.commitMs[0], x.commitMs[1], x.commitMs[2], x.commitMs[3])
			}
		}
	}
	fmt.Println()
}
