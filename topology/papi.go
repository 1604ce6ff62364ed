package topology

import (
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// The Processor API: a topology built node by node. Parents are named;
// naming a node that does not exist, or connecting nodes whose record types
// differ, is an error from Build.

func (b *Builder) parents(child string, names []string) []*rt.NodeSpec {
	if len(names) == 0 {
		b.errorf("node %q needs at least one parent", child)
	}
	out := make([]*rt.NodeSpec, 0, len(names))
	for _, n := range names {
		p, ok := b.byName[n]
		if !ok {
			b.errorf("node %q names parent %q, which is not in the topology (add parents first)", child, n)
			continue
		}
		out = append(out, p)
	}
	return out
}

// AddSource adds a source node reading topics with the given serdes.
func AddSource[K, V any](b *Builder, name string, ks serde.Serde[K], vs serde.Serde[V], topics ...string) {
	sourceNode(b, name, topics, ks, vs, false)
}

// AddProcessor adds a node running the processors supplier makes, taking
// records from the named parents.
func AddProcessor[KIn, VIn, KOut, VOut any](b *Builder, name string, supplier processor.Supplier[KIn, VIn, KOut, VOut], parents ...string) {
	if supplier == nil {
		b.errorf("processor %q has a nil supplier", name)
		return
	}
	b.add(processorSpec[KIn, VIn, KOut, VOut](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		return rt.NewProcessorNode(bc, supplier())
	}), b.parents(name, parents)...)
}

// AddSink adds a sink node writing to topic, taking records from the named
// parents.
func AddSink[K, V any](b *Builder, name, topic string, ks serde.Serde[K], vs serde.Serde[V], parents ...string) {
	if topic == "" {
		b.errorf("sink %q writes to an empty topic name", name)
	}
	ps := b.parents(name, parents)
	var first *rt.NodeSpec
	if len(ps) > 0 {
		first = ps[0]
	}
	n := sinkNode(b, name, first, topic, nil, pickSerde(ks), pickSerde(vs), false)
	for _, p := range ps[min(1, len(ps)):] {
		n.Parents = append(n.Parents, p)
		p.Children = append(p.Children, n)
	}
}

// AddStateStore adds a store and connects it to the named processors.
func (b *Builder) AddStateStore(sb stores.Builder, processors ...string) {
	b.addStore(sb)
	if sb == nil {
		return
	}
	name := sb.Name()
	for _, p := range processors {
		b.ConnectProcessorAndStateStores(p, name)
	}
}

// ConnectProcessorAndStateStores connects the processor named first to
// the stores named after it.
func (b *Builder) ConnectProcessorAndStateStores(processorAndStores ...string) {
	if len(processorAndStores) < 2 {
		return
	}
	p, ok := b.byName[processorAndStores[0]]
	if !ok {
		b.errorf("cannot connect stores %v to %q: no such processor", processorAndStores[1:], processorAndStores[0])
		return
	}
	for _, s := range processorAndStores[1:] {
		b.connect(p, s)
	}
}
