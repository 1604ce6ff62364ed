package streamstest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// With emission throttled on the wall clock (as the Kafka runtime does),
// final results that became due while throttled go out one interval later
// even when no further record arrives: a burst that closes windows and then
// silence must not hold the results back until the next record.
func TestThrottledEmissionRetriedOnWallClock(t *testing.T) {
	str := serde.String()
	cases := []struct {
		name  string
		build func(b *topology.Builder)
		first []string // emitted by the first look, unthrottled
		want  []string // due while throttled
	}{{
		name: "tumbling",
		build: func(b *topology.Builder) {
			w := topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey().
				WindowedBy(topology.TumblingWindows(time.Second, 0)).EmitOnWindowClose()
			topology.Map(topology.WindowedCount(w).ToStream(), func(k serde.Windowed[string], n int64) (string, string) {
				return fmt.Sprintf("%s@%d", k.Key, k.Window.Start), fmt.Sprint(n)
			}).To("out", topology.Produced(str, str))
		},
		first: []string{"a@0=2"},
		want:  []string{"b@2000=2"},
	}, {
		name: "session",
		build: func(b *topology.Builder) {
			s := topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey().
				WindowedBySession(topology.Sessions(time.Second, 0)).EmitOnWindowClose()
			topology.Map(topology.SessionCount(s).ToStream(), func(k serde.Windowed[string], n int64) (string, string) {
				return fmt.Sprintf("%s@%d", k.Key, k.Window.Start), fmt.Sprint(n)
			}).To("out", topology.Produced(str, str))
		},
		first: []string{"a@0=2"},
		want:  []string{"b@2500=2"},
	}, {
		name: "outer-join",
		build: func(b *topology.Builder) {
			left := topology.Stream(b, "in", topology.Consumed(str, str))
			right := topology.Stream(b, "other", topology.Consumed(str, str))
			topology.OuterJoinStream(left, right, func(l, r *string) string {
				if r == nil {
					return *l + "+nil"
				}
				if l == nil {
					return "nil+" + *r
				}
				return *l + "+" + *r
			}, topology.JoinTimeDifference(time.Second, 0)).To("out", topology.Produced(str, str))
		},
		// The join's first look is at the first record, so every look
		// after it in the same second is throttled.
		want: []string{"a=1+nil", "a=2+nil", "b=3+nil", "b=4+nil"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := topology.NewBuilder()
			c.build(b)
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := streamstest.New(t, top, streamstest.Options{EmitInterval: time.Second, CacheMaxBytes: -1})
			in := streamstest.Input(d, "in", str, str)
			out := streamstest.Output(d, "out", str, str)
			read := func() []string {
				var got []string
				for _, r := range out.ReadRecords() {
					got = append(got, r.Key+"="+r.Value)
				}
				return got
			}
			in.PipeAt("a", "1", 0)
			in.PipeAt("a", "2", 500)
			in.PipeAt("b", "3", 2500) // closes a's window: the first look emits it
			if got := read(); fmt.Sprint(got) != fmt.Sprint(c.first) {
				t.Fatalf("first look: got %v, want %v", got, c.first)
			}
			in.PipeAt("b", "4", 2600)
			in.PipeAt("c", "5", 3_600_000) // closes b's window, but the look is throttled; its segment expires
			if got := read(); len(got) != 0 {
				t.Fatalf("emitted before the wall clock moved: %v", got)
			}
			if err := d.AdvanceWallClock(999); err != nil {
				t.Fatal(err)
			}
			if got := read(); len(got) != 0 {
				t.Fatalf("emitted before one emit interval passed: %v", got)
			}
			if err := d.AdvanceWallClock(1); err != nil {
				t.Fatal(err)
			}
			if got := read(); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("after one emit interval: got %v, want %v", got, c.want)
			}
			if err := d.AdvanceWallClock(5000); err != nil {
				t.Fatal(err)
			}
			if got := read(); len(got) != 0 {
				t.Fatalf("emitted again: %v", got)
			}
		})
	}
}
