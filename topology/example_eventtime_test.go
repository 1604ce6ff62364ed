package topology_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// Clicks per user per minute, emitted once per window when it closes (one
// minute plus 10s of grace); a click for a closed window goes to the
// late-records topic.
func ExampleWindowedCount() {
	str := serde.String()
	b := topology.NewBuilder()
	clicks := topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey()
	w := clicks.WindowedBy(topology.TumblingWindows(time.Minute, 10*time.Second)).
		EmitOnWindowClose().LateRecords("late-clicks")
	counts := topology.WindowedCount(w)
	topology.Map(counts.ToStream(), func(k serde.Windowed[string], n int64) (string, string) {
		return fmt.Sprintf("%s@%s", k.Key, time.UnixMilli(k.Window.Start).UTC().Format("15:04")), fmt.Sprint(n)
	}).To("clicks-per-minute", topology.Produced(str, str))
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
	at := func(hhmmss string) int64 {
		t, _ := time.Parse(time.DateTime, "2026-11-30 "+hhmmss)
		return t.UnixMilli()
	}
	in.PipeAt("ann", "/home", at("10:00:05"))
	in.PipeAt("bob", "/home", at("10:00:30"))
	in.PipeAt("ann", "/cart", at("10:00:59"))
	in.PipeAt("ann", "/pay", at("10:01:20"))  // stream time 10:01:20 closes 10:00
	in.PipeAt("bob", "/cart", at("10:00:40")) // late: 10:00 closed at 10:01:10
	for _, r := range streamstest.Output(d, "clicks-per-minute", str, str).ReadRecords() {
		fmt.Println(r.Key, r.Value)
	}
	for _, r := range streamstest.Output(d, "late-clicks", str, str).ReadRecords() {
		fmt.Println("late:", r.Key, r.Value)
	}
	// Output:
	// ann@10:00 2
	// bob@10:00 1
	// late: bob /cart
}

// Orders priced from a global table, joined by the product in the order.
func ExampleJoinGlobal() {
	str := serde.String()
	b := topology.NewBuilder()
	prices := topology.GlobalTable(b, "prices", topology.Consumed(str, str))
	orders := topology.Stream(b, "orders", topology.Consumed(str, str))
	topology.LeftJoinGlobal(orders, prices,
		func(orderID, product string) string { return product },
		func(product string, price *string) string {
			if price == nil {
				return product + " (no price)"
			}
			return product + " at " + *price
		}).To("priced")
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	streamstest.Input(d, "prices", str, str).Pipe("tea", "3.50")
	in := streamstest.Input(d, "orders", str, str)
	in.Pipe("o1", "tea")
	in.Pipe("o2", "cake")
	for _, r := range streamstest.Output(d, "priced", str, str).ReadRecords() {
		fmt.Println(r.Key, r.Value)
	}
	// Output:
	// o1 tea at 3.50
	// o2 cake (no price)
}

