package topology

import (
	"fmt"
	"strings"

	"github.com/eddy-go/eddy/internal/rt"
)

// Mermaid draws the topology as a Mermaid flowchart (which GitHub renders
// in Markdown inside a ```mermaid block): one box per sub-topology holding
// its processors, topics as parallelograms between them (a repartition
// topic links two sub-topologies), and state stores as cylinders beside
// the processors that use them.
func (t *Topology) Mermaid() string {
	var sb strings.Builder
	sb.WriteString("flowchart TB\n")
	ids := map[string]string{} // "n:<node>", "t:<topic>", "s:<store>" → mermaid id
	id := func(kind, name string) string {
		k := kind + ":" + name
		if v, ok := ids[k]; ok {
			return v
		}
		v := fmt.Sprintf("%s%d", kind, len(ids))
		ids[k] = v
		return v
	}
	var edges, outside []string
	topic := func(name string) string {
		k := "t:" + name
		if _, ok := ids[k]; !ok {
			outside = append(outside, fmt.Sprintf("  %s[/%s/]", id("t", name), mermaidLabel(name)))
		}
		return id("t", name)
	}
	store := func(name string) string {
		k := "s:" + name
		if _, ok := ids[k]; !ok {
			outside = append(outside, fmt.Sprintf("  %s[(%s)]", id("s", name), mermaidLabel(name+t.storeNote(name))))
		}
		return id("s", name)
	}
	for _, st := range t.prog.Subtopologies {
		if g := st.Global; g != nil {
			fmt.Fprintf(&sb, "  subgraph sub%d[%s]\n", st.ID, mermaidLabel(fmt.Sprintf("Sub-topology %d: global store", st.ID)))
			src, proc := id("n", g.SourceName), id("n", g.ProcessorName)
			fmt.Fprintf(&sb, "    %s[%s]\n    %s[%s]\n  end\n", src, mermaidLabel(g.SourceName), proc, mermaidLabel(g.ProcessorName))
			edges = append(edges, topic(g.Topic)+" --> "+src, src+" --> "+proc, proc+" --- "+store(g.Name))
			continue
		}
		fmt.Fprintf(&sb, "  subgraph sub%d[%s]\n", st.ID, mermaidLabel(fmt.Sprintf("Sub-topology %d", st.ID)))
		for _, n := range st.Nodes {
			fmt.Fprintf(&sb, "    %s[%s]\n", id("n", n.Name), mermaidLabel(n.Name))
		}
		sb.WriteString("  end\n")
		for _, n := range st.Nodes {
			me := id("n", n.Name)
			switch n.Kind {
			case rt.KindSource:
				for _, tp := range n.Topics {
					edges = append(edges, topic(tp)+" --> "+me)
				}
			case rt.KindSink:
				name := n.Topic
				if n.DynamicSink {
					name = "(topic chosen per record)"
				}
				edges = append(edges, me+" --> "+topic(name))
			}
			for _, c := range n.Children {
				edges = append(edges, me+" --> "+id("n", c.Name))
			}
			for _, s := range n.Stores {
				edges = append(edges, me+" --- "+store(s))
			}
		}
	}
	for _, l := range outside {
		sb.WriteString(l + "\n")
	}
	for _, e := range edges {
		sb.WriteString("  " + e + "\n")
	}
	return sb.String()
}

// mermaidLabel quotes a label, escaping what Mermaid would read as syntax.
func mermaidLabel(s string) string {
	r := strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;")
	return `"` + r.Replace(s) + `"`
}
