package topology_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// Payments carry their id in the value; the same payment may be sent
// again, under any key, by a retrying producer. Deduplicate forwards each
// id once within an hour of stream time.
func ExampleDeduplicate() {
	str := serde.String()
	b := topology.NewBuilder()
	payments := topology.Stream(b, "payments", topology.Consumed(str, str))
	paymentID := func(_, v string) string { id, _, _ := strings.Cut(v, ":"); return id }
	topology.Deduplicate(payments, paymentID, time.Hour, topology.Deduplicated[string]("payments-dedup")).
		To("payments-once", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}

	d, err := streamstest.Open(top)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "payments", str, str)
	in.PipeAt("alice", "p-1:€20", 0)
	in.PipeAt("alice", "p-1:€20", 30_000) // a retry, 30 s later
	in.PipeAt("bob", "p-2:€5", 40_000)
	in.PipeAt("carol", "p-1:€20", 50_000) // the same payment under another key
	for _, r := range streamstest.Output(d, "payments-once", str, str).ReadRecords() {
		fmt.Println(r.Key, r.Value)
	}
	fmt.Println("duplicates dropped:", d.Deduplicated())
	// Output:
	// alice p-1:€20
	// bob p-2:€5
	// duplicates dropped: 2
}

// A count per key that forgets keys not updated for ten minutes of stream
// time: the store stays bounded by the keys active lately, and downstream
// sees a deletion (a tombstone) when a key expires. (With the record cache
// on, as here, an expiry and a new record of the same key between two
// commits reach downstream as the new value only.)
func ExampleMaterializedOptions_WithTTL() {
	str := serde.String()
	b := topology.NewBuilder()
	clicks := topology.Stream(b, "clicks", topology.Consumed(str, str))
	topology.Count(clicks.GroupByKey(), topology.Materialized[string, int64]("active-users").WithTTL(10*time.Minute)).
		ToStream().To("active-user-clicks", topology.Produced(str, serde.Int64()))
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
	minute := int64(time.Minute / time.Millisecond)
	in.PipeAt("ann", "/", 0)
	in.PipeAt("bob", "/", 1*minute)
	in.PipeAt("ann", "/cart", 5*minute)
	in.PipeAt("ann", "/pay", 11*minute) // bob's count (1 min) is 10 minutes old now: it expires
	in.PipeAt("bob", "/", 12*minute)    // and bob starts over
	for _, r := range streamstest.Output(d, "active-user-clicks", str, serde.Int64()).ReadRecords() {
		if r.NullValue {
			fmt.Printf("%s expired\n", r.Key)
			continue
		}
		fmt.Printf("%s %d\n", r.Key, r.Value)
	}
	// Output:
	// ann 1
	// bob 1
	// ann 2
	// bob expired
	// ann 3
	// bob 1
}
