package streamstest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

type visit struct {
	Page string `json:"page"`
}

type spend struct {
	Cents int64 `json:"cents"`
}

type userActivity struct {
	Visits int   `json:"visits"`
	Cents  int64 `json:"cents"`
}

// Two streams of different value types co-grouped into one aggregate per
// user: with the record cache on, updates from both streams between two
// commits reach the output once per key, carrying both; the aggregate
// table feeds a table aggregation, which needs the old value of every
// update (the co-grouped table sends it); the store is readable.
func TestCogroup(t *testing.T) {
	b := topology.NewBuilder()
	visits := topology.Stream(b, "visits", topology.Consumed(str, serde.JSON[visit]())).GroupByKey()
	// Spends are keyed by order id, "user/order": re-keyed by user, which
	// repartitions them.
	spends := topology.GroupBy(topology.Stream(b, "spends", topology.Consumed(str, serde.JSON[spend]())),
		func(k string, _ spend) string { u, _, _ := strings.Cut(k, "/"); return u },
		topology.Grouped(str, serde.JSON[spend]()).WithName("spends-by-user"))
	c := topology.Cogroup(visits, func(_ string, _ visit, a userActivity) userActivity { a.Visits++; return a })
	c = topology.CogroupWith(c, spends, func(_ string, s spend, a userActivity) userActivity { a.Cents += s.Cents; return a })
	activity := c.Aggregate(func() userActivity { return userActivity{} },
		topology.Materialized[string, userActivity]("activity").WithSerdes(str, serde.JSON[userActivity]()))
	activity.ToStream().To("activity-out", topology.Produced(str, serde.JSON[userActivity]()))
	// Total spend of users with at least two visits: old rows are retracted.
	active := activity.Filter(func(_ string, a userActivity) bool { return a.Visits >= 2 })
	topology.TableAggregate(topology.TableGroupBy(active, func(_ string, a userActivity) (string, int64) { return "active", a.Cents },
		topology.Grouped(str, serde.Int64())),
		func() int64 { return 0 },
		func(_ string, v, agg int64) int64 { return agg + v },
		func(_ string, v, agg int64) int64 { return agg - v },
		topology.Materialized[string, int64]("active-spend").WithSerdes(str, serde.Int64())).
		ToStream().To("active-spend-out", topology.Produced(str, serde.Int64()))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if d := top.Describe(); !strings.Contains(d, "COGROUPKSTREAM-MERGE-") || !strings.Contains(d, "spends-by-user-repartition") {
		t.Errorf("Describe lacks the cogroup merge or the repartition topic:\n%s", d)
	}
	d := streamstest.New(t, top, streamstest.Options{ManualCommit: true})
	vin := streamstest.Input(d, "visits", str, serde.JSON[visit]())
	sin := streamstest.Input(d, "spends", str, serde.JSON[spend]())
	out := streamstest.Output(d, "activity-out", str, serde.JSON[userActivity]())
	spendOut := streamstest.Output(d, "active-spend-out", str, serde.Int64())
	commit := func(want, wantSpend string) {
		t.Helper()
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range out.ReadRecords() {
			got = append(got, fmt.Sprintf("%s=%d/%d", r.Key, r.Value.Visits, r.Value.Cents))
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("activity %q, want %q", g, want)
		}
		var spends []string
		for _, r := range spendOut.ReadRecords() {
			spends = append(spends, fmt.Sprint(r.Value))
		}
		if g := strings.Join(spends, " "); g != wantSpend {
			t.Errorf("active spend %q, want %q", g, wantSpend)
		}
	}
	vin.PipeAt("u1", visit{"/"}, 1)
	sin.PipeAt("u1/o1", spend{500}, 2)
	vin.PipeAt("u2", visit{"/"}, 3)
	vin.PipeAt("u1", visit{"/cart"}, 4)
	commit("u1=2/500 u2=1/0", "500")
	sin.PipeAt("u1/o2", spend{250}, 5)
	sin.PipeAt("u2/o3", spend{100}, 6)
	vin.PipeAt("u2", visit{"/help"}, 7)
	commit("u1=2/750 u2=2/100", "850")

	kv := streamstest.KeyValueStore[string, userActivity](d, "activity")
	if a, ok, err := kv.Get("u1"); err != nil || !ok || a != (userActivity{2, 750}) {
		t.Errorf("store u1: %+v %v %v, want 2 visits, 750 cents", a, ok, err)
	}
}

// Two co-grouped streams that both need repartitioning without Grouped
// names would write the same topic: Build says so instead.
func TestCogroupUnnamedRepartitionsClash(t *testing.T) {
	b := topology.NewBuilder()
	rekey := func(topic string) *topology.KGroupedStream[string, string] {
		return topology.GroupBy(topology.Stream(b, topic, consumed()), func(_, v string) string { return v }, topology.Grouped(str, str))
	}
	c := topology.Cogroup(rekey("a"), func(_, v, agg string) string { return agg + v })
	c = topology.CogroupWith(c, rekey("b"), func(_, v, agg string) string { return agg + v })
	c.Aggregate(func() string { return "" }, topology.Materialized[string, string]("ab").WithSerdes(str, str))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "ab-repartition") {
		t.Fatalf("Build: %v, want an error naming the clashing topic ab-repartition", err)
	}
}

// Windowed co-grouping closes a window for every co-grouped stream at
// once, on the task's stream time (the latest record of any of them): a
// click for a window that the purchases' time has closed is late, though
// no later click came. Count windows are refused by Build.
func TestCogroupWindowedClosesForAllStreams(t *testing.T) {
	b := topology.NewBuilder()
	c := topology.Cogroup(topology.Stream(b, "clicks", consumed()).GroupByKey(), func(_, v, agg string) string { return agg + " c:" + v })
	c = topology.CogroupWith(c, topology.Stream(b, "buys", consumed()).GroupByKey(), func(_, v, agg string) string { return agg + " b:" + v })
	c.WindowedBy(topology.TumblingWindows(100*time.Millisecond, 10*time.Millisecond)).
		Aggregate(func() string { return "" }, topology.Materialized[string, string]("w").WithSerdes(str, str).WithCaching(false)).
		ToStream().To("out", topology.Produced(serde.TimeWindowed(str, 100), str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	clicks, buys := streamstest.Input(d, "clicks", str, str), streamstest.Input(d, "buys", str, str)
	out := streamstest.Output(d, "out", serde.TimeWindowed(str, 100), str)
	clicks.PipeAt("u1", "home", 10)
	buys.PipeAt("u1", "book", 250) // closes [0,100) for both streams
	clicks.PipeAt("u1", "cart", 50)
	var got []string
	for _, r := range out.ReadRecords() {
		got = append(got, fmt.Sprintf("%s@%d=%s", r.Key.Key, r.Key.Window.Start, r.Value))
	}
	if g := strings.Join(got, ", "); g != "u1@0= c:home, u1@200= b:book" {
		t.Errorf("output %q", g)
	}
	if n := d.LateRecords(); n != 1 {
		t.Errorf("%d late records, want 1 (the click for the closed window)", n)
	}

	b = topology.NewBuilder()
	c = topology.Cogroup(topology.Stream(b, "clicks", consumed()).GroupByKey(), func(_, v, agg string) string { return agg + v })
	c.WindowedBy(topology.CountWindows(3)).Aggregate(func() string { return "" }, topology.Materialized[string, string]("cw").WithSerdes(str, str))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "count windows") {
		t.Errorf("Build: %v, want an error refusing count windows", err)
	}
}
