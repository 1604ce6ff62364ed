package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/eddy-go/eddy/internal/engine"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// child runs one system (ceiling or eddy) until SIGTERM, printing RUNNING
// once it processes.
func child(args []string) {
	fs := flag.NewFlagSet("child", flag.ExitOnError)
	sys := fs.String("system", "eddy", "ceiling (franz-go), ceiling-librdkafka or eddy")
	wl := fs.String("workload", "stateless", "workload")
	g := fs.String("guarantee", "at_least_once", "guarantee")
	brokers := fs.String("brokers", "", "bootstrap servers")
	app := fs.String("app", "", "application id (consumer group)")
	state := fs.String("state", "", "state directory")
	commitMs := fs.Int("commit-ms", 1000, "commit interval")
	out := fs.String("out", "", "output topic")
	in := fs.String("in", "", "input topics, comma-separated")
	client := fs.String("client", "", "client properties k=v,k=v for eddy's ClientConfig")
	standbys := fs.Int("standbys", 0, "NumStandbyReplicas")
	reportRestored := fs.Bool("report-restored", false, `print "RESTORED n" (changelog records restored so far) whenever it grows`)
	threads := fs.Int("threads", 1, "NumStreamThreads")
	reportTasks := fs.Bool("report-tasks", false, `print "TASKS …" (each thread's tasks and records processed) every 250 ms`)
	profile := fs.String("cpuprofile", os.Getenv("EDDYBENCH_CPUPROFILE"), "write a CPU profile of the child to this file ({pid} is replaced by the child's process id)")
	profileFor := fs.Duration("cpuprofile-for", envDuration("EDDYBENCH_CPUPROFILE_FOR"), "stop the CPU profile after this long (0: at exit); a child that is SIGKILLed (the state workload's build) writes its profile only this way")
	traceAt := fs.Duration("trace-at", envDuration("EDDYBENCH_TRACE_AT"), "write a 5 s execution trace (runtime/trace) this long after start, to the -cpuprofile path with .trace appended (0: none)")
	fs.Parse(args)
	if *traceAt > 0 && *profile != "" {
		path := strings.ReplaceAll(*profile, "{pid}", fmt.Sprint(os.Getpid())) + ".trace"
		time.AfterFunc(*traceAt, func() {
			f := must(os.Create(path))
			trace.Start(f)
			time.AfterFunc(5*time.Second, func() { trace.Stop(); f.Close() })
		})
	}
	if *profile != "" {
		f := must(os.Create(strings.ReplaceAll(*profile, "{pid}", fmt.Sprint(os.Getpid()))))
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
		if *profileFor > 0 {
			time.AfterFunc(*profileFor, pprof.StopCPUProfile)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	inputs := strings.Split(*in, ",")
	commit := time.Duration(*commitMs) * time.Millisecond
	switch *sys {
	case "ceiling":
		ceilingFranz(ctx, *brokers, *app, inputs[0], *out, *g == "exactly_once", commit)
		return
	case "ceiling-librdkafka":
		ceilingLibrdkafka(ctx, *brokers, *app, inputs[0], *out, *g == "exactly_once", commit)
		return
	}
	guarantee := must(streams.ParseGuarantee(*g))
	reg := prometheus.NewRegistry()
	cc := map[string]string{}
	for _, kv := range strings.Split(*client, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			cc[k] = v
		}
	}
	logger := zap.NewNop()
	if path := os.Getenv("EDDYBENCH_LOG"); path != "" {
		// Every child appends to one file: for timelines, not for timing.
		f := must(os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644))
		enc := zap.NewDevelopmentEncoderConfig()
		logger = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(f), zapcore.InfoLevel)).
			With(zap.Int("pid", os.Getpid()))
		logger.Info("child started", zap.Strings("args", args))
	}
	a := must(streams.New(buildTopology(*wl, inputs, *out), streams.Config{
		Logger:        logger,
		ApplicationID: *app, BootstrapServers: *brokers, Guarantee: guarantee, StateDir: *state,
		CommitInterval: commit, Metrics: reg, ClientConfig: cc, NumStandbyReplicas: *standbys, NumStreamThreads: *threads,
		StateListener: func(_, s streams.State) {
			if s == streams.Running {
				fmt.Println("RUNNING")
			}
		},
	}))
	if *reportRestored {
		go reportRestoredRecords(ctx, reg)
	}
	if *reportTasks {
		go reportThreadTasks(ctx, a)
	}
	if err := a.Run(ctx); err != nil {
		fail("%v", err)
	}
	p50, p99, n, slow := commitQuantiles(reg)
	fmt.Printf("COMMITS %.2f %.2f %d %d\n", p50, p99, n, slow)
}

