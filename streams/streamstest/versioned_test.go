package streamstest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// priced joins orders with prices: as of each order's time when versioned,
// the latest price otherwise.
func priced(t *testing.T, versioned bool, grace time.Duration) (*streamstest.Driver, *streamstest.InputTopic[string, string], *streamstest.InputTopic[string, string], *streamstest.OutputTopic[string, string]) {
	t.Helper()
	str := serde.String()
	b := topology.NewBuilder()
	m := topology.Materialized[string, string]("prices")
	if versioned {
		m = m.WithVersioned(time.Hour)
	}
	prices := topology.Table(b, "prices", topology.Consumed(str, str), m)
	orders := topology.Stream(b, "orders", topology.Consumed(str, str))
	join := func(o, p string) string { return o + "@" + p }
	if grace > 0 {
		topology.JoinTableWithGrace(orders, prices, grace, join).To("priced", topology.Produced(str, str))
	} else {
		topology.JoinTable(orders, prices, join).To("priced", topology.Produced(str, str))
	}
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	return d, streamstest.Input(d, "prices", str, str), streamstest.Input(d, "orders", str, str), streamstest.Output(d, "priced", str, str)
}

func values(o *streamstest.OutputTopic[string, string]) string {
	var out []string
	for _, r := range o.ReadRecords() {
		out = append(out, r.Value)
	}
	return strings.Join(out, " ")
}

// Orders and prices produced independently arrive out of order: an order
// placed at 10:05 must be priced with the price valid at 10:05, not with
// one set later. A versioned table answers as of the order's time; the
// latest-value join prices the late order with the future.
func TestVersionedJoinPricesAsOfTheOrder(t *testing.T) {
	const min = int64(60_000)
	run := func(versioned bool) string {
		_, prices, orders, out := priced(t, versioned, 0)
		prices.PipeAt("apple", "1.00", 10*min)
		prices.PipeAt("apple", "1.20", 11*min)
		orders.PipeAt("apple", "o1", 10*min+5*min/10) // 10:00:30, arrives after the 11:00 price
		orders.PipeAt("apple", "o2", 11*min+1)
		prices.PipeAt("apple", "0.90", 9*min) // a late correction, before both
		orders.PipeAt("apple", "o0", 9*min+1)
		return values(out)
	}
	if got, want := run(true), "o1@1.00 o2@1.20 o0@0.90"; got != want {
		t.Fatalf("versioned: %q, want %q", got, want)
	}
	if got, want := run(false), "o1@1.20 o2@1.20 o0@0.90"; got != want {
		t.Fatalf("latest value: %q, want %q (the wrong answer a latest-value join gives)", got, want)
	}
}

// With a grace period the stream waits: a price that arrives after the
// order but is valid at its time is seen.
func TestVersionedJoinWithGraceSeesLatePrices(t *testing.T) {
	_, prices, orders, out := priced(t, true, 50*time.Millisecond)
	prices.PipeAt("apple", "1.00", 100)
	orders.PipeAt("apple", "o1", 200) // waits until stream time 250
	prices.PipeAt("apple", "1.10", 190)
	if got := values(out); got != "" {
		t.Fatalf("joined before the grace period passed: %q", got)
	}
	orders.PipeAt("apple", "o2", 249)
	if got := values(out); got != "" {
		t.Fatalf("joined before the grace period passed: %q", got)
	}
	orders.PipeAt("apple", "o3", 250) // stream time 250: o1 is due
	if got, want := values(out), "o1@1.10"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	orders.PipeAt("apple", "o4", 120) // older than stream time minus grace: at once
	if got, want := values(out), "o4@1.00"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// A grace period needs a versioned table; a versioned store materializes a
// source table only.
func TestVersionedRefusals(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	prices := topology.Table(b, "prices", topology.Consumed(str, str), topology.Materialized[string, string]("prices"))
	topology.JoinTableWithGrace(topology.Stream(b, "orders", topology.Consumed(str, str)), prices, time.Second,
		func(o, p string) string { return o + p })
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "needs a versioned table") {
		t.Fatalf("grace with a plain table: err = %v", err)
	}
	b = topology.NewBuilder()
	g := topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey()
	topology.Count(g, topology.Materialized[string, int64]("c").WithVersioned(time.Hour))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "source tables") {
		t.Fatalf("a versioned aggregation: err = %v", err)
	}
}

// The versioned store behind a table answers as-of and multi-version
// queries.
func TestVersionedTableStoreQueries(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Table(b, "prices", topology.Consumed(str, str), topology.Materialized[string, string]("prices").WithVersioned(time.Hour))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	in := streamstest.Input(d, "prices", str, str)
	in.PipeAt("apple", "1.00", 100)
	in.PipeAt("apple", "1.20", 300)
	in.PipeAt("apple", "1.10", 200)
	in.PipeRecord(processor.Record[string, string]{Key: "apple", NullValue: true, Timestamp: 300})
	in.PipeAt("apple", "1.30", 500)
	s := streamstest.VersionedKeyValueStore[string, string](d, "prices")
	var got []string
	for _, at := range []int64{99, 100, 199, 200, 300, 450, 500} {
		r, ok, err := s.GetAsOf("apple", at)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%v:%s", at, ok, r.Value))
	}
	// The deletion at 300 replaced 1.20, the version from 300.
	if want := "99:false: 100:true:1.00 199:true:1.00 200:true:1.10 300:false: 450:false: 500:true:1.30"; strings.Join(got, " ") != want {
		t.Fatalf("as of: %s\nwant  %s", strings.Join(got, " "), want)
	}
	vs, err := s.Versions("apple", 0, 1000, false)
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, v := range vs {
		to := fmt.Sprint(v.ValidTo)
		if v.ValidTo == stores.NoValidTo {
			to = "∞"
		}
		desc = append(desc, fmt.Sprintf("%s[%d,%s)", v.Value, v.Timestamp, to))
	}
	if want := "1.30[500,∞) 1.10[200,300) 1.00[100,200)"; strings.Join(desc, " ") != want {
		t.Fatalf("versions: %s, want %s", strings.Join(desc, " "), want)
	}
}
