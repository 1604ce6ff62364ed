package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// runApp runs top until the returned stop is called; stop fails the test
// when Run failed.
func runApp(t *testing.T, top *topology.Topology, cfg streams.Config) (stop func()) {
	t.Helper()
	_, stop = startApp(t, top, cfg)
	return stop
}

// startApp is runApp that also returns the app.
func startApp(t *testing.T, top *topology.Topology, cfg streams.Config) (app *streams.App, stop func()) {
	t.Helper()
	app, err := streams.New(top, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("app %s: %v", cfg.ApplicationID, err)
		}
	}
	t.Cleanup(stop)
	return app, stop
}

// A stream–table join enriches each stream record with the table row as of
// the record's timestamp while the table changes under it: the task takes
// records from the table and stream partitions in timestamp order, waiting
// for a partition whose records are not fetched yet (the default
// MaxTaskIdle, as Kafka Streams' KIP-695), so with both topics written
// before the app starts, every join result is exact — however the fetches
// happen to interleave.
func TestStreamTableJoinWhileTableUpdates(t *testing.T) {
	brokers := realBroker(t)
	users, clicks, out := kafkatest.UniqueName(t, "users"), kafkatest.UniqueName(t, "clicks"), kafkatest.UniqueName(t, "enriched")
	for _, tp := range []string{users, clicks, out} {
		kafkatest.CreateTopic(t, brokers, tp, 3, nil)
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	// Users change region every 10ms of event time (even timestamps);
	// clicks come at odd timestamps in between.
	const n = 3000
	region := map[string]string{}
	want := map[string]string{} // click id → "click/region"
	var userRecs, clickRecs []kafkatest.Record
	for i := range n {
		user := fmt.Sprintf("u%d", i%25)
		ts := base + int64(i)*10
		if i%3 == 0 {
			r := fmt.Sprintf("r%d", i)
			region[user] = r
			userRecs = append(userRecs, kafkatest.Record{Key: []byte(user), Value: []byte(r), Timestamp: time.UnixMilli(ts)})
			continue
		}
		id := fmt.Sprintf("c%d", i)
		clickRecs = append(clickRecs, kafkatest.Record{Key: []byte(user), Value: []byte(id), Timestamp: time.UnixMilli(ts + 1)})
		if r, ok := region[user]; ok {
			want[id] = id + "/" + r
		}
	}
	kafkatest.Produce(t, brokers, users, userRecs...)
	kafkatest.Produce(t, brokers, clicks, clickRecs...)

	str := serde.String()
	b := topology.NewBuilder()
	table := topology.Table(b, users, topology.Consumed(str, str), topology.Materialized[string, string]("regions"))
	topology.JoinTable(topology.Stream(b, clicks, topology.Consumed(str, str)), table,
		func(click, region string) string { return click + "/" + region }).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	appID := kafkatest.UniqueName(t, "enrich")
	stop := runApp(t, top, streams.Config{ApplicationID: appID, BootstrapServers: brokers, StateDir: t.TempDir(),
		Guarantee: streams.ExactlyOnce})
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, users, clicks)
	stop()

	got := map[string]string{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		v := string(r.Value)
		got[strings.SplitN(v, "/", 2)[0]] = v
	}
	bad := 0
	for id, w := range want {
		if got[id] != w {
			if bad++; bad <= 5 {
				t.Errorf("click %s joined as %q, want %q (the region as of the click)", id, got[id], w)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d join results, want %d", len(got), len(want))
	}
	if bad > 0 {
		t.Fatalf("%d of %d joins saw the wrong table version", bad, len(want))
	}
}

// A task waits for an empty partition only while records are known to be
// coming: a partition with no record at all (a table with nothing on
// some of its partitions) is caught up from its first fetch, and the
// stream records of that task are processed and committed.
func TestStreamTableJoinWithAnEmptyTablePartition(t *testing.T) {
	brokers := realBroker(t)
	users, clicks, out := kafkatest.UniqueName(t, "users"), kafkatest.UniqueName(t, "clicks"), kafkatest.UniqueName(t, "enriched")
	for _, tp := range []string{users, clicks, out} {
		kafkatest.CreateTopic(t, brokers, tp, 2, nil)
	}
	// Table rows on partition 0 only; clicks on both partitions.
	kafkatest.ProduceToPartitions(t, brokers, users, kafkatest.Record{Partition: 0, Key: []byte("u0"), Value: []byte("r0")})
	var clickRecs []kafkatest.Record
	for i := range 200 {
		clickRecs = append(clickRecs, kafkatest.Record{Partition: int32(i % 2), Key: []byte("u0"), Value: []byte(fmt.Sprintf("c%d", i))})
	}
	kafkatest.ProduceToPartitions(t, brokers, clicks, clickRecs...)

	str := serde.String()
	b := topology.NewBuilder()
	table := topology.Table(b, users, topology.Consumed(str, str), topology.Materialized[string, string]("regions"))
	topology.JoinTable(topology.Stream(b, clicks, topology.Consumed(str, str)), table,
		func(click, region string) string { return click + "/" + region }).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	appID := kafkatest.UniqueName(t, "empty-part")
	stop := runApp(t, top, streams.Config{ApplicationID: appID, BootstrapServers: brokers, StateDir: t.TempDir(), CommitInterval: 200 * time.Millisecond})
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, clicks)
	stop()
	// The clicks on partition 0 met the row; those on partition 1 had no
	// row on their partition (inner join: no output), but were processed.
	if got := len(kafkatest.ConsumeAll(t, brokers, out)); got != 100 {
		t.Fatalf("%d join results, want the 100 clicks of partition 0", got)
	}
}

// A global table is read in full on every instance before processing
// starts, then follows its topic; a restarted instance resumes from the
// offsets its store holds.
func TestGlobalTableJoin(t *testing.T) {
	brokers := realBroker(t)
	products, orders, out := kafkatest.UniqueName(t, "products"), kafkatest.UniqueName(t, "orders"), kafkatest.UniqueName(t, "priced")
	kafkatest.CreateTopic(t, brokers, products, 4, map[string]string{"cleanup.policy": "compact"})
	kafkatest.CreateTopic(t, brokers, orders, 2, nil)
	kafkatest.CreateTopic(t, brokers, out, 2, nil)

	// 500 products across four partitions, and orders (keyed by order id,
	// on two partitions) for them, all written before the app starts: an
	// order processed before the global table was complete would be
	// dropped or priced wrong.
	var prodRecs, orderRecs []kafkatest.Record
	for i := range 500 {
		prodRecs = append(prodRecs, kafkatest.KV(fmt.Sprintf("p%d", i), fmt.Sprintf("price-%d", i)))
	}
	for i := range 2000 {
		orderRecs = append(orderRecs, kafkatest.KV(fmt.Sprintf("o%d", i), fmt.Sprintf("p%d", i%500)))
	}
	kafkatest.Produce(t, brokers, products, prodRecs...)
	kafkatest.Produce(t, brokers, orders, orderRecs...)

	str := serde.String()
	build := func() *topology.Topology {
		b := topology.NewBuilder()
		prices := topology.GlobalTable(b, products, topology.Consumed(str, str), topology.Materialized[string, string]("prices"))
		topology.JoinGlobal(topology.Stream(b, orders, topology.Consumed(str, str)), prices,
			func(_, product string) string { return product },
			func(product, price string) string { return product + "=" + price }).To(out)
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	appID := kafkatest.UniqueName(t, "pricing")
	state := t.TempDir()
	cfg := streams.Config{ApplicationID: appID, BootstrapServers: brokers, StateDir: state, Guarantee: streams.ExactlyOnce}
	app, stop := startApp(t, build(), cfg)
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, orders)

	// The global store answers queries for every key on this instance.
	prices, err := streams.KeyValueStoreOf[string, string](app, "prices")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := prices.Get("p42"); err != nil || !ok || v != "price-42" {
		t.Errorf(`global store query Get("p42") = %q %v %v, want "price-42"`, v, ok, err)
	}
	if n, err := prices.ApproximateNumEntries(); err != nil || n != 500 {
		t.Errorf("global store holds %d entries (%v), want 500", n, err)
	}

	check := func(want map[string]string) {
		t.Helper()
		got := map[string]string{}
		for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
			got[string(r.Key)] = string(r.Value)
		}
		bad := 0
		for k, w := range want {
			if got[k] != w {
				if bad++; bad <= 5 {
					t.Errorf("order %s: %q, want %q", k, got[k], w)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%d of %d orders priced wrong", bad, len(want))
		}
	}
	want := map[string]string{}
	for i := range 2000 {
		want[fmt.Sprintf("o%d", i)] = fmt.Sprintf("p%d=price-%d", i%500, i%500)
	}
	check(want)

	// The table follows its topic while the app runs: reprice p7, then
	// order it until an order sees the new price.
	kafkatest.Produce(t, brokers, products, kafkatest.KV("p7", "price-7-new"))
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("late-%d", i)
		kafkatest.Produce(t, brokers, orders, kafkatest.KV(id, "p7"))
		kafkatest.WaitCaughtUp(t, brokers, appID, time.Minute, orders)
		var last string
		for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
			if string(r.Key) == id {
				last = string(r.Value)
			}
		}
		if last == "p7=price-7-new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the global table did not pick up the new price within 60s (last: %q)", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()

	// Restarted on the same state directory, the instance resumes: a
	// product deleted meanwhile (tombstone) is gone for new orders.
	kafkatest.Produce(t, brokers, products, kafkatest.Record{Key: []byte("p9")})
	kafkatest.Produce(t, brokers, orders, kafkatest.KV("after-delete", "p9"), kafkatest.KV("after-restart", "p8"))
	stop = runApp(t, build(), cfg)
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, orders)
	stop()
	got := map[string]string{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		got[string(r.Key)] = string(r.Value)
	}
	if got["after-restart"] != "p8=price-8" {
		t.Errorf("after restart: %q", got["after-restart"])
	}
	if v, ok := got["after-delete"]; ok {
		t.Errorf("an order for a deleted product was joined: %q", v)
	}
}