// reportRestoredRecords prints "RESTORED n" whenever eddy's count of
// restored changelog records (eddy_restore_records_total) grows, until
// ctx ends.
func reportRestoredRecords(ctx context.Context, reg *prometheus.Registry) {
	var last float64
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() == "eddy_restore_records_total" {
				for _, m := range mf.Metric {
					n += m.GetCounter().GetValue()
				}
			}
		}
		if n > last {
			last = n
			fmt.Printf("RESTORED %.0f\n", n)
		}
	}
}

// reportThreadTasks prints, every 250 ms until ctx ends, each stream
// thread's active tasks and records processed, as "TASKS" then per thread
// "ids:processed" (ids comma-separated, "-" for none), the format
// bench/kstreams prints too.
func reportThreadTasks(ctx context.Context, a *streams.App) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		line := "TASKS"
		for _, th := range a.Report().Threads {
			var ids []string
			for _, tk := range th.Tasks {
				ids = append(ids, tk.ID)
			}
			if len(ids) == 0 {
				ids = []string{"-"}
			}
			sort.Strings(ids)
			line += fmt.Sprintf(" %s:%d", strings.Join(ids, ","), th.Counts.Processed)
		}
		fmt.Println(line)
	}
}

// buildTopology is each workload in eddy's DSL, as bench/kstreams writes
// it in Kafka Streams'.
func buildTopology(name string, in []string, out string) *topology.Topology {
	tb := topology.NewBuilder()
	switch name {
	case "stateless":
		s := topology.Stream(tb, in[0], topology.Consumed(serde.Bytes(), serde.Bytes()))
		topology.MapValues(s.Filter(func(_, v []byte) bool { return len(v) > 0 }), bytes.ToUpper).To(out)
	case "wordcount":
		lines := topology.Stream(tb, in[0], topology.Consumed(serde.String(), serde.String()))
		words := topology.FlatMapValues(lines, strings.Fields)
		g := topology.GroupBy(words, func(_, w string) string { return w }, topology.Grouped(serde.String(), serde.String()))
		topology.Count(g, topology.Materialized[string, int64]("counts")).ToStream().
			To(out, topology.Produced(serde.String(), serde.Int64()))
	case "windowed":
		s := topology.Stream(tb, in[0], topology.Consumed(serde.String(), serde.String()))
		counts := topology.WindowedCount(s.GroupByKey().WindowedBy(topology.TumblingWindows(time.Minute, 0)),
			topology.Materialized[string, int64]("window-counts"))
		topology.Map(counts.ToStream(), func(k serde.Windowed[string], n int64) (string, int64) {
			return fmt.Sprintf("%s@%d", k.Key, k.Window.Start), n
		}).To(out, topology.Produced(serde.String(), serde.Int64()))
	case "join":
		s := topology.Stream(tb, in[0], topology.Consumed(serde.String(), serde.String()))
		t := topology.Table(tb, in[1], topology.Consumed(serde.String(), serde.String()), topology.Materialized[string, string]("table"))
		topology.JoinTable(s, t, func(v, tv string) string { return v + "|" + tv }).
			To(out, topology.Produced(serde.String(), serde.String()))
	case "async-sync", "async", "async-64":
		asyncTopology(tb, name, in, out)
	case "regroupcount":
		s := topology.Stream(tb, in[0], topology.Consumed(serde.String(), serde.String()))
		g := topology.GroupBy(s, func(k, _ string) string { return k }, topology.Grouped(serde.String(), serde.String()))
		topology.Count(g, topology.Materialized[string, int64]("counts")).ToStream().
			To(out, topology.Produced(serde.String(), serde.Int64()))
	case "statecount":
		s := topology.Stream(tb, in[0], topology.Consumed(serde.String(), serde.String()))
		topology.Count(s.GroupByKey(), topology.Materialized[string, int64]("counts")).ToStream().
			To(out, topology.Produced(serde.String(), serde.Int64()))
	default:
		fail("unknown workload %q", name)
	}
	return must(tb.Build())
}

