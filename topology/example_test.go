package topology_test

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// The word count's description, in Kafka Streams' TopologyDescription
// format: the repartition topic splits it into two sub-topologies.
func ExampleTopology_Describe() {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "text-input", topology.Consumed(serde.String(), serde.String()))
	words := topology.FlatMapValues(lines, func(line string) []string {
		return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r)
		})
	})
	byWord := topology.GroupBy(words, func(_, w string) string { return w },
		topology.Grouped(serde.String(), serde.String()))
	counts := topology.Count(byWord, topology.Materialized[string, int64]("counts"))
	counts.ToStream().To("word-counts", topology.Produced(serde.String(), serde.Int64()))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	fmt.Print(top.Describe())
	// Output:
	// Topologies:
	//    Sub-topology: 0
	//     Source: KSTREAM-SOURCE-0000000000 (topics: [text-input])
	//       --> KSTREAM-FLATMAPVALUES-0000000001
	//     Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
	//       --> KSTREAM-KEY-SELECT-0000000002
	//       <-- KSTREAM-SOURCE-0000000000
	//     Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
	//       --> counts-repartition-filter
	//       <-- KSTREAM-FLATMAPVALUES-0000000001
	//     Processor: counts-repartition-filter (stores: [])
	//       --> counts-repartition-sink
	//       <-- KSTREAM-KEY-SELECT-0000000002
	//     Sink: counts-repartition-sink (topic: counts-repartition)
	//       <-- counts-repartition-filter
	//
	//   Sub-topology: 1
	//     Source: counts-repartition-source (topics: [counts-repartition])
	//       --> KSTREAM-AGGREGATE-0000000003
	//     Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts])
	//       --> KTABLE-TOSTREAM-0000000007
	//       <-- counts-repartition-source
	//     Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
	//       --> KSTREAM-SINK-0000000008
	//       <-- KSTREAM-AGGREGATE-0000000003
	//     Sink: KSTREAM-SINK-0000000008 (topic: word-counts)
	//       <-- KTABLE-TOSTREAM-0000000007
}

// A topology as a Mermaid flowchart, for a README or a pull request: GitHub
// renders it inside a ```mermaid block. The admin endpoint serves it at
// /topology?format=mermaid.
func ExampleTopology_Mermaid() {
	b := topology.NewBuilder()
	clicks := topology.Stream(b, "clicks", topology.Consumed(serde.String(), serde.String()))
	counts := topology.Count(clicks.Filter(func(_, page string) bool { return page != "" }).GroupByKey(),
		topology.Materialized[string, int64]("clicks-per-user"))
	counts.ToStream().To("click-counts", topology.Produced(serde.String(), serde.Int64()))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	fmt.Print(top.Mermaid())
	// Output:
	// flowchart TB
	//   subgraph sub0["Sub-topology 0"]
	//     n0["KSTREAM-SOURCE-0000000000"]
	//     n1["KSTREAM-FILTER-0000000001"]
	//     n2["KSTREAM-AGGREGATE-0000000002"]
	//     n3["KTABLE-TOSTREAM-0000000003"]
	//     n4["KSTREAM-SINK-0000000004"]
	//   end
	//   t5[/"clicks"/]
	//   s6[("clicks-per-user")]
	//   t7[/"click-counts"/]
	//   t5 --> n0
	//   n0 --> n1
	//   n1 --> n2
	//   n2 --> n3
	//   n2 --- s6
	//   n3 --> n4
	//   n4 --> t7
}

// Orders must never be skipped: if the application comes back to find its
// committed offset deleted by retention, it stops with an error naming the
// partition and the offsets it missed. Clicks are worth reading only from
// the last hour.
func ExampleConsumedOptions_WithOffsetReset() {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Stream(b, "orders", topology.Consumed(str, str).WithOffsetReset(topology.ResetNone)).
		To("orders-checked", topology.Produced(str, str))
	lastHour := topology.ResetByDuration(time.Hour)
	topology.Stream(b, "clicks", topology.Consumed(str, str).WithOffsetReset(lastHour)).
		To("clicks-seen", topology.Produced(str, str))
	if _, err := b.Build(); err != nil {
		panic(err)
	}
	fmt.Println(topology.ResetNone, lastHour)
	// Output: none by_duration:PT3600S
}

// Alerts go to the partition of their region (regions are numbered), and
// an alert for every region to all of them: a stream partitioner places
// each record, multicasting and dropping as KIP-837 allows.
func ExampleProducedOptions_WithStreamPartitioner() {
	str := serde.String()
	byRegion := func(_ string, region string, _ *string, n int32) ([]int32, bool) {
		switch region {
		case "all":
			return []int32{0, 1, 2}, true
		case "test":
			return nil, true // dropped
		}
		var p int32
		fmt.Sscanf(region, "region-%d", &p)
		return []int32{p % n}, true
	}
	b := topology.NewBuilder()
	topology.Stream(b, "alerts", topology.Consumed(str, str)).
		To("regional-alerts", topology.Produced(str, str).WithStreamPartitioner(byRegion))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	d, err := streamstest.Open(top, streamstest.Options{Partitions: map[string]int32{"regional-alerts": 3}})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "alerts", str, str)
	in.Pipe("region-2", "flood")
	in.Pipe("all", "maintenance")
	in.Pipe("test", "ignore me")
	byPartition := streamstest.Output(d, "regional-alerts", str, str).ReadRecordsByPartition()
	for p := range int32(3) {
		for _, r := range byPartition[p] {
			fmt.Println(p, r.Value)
		}
	}
	// Output:
	// 0 maintenance
	// 1 maintenance
	// 2 flood
	// 2 maintenance
}

// One user makes half the clicks: a plain count would aggregate all of
// them in one task. CountSpread counts each user's clicks under 8 salted
// keys spread over the partitions, then adds up the 8 partial counts.
func ExampleCountSpread() {
	str := serde.String()
	b := topology.NewBuilder()
	clicks := topology.Stream(b, "clicks", topology.Consumed(str, str))
	topology.CountSpread(clicks.GroupByKey(), 8, topology.Materialized[string, int64]("clicks-per-user"))
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
	for i := range 1000 {
		user := "celebrity"
		if i%2 == 1 {
			user = fmt.Sprintf("user-%d", i%5)
		}
		in.Pipe(user, "/home")
	}
	counts := streamstest.KeyValueStore[string, int64](d, "clicks-per-user")
	for _, u := range []string{"celebrity", "user-1", "user-3"} {
		n, _, _ := counts.Get(u)
		fmt.Println(u, n)
	}
	// Output:
	// celebrity 500
	// user-1 100
	// user-3 100
}
