package topology_test

import (
	"strings"
	"testing"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/topology"
)

type point struct{ X, Y int }

type nop[K, V any] struct{}

func (nop[K, V]) Init(processor.Context[K, V]) error   { return nil }
func (nop[K, V]) Process(processor.Record[K, V]) error { return nil }
func (nop[K, V]) Close() error                         { return nil }

func nopSupplier[K, V any]() processor.Processor[K, V, K, V] { return nop[K, V]{} }

var s = serde.String()

func TestBuildErrorsNameTheNode(t *testing.T) {
	cases := []struct {
		name  string
		build func(b *topology.Builder)
		want  []string
	}{
		{"store used by no processor", func(b *topology.Builder) {
			topology.Stream(b, "in", topology.Consumed(s, s)).To("out")
			b.AddStateStore(stores.KeyValue("orphan", s, s))
		}, []string{`state store "orphan" is used by no processor`}},
		{"name used twice", func(b *topology.Builder) {
			in := topology.Stream(b, "in", topology.Consumed(s, s))
			in.Filter(func(string, string) bool { return true }, "f").To("a")
			in.Filter(func(string, string) bool { return true }, "f").To("b")
		}, []string{`node name "f" is used twice`}},
		{"sink to nothing", func(b *topology.Builder) {
			topology.Stream(b, "in", topology.Consumed(s, s)).To("")
		}, []string{`sink "KSTREAM-SINK-0000000001" writes to no topic`}},
		{"unknown parent", func(b *topology.Builder) {
			topology.AddSource(b, "src", s, s, "in")
			topology.AddProcessor(b, "p", nopSupplier[string, string], "nope")
			topology.AddSink(b, "sink", "out", s, s, "p")
		}, []string{`node "p" names parent "nope"`, `processor "p" has no parent`}},
		{"types do not match", func(b *topology.Builder) {
			topology.AddSource(b, "src", s, serde.Int64(), "in")
			topology.AddProcessor(b, "p", nopSupplier[string, string], "src")
		}, []string{`node "p" takes Record[string, string] but its parent "src" gives Record[string, int64]`}},
		{"no serde for a custom type", func(b *topology.Builder) {
			in := topology.Stream(b, "in", topology.Consumed(s, s))
			pts := topology.MapValues(in, func(string) point { return point{} })
			topology.Count(topology.GroupBy(pts, func(k string, _ point) string { return k })).ToStream().To("out")
		}, []string{`needs serdes for Record[string, topology_test.point]`}},
		{"store not in the topology", func(b *topology.Builder) {
			in := topology.Stream(b, "in", topology.Consumed(s, s))
			topology.Process(in, nopSupplier[string, string], []string{"ghost"}, "proc").To("out")
		}, []string{`processor "proc" uses state store "ghost", which is not in the topology`}},
		{"no source", func(b *topology.Builder) {}, []string{"the topology has no nodes"}},
		{"topic read twice", func(b *topology.Builder) {
			topology.Stream(b, "in", topology.Consumed(s, s)).To("x")
			topology.Stream(b, "in", topology.Consumed(s, s)).To("y")
		}, []string{`topic "in" is read by two sources`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := topology.NewBuilder()
			c.build(b)
			top, err := b.Build()
			if err == nil {
				t.Fatalf("Build succeeded:\n%s", top.Describe())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestBuildTwiceIsAnError(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(s, s)).To("out")
	if _, err := b.Build(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Build(); err == nil {
		t.Fatal("second Build succeeded")
	}
}

// Explicit names keep node, store and repartition topic names stable when
// operators are added upstream.
func TestNamesStayStableWithNamedOperators(t *testing.T) {
	describe := func(extra bool) string {
		b := topology.NewBuilder()
		in := topology.Stream(b, "in", topology.Consumed(s, s).WithName("source"))
		if extra {
			in = in.Filter(func(string, string) bool { return true }, "extra-filter")
		}
		g := topology.GroupBy(in, func(_, v string) string { return v }, topology.Grouped(s, s).WithName("by-value"))
		topology.Count(g, topology.Materialized[string, int64]("counts")).ToStream("to-stream").
			To("out", topology.Produced(s, serde.Int64()).WithName("sink"))
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top.Describe()
	}
	a, b := describe(false), describe(true)
	for _, name := range []string{"by-value-repartition-sink", "by-value-repartition-source", "(topic: by-value-repartition)", "(stores: [counts])", "Sink: sink (topic: out)"} {
		if !strings.Contains(a, name) || !strings.Contains(b, name) {
			t.Errorf("%q missing from one of the descriptions:\n%s\n%s", name, a, b)
		}
	}
}

// Each sub-topology is one connected part of the graph; stores shared by
// processors join their parts.
func TestSubtopologiesSplitAtRepartitionTopics(t *testing.T) {
	b := topology.NewBuilder()
	in := topology.Stream(b, "in", topology.Consumed(s, s))
	rekeyed := topology.SelectKey(in, func(_, v string) string { return v })
	topology.Count(rekeyed.GroupByKey()).ToStream().To("counts", topology.Produced(s, serde.Int64()))
	topology.Stream(b, "other", topology.Consumed(s, s)).To("copy")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := top.Describe()
	if n := strings.Count(d, "Sub-topology:"); n != 3 {
		t.Fatalf("%d sub-topologies, want 3:\n%s", n, d)
	}
}