// commitQuantiles estimates p50 and p99 of eddy_commit_duration_seconds,
// in milliseconds, interpolating within histogram buckets; n is the number
// of commits, slow of those over 40.5 ms (the bucket bound below 50 ms:
// those that may have taken over the 50 ms a p99 is aimed at).
func commitQuantiles(reg *prometheus.Registry) (p50, p99 float64, n, slow uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0, 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "eddy_commit_duration_seconds" || len(mf.Metric) == 0 {
			continue
		}
		return histogramStats(mf.Metric[0].GetHistogram())
	}
	return 0, 0, 0, 0
}

// histogramStats is commitQuantiles for one histogram of seconds.
func histogramStats(h *dto.Histogram) (p50, p99 float64, n, slow uint64) {
	n = h.GetSampleCount()
	slow = n
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() <= 0.05 {
			slow = n - b.GetCumulativeCount()
		}
	}
	return quantile(h, 0.5) * 1000, quantile(h, 0.99) * 1000, n, slow
}

// ksLog is where a Kafka Streams child logs its commits: beside its state
// directory, not in it (the state workload measures that directory).
func ksLog(state string) string { return state + ".kstreams-commits.log" }

// stateDir makes an empty state directory for a child; remove deletes it
// and the Kafka Streams commit log beside it.
func stateDir(prefix string) (dir string, remove func()) {
	dir = must(os.MkdirTemp("", prefix))
	return dir, func() {
		os.RemoveAll(dir)
		os.Remove(ksLog(dir))
	}
}

// ksCommitStats reads Kafka Streams' commit durations from its StreamThread
// debug lines ("Committed all active tasks [...] and standby tasks [...] in
// 12ms": whole milliseconds, one line per commit that committed a task) and
// returns them as stopAndCommitStats does eddy's.
func ksCommitStats(path string) [4]float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return [4]float64{}
	}
	// eddy's buckets, so that both systems' quantiles are estimated alike.
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kstreams_commit_duration_seconds", Buckets: engine.CommitDurationBuckets()})
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "Committed all active tasks") || !strings.HasSuffix(l, "ms") {
			continue
		}
		f := strings.Fields(l)
		if ms, err := strconv.ParseFloat(strings.TrimSuffix(f[len(f)-1], "ms"), 64); err == nil {
			h.Observe(ms / 1000)
		}
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return [4]float64{}
	}
	p50, p99, n, slow := histogramStats(m.GetHistogram())
	return [4]float64{p50, p99, float64(n), float64(slow)}
}

func quantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return 0
	}
	bs := h.GetBucket()
	sort.Slice(bs, func(i, j int) bool { return bs[i].GetUpperBound() < bs[j].GetUpperBound() })
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bs {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if c == prevCount {
				return b.GetUpperBound()
			}
			return prevBound + (b.GetUpperBound()-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b.GetUpperBound(), c
	}
	return prevBound
}

// envDuration parses the duration in environment variable name; zero when
// it is unset or not a duration.
func envDuration(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}
