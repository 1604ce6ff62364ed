package topology

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/stores"
)

// Builder collects a topology: DSL streams and tables, or nodes added by
// hand with the Processor API. Build validates it and returns the Topology.
// Mistakes made while building are collected and returned by Build, each
// naming the node; the builder never panics on them.
type Builder struct {
	nodes   []*rt.NodeSpec
	byName  map[string]*rt.NodeSpec
	stores  map[string]*rt.StoreSpec
	sorder  []string
	index   int
	repart  []*rt.InternalTopic
	errs    []error
	built   bool
	copart  [][]*rt.NodeSpec // groups of sources whose topics must be co-partitioned
	onBuild []func()         // run at Build, before compiling (old-value propagation)
	globals []*rt.GlobalStore
}

// NewBuilder returns an empty builder.
func NewBuilder() *Builder {
	return &Builder{byName: map[string]*rt.NodeSpec{}, stores: map[string]*rt.StoreSpec{}}
}

func (b *Builder) errorf(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("topology: "+format, args...))
}

// newName returns prefix followed by the next index, as Kafka Streams
// names nodes: "KSTREAM-FILTER-0000000003".
func (b *Builder) newName(prefix string) string {
	n := fmt.Sprintf("%s%010d", prefix, b.index)
	b.index++
	return n
}

// nameOr returns name, or a generated name with prefix when name is empty.
func (b *Builder) nameOr(name, prefix string) string {
	if name != "" {
		return name
	}
	return b.newName(prefix)
}

// newStoreName is Kafka Streams' generated store name: prefix + "STATE-STORE-" + index.
func (b *Builder) newStoreName(prefix string) string { return b.newName(prefix + "STATE-STORE-") }

// add registers a node and connects it to its parents.
func (b *Builder) add(n *rt.NodeSpec, parents ...*rt.NodeSpec) *rt.NodeSpec {
	if n.Name == "" {
		b.errorf("a node has an empty name")
	}
	if _, dup := b.byName[n.Name]; dup {
		b.errorf("node name %q is used twice", n.Name)
		// keep going with a unique name so later errors still make sense
		n.Name = n.Name + "#" + fmt.Sprint(len(b.nodes))
	}
	n.Index = len(b.nodes)
	for _, p := range parents {
		if p == nil {
			b.errorf("node %q has a nil parent", n.Name)
			continue
		}
		if p.Kind == rt.KindSink {
			b.errorf("node %q cannot take records from sink %q", n.Name, p.Name)
			continue
		}
		n.Parents = append(n.Parents, p)
		p.Children = append(p.Children, n)
	}
	b.nodes = append(b.nodes, n)
	b.byName[n.Name] = n
	return n
}

// processorSpec returns a processor node spec with its record types.
func processorSpec[KIn, VIn, KOut, VOut any](name string, build func(*rt.BuildCtx) (rt.Node, error)) *rt.NodeSpec {
	return &rt.NodeSpec{
		Name: name, Kind: rt.KindProcessor, Build: build,
		InKey: rt.TypeOf[KIn](), InValue: rt.TypeOf[VIn](), OutKey: rt.TypeOf[KOut](), OutValue: rt.TypeOf[VOut](),
	}
}

// addStore registers a store builder.
func (b *Builder) addStore(sb stores.Builder) {
	rb, ok := storage.FromPublic(sb)
	if !ok {
		b.errorf("a state store has no builder (nil)")
		return
	}
	spec := rb.Spec()
	if spec.Name == "" {
		b.errorf("a state store has an empty name")
		return
	}
	if _, dup := b.stores[spec.Name]; dup {
		b.errorf("state store name %q is used twice", spec.Name)
		return
	}
	b.stores[spec.Name] = &rt.StoreSpec{Builder: rb}
	b.sorder = append(b.sorder, spec.Name)
}

// connect records that processor uses store. The store may be added later;
// Build checks it exists.
func (b *Builder) connect(processor *rt.NodeSpec, store string) {
	for _, s := range processor.Stores {
		if s == store {
			return
		}
	}
	processor.Stores = append(processor.Stores, store)
}

// Topology is a built, validated topology: run it with streams.New, test it
// with streamstest.New, print it with Describe.
type Topology struct {
	prog *rt.Program
}

func init() {
	rt.RegisterProgramAccessor(func(t any) (*rt.Program, bool) {
		top, ok := t.(*Topology)
		if !ok || top == nil {
			return nil, false
		}
		return top.prog, true
	})
}

// Build validates the topology and compiles it into sub-topologies. Every
// mistake found is reported in the one returned error. A builder builds
// once.
func (b *Builder) Build() (*Topology, error) {
	if b.built {
		return nil, errors.New("topology: Build was already called on this builder")
	}
	b.built = true
	for _, f := range b.onBuild {
		f()
	}
	b.validate()
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	prog := b.compile()
	return &Topology{prog: prog}, nil
}