type fkOrder struct {
	Product string `json:"product"`
	Qty     int    `json:"qty"`
}

// A foreign-key join between tables of different partition counts (orders
// on 4 partitions, products on 2) while both change, orders move between
// products, and rows are deleted, under exactly-once: the result table
// ends equal to the join of the final tables. Rapid updates of one order
// put stale answers in flight, which the join must drop.
func TestForeignKeyJoinWhileBothTablesChange(t *testing.T) {
	brokers := realBroker(t)
	app := kafkatest.UniqueName(t, "fk")
	orders, products, out := app+"-orders", app+"-products", app+"-priced"
	kafkatest.CreateTopic(t, brokers, orders, 4, nil)
	kafkatest.CreateTopic(t, brokers, products, 2, nil)
	kafkatest.CreateTopic(t, brokers, out, 4, nil)

	str := serde.String()
	b := topology.NewBuilder()
	ot := topology.Table(b, orders, topology.Consumed(str, serde.JSON[fkOrder]()), topology.Materialized[string, fkOrder]("orders"))
	pt := topology.Table(b, products, topology.Consumed(str, serde.Int64()), topology.Materialized[string, int64]("prices"))
	topology.ForeignKeyJoin(ot, pt, func(o fkOrder) (string, bool) { return o.Product, o.Product != "" },
		func(o fkOrder, price int64) string { return fmt.Sprintf("%s:%d", o.Product, int64(o.Qty)*price) },
		topology.Materialized[string, string]("priced").WithSerdes(str, str)).
		ToStream().To(out, topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}

	orderVal := serde.JSON[fkOrder]()
	price := map[string]int64{}
	order := map[string]fkOrder{}
	seq := 0
	batch := func(n int) (ps, os []kafkatest.Record) {
		for range n {
			seq++
			if seq%3 == 0 {
				p := fmt.Sprintf("p%02d", seq%40)
				if seq%29 == 0 {
					delete(price, p)
					ps = append(ps, kafkatest.Record{Key: []byte(p)})
					continue
				}
				price[p] = int64(seq % 97)
				v, _ := serde.Int64().Serialize("", price[p])
				ps = append(ps, kafkatest.Record{Key: []byte(p), Value: v})
				continue
			}
			o := fmt.Sprintf("o%03d", (seq*7)%300)
			if seq%31 == 0 {
				delete(order, o)
				os = append(os, kafkatest.Record{Key: []byte(o)})
				continue
			}
			ord := fkOrder{Product: fmt.Sprintf("p%02d", (seq*13)%45), Qty: seq%5 + 1} // p40..p44 never exist
			if seq%17 == 0 {
				ord.Product = ""
			}
			order[o] = ord
			v, _ := orderVal.Serialize("", ord)
			os = append(os, kafkatest.Record{Key: []byte(o), Value: v})
		}
		return ps, os
	}
	ps, os := batch(6000)
	kafkatest.Produce(t, brokers, products, ps...)
	kafkatest.Produce(t, brokers, orders, os...)
	stop := runApp(t, top, streams.Config{ApplicationID: app, BootstrapServers: brokers, StateDir: t.TempDir(), Guarantee: streams.ExactlyOnce})
	for range 10 { // more changes while it runs
		ps, os := batch(1000)
		kafkatest.Produce(t, brokers, orders, os...)
		kafkatest.Produce(t, brokers, products, ps...)
		time.Sleep(200 * time.Millisecond)
	}
	want := map[string]string{}
	for o, ord := range order {
		if p, ok := price[ord.Product]; ok && ord.Product != "" {
			want[o] = fmt.Sprintf("%s:%d", ord.Product, int64(ord.Qty)*p)
		}
	}
	kafkatest.WaitCaughtUp(t, brokers, app, 2*time.Minute, orders, products)
	var got map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for {
		got = map[string]string{}
		for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
			if r.Value == nil {
				delete(got, string(r.Key))
			} else {
				got[string(r.Key)] = string(r.Value)
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stop()
	bad := 0
	for k, v := range want {
		if got[k] != v {
			if bad++; bad <= 5 {
				t.Errorf("order %s: result %q, want %q", k, got[k], v)
			}
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("order %s: result %q, want none", k, v)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d results wrong of %d", bad, len(want))
	}
	t.Logf("%d joined orders exact", len(want))
}

type cogroupSummary struct {
	Visits int   `json:"visits"`
	Cents  int64 `json:"cents"`
}

// Two streams of different shapes co-grouped into one aggregate per user
// on the real broker, exactly once: visits keyed by user, orders keyed by
// order id and re-keyed by user through a repartition topic. The last
// summary of every user equals a count over the input.
func TestCogroupVisitsAndOrders(t *testing.T) {
	brokers := realBroker(t)
	app := kafkatest.UniqueName(t, "cogroup")
	visits, orders, out := app+"-visits", app+"-orders", app+"-summaries"
	for _, tp := range []string{visits, orders, out} {
		kafkatest.CreateTopic(t, brokers, tp, 3, nil)
	}
	want := map[string]cogroupSummary{}
	var vrecs, orecs []kafkatest.Record
	for i := range 6000 {
		user := fmt.Sprintf("u%02d", (i*7)%40)
		s := want[user]
		if i%3 == 0 {
			cents := int64(100 + i%900)
			s.Cents += cents
			orecs = append(orecs, kafkatest.KV(fmt.Sprintf("o%05d", i), fmt.Sprintf("%s:%d", user, cents)))
		} else {
			s.Visits++
			vrecs = append(vrecs, kafkatest.KV(user, fmt.Sprintf("/page/%d", i%17)))
		}
		want[user] = s
	}
	kafkatest.Produce(t, brokers, visits, vrecs...)
	kafkatest.Produce(t, brokers, orders, orecs...)

	str := serde.String()
	b := topology.NewBuilder()
	byUser := topology.GroupBy(topology.Stream(b, orders, topology.Consumed(str, str)),
		func(_, v string) string { u, _, _ := strings.Cut(v, ":"); return u },
		topology.Grouped(str, str).WithName("orders-by-user"))
	c := topology.Cogroup(topology.Stream(b, visits, topology.Consumed(str, str)).GroupByKey(),
		func(_, _ string, s cogroupSummary) cogroupSummary { s.Visits++; return s })
	c = topology.CogroupWith(c, byUser, func(_, v string, s cogroupSummary) cogroupSummary {
		_, cents, _ := strings.Cut(v, ":")
		n, _ := strconv.ParseInt(cents, 10, 64)
		s.Cents += n
		return s
	})
	c.Aggregate(func() cogroupSummary { return cogroupSummary{} },
		topology.Materialized[string, cogroupSummary]("summary").WithSerdes(str, serde.JSON[cogroupSummary]())).
		ToStream().To(out, topology.Produced(str, serde.JSON[cogroupSummary]()))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	stop := runApp(t, top, streams.Config{ApplicationID: app, BootstrapServers: brokers, StateDir: t.TempDir(), Guarantee: streams.ExactlyOnce})
	kafkatest.WaitCaughtUp(t, brokers, app, 2*time.Minute, visits, orders, app+"-orders-by-user-repartition")
	stop()

	got := map[string]cogroupSummary{}
	js := serde.JSON[cogroupSummary]()
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		s, err := js.Deserialize(out, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[string(r.Key)] = s
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("summaries %v\nwant %v", got, want)
	}
	t.Logf("%d users' summaries exact", len(want))
}
