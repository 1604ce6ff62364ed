// Command eddybench measures eddy against a real broker: records per second
// and CPU seconds per million records for a stateless filter/map/to
// topology and for word count, under at-least-once and exactly-once, and —
// on the same data in the same run — a plain confluent-kafka-go
// consume→produce loop as the ceiling. Every figure is also given as a
// ratio to that ceiling. Run it with `make bench`.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

func main() {
	brokers := flag.String("brokers", os.Getenv("EDDY_KAFKA_BOOTSTRAP"), "bootstrap servers")
	n := flag.Int("records", 1_000_000, "records pre-loaded in the input topic")
	parts := flag.Int("partitions", 4, "input partitions")
	only := flag.String("only", "", "comma-separated subset of runs (ceiling,stateless-alos,…)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the runs to this file")
	flag.IntVar(&maxBuffered, "max-buffered", 0, "streams.Config.MaxBufferedRecords (0: default)")
	flag.BoolVar(&verbose, "v", false, "log what the apps do to stderr")
	flag.DurationVar(&commitEvery, "commit", 0, "streams.Config.CommitInterval (0: the guarantee's default; at-least-once runs use 1s then, so completion is seen)")
	flag.Parse()
	if *profile != "" {
		f := must(os.Create(*profile))
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *brokers == "" {
		fail("no broker: pass -brokers or set EDDY_KAFKA_BOOTSTRAP (make bench starts one)")
	}
	b := &bench{brokers: *brokers, records: *n, partitions: int32(*parts), run: fmt.Sprint(time.Now().Unix())}
	b.cl = must(kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20)))
	defer b.cl.Close()
	b.adm = kadm.NewClient(b.cl)
	fmt.Printf("eddybench: %d records of 100 bytes on %d partitions, broker %s\n", *n, *parts, *brokers)
	b.preload()

	runs := []struct {
		name string
		f    func() result
	}{
		{"ceiling", b.ceiling},
		{"stateless-alos", func() result { return b.app(stateless, streams.AtLeastOnce) }},
		{"stateless-eos", func() result { return b.app(stateless, streams.ExactlyOnce) }},
		{"wordcount-alos", func() result { return b.app(wordcount, streams.AtLeastOnce) }},
		{"wordcount-eos", func() result { return b.app(wordcount, streams.ExactlyOnce) }},
	}
	var ceiling result
	fmt.Printf("\n| run | records/s | CPU s per 1M records | vs ceiling (records/s) |\n|---|---|---|---|\n")
	for _, r := range runs {
		if *only != "" && !strings.Contains(","+*only+",", ","+r.name+",") {
			continue
		}
		res := r.f()
		if r.name == "ceiling" {
			ceiling = res
		}
		ratio := "—"
		if ceiling.rate > 0 {
			ratio = fmt.Sprintf("%.2f", res.rate/ceiling.rate)
		}
		fmt.Printf("| %s | %.0f | %.2f | %s |\n", r.name, res.rate, res.cpuPerMillion, ratio)
	}
}

type bench struct {
	brokers    string
	records    int
	partitions int32
	run        string
	cl         *kgo.Client
	adm        *kadm.Client
	input      string
}

var (
	verbose     bool
	maxBuffered int
	commitEvery time.Duration
)

type result struct {
	rate          float64 // input records per second
	cpuPerMillion float64 // CPU seconds of this process per million input records
}

func (b *bench) topic(name string) string { return "bench-" + b.run + "-" + name }

func (b *bench) create(topic string) {
	resp := must(b.adm.CreateTopics(context.Background(), b.partitions, -1, nil, topic))
	if err := resp.Error(); err != nil {
		fail("creating %s: %v", topic, err)
	}
}

var vocabulary = strings.Fields("the river does not hurry yet arrives an eddy is where turns back on itself and keeps what it carries streams of events like water are counted one record at a time once only even when stream interrupted turn count carry")

