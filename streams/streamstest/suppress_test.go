package streamstest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// suppressed builds in -> count per key (windowed by w, or not) ->
// Suppress(s) -> out, with keys written as key@start/end.
func suppressed(t *testing.T, w *topology.Windows, sessions *topology.SessionWindows, s topology.Suppressed) (*streamstest.Driver, *streamstest.InputTopic[string, string], *streamstest.OutputTopic[string, string]) {
	t.Helper()
	str := serde.String()
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey()
	flat := func(k serde.Windowed[string], n int64) (string, string) {
		return fmt.Sprintf("%s@%d/%d", k.Key, k.Window.Start, k.Window.End), fmt.Sprint(n)
	}
	switch {
	case w != nil:
		c := topology.WindowedCount(g.WindowedBy(*w), topology.Materialized[string, int64]("counts")).Suppress(s)
		topology.Map(c.ToStream(), flat).To("out", topology.Produced(str, str))
	case sessions != nil:
		c := topology.SessionCount(g.WindowedBySession(*sessions), topology.Materialized[string, int64]("counts")).Suppress(s)
		topology.Map(c.ToStream(), flat).To("out", topology.Produced(str, str))
	default:
		c := topology.Count(g, topology.Materialized[string, int64]("counts")).Suppress(s)
		topology.MapValues(c.ToStream(), func(n int64) string { return fmt.Sprint(n) }).To("out", topology.Produced(str, str))
	}
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	return d, streamstest.Input(d, "in", str, str), streamstest.Output(d, "out", str, str)
}

func lines(recs []string) string { return strings.Join(recs, " ") }

func readAll(o *streamstest.OutputTopic[string, string]) []string {
	var out []string
	for _, r := range o.ReadRecords() {
		out = append(out, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp))
	}
	return out
}

