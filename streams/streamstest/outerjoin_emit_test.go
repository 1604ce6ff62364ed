package streamstest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// A stream–stream outer join emits a record that found no partner at the
// first record after its window (plus grace) closed. Kafka Streams 4.4
// remembers the timestamp of the last waiting record its scan looked at,
// which can be later than one still waiting, and emits that one later
// (here: not at all before the input ends). This is one of the README's
// deliberate differences; the input came from a differential run.
func TestOuterJoinEmitsUnjoinedWhenWindowCloses(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	left := topology.Stream(b, "in", topology.Consumed(str, str))
	right := topology.Stream(b, "tbl", topology.Consumed(str, str))
	orNull := func(s *string) string {
		if s == nil {
			return "null"
		}
		return *s
	}
	topology.OuterJoinStream(left, right, func(l, r *string) string { return orNull(l) + "|" + orNull(r) },
		topology.JoinTimeDifference(20*time.Second, 5*time.Second)).To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: -1})
	in := streamstest.Input(d, "in", str, str)
	tbl := streamstest.Input(d, "tbl", str, str)
	in.PipeAt("k4", "in60", 1056442)
	tbl.PipeAt("k0", "tbl64", 1058472)
	in.PipeAt("k3", "in59", 1080673)
	tbl.PipeAt("k7", "tbl79", 1082342)
	tbl.PipeAt("k1", "tbl29", 1084075) // stream time passes k0's close (1058472+20000+5000)
	var got []string
	for _, r := range streamstest.Output(d, "out", str, str).ReadRecords() {
		got = append(got, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp))
	}
	// Kafka Streams: only the first.
	want := []string{"k4=in60|null@1056442", "k0=null|tbl64@1058472"}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}
