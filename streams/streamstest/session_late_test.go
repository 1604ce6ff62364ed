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

// A record is too late for session windows only when its merged session
// ended before stream time minus grace minus the inactivity gap, as in
// Kafka Streams (KStreamSessionWindowAggregate's close time), which is also
// when emit-on-close closes a session. Both inputs came from differential
// runs against Kafka Streams 4.4's TopologyTestDriver, whose outputs are
// the expectations.
func TestSessionLateBoundaryMatchesKafkaStreams(t *testing.T) {
	str := serde.String()
	type in struct {
		key string
		ts  int64
	}
	cases := []struct {
		name       string
		gap, grace time.Duration
		input      []in
		want       []string
	}{{
		name: "gap 5s grace 20s", gap: 5 * time.Second, grace: 20 * time.Second,
		input: []in{{"a", 100000}, {"b", 76000}},
		// 76000 is within 100000-20000-5000: not late.
		want: []string{"a@[100000,100000]=1", "b@[76000,76000]=1"},
	}, {
		name: "gap 30s grace 10s", gap: 30 * time.Second, grace: 10 * time.Second,
		input: []in{{"k4", 1088172}, {"k5", 1127880}, {"k4", 1070414}},
		// The third merges with k4's session (1070414 is within the gap of
		// 1088172), which ends at 1088172 >= 1127880-10000-30000.
		want: []string{"k4@[1088172,1088172]=1", "k5@[1127880,1127880]=1",
			"k4@[1088172,1088172]=null", "k4@[1070414,1088172]=2"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := topology.NewBuilder()
			s := topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey().
				WindowedBySession(topology.Sessions(c.gap, c.grace))
			topology.SessionCount(s).ToStream().To("out", topology.Produced(serde.SessionWindowed(str), serde.Int64()))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: -1})
			input := streamstest.Input(d, "in", str, str)
			out := streamstest.Output(d, "out", serde.SessionWindowed(str), serde.Int64())
			for _, r := range c.input {
				input.PipeAt(r.key, "v", r.ts)
			}
			var got []string
			for _, r := range out.ReadRecords() {
				v := fmt.Sprint(r.Value)
				if r.NullValue {
					v = "null"
				}
				got = append(got, fmt.Sprintf("%s@[%d,%d]=%s", r.Key.Key, r.Key.Window.Start, r.Key.Window.End, v))
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got  %v\nwant %v", got, c.want)
			}
		})
	}
}