// The boundary: sliding windows (5 s, grace 2 s) with
// suppress(untilWindowCloses); k0@1127210 then k0@1129210. Stream time
// 1129210 is the first window's end plus grace, which closes it: Kafka
// Streams emits k0@[1122210,1127210] -> 1, and so must eddy.
func TestSuppressSlidingWindowClosesAtEndPlusGrace(t *testing.T) {
	w := topology.SlidingWindows(5*time.Second, 2*time.Second)
	_, in, out := suppressed(t, &w, nil, topology.UntilWindowCloses(topology.Unbounded()))
	in.PipeAt("k0", "x", 1127210)
	if got := readAll(out); len(got) != 0 {
		t.Fatalf("emitted before any window closed: %v", got)
	}
	in.PipeAt("k0", "x", 1129210)
	if got, want := lines(readAll(out)), "k0@1122210/1127210=1@1127210"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// One millisecond short of the next close emits nothing more; reaching
	// it emits the window ending at 1129210 (both records) — and the right
	// window of the first record [1127211,1132211] only at 1134211.
	in.PipeAt("k1", "x", 1131209)
	if got := readAll(out); len(got) != 0 {
		t.Fatalf("emitted early: %v", got)
	}
	in.PipeAt("k1", "x", 1131210)
	if got, want := lines(readAll(out)), "k0@1124210/1129210=2@1129210"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Tumbling windows: each window's final count once, at end + grace, in
// window-end order, with its own timestamp; late records (past grace) do
// not reopen a window; updates are never emitted early.
func TestSuppressTumblingFinalResults(t *testing.T) {
	w := topology.TumblingWindows(100*time.Millisecond, 20*time.Millisecond)
	_, in, out := suppressed(t, &w, nil, topology.UntilWindowCloses(topology.Unbounded()))
	for _, r := range []struct {
		k  string
		ts int64
	}{{"a", 10}, {"b", 50}, {"a", 90}, {"a", 110}, {"b", 105}, {"a", 95}} {
		in.PipeAt(r.k, "x", r.ts)
	}
	if got := readAll(out); len(got) != 0 {
		t.Fatalf("emitted before stream time reached 120: %v", got)
	}
	in.PipeAt("c", "x", 120) // window [0,100) closes
	if got, want := lines(readAll(out)), "a@0/100=3@95 b@0/100=1@50"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	in.PipeAt("a", "x", 40) // late: its window closed
	in.PipeAt("c", "x", 220)
	if got, want := lines(readAll(out)), "a@100/200=1@110 b@100/200=1@105 c@100/200=1@120"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Session windows close at their end plus the gap plus grace.
func TestSuppressSessionsCloseAfterGapAndGrace(t *testing.T) {
	s := topology.Sessions(30*time.Millisecond, 20*time.Millisecond)
	_, in, out := suppressed(t, nil, &s, topology.UntilWindowCloses(topology.Unbounded()))
	in.PipeAt("a", "x", 100)
	in.PipeAt("a", "x", 120) // session [100,120]
	in.PipeAt("b", "x", 169)
	if got := readAll(out); len(got) != 0 {
		t.Fatalf("emitted before 120+30+20: %v", got)
	}
	in.PipeAt("b", "x", 170)
	if got, want := lines(readAll(out)), "a@100/120=2@120"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// UntilTimeLimit on a plain table: a key's latest value once stream time is
// the limit past its first held update; a bounded buffer that emits early
// when full sends the oldest key on; one that shuts down fails the task.
func TestSuppressUntilTimeLimit(t *testing.T) {
	_, in, out := suppressed(t, nil, nil, topology.UntilTimeLimit(50*time.Millisecond, topology.Unbounded()))
	in.PipeAt("a", "x", 0)
	in.PipeAt("a", "x", 30)
	in.PipeAt("b", "x", 40)
	in.PipeAt("a", "x", 49)
	if got := readAll(out); len(got) != 0 {
		t.Fatalf("emitted before the limit: %v", got)
	}
	in.PipeAt("c", "x", 50) // a was first held at 0
	if got, want := lines(readAll(out)), "a=3@49"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	in.PipeAt("a", "x", 90) // b (40) is due, a is held anew from 90
	if got, want := lines(readAll(out)), "b=1@40"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}

	_, in, out = suppressed(t, nil, nil, topology.UntilTimeLimit(time.Hour, topology.MaxRecords(2).EmitEarlyWhenFull()))
	in.PipeAt("a", "x", 0)
	in.PipeAt("b", "x", 1)
	in.PipeAt("a", "x", 2)
	if got := readAll(out); len(got) != 0 {
		t.Fatalf("emitted with the buffer not full: %v", got)
	}
	in.PipeAt("c", "x", 3)
	if got, want := lines(readAll(out)), "a=2@2"; got != want {
		t.Fatalf("emitting early: got %q, want %q", got, want)
	}

	_, in, _ = suppressed(t, nil, nil, topology.UntilTimeLimit(time.Hour, topology.MaxRecords(2).ShutDownWhenFull()))
	in.PipeAt("a", "x", 0)
	in.PipeAt("b", "x", 1)
	err := in.TryPipe(processor.Record[string, string]{Key: "c", Value: "x", Timestamp: 2})
	if !errors.Is(err, topology.ErrSuppressBufferFull) {
		t.Fatalf("a third key in a buffer of 2 that shuts down when full: err = %v, want ErrSuppressBufferFull", err)
	}
}

// What Suppress refuses when the topology is built.
func TestSuppressRefusals(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	c := topology.Count(topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey())
	c.Suppress(topology.UntilWindowCloses(topology.Unbounded()))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "needs a windowed table") {
		t.Fatalf("UntilWindowCloses on a plain table: err = %v", err)
	}
	b = topology.NewBuilder()
	w := topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey().WindowedBy(topology.TumblingWindows(time.Second, 0))
	topology.WindowedCount(w).Suppress(topology.UntilWindowCloses(topology.MaxRecords(5).EmitEarlyWhenFull()))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "strict buffer") {
		t.Fatalf("UntilWindowCloses emitting early: err = %v", err)
	}
}
