package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/topology"
)

// The async workload: each record's value goes through an HTTP service
// (in this process, on 127.0.0.1) that takes 5–20 ms a call, then to the
// output. eddy runs it with MapValues calling the service on the stream
// thread (sync) and with MapValuesAsync (async, its default 16 calls at
// once per task, and 64), one stream thread, the same service, in the same
// run. Kafka Streams has no async operator: it is not in this table.

// asyncService is the slow service the async workload's children call.
type asyncService struct {
	url   string
	calls atomic.Int64
	srv   *http.Server
}

func startAsyncService() *asyncService {
	ln := must(net.Listen("tcp", "127.0.0.1:0"))
	s := &asyncService{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		time.Sleep(time.Duration(5000+rand.IntN(15001)) * time.Microsecond)
		io.Copy(w, r.Body)
	})}
	go s.srv.Serve(ln)
	return s
}

// asyncCall posts value to the service and returns its answer.
func asyncCall(ctx context.Context, c *http.Client, url string, value []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(value)))
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("service: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// asyncTopology is the child's side: workload async-sync, async or
// async-64, calling the service at EDDYBENCH_SERVICE.
func asyncTopology(tb *topology.Builder, name string, in []string, out string) {
	url := os.Getenv("EDDYBENCH_SERVICE")
	if url == "" {
		fail("%s: no EDDYBENCH_SERVICE", name)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	s := topology.Stream(tb, in[0], topology.Consumed(serde.Bytes(), serde.Bytes()))
	if name == "async-sync" {
		topology.MapValues(s, func(v []byte) []byte {
			r, err := asyncCall(context.Background(), client, url, v)
			if err != nil {
				fail("%v", err)
			}
			return r
		}).To(out)
		return
	}
	opts := topology.Async()
	if name == "async-64" {
		opts = opts.WithConcurrency(64)
	}
	topology.MapValuesAsync(s, func(ctx context.Context, _ []byte, v []byte) ([]byte, error) {
		return asyncCall(ctx, client, url, v)
	}, opts).To(out)
}

// asyncWorkload runs the three variants under each guarantee and prints
// their rates.
func (b *bench) asyncWorkload() {
	svc := startAsyncService()
	defer svc.srv.Close()
	os.Setenv("EDDYBENCH_SERVICE", svc.url)
	fmt.Printf("\nasync: each record through a service taking 5–20 ms a call (mean 12.5 ms), %d partitions, 1 stream thread\n", b.o.partitions)
	fmt.Println("| variant | guarantee | records | records/s | × sync | calls in flight at most (tasks × concurrency) |")
	fmt.Println("|---|---|---|---|---|---|")
	variants := []struct {
		name    string
		records int
		bound   int
	}{{"async-sync", b.scaled(1_500), 1}, {"async", b.scaled(20_000), 16}, {"async-64", b.scaled(40_000), 64}}
	loaded := map[string]workload{}
	for _, v := range variants {
		w := workload{name: v.name, records: v.records, inputs: []string{b.topic(v.name + "-in")}, unit: "records of 100 B"}
		w.expect.records = w.records
		rng := rand.New(rand.NewPCG(3, 4))
		b.load(w.inputs[0], w.records, func(i int) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "k%d", rng.IntN(10_000)), Value: line(rng)}
		})
		loaded[v.name] = w
	}
	for _, g := range []string{"at_least_once", "exactly_once"} {
		if !b.o.want(b.o.guarantees, g) {
			continue
		}
		var syncRate float64
		for _, v := range variants {
			res := b.runOne(loaded[v.name], "eddy", g)
			if !res.ok {
				fmt.Printf("| %s | %s | %d | failed: %s | | |\n", v.name, g, v.records, res.err)
				continue
			}
			if v.name == "async-sync" {
				syncRate = res.rate
			}
			ratio := "1.00"
			if v.name != "async-sync" && syncRate > 0 {
				ratio = fmt.Sprintf("%.1f", res.rate/syncRate)
			}
			fmt.Printf("| %s | %s | %d | %.0f | %s | %d × %d |\n", v.name, g, v.records, res.rate, ratio, b.o.partitions, v.bound)
		}
	}
	fmt.Printf("(%d service calls in all)\n", svc.calls.Load())
}