// Orders (keyed by order id, valued "product:qty") joined with the
// products they name: a price change reaches every order of the product,
// and an order moving to another product is priced again.
func ExampleForeignKeyJoin() {
	str := serde.String()
	b := topology.NewBuilder()
	orders := topology.Table(b, "orders", topology.Consumed(str, str), topology.Materialized[string, string]("orders"))
	prices := topology.Table(b, "prices", topology.Consumed(str, str), topology.Materialized[string, string]("prices"))
	product := func(order string) (string, bool) {
		p, _, ok := strings.Cut(order, ":")
		return p, ok
	}
	topology.ForeignKeyJoin(orders, prices, product, func(order, price string) string { return order + " at " + price }).
		ToStream().To("priced-orders", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	p := streamstest.Input(d, "prices", str, str)
	o := streamstest.Input(d, "orders", str, str)
	p.Pipe("tea", "3.50")
	o.Pipe("o1", "tea:2")
	o.Pipe("o2", "tea:1")
	p.Pipe("tea", "3.80")
	p.Pipe("cake", "4.00")
	o.Pipe("o1", "cake:1")
	for _, r := range streamstest.Output(d, "priced-orders", str, str).ReadRecords() {
		fmt.Println(r.Key, r.Value)
	}
	// Output:
	// o1 tea:2 at 3.50
	// o2 tea:1 at 3.50
	// o1 tea:2 at 3.80
	// o2 tea:1 at 3.80
	// o1 cake:1 at 4.00
}

// Page views and purchases, two streams of different shapes, folded into
// one summary per user.
func ExampleCogroup() {
	str := serde.String()
	b := topology.NewBuilder()
	views := topology.Stream(b, "views", topology.Consumed(str, str)).GroupByKey()              // user → page
	buys := topology.Stream(b, "purchases", topology.Consumed(str, serde.Int64())).GroupByKey() // user → cents
	c := topology.Cogroup(views, func(_ string, page string, s string) string { return s + " " + page })
	c = topology.CogroupWith(c, buys, func(_ string, cents int64, s string) string { return fmt.Sprintf("%s $%d", s, cents/100) })
	c.Aggregate(func() string { return "" }, topology.Materialized[string, string]("summary").WithSerdes(str, str)).
		ToStream().To("summaries", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top, streamstest.Options{CacheMaxBytes: -1})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	v := streamstest.Input(d, "views", str, str)
	p := streamstest.Input(d, "purchases", str, serde.Int64())
	v.Pipe("ann", "/shoes")
	p.Pipe("ann", 4999)
	v.Pipe("bob", "/hats")
	v.Pipe("ann", "/socks")
	for _, r := range streamstest.Output(d, "summaries", str, str).ReadRecords() {
		fmt.Printf("%s:%s\n", r.Key, r.Value)
	}
	// Output:
	// ann: /shoes
	// ann: /shoes $49
	// bob: /hats
	// ann: /shoes $49 /socks
}

// A table's changes as a stream of labels: MapValuesNullable sees a
// deleted row as nil and says so, where MapValues would pass the tombstone
// through untouched.
func ExampleMapValuesNullable() {
	str := serde.String()
	b := topology.NewBuilder()
	stock := topology.Table(b, "stock", topology.Consumed(str, serde.Int64()), topology.Materialized[string, int64]("stock-store"))
	topology.MapValuesNullable(stock.ToStream(), func(item string, n *int64) *string {
		label := "discontinued"
		if n != nil {
			label = fmt.Sprintf("%d in stock", *n)
		}
		return &label
	}).To("stock-labels", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}

	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "stock", str, serde.Int64())
	in.Pipe("lamp", 3)
	in.PipeTombstone("lamp")
	for _, r := range streamstest.Output(d, "stock-labels", str, str).ReadRecords() {
		fmt.Println(r.Key, r.Value)
	}
	// Output:
	// lamp 3 in stock
	// lamp discontinued
}

// A table's changes, big orders only: Filter keeps the deletion of a row
// (it never judges a tombstone), where FilterNullable can drop deletions
// too.
func ExampleKStream_FilterNullable() {
	str, i64 := serde.String(), serde.Int64()
	b := topology.NewBuilder()
	orders := topology.Table(b, "orders", topology.Consumed(str, i64), topology.Materialized[string, int64]("orders-store")).ToStream()
	orders.Filter(func(_ string, amount int64) bool { return amount >= 100 }).To("big-orders", topology.Produced(str, i64))
	orders.FilterNullable(func(_ string, amount *int64) bool { return amount != nil && *amount >= 100 }).
		To("big-orders-no-deletions", topology.Produced(str, i64))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}

	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "orders", str, i64)
	in.Pipe("o1", 250)
	in.Pipe("o2", 20)
	in.PipeTombstone("o1")
	for _, topic := range []string{"big-orders", "big-orders-no-deletions"} {
		for _, r := range streamstest.Output(d, topic, str, i64).ReadRecords() {
			fmt.Println(topic, r.Key, r.Value, r.NullValue)
		}
	}
	// Output:
	// big-orders o1 250 false
	// big-orders o1 0 true
	// big-orders-no-deletions o1 250 false
}
