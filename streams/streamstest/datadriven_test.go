package streamstest_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// TestDSL runs the datadriven files in testdata/dsl. Commands:
//
//	topology name=<scenario> [cache=<bytes>] [manual-commit] [on-error=continue|dead-letter]
//	pipe topic=<t>        input lines "key|value|timestamp" (value <null>: tombstone)
//	commit
//	advance-wall ms=<n>
//	store name=<s>        the store's contents, "key=value" per line
//	counters
//
// pipe, commit and advance-wall print every record written to the
// scenario's output topics since the last command, "topic|key|value|ts".
func TestDSL(t *testing.T) {
	datadriven.Walk(t, "testdata/dsl", func(t *testing.T, path string) {
		var d *streamstest.Driver
		var sc scenario
		var outs map[string]func() []string
		inputs := map[string]*streamstest.InputTopic[string, string]{}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			switch td.Cmd {
			case "topology":
				var name string
				td.ScanArgs(t, "name", &name)
				var ok bool
				if sc, ok = scenarios[name]; !ok {
					if sc, ok = dslScenarios[name]; !ok {
						t.Fatalf("no scenario %q", name)
					}
				}
				opts := streamstest.Options{ApplicationID: "dsl", CacheMaxBytes: -1}
				if td.HasArg("cache") {
					td.ScanArgs(t, "cache", &opts.CacheMaxBytes)
				}
				opts.ManualCommit = td.HasArg("manual-commit")
				if td.HasArg("on-error") {
					var action string
					td.ScanArgs(t, "on-error", &action)
					opts.OnError = func(*rt.RecordError) rt.ErrorAction {
						if action == "dead-letter" {
							return rt.ActionDeadLetter
						}
						return rt.ActionContinue
					}
					opts.DeadLetterTopic = "dlq"
				}
				b := topology.NewBuilder()
				sc.build(b)
				top, err := b.Build()
				if err != nil {
					return "error: " + err.Error()
				}
				d = streamstest.New(t, top, opts)
				inputs = map[string]*streamstest.InputTopic[string, string]{}
				outs = map[string]func() []string{}
				for _, o := range sc.outputs {
					o := o
					if o.long {
						ot := streamstest.Output(d, o.topic, str, serde.Int64())
						outs[o.topic] = func() (l []string) {
							for _, r := range ot.ReadRecords() {
								l = append(l, line(o.topic, r.Key, strconv.FormatInt(r.Value, 10), r.NullValue, r.Timestamp))
							}
							return l
						}
					} else {
						ot := streamstest.Output(d, o.topic, str, str)
						outs[o.topic] = func() (l []string) {
							for _, r := range ot.ReadRecords() {
								l = append(l, line(o.topic, r.Key, r.Value, r.NullValue, r.Timestamp)+headers(r.Headers))
							}
							return l
						}
					}
				}
				return "ok"
			case "pipe":
				var topic string
				td.ScanArgs(t, "topic", &topic)
				in := inputs[topic]
				if in == nil {
					in = streamstest.Input(d, topic, str, str)
					inputs[topic] = in
				}
				for _, l := range strings.Split(strings.TrimSpace(td.Input), "\n") {
					p := strings.Split(l, "|")
					if len(p) != 3 {
						t.Fatalf("bad input line %q", l)
					}
					ts, _ := strconv.ParseInt(p[2], 10, 64)
					var err error
					if p[1] == "<bad>" {
						err = in.PipeBytes([]byte(p[0]), []byte("{broken"), ts)
					} else {
						err = in.TryPipe(processor.Record[string, string]{Key: p[0], Value: p[1], NullValue: p[1] == "<null>", Timestamp: ts})
					}
					if err != nil {
						return "error: " + err.Error()
					}
				}
				return written(sc, outs)
			case "commit":
				if err := d.Commit(); err != nil {
					return "error: " + err.Error()
				}
				return written(sc, outs)
			case "advance-wall":
				var ms int64
				td.ScanArgs(t, "ms", &ms)
				if err := d.AdvanceWallClock(ms); err != nil {
					return "error: " + err.Error()
				}
				return written(sc, outs)
			case "store":
				var name string
				td.ScanArgs(t, "name", &name)
				var l []string
				if td.HasArg("long") {
					for k, v := range streamstest.KeyValueStore[string, int64](d, name).All().Seq() {
						l = append(l, fmt.Sprintf("%s=%d", k, v))
					}
				} else {
					for k, v := range streamstest.KeyValueStore[string, string](d, name).All().Seq() {
						l = append(l, k+"="+v)
					}
				}
				if len(l) == 0 {
					return "(empty)"
				}
				return strings.Join(l, "\n")
			case "counters":
				p, s, dl := d.Counters()
				return fmt.Sprintf("processed=%d skipped=%d dead-lettered=%d", p, s, dl)
			}
			t.Fatalf("unknown command %q", td.Cmd)
			return ""
		})
	})
}

func headers(h processor.Headers) string {
	var b strings.Builder
	for _, x := range h {
		fmt.Fprintf(&b, " %s=%s", x.Key, x.Value)
	}
	return b.String()
}

func written(sc scenario, outs map[string]func() []string) string {
	var l []string
	for _, o := range sc.outputs {
		l = append(l, outs[o.topic]()...)
	}
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, "\n")
}

type reading struct {
	At    int64 `json:"at"`
	Value int   `json:"value"`
}