// preload writes the input: 100-byte values of words.
func (b *bench) preload() {
	b.input = b.topic("input")
	b.create(b.input)
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	const chunk = 50_000
	for done := 0; done < b.records; done += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for i := done; i < min(b.records, done+chunk); i++ {
			var v bytes.Buffer
			for v.Len() < 100 {
				v.WriteString(vocabulary[rng.IntN(len(vocabulary))])
				v.WriteByte(' ')
			}
			recs = append(recs, &kgo.Record{Topic: b.input, Key: fmt.Appendf(nil, "k%d", i), Value: v.Bytes()[:100]})
		}
		if err := b.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			fail("preloading: %v", err)
		}
	}
	fmt.Printf("preloaded in %v\n", time.Since(start).Round(time.Millisecond))
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// ceiling is a plain confluent-kafka-go loop: consume every input record,
// produce it to an output topic, same client tuning as eddy.
func (b *bench) ceiling() result {
	out := b.topic("ceiling-out")
	b.create(out)
	c := must(kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": b.brokers, "group.id": b.topic("ceiling"), "auto.offset.reset": "earliest",
		"enable.auto.commit": false, "fetch.queue.backoff.ms": 0, "queued.min.messages": 1_000_000, "fetch.wait.max.ms": 10,
	}))
	defer c.Close()
	p := must(kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.brokers, "linger.ms": 10, "enable.idempotence": true,
		"go.delivery.reports": false, "partitioner": "murmur2_random"}))
	defer p.Close()
	if err := c.Subscribe(b.input, nil); err != nil {
		fail("subscribe: %v", err)
	}
	cpu0, t0 := cpuSeconds(), time.Now()
	var started time.Time
	for n := 0; n < b.records; {
		ev := c.Poll(100)
		m, ok := ev.(*kafka.Message)
		if !ok {
			continue
		}
		if started.IsZero() {
			started = time.Now()
		}
		for {
			err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &out, Partition: kafka.PartitionAny}, Key: m.Key, Value: m.Value}, nil)
			if err == nil {
				break
			}
			p.Flush(10)
		}
		n++
	}
	p.Flush(60_000)
	if _, err := c.Commit(); err != nil {
		fail("commit: %v", err)
	}
	_ = t0
	return measure(b.records, started, cpu0)
}

func measure(n int, start time.Time, cpu0 float64) result {
	el := time.Since(start).Seconds()
	return result{rate: float64(n) / el, cpuPerMillion: (cpuSeconds() - cpu0) / float64(n) * 1e6}
}

type topo func(b *bench, out string) *topology.Topology

func stateless(b *bench, out string) *topology.Topology {
	tb := topology.NewBuilder()
	in := topology.Stream(tb, b.input, topology.Consumed(serde.Bytes(), serde.Bytes()))
	up := topology.MapValues(in.Filter(func(_, v []byte) bool { return len(v) > 0 }), bytes.ToUpper)
	up.To(out)
	return mustTop(tb)
}

func wordcount(b *bench, out string) *topology.Topology {
	tb := topology.NewBuilder()
	in := topology.Stream(tb, b.input, topology.Consumed(serde.String(), serde.String()))
	words := topology.FlatMapValues(in, strings.Fields)
	g := topology.GroupBy(words, func(_, w string) string { return w }, topology.Grouped(serde.String(), serde.String()))
	topology.Count(g, topology.Materialized[string, int64]("counts")).ToStream().To(out, topology.Produced(serde.String(), serde.Int64()))
	return mustTop(tb)
}

func mustTop(tb *topology.Builder) *topology.Topology {
	top, err := tb.Build()
	if err != nil {
		fail("topology: %v", err)
	}
	return top
}

// app runs a topology as one instance until its group has committed every
// input record (and, for word count, every repartitioned one).
func (b *bench) app(t topo, g streams.Guarantee) result {
	name := fmt.Sprintf("%p-%s", t, g)
	out := b.topic("out-" + fmt.Sprint(time.Now().UnixNano()))
	b.create(out)
	appID := b.topic("app-" + fmt.Sprint(time.Now().UnixNano()))
	dir, _ := os.MkdirTemp("", "eddybench-")
	defer os.RemoveAll(dir)
	running := make(chan struct{})
	commit := commitEvery
	if commit == 0 && g == streams.AtLeastOnce {
		commit = time.Second
	}
	logger := zap.NewNop()
	if verbose {
		logger, _ = zap.NewDevelopment()
	}
	app, err := streams.New(t(b, out), streams.Config{
		Logger:        logger,
		ApplicationID: appID, BootstrapServers: b.brokers, Guarantee: g, StateDir: dir, MaxBufferedRecords: maxBuffered, CommitInterval: commit,
		StateListener: func(_, s streams.State) {
			if s == streams.Running {
				select {
				case <-running:
				default:
					close(running)
				}
			}
		},
	})
	if err != nil {
		fail("%s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cpu0 := cpuSeconds()
	go func() { done <- app.Run(ctx) }()
	select {
	case <-running:
	case err := <-done:
		fail("%s stopped before running: %v", name, err)
	}
	start := time.Now()
	for {
		lags, err := b.adm.Lag(context.Background(), appID)
		if err == nil {
			if l, ok := lags[appID]; ok && l.Error() == nil && len(l.Lag) > 0 && l.Lag.Total() == 0 {
				if _, ok := l.Lag[b.input]; ok {
					break
				}
			}
		}
		select {
		case err := <-done:
			fail("%s stopped: %v", name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	res := measure(b.records, start, cpu0)
	cancel()
	if err := <-done; err != nil {
		fail("%s: %v", name, err)
	}
	return res
}

func must[T any](v T, err error) T {
	if err != nil {
		fail("%v", err)
	}
	return v
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "eddybench: "+format+"\n", args...)
	os.Exit(1)
}