func (b *Builder) validate() {
	if len(b.nodes) == 0 {
		b.errorf("the topology has no nodes")
	}
	hasSource := false
	for _, n := range b.nodes {
		switch n.Kind {
		case rt.KindSource:
			hasSource = true
			if len(n.Topics) == 0 {
				b.errorf("source %q reads no topic", n.Name)
			}
			for _, t := range n.Topics {
				if t == "" {
					b.errorf("source %q has an empty topic name", n.Name)
				}
			}
		case rt.KindSink:
			if len(n.Parents) == 0 {
				b.errorf("sink %q has no parent: nothing would reach it", n.Name)
			}
			if n.Topic == "" && !n.DynamicSink {
				b.errorf("sink %q writes to no topic", n.Name)
			}
		case rt.KindProcessor:
			if len(n.Parents) == 0 {
				b.errorf("processor %q has no parent", n.Name)
			}
		}
		if n.Build == nil {
			b.errorf("node %q cannot be built", n.Name)
		}
		for _, p := range n.Parents {
			if n.InKey != nil && p.OutKey != nil && (n.InKey != p.OutKey || n.InValue != p.OutValue) {
				b.errorf("node %q takes Record[%s, %s] but its parent %q gives Record[%s, %s]",
					n.Name, n.InKey, n.InValue, p.Name, p.OutKey, p.OutValue)
			}
		}
		for _, s := range n.Stores {
			ss, ok := b.stores[s]
			if !ok {
				b.errorf("processor %q uses state store %q, which is not in the topology", n.Name, s)
				continue
			}
			ss.Processors = append(ss.Processors, n.Name)
		}
	}
	if len(b.nodes) > 0 && !hasSource {
		b.errorf("the topology has no source")
	}
	for _, name := range b.sorder {
		if len(b.stores[name].Processors) == 0 {
			b.errorf("state store %q is used by no processor", name)
		}
	}
	seenTopic := map[string]string{}
	for _, n := range b.nodes {
		if n.Kind != rt.KindSource {
			continue
		}
		for _, t := range n.Topics {
			if other, ok := seenTopic[t]; ok && other != n.Name {
				b.errorf("topic %q is read by two sources, %q and %q", t, other, n.Name)
			}
			seenTopic[t] = n.Name
		}
	}
}

// compile splits the graph into sub-topologies: nodes connected by edges or
// by a shared store form one; repartition topics separate them. Sub-topology
// ids follow the sorted names of their source nodes, as Kafka Streams.
func (b *Builder) compile() *rt.Program {
	parent := make([]int, len(b.nodes))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, c int) { parent[find(a)] = find(c) }
	for _, n := range b.nodes {
		for _, p := range n.Parents {
			union(n.Index, p.Index)
		}
	}
	for _, name := range b.sorder {
		ps := b.stores[name].Processors
		for i := 1; i < len(ps); i++ {
			union(b.byName[ps[0]].Index, b.byName[ps[i]].Index)
		}
	}
	var sources []*rt.NodeSpec
	for _, n := range b.nodes {
		if n.Kind == rt.KindSource {
			sources = append(sources, n)
		}
	}
	sort.Slice(sources, func(i, j int) bool { return sources[i].Name < sources[j].Name })
	// Global stores take sub-topology ids too (they generate no tasks), in
	// the same order by source name, so ids and task ids match Kafka
	// Streams'.
	globals := slices.Clone(b.globals)
	sort.Slice(globals, func(i, j int) bool { return globals[i].SourceName < globals[j].SourceName })
	groupID := map[int]int{}
	globalID := map[*rt.GlobalStore]int{}
	next := 0
	for _, s := range sources {
		for len(globals) > 0 && globals[0].SourceName < s.Name {
			globalID[globals[0]] = next
			next++
			globals = globals[1:]
		}
		root := find(s.Index)
		if _, ok := groupID[root]; !ok {
			groupID[root] = next
			next++
		}
	}
	for _, g := range globals {
		globalID[g] = next
		next++
	}
	prog := &rt.Program{
		Nodes:        b.nodes,
		NodesByName:  b.byName,
		Stores:       b.stores,
		StoreOrder:   b.sorder,
		GlobalStores: b.globals,
	}
	prog.Subtopologies = make([]*rt.Subtopology, next)
	for i := range prog.Subtopologies {
		prog.Subtopologies[i] = &rt.Subtopology{ID: i}
	}
	for g, id := range globalID {
		prog.Subtopologies[id].Global = g
	}
	for _, n := range b.nodes {
		id := groupID[find(n.Index)]
		n.Subtopology = id
		st := prog.Subtopologies[id]
		st.Nodes = append(st.Nodes, n)
		if n.Kind == rt.KindSource {
			st.SourceTopics = append(st.SourceTopics, n.Topics...)
		}
	}
	for _, name := range b.sorder {
		s := b.stores[name]
		s.Subtopology = b.byName[s.Processors[0]].Subtopology
		st := prog.Subtopologies[s.Subtopology]
		st.Stores = append(st.Stores, s)
	}
	for _, t := range b.repart {
		for _, n := range b.nodes {
			if n.Kind == rt.KindSink && n.Internal && n.Topic == t.Name {
				t.WriterSubtopology = n.Subtopology
			}
			if n.Kind == rt.KindSource && n.Internal && slices.Contains(n.Topics, t.Name) {
				t.ReaderSubtopology = n.Subtopology
			}
		}
	}
	prog.InternalTopics = append(prog.InternalTopics, b.repart...)
	for _, name := range b.sorder {
		spec := b.stores[name].Builder.Spec()
		if !spec.Logged {
			continue
		}
		cfg := map[string]string{"cleanup.policy": "compact"}
		maps.Copy(cfg, spec.LogConfig)
		prog.InternalTopics = append(prog.InternalTopics, &rt.InternalTopic{
			Name: name + "-changelog", Config: cfg, Store: name,
		})
	}
	for _, group := range b.copart {
		var topics []string
		for _, s := range group {
			topics = append(topics, s.Topics...)
		}
		slices.Sort(topics)
		prog.CoPartitioned = append(prog.CoPartitioned, slices.Compact(topics))
	}
	return prog
}
