// Command eddybench measures eddy against Kafka Streams on a real broker,
// in one run, on the same pre-loaded topics: four workloads (stateless
// filter → mapValues → to; word count; a tumbling one-minute count; a
// stream–table join), each under at-least-once and exactly-once, run by
//
//   - a plain franz-go consume → produce loop, and a plain confluent-kafka-go
//     one (stateless only): the ceiling of any library on each client;
//   - eddy on its own client (franz-go), one stream thread;
//   - eddy built with -tags eddy_librdkafka (librdkafka), one stream thread
//     (-librdkafka-bin: an eddybench built with that tag);
//   - Kafka Streams (bench/kstreams), one stream thread;
//
// each as its own process, so CPU and memory are the system's own. Then a
// latency run: input produced at a steady rate, the time from produce to
// the result being readable by a read_committed consumer. It prints one
// table. Then the state workload (state.go): a count per key over
// -state-keys distinct keys, each system building the state, SIGKILLed,
// restarted on its state and started cold, timed to its first new output.
// Then the async workload (async.go): each record through a service taking
// 5–20 ms a call, eddy's MapValues against MapValuesAsync.
// Then the rebalance workload (rebalance.go): instances joining, leaving
// and dying under steady input, each event's pauses per partition.
// With -svg it also draws records/s and memory, eddy against Kafka
// Streams, per workload and guarantee (the README's Performance chart).
// Run it with `make bench`.
//
// A run's rate counts input records from the moment the system reports
// RUNNING until all its output is readable (stateless and join: one output
// record per input record) or, for the aggregations, until its consumer
// group has committed all input (and, for word count, all repartitioned
// records); CPU is the process's user+system time over the same span;
// memory is its peak resident set.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		child(os.Args[2:])
		return
	}
	var o options
	flag.StringVar(&o.brokers, "brokers", os.Getenv("EDDY_KAFKA_BOOTSTRAP"), "bootstrap servers")
	flag.StringVar(&o.only, "only", "", "comma-separated subset of workloads (stateless,wordcount,windowed,join,latency,async,state,rebalance,placement)")
	flag.StringVar(&o.systems, "systems", "ceiling,ceiling-librdkafka,eddy,eddy-librdkafka,kstreams", "comma-separated subset of systems")
	flag.StringVar(&o.librdkafkaBin, "librdkafka-bin", "", "an eddybench built with -tags eddy_librdkafka, for the librdkafka systems (scripts/bench.sh builds it)")
	flag.StringVar(&o.svg, "svg", "", "write a chart of the run's records/s and memory to this SVG file")
	flag.StringVar(&o.guarantees, "guarantees", "at_least_once,exactly_once", "comma-separated subset of guarantees")
	flag.Float64Var(&o.scale, "scale", 1, "multiply every workload's record count by this")
	flag.IntVar(&o.repeat, "repeat", 1, "run each system this many times, in turns, and keep its median run")
	flag.StringVar(&o.kstreams, "kstreams-classpath", "", "classpath of bench/kstreams (scripts/bench.sh builds it)")
	flag.IntVar(&o.latencyRate, "latency-rate", 20_000, "records/s produced in the latency run")
	flag.DurationVar(&o.latencyFor, "latency-for", 20*time.Second, "how long the latency run produces")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions of every input topic")
	flag.IntVar(&o.stateKeys, "state-keys", 1_000_000, "distinct keys (and records) of the state workload (the state issue measures 10000000)")
	flag.StringVar(&o.client, "eddy-client-config", "", "for exploring only: client properties (k=v,k=v) passed to eddy's ClientConfig")
	flag.IntVar(&o.rb.keys, "rebalance-keys", 1_000_000, "distinct keys (the state) of the rebalance workload")
	flag.IntVar(&o.rb.rate, "rebalance-rate", 10_000, "input records/s during the rebalance workload's events")
	flag.IntVar(&o.rb.partitions, "rebalance-partitions", 6, "partitions of the rebalance workload's topics")
	flag.DurationVar(&o.rb.session, "rebalance-session", 10*time.Second, "both systems' session timeout in the rebalance workload")
	flag.StringVar(&o.rb.cases, "rebalance-cases", "", "comma-separated subset of the rebalance workload's cases (statecount,regroupcount)")
	flag.Parse()
	if o.brokers == "" {
		fail("no broker: pass -brokers or set EDDY_KAFKA_BOOTSTRAP (make bench starts one)")
	}
	b := newBench(o)
	defer b.close()
	fmt.Printf("eddybench: broker %s, %d partitions per input topic, 1 stream thread per system, commits every 1s (at-least-once) / 100ms (exactly-once)\n",
		o.brokers, o.partitions)
	b.runAll()
}

type options struct {
	brokers, only, systems, guarantees, kstreams string
	client, librdkafkaBin, svg                   string
	scale                                        float64
	latencyRate, partitions, stateKeys, repeat   int
	latencyFor                                   time.Duration
	rb                                           rbOptions
}

func (o options) want(list, item string) bool {
	return list == "" || strings.Contains(","+list+",", ","+item+",")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "eddybench: "+format+"\n", args...)
	os.Exit(1)
}

func must[T any](v T, err error) T {
	if err != nil {
		fail("%v", err)
	}
	return v
}
