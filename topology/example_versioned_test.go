package topology_test

import (
	"fmt"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// Orders joined with a versioned price table get the price valid at each
// order's time, though the 12:00 price arrived before the 10:30 order.
func ExampleMaterializedOptions_WithVersioned() {
	str := serde.String()
	b := topology.NewBuilder()
	prices := topology.Table(b, "prices", topology.Consumed(str, str),
		topology.Materialized[string, string]("prices").WithVersioned(24*time.Hour))
	orders := topology.Stream(b, "orders", topology.Consumed(str, str))
	topology.JoinTable(orders, prices, func(o, p string) string { return o + " at " + p }).
		To("priced", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	hour := int64(time.Hour / time.Millisecond)
	p, o := streamstest.Input(d, "prices", str, str), streamstest.Input(d, "orders", str, str)
	p.PipeAt("apple", "1.00", 8*hour)
	p.PipeAt("apple", "1.20", 12*hour)
	o.PipeAt("apple", "order-1", 10*hour+hour/2) // placed at 10:30, arrives late
	o.PipeAt("apple", "order-2", 13*hour)
	for _, r := range streamstest.Output(d, "priced", str, str).ReadRecords() {
		fmt.Println(r.Value)
	}
	// Output:
	// order-1 at 1.00
	// order-2 at 1.20
}

// With a grace period the order waits for prices up to a minute late.
func ExampleJoinTableWithGrace() {
	str := serde.String()
	b := topology.NewBuilder()
	prices := topology.Table(b, "prices", topology.Consumed(str, str),
		topology.Materialized[string, string]("prices").WithVersioned(time.Hour))
	orders := topology.Stream(b, "orders", topology.Consumed(str, str))
	topology.JoinTableWithGrace(orders, prices, time.Minute, func(o, p string) string { return o + " at " + p }).
		To("priced", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	p, o := streamstest.Input(d, "prices", str, str), streamstest.Input(d, "orders", str, str)
	p.PipeAt("apple", "1.00", 0)
	o.PipeAt("apple", "order-1", 100_000)
	p.PipeAt("apple", "1.10", 90_000)     // a price from before the order, 10 s late
	o.PipeAt("apple", "order-2", 160_000) // stream time passes order-1's time by the grace
	for _, r := range streamstest.Output(d, "priced", str, str).ReadRecords() {
		fmt.Println(r.Value)
	}
	// Output:
	// order-1 at 1.10
}

// Each sliding window's final count, once, when it closes: stream time at
// its end plus grace.
func ExampleKTable_Suppress() {
	str := serde.String()
	b := topology.NewBuilder()
	clicks := topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey()
	counts := topology.WindowedCount(clicks.WindowedBy(topology.SlidingWindows(5*time.Second, 2*time.Second)))
	final := counts.Suppress(topology.UntilWindowCloses(topology.Unbounded()))
	topology.Map(final.ToStream(), func(k serde.Windowed[string], n int64) (string, string) {
		return fmt.Sprintf("%s [%d,%d]", k.Key, k.Window.Start, k.Window.End), fmt.Sprint(n)
	}).To("final", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "clicks", str, str)
	in.PipeAt("k0", "click", 1127210)
	in.PipeAt("k0", "click", 1129210) // the first window's end plus grace: it closes
	for _, r := range streamstest.Output(d, "final", str, str).ReadRecords() {
		fmt.Println(r.Key, "=", r.Value)
	}
	// Output:
	// k0 [1122210,1127210] = 1
}