// dslScenarios are topologies used only by the datadriven tests.
var dslScenarios = map[string]scenario{
	// Event time from the value, tumbling windows emitted on close, late
	// records to a topic.
	"event-time": {func(b *topology.Builder) {
		in := topology.Stream(b, "readings", topology.Consumed(str, serde.JSON[reading]()).
			WithTimestampExtractor(topology.EventTime[string](func(r reading) time.Time {
				if r.At == 0 {
					return time.Time{} // no event time
				}
				return time.UnixMilli(r.At)
			})))
		w := in.GroupByKey(topology.Grouped(str, serde.JSON[reading]())).
			WindowedBy(topology.TumblingWindows(100*time.Millisecond, 10*time.Millisecond)).EmitOnWindowClose().LateRecords("late")
		t := topology.WindowedAggregate(w, func() int64 { return 0 }, func(_ string, r reading, sum int64) int64 { return sum + int64(r.Value) },
			topology.Materialized[string, int64]("sums").WithSerdes(str, serde.Int64()))
		topology.Map(t.ToStream(), func(k serde.Windowed[string], v int64) (string, string) {
			return fmt.Sprintf("%s@%d/%d", k.Key, k.Window.Start, k.Window.End), strconv.FormatInt(v, 10)
		}).To("out", topology.Produced(str, str))
	}, []parityOut{{"out", false}, {"late", false}}, ""},

	// Count windows (eddy only): tumbling windows of 3 records per key
	// emitted on every update to "out", hopping windows of 4 records every
	// 2 emitted once full to "full".
	"count-windows": {func(b *topology.Builder) {
		g := topology.Stream(b, "in", consumed()).GroupByKey()
		concat := func(_ string, v, agg string) string { return agg + v }
		flat := func(wk serde.Windowed[string], v string) (string, string) {
			return fmt.Sprintf("%s@%d/%d", wk.Key, wk.Window.Start, wk.Window.End), v
		}
		t := topology.WindowedAggregate(g.WindowedBy(topology.CountWindows(3)), func() string { return "" }, concat,
			topology.Materialized[string, string]("every-3").WithSerdes(str, str))
		topology.Map(t.ToStream(), flat).To("out", topology.Produced(str, str))
		h := topology.WindowedReduce(g.WindowedBy(topology.HoppingCountWindows(4, 2)).EmitOnWindowClose(),
			func(agg, v string) string { return agg + v }, topology.Materialized[string, string]("four-by-two"))
		topology.Map(h.ToStream(), flat).To("full", topology.Produced(str, str))
	}, []parityOut{{"out", false}, {"full", false}}, ""},

	"count-windows-late": {func(b *topology.Builder) {
		g := topology.Stream(b, "in", consumed()).GroupByKey()
		topology.WindowedCount(g.WindowedBy(topology.CountWindows(3)).LateRecords("late"))
	}, nil, ""},

	// A DSL function that panics on some values.
	"panics": {func(b *topology.Builder) {
		in := topology.Stream(b, "in", consumed())
		topology.MapValues(in, func(v string) string {
			if v == "boom" {
				panic("cannot handle boom")
			}
			return strings.ToUpper(v)
		}).To("out")
	}, []parityOut{{"out", false}, {"dlq", false}}, ""},

	// A Processor-API topology: a processor counting per key in its own
	// store, forwarding to a named child, with punctuators on both clocks.
	"papi": {func(b *topology.Builder) {
		topology.AddSource(b, "src", str, str, "in")
		topology.AddProcessor(b, "counter", func() processor.Processor[string, string, string, string] { return &counter{} }, "src")
		topology.AddSink(b, "counts-sink", "counts", str, str, "counter")
		topology.AddSink(b, "ticks-sink", "ticks", str, str, "counter")
		b.AddStateStore(stores.KeyValue("per-key", str, serde.Int64()), "counter")
	}, []parityOut{{"counts", false}, {"ticks", false}}, ""},

	// JSON values, for bad-input handling.
	"json": {func(b *topology.Builder) {
		type order struct {
			Item string `json:"item"`
			Qty  int    `json:"qty"`
		}
		in := topology.Stream(b, "orders", topology.Consumed(str, serde.JSON[order]()))
		topology.MapValues(in, func(o order) string { return fmt.Sprintf("%s x%d", o.Item, o.Qty) }).To("out", topology.Produced(str, str))
	}, []parityOut{{"out", false}, {"dlq", false}}, ""},
}

type counter struct {
	ctx   processor.Context[string, string]
	store stores.KeyValueStore[string, int64]
}

func (c *counter) Init(ctx processor.Context[string, string]) (err error) {
	c.ctx = ctx
	if c.store, err = processor.GetKeyValueStore[string, int64](ctx, "per-key"); err != nil {
		return err
	}
	if _, err := ctx.Schedule(100*time.Millisecond, processor.StreamTime, func(ts int64) error {
		return ctx.ForwardTo("ticks-sink", processor.Record[string, string]{Key: "stream-time", Value: strconv.FormatInt(ts, 10), Timestamp: ts})
	}); err != nil {
		return err
	}
	_, err = ctx.Schedule(time.Second, processor.WallClockTime, func(ts int64) error {
		n, _ := c.store.ApproximateNumEntries()
		return ctx.ForwardTo("ticks-sink", processor.Record[string, string]{Key: "wall-clock", Value: fmt.Sprintf("%d keys", n), Timestamp: ts})
	})
	return err
}

func (c *counter) Process(r processor.Record[string, string]) error {
	n, _, err := c.store.Get(r.Key)
	if err != nil {
		return err
	}
	n++
	if err := c.store.Put(r.Key, n); err != nil {
		return err
	}
	md, _ := c.ctx.RecordMetadata()
	return c.ctx.ForwardTo("counts-sink", processor.Record[string, string]{Key: r.Key,
		Value: fmt.Sprintf("%d (offset %d)", n, md.Offset), Timestamp: r.Timestamp})
}

func (c *counter) Close() error { return nil }
