// Command wcworker is one instance of an application under test, run as a
// separate OS process by the integration tests so they can kill it with
// SIGKILL: word count (default); with -topology windowed, a per-key count
// in tumbling windows of one second (grace 500ms) emitted once per window
// when it closes, late records to -late; with -topology sum, a running
// count and sum of the integer values per key ("<count>:<sum>", caching
// off); with -topology asyncsum, the same sums of values first sent through
// an HTTP service (-service) by an async operator. It logs JSON lines to stderr and stops cleanly on SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

func main() {
	// SIGTERM asks for a clean stop from the first instruction on (the
	// tests stop a worker as soon as it logged "worker started").
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var (
		brokers    = flag.String("brokers", "", "bootstrap servers")
		app        = flag.String("app", "", "application id")
		input      = flag.String("input", "", "input topic")
		output     = flag.String("output", "", "output topic")
		state      = flag.String("state", "", "state directory")
		guarantee  = flag.String("guarantee", "exactly_once", "exactly_once or at_least_once")
		cache      = flag.Bool("cache", true, "record cache on")
		processID  = flag.String("process-id", "", "process id (transactional ids)")
		threads    = flag.Int("threads", 1, "stream threads")
		commit     = flag.Duration("commit", 0, "commit interval (0: default)")
		session    = flag.Int("session-timeout-ms", 6000, "consumer session timeout")
		kind       = flag.String("topology", "wordcount", "wordcount, windowed, sum, dedup or versioned")
		late       = flag.String("late", "", "late-records topic (windowed)")
		txnTimeout = flag.Duration("transaction-timeout", 0, "transaction.timeout.ms (0: eddy's default)")
		httpAddr   = flag.String("http", "", "serve the app's Handler (/metrics, /stores/...) on this address")
		standbys   = flag.Int("standbys", 0, "NumStandbyReplicas")
		service    = flag.String("service", "", "asyncsum: the base URL of the service each value goes through")
		asyncConc  = flag.Int("async-concurrency", 16, "asyncsum: calls at once per task (1: one at a time)")
		asyncTime  = flag.Duration("async-timeout", 5*time.Second, "asyncsum: timeout per call")
	)
	flag.Parse()
	log, _ := zap.NewProduction()
	defer log.Sync()
	log.Info("worker started")
	g, err := streams.ParseGuarantee(*guarantee)
	if err != nil {
		log.Fatal("bad guarantee", zap.Error(err))
	}
	b := topology.NewBuilder()
	switch *kind {
	case "windowed":
		windowed(b, *input, *output, *late)
	case "sum":
		sums(b, *input, *output)
	case "asyncsum":
		asyncSums(b, *input, *output, *service, *asyncConc, *asyncTime)
	case "dedup":
		dedup(b, *input, *output)
	case "versioned":
		versioned(b, *input, *output)
	default:
		wordCount(b, *input, *output, *cache)
	}
	top, err := b.Build()
	if err != nil {
		log.Fatal("topology", zap.Error(err))
	}
	client := map[string]string{"session.timeout.ms": fmt.Sprint(*session), "heartbeat.interval.ms": "500"}
	if d := os.Getenv("EDDY_WORKER_CLIENT_DEBUG"); d != "" {
		client["debug"] = d // librdkafka's debug contexts, for reading a run
		client["log_level"] = "7"
	}
	if *txnTimeout > 0 {
		client["transaction.timeout.ms"] = fmt.Sprint(txnTimeout.Milliseconds())
	}
	a, err := streams.New(top, streams.Config{
		ApplicationID: *app, BootstrapServers: *brokers, StateDir: *state, Guarantee: g,
		NoCache: !*cache, ProcessID: *processID, NumStreamThreads: *threads, CommitInterval: *commit,
		NumStandbyReplicas: *standbys,
		Logger:             log,
		ClientConfig:       client,
	})
	if err != nil {
		log.Fatal("config", zap.Error(err))
	}
	if *httpAddr != "" {
		go func() {
			if err := http.ListenAndServe(*httpAddr, a.Handler()); err != nil {
				log.Error("serving the handler", zap.Error(err))
			}
		}()
	}
	start := time.Now()
	if err := a.Run(ctx); err != nil {
		log.Error("run failed", zap.Error(err))
		os.Exit(1)
	}
	log.Info("worker exited cleanly", zap.Duration("ran", time.Since(start)))
}

