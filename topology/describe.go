package topology

import (
	"sort"
	"strings"

	"github.com/eddy-go/eddy/internal/rt"
)

// Describe prints the topology in the text format of Kafka Streams'
// TopologyDescription, so tools that read that format read this:
//
//	Topologies:
//	   Sub-topology: 0
//	    Source: KSTREAM-SOURCE-0000000000 (topics: [input])
//	      --> KSTREAM-FILTER-0000000001
//	    Processor: KSTREAM-FILTER-0000000001 (stores: [])
//	      --> KSTREAM-SINK-0000000002
//	      <-- KSTREAM-SOURCE-0000000000
//	    Sink: KSTREAM-SINK-0000000002 (topic: output)
//	      <-- KSTREAM-FILTER-0000000001
//
// Nodes are listed as Kafka Streams lists them: larger sub-trees first,
// then by name. Internal topics appear without the application id.
func (t *Topology) Describe() string {
	var sb strings.Builder
	sb.WriteString("Topologies:\n ")
	for _, st := range t.prog.Subtopologies {
		if st.Global != nil {
			sb.WriteString(describeGlobal(st.Global, st.ID))
			continue
		}
		sb.WriteString("  Sub-topology: ")
		sb.WriteString(itoa(st.ID))
		sb.WriteString("\n")
		size := subtreeSizes(st.Nodes)
		nodes := append([]*rt.NodeSpec(nil), st.Nodes...)
		sortNodes(nodes, size)
		for _, n := range nodes {
			sb.WriteString("    ")
			switch n.Kind {
			case rt.KindSource:
				sb.WriteString("Source: " + n.Name + " (topics: [" + strings.Join(n.Topics, ", ") + "])")
				sb.WriteString("\n      --> " + names(n.Children, size))
			case rt.KindProcessor:
				st := append([]string(nil), n.Stores...)
				sort.Strings(st)
				for i, name := range st {
					st[i] = name + t.storeNote(name)
				}
				sb.WriteString("Processor: " + n.Name + " (stores: [" + strings.Join(st, ", ") + "])")
				sb.WriteString("\n      --> " + names(n.Children, size))
				sb.WriteString("\n      <-- " + names(n.Parents, size))
			case rt.KindSink:
				topic := n.Topic
				if n.DynamicSink {
					topic = "null"
				}
				sb.WriteString("Sink: " + n.Name + " (topic: " + topic + ")")
				sb.WriteString("\n      <-- " + names(n.Parents, size))
			}
			sb.WriteString("\n")
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// storeNote is what Describe and Mermaid add to a store's name: its time
// to live, if it has one (Kafka Streams has none, so its descriptions
// never differ from ours by this).
func (t *Topology) storeNote(name string) string {
	for _, st := range t.prog.Subtopologies {
		for _, s := range st.Stores {
			if spec := s.Builder.Spec(); spec.Name == name && spec.TTL > 0 {
				return " (TTL " + spec.TTL.String() + " of " + spec.TTLClock.String() + ")"
			}
		}
	}
	return ""
}

// subtreeSizes counts, for each node, itself plus the sizes of its children
// (paths through shared descendants count once per path), as Kafka Streams
// orders nodes in descriptions.
func subtreeSizes(nodes []*rt.NodeSpec) map[*rt.NodeSpec]int {
	size := map[*rt.NodeSpec]int{}
	var visit func(n *rt.NodeSpec) int
	visit = func(n *rt.NodeSpec) int {
		if s, ok := size[n]; ok {
			return s
		}
		s := 1
		for _, c := range n.Children {
			s += visit(c)
		}
		size[n] = s
		return s
	}
	for _, n := range nodes {
		visit(n)
	}
	return size
}

func sortNodes(nodes []*rt.NodeSpec, size map[*rt.NodeSpec]int) {
	sort.SliceStable(nodes, func(i, j int) bool {
		if size[nodes[i]] != size[nodes[j]] {
			return size[nodes[i]] > size[nodes[j]]
		}
		return nodes[i].Name < nodes[j].Name
	})
}

func names(nodes []*rt.NodeSpec, size map[*rt.NodeSpec]int) string {
	if len(nodes) == 0 {
		return "none"
	}
	ns := append([]*rt.NodeSpec(nil), nodes...)
	sortNodes(ns, size)
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return strings.Join(out, ", ")
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// String is Describe.
func (t *Topology) String() string { return t.Describe() }
