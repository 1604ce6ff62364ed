package topology_test

import (
	"context"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// Each order is priced by a call to a (here pretend) pricing service, up to
// 8 calls at once per task; each customer's orders stay in order.
func ExampleMapValuesAsync() {
	str := serde.String()
	prices := map[string]int{"apple": 3, "pear": 5}
	lookup := func(ctx context.Context, product string) (int, error) {
		select {
		case <-time.After(time.Millisecond): // the service's latency
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return prices[product], nil
	}
	b := topology.NewBuilder()
	orders := topology.Stream(b, "orders", topology.Consumed(str, str)) // customer → product
	topology.MapValuesAsync(orders, func(ctx context.Context, customer, product string) (string, error) {
		p, err := lookup(ctx, product)
		return fmt.Sprintf("%s at %d", product, p), err
	}, topology.Async().WithConcurrency(8).WithTimeout(time.Second)).To("priced", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "orders", str, str)
	in.Pipe("ann", "apple")
	in.Pipe("bob", "pear")
	in.Pipe("ann", "pear")
	for _, r := range streamstest.Output(d, "priced", str, str).ReadRecords() {
		fmt.Printf("%s: %s\n", r.Key, r.Value)
	}
	// Output:
	// ann: apple at 3
	// bob: pear at 5
	// ann: pear at 5
}

// A call keeps per-key state: here how many orders each customer placed,
// read and written through the KeyState of the record's key.
func ExampleMapValuesAsyncWithState() {
	str, i64 := serde.String(), serde.Int64()
	b := topology.NewBuilder()
	b.AddStateStore(stores.KeyValue("orders-per-customer", str, i64))
	orders := topology.Stream(b, "orders", topology.Consumed(str, str))
	topology.MapValuesAsyncWithState(orders, "orders-per-customer",
		func(ctx context.Context, customer, product string, st *topology.KeyState[int64]) (string, error) {
			n, _ := st.Get()
			st.Put(n + 1)
			return fmt.Sprintf("order %d: %s", n+1, product), nil
		}).To("numbered", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "orders", str, str)
	in.Pipe("ann", "apple")
	in.Pipe("ann", "pear")
	in.Pipe("bob", "fig")
	for _, r := range streamstest.Output(d, "numbered", str, str).ReadRecords() {
		fmt.Printf("%s: %s\n", r.Key, r.Value)
	}
	// Output:
	// ann: order 1: apple
	// ann: order 2: pear
	// bob: order 1: fig
}