func wordCount(b *topology.Builder, input, output string, cache bool) {
	lines := topology.Stream(b, input, topology.Consumed(serde.String(), serde.String()))
	words := topology.FlatMapValues(lines, func(l string) []string {
		return strings.FieldsFunc(strings.ToLower(l), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	})
	byWord := topology.GroupBy(words, func(_, w string) string { return w }, topology.Grouped(serde.String(), serde.String()))
	topology.Count(byWord, topology.Materialized[string, int64]("counts").WithCaching(cache)).ToStream().
		To(output, topology.Produced(serde.String(), serde.Int64()))
}

// windowed counts each key's records per one-second window, emitting each
// window once, as "<key>@<window start>" = count.
func windowed(b *topology.Builder, input, output, late string) {
	w := topology.Stream(b, input, topology.Consumed(serde.String(), serde.String())).GroupByKey().
		WindowedBy(topology.TumblingWindows(time.Second, 500*time.Millisecond)).EmitOnWindowClose()
	if late != "" {
		w = w.LateRecords(late)
	}
	counts := topology.WindowedCount(w, topology.Materialized[string, int64]("window-counts"))
	topology.Map(counts.ToStream(), func(k serde.Windowed[string], n int64) (string, int64) {
		return fmt.Sprintf("%s@%d", k.Key, k.Window.Start), n
	}).To(output, topology.Produced(serde.String(), serde.Int64()))
}

// versioned reads the input as a table in a versioned store "versioned"
// (10 s of history), forwarding its updates (out-of-order ones too) to the
// output.
func versioned(b *topology.Builder, input, output string) {
	topology.Table(b, input, topology.Consumed(serde.String(), serde.String()),
		topology.Materialized[string, string]("versioned").WithVersioned(10*time.Second)).
		ToStream().To(output, topology.Produced(serde.String(), serde.String()))
}

// sums keeps a running count and sum of each key's integer values, every
// update forwarded (caching off) as "<count>:<sum>".
func sums(b *topology.Builder, input, output string) {
	sumOf(topology.Stream(b, input, topology.Consumed(serde.String(), serde.Int64())), output)
}

// asyncSums is sums with each value first sent through the service at
// base (GET <base>/value?key=K&v=N answers the value to add) by an async
// operator, up to conc calls at once per task.
func asyncSums(b *topology.Builder, input, output, base string, conc int, timeout time.Duration) {
	in := topology.Stream(b, input, topology.Consumed(serde.String(), serde.Int64()))
	client := &http.Client{}
	values := topology.MapValuesAsync(in, func(ctx context.Context, k string, v int64) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/value?key=%s&v=%d", base, url.QueryEscape(k), v), nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("service: %s: %s", resp.Status, body)
		}
		return strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	}, topology.Async().WithConcurrency(conc).WithTimeout(timeout))
	sumOf(values, output)
}

func sumOf(in *topology.KStream[string, int64], output string) {
	agg := topology.Aggregate(in.GroupByKey(), func() string { return "0:0" }, func(_ string, v int64, agg string) string {
		var n, sum int64
		fmt.Sscanf(agg, "%d:%d", &n, &sum)
		return fmt.Sprintf("%d:%d", n+1, sum+v)
	}, topology.Materialized[string, string]("sums").WithCaching(false))
	agg.ToStream().To(output, topology.Produced(serde.String(), serde.String()))
}

// dedup forwards each payment id once within an hour of stream time: values
// are "id:payload", keys arbitrary (duplicates sit on any partition).
func dedup(b *topology.Builder, input, output string) {
	s := topology.Stream(b, input, topology.Consumed(serde.String(), serde.String()))
	topology.Deduplicate(s, func(_, v string) string { id, _, _ := strings.Cut(v, ":"); return id }, time.Hour,
		topology.Deduplicated[string]("dedup")).
		To(output, topology.Produced(serde.String(), serde.String()))
}
