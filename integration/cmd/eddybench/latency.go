package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latency runs the stateless topology under exactly-once on an empty topic,
// feeds it at a steady rate, and measures, for every record, the time from
// its produce (the record timestamp, which the output keeps) to a
// read_committed consumer receiving the result.
func (b *bench) latency() {
	fmt.Printf("\nlatency, stateless exactly-once, input at %d records/s for %v (first 2 s not counted):\n\n", b.o.latencyRate, b.o.latencyFor)
	fmt.Printf("| system | records | p50 ms | p99 ms | p99.9 ms | max ms |\n|---|---|---|---|---|---|\n")
	for _, sys := range []string{"eddy", "kstreams"} {
		if !b.o.want(b.o.systems, sys) {
			continue
		}
		lat, n, err := b.latencyOf(sys)
		if err != nil {
			fmt.Printf("| %s | failed: %v | | | | |\n", sys, err)
			continue
		}
		fmt.Printf("| %s | %d | %.1f | %.1f | %.1f | %.1f |\n", sys, n, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999), pct(lat, 1))
	}
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (b *bench) latencyOf(sys string) ([]float64, int, error) {
	in := b.topic(fmt.Sprintf("latency-%s-in", sys))
	b.create(in, int32(b.o.partitions))
	w := workload{name: "stateless", inputs: []string{in}}
	app := b.topic(fmt.Sprintf("latency-%s", sys))
	out := app + "-out"
	b.create(out, int32(b.o.partitions))
	state, remove := stateDir("eddybench-")
	defer remove()
	p := startChild(b.command(w, sys, "exactly_once", app, out, state))
	defer p.stop()
	if err := p.waitRunning(3 * time.Minute); err != nil {
		return nil, 0, err
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.o.brokers, ",")...),
		kgo.ConsumeTopics(out), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return nil, 0, err
	}
	defer cons.Close()
	start := time.Now()
	countFrom := start.Add(2 * time.Second)
	total := int(float64(b.o.latencyRate) * b.o.latencyFor.Seconds())
	var mu sync.Mutex
	var lat []float64
	received := 0
	ctx, cancel := context.WithTimeout(context.Background(), b.o.latencyFor+time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for received < total && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				received++
				if !r.Timestamp.Before(countFrom) {
					lat = append(lat, float64(now.Sub(r.Timestamp).Microseconds())/1000)
				}
			})
			mu.Unlock()
		}
	}()
	// Produce at a steady pace: every 10 ms the records due by then.
	const tick = 10 * time.Millisecond
	sent := 0
	for next := start; sent < total; next = next.Add(tick) {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		due := min(total, int(float64(b.o.latencyRate)*time.Since(start).Seconds()))
		for ; sent < due; sent++ {
			b.cl.Produce(ctx, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "k%d", sent), Value: []byte("latency probe value"), Timestamp: time.Now()}, nil)
		}
	}
	if err := b.cl.Flush(ctx); err != nil {
		return nil, 0, err
	}
	wg.Wait()
	p.stopAndCommitStats()
	mu.Lock()
	defer mu.Unlock()
	if received < total {
		return nil, received, fmt.Errorf("received %d of %d records", received, total)
	}
	slices.Sort(lat)
	return lat, received, nil
}
