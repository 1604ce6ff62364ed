// Command pricing prices orders with the price valid when each order was
// placed, although prices and orders arrive out of order: the prices table
// is versioned, so the stream–table join reads it as of each order's time.
//
// With no flags it starts an embedded Kafka broker (franz-go's kfake) and
// the pricing app (exactly once), writes a day of price changes, and once
// the app has read them writes the day's orders — a producer that was
// late — then prints each priced order; -latest runs the same join against
// a plain (latest-value) table instead, to show the wrong prices it gives.
//
//	go run ./examples/pricing
//	go run ./examples/pricing -latest
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// Topology prices each order (keyed by product, value "order-id qty") with
// the product's price: as of the order's timestamp when versioned, the
// latest price otherwise. Output values are "order-id qty × price".
func Topology(prices, orders, priced string, versioned bool) (*topology.Topology, error) {
	str := serde.String()
	b := topology.NewBuilder()
	m := topology.Materialized[string, string]("prices")
	if versioned {
		m = m.WithVersioned(24 * time.Hour)
	}
	table := topology.Table(b, prices, topology.Consumed(str, str), m)
	in := topology.Stream(b, orders, topology.Consumed(str, str))
	topology.JoinTable(in, table, func(order, price string) string { return order + " × " + price }).
		To(priced, topology.Produced(str, str))
	return b.Build()
}

// Event is a record of the example's input: a topic, a product key, a
// value and when it happened.
type Event struct {
	Topic, Key, Value string
	At                time.Time
}

// Input is the day's events in the order they reach Kafka: the prices as
// they changed, then the orders, whose producer was late — every order
// arrives after the last price change.
func Input(day time.Time) []Event {
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	return []Event{
		{"prices", "apple", "1.00", at(8, 0)},
		{"prices", "pear", "2.00", at(8, 0)},
		{"prices", "apple", "1.20", at(12, 0)},
		{"prices", "pear", "1.80", at(15, 0)},
		{"prices", "apple", "0.90", at(18, 0)},
		{"orders", "apple", "o1 3", at(9, 30)},
		{"orders", "pear", "o2 1", at(13, 0)},
		{"orders", "apple", "o3 2", at(12, 0)},
		{"orders", "apple", "o4 5", at(17, 59)},
		{"orders", "pear", "o5 4", at(16, 10)},
	}
}

func main() {
	latest := flag.Bool("latest", false, "join against the latest price (a plain table), not the price as of the order")
	flag.Parse()
	if err := run(!*latest, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(versioned bool, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "prices", "orders", "priced"))
	if err != nil {
		return fmt.Errorf("starting the embedded broker: %w", err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	top, err := Topology("prices", "orders", "priced", versioned)
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "eddy-pricing-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	app, err := streams.New(top, streams.Config{ApplicationID: "pricing", BootstrapServers: brokers,
		Guarantee: streams.ExactlyOnce, StateDir: state, CommitInterval: 100 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	// The prices first; the orders once the app has read them all.
	adm := kadm.NewClient(cl)
	day := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, topic := range []string{"prices", "orders"} {
		n := 0
		for _, e := range Input(day) {
			if e.Topic != topic {
				continue
			}
			r := &kgo.Record{Topic: e.Topic, Key: []byte(e.Key), Value: []byte(e.Value), Timestamp: e.At}
			if err = cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				break
			}
			n++
		}
		if err == nil {
			err = waitProcessed(runCtx, adm, "pricing", topic, int64(n))
		}
		if err != nil {
			break
		}
	}
	stop()
	if runErr := <-done; runErr != nil {
		return runErr
	}
	if err != nil {
		return err
	}
	return printPriced(ctx, brokers, out)
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
			return errors.New("stopped before every record was processed")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func printPriced(ctx context.Context, brokers string, out io.Writer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics("priced"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for n := 0; n < 5; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			fmt.Fprintf(out, "%s %s: %s\n", r.Timestamp.UTC().Format("15:04"), r.Key, r.Value)
			n++
		})
	}
	return nil
}
