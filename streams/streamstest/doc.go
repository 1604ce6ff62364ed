// Package streamstest runs a topology without a broker — eddy's
// TopologyTestDriver — with the same task code the Kafka runtime runs:
// pipe records into input topics, read what the topology wrote, look into
// its stores, move stream time and the wall clock by hand.
//
//	d := streamstest.New(t, top)
//	in := streamstest.Input(d, "text-input", serde.String(), serde.String())
//	out := streamstest.Output(d, "word-counts", serde.String(), serde.Int64())
//	in.Pipe("", "hello world hello")
//	got := streamstest.ReadKeyValueMap(out) // map[hello:2 world:1]
//
// Internal topics (repartitions, changelogs) are passed in memory, so a
// test sees every operator at work, deterministic and fast.
package streamstest
