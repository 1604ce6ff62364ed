// Command enrich enriches orders with their customer's details from an HTTP
// service, inside the topology, without holding the stream thread: each
// call takes 5–20 ms, and topology.MapValuesAsync runs up to 32 of them at
// once per task while keeping each customer's orders in order. A second
// async operator notifies a (pretend) mail service once per order, with the
// order's topic, partition and offset as an idempotency key, so a call that
// runs again after a crash notifies nobody twice.
//
// With no flags it starts an embedded Kafka broker (franz-go's kfake), the
// customer service on 127.0.0.1, and the app (exactly once); writes 2,000
// orders of 50 customers; and prints a few enriched orders and how long the
// whole run took. -sync runs the same calls one at a time (concurrency 1),
// to compare.
//
//	go run ./examples/enrich
//	go run ./examples/enrich -sync
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// Customer is what the customer service answers.
type Customer struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Tier string `json:"tier"`
}

// Enriched is an order with its customer's details.
type Enriched struct {
	Order    string `json:"order"`
	Customer string `json:"customer"`
	Tier     string `json:"tier"`
}

// Topology reads orders (key: customer id, value: order id), enriches each
// with its customer from the service at baseURL, writes them to enriched,
// and notifies the mail service once per order. concurrency is how many
// calls run at once per task.
func Topology(orders, enriched, baseURL string, concurrency int) (*topology.Topology, error) {
	str := serde.String()
	client := &http.Client{}
	b := topology.NewBuilder()
	in := topology.Stream(b, orders, topology.Consumed(str, str))
	opts := topology.Async().WithConcurrency(concurrency).WithTimeout(2*time.Second).
		WithRetries(3, 50*time.Millisecond, time.Second)
	out := topology.MapValuesAsync(in, func(ctx context.Context, customer, order string) (Enriched, error) {
		var c Customer
		if err := getJSON(ctx, client, baseURL+"/customers/"+customer, &c); err != nil {
			return Enriched{}, err
		}
		return Enriched{Order: order, Customer: c.Name, Tier: c.Tier}, nil
	}, opts.WithName("enrich"))
	out.To(enriched, topology.Produced(str, serde.JSON[Enriched]()))
	topology.ForeachAsync(out, func(ctx context.Context, customer string, e Enriched) error {
		md, _ := processor.RecordMetadataFrom(ctx)
		key := fmt.Sprintf("%s/%d/%d", md.Topic, md.Partition, md.Offset)
		return post(ctx, client, baseURL+"/notify", key, e.Order)
	}, opts.WithName("notify"))
	return b.Build()
}

func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func post(ctx context.Context, c *http.Client, url, idempotencyKey, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", idempotencyKey)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

// Service is the example's customer and mail service: every answer takes
// 5–20 ms; notifications are kept once per idempotency key.
type Service struct {
	URL string

	mu       sync.Mutex
	notified map[string]string // idempotency key → order
	calls    int
	srv      *http.Server
}

// StartService serves on 127.0.0.1.
func StartService() (*Service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Service{URL: "http://" + ln.Addr().String(), notified: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /customers/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.slow()
		id := r.PathValue("id")
		var n int
		fmt.Sscanf(id, "c-%d", &n)
		json.NewEncoder(w).Encode(Customer{ID: id, Name: "Customer " + strings.TrimPrefix(id, "c-"), Tier: []string{"gold", "silver", "bronze"}[n%3]})
	})
	mux.HandleFunc("POST /notify", func(w http.ResponseWriter, r *http.Request) {
		s.slow()
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.notified[r.Header.Get("Idempotency-Key")] = string(body)
		s.mu.Unlock()
	})
	s.srv = &http.Server{Handler: mux}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *Service) slow() {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	time.Sleep(time.Duration(5+rand.IntN(16)) * time.Millisecond)
}

// Notified returns the orders notified, once per idempotency key.
func (s *Service) Notified() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.notified))
	for k, v := range s.notified {
		out[k] = v
	}
	return out
}

// Close stops the service.
func (s *Service) Close() error { return s.srv.Close() }

// Orders returns n orders of 50 customers: key customer id, value order id
// ("o-<n>"), each customer's orders numbered in the order they are written.
func Orders(n int) [][2]string {
	out := make([][2]string, n)
	for i := range out {
		out[i] = [2]string{fmt.Sprintf("c-%02d", i%50), fmt.Sprintf("o-%04d", i)}
	}
	return out
}

func main() {
	sync := flag.Bool("sync", false, "one call at a time (concurrency 1), to compare")
	flag.Parse()
	conc := 32
	if *sync {
		conc = 1
	}
	res, err := run(conc, 2000)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res.Records[:5] {
		fmt.Printf("%s: %s\n", r[0], r[1])
	}
	fmt.Printf("…\n%d orders enriched and %d notified in %v (concurrency %d per task)\n",
		len(res.Records), res.Notified, res.Took.Round(10*time.Millisecond), conc)
}

// Result is what a run gives: the enriched records in the order they were
// written (key, JSON value), how many orders were notified, and the time
// from the first order written to the last enriched one committed.
type Result struct {
	Records  [][2]string
	Notified int
	Took     time.Duration
}

func run(concurrency, n int) (*Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := StartService()
	if err != nil {
		return nil, err
	}
	defer svc.Close()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "enriched"))
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	top, err := Topology("orders", "enriched", svc.URL, concurrency)
	if err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp("", "eddy-enrich-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	app, err := streams.New(top, streams.Config{ApplicationID: "enrich", BootstrapServers: brokers,
		Guarantee: streams.ExactlyOnce, StateDir: state, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	start := time.Now()
	for _, o := range Orders(n) {
		cl.Produce(ctx, &kgo.Record{Topic: "orders", Key: []byte(o[0]), Value: []byte(o[1])}, nil)
	}
	if err := cl.Flush(ctx); err == nil {
		err = waitProcessed(runCtx, kadm.NewClient(cl), "enrich", "orders", int64(n))
	}
	took := time.Since(start)
	stop()
	if runErr := <-done; runErr != nil {
		return nil, runErr
	}
	if err != nil {
		return nil, err
	}
	recs, err := readAll(ctx, brokers, "enriched", n)
	if err != nil {
		return nil, err
	}
	return &Result{Records: recs, Notified: len(svc.Notified()), Took: took}, nil
}

// waitProcessed waits until the app's group has committed the n records of
// topic.
func waitProcessed(ctx context.Context, adm *kadm.Client, group, topic string, n int64) error {
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		if err == nil && offs.Error() == nil {
			var done int64
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic {
					done += o.At
				}
			})
			if done >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("stopped before every order was processed")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readAll reads n committed records of topic, partition by partition.
func readAll(ctx context.Context, brokers, topic string, n int) ([][2]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out [][2]string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return out, err
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, [2]string{string(r.Key), string(r.Value)}) })
	}
	return out, nil
}
