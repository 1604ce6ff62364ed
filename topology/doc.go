// Package topology is where an eddy application is described: the
// KStream/KTable DSL, the Processor API's nodes, and the compiled Topology
// that streams.New runs.
//
// Start with NewBuilder; add sources (Stream, Table, GlobalTable), then
// operations. Operations that keep a stream's types are methods (Filter,
// Peek, Merge, To, GroupByKey); those that change them are package
// functions, since Go methods take no type parameters (MapValues, Map,
// FlatMapValues, GroupBy, Count, Aggregate, WindowedCount, JoinTable, …).
// Parameter objects are Kafka Streams' (Consumed, Produced, Grouped,
// Materialized, Named, the windows). Build validates the graph and returns
// the Topology; Describe prints it as Kafka Streams does, Mermaid as a
// flowchart.
//
//	b := topology.NewBuilder()
//	lines := topology.Stream(b, "text-input", topology.Consumed(serde.String(), serde.String()))
//	words := topology.FlatMapValues(lines, strings.Fields)
//	byWord := topology.GroupBy(words, func(_, w string) string { return w },
//		topology.Grouped(serde.String(), serde.String()))
//	topology.Count(byWord, topology.Materialized[string, int64]("counts")).
//		ToStream().To("word-counts", topology.Produced(serde.String(), serde.Int64()))
//	top, err := b.Build()
//
// Nothing here runs anything: streams.New runs a Topology on Kafka, and
// streams/streamstest runs it without a broker.
package topology
