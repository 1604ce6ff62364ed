// Package stores holds eddy's state stores: the typed interfaces a
// processor uses (KeyValueStore, WindowStore, SessionStore and their
// read-only views for interactive queries), the builders that declare them
// (KeyValue, Window, Session and their timestamped forms), and the byte
// layers beneath — changelogging, the record cache, the write set of a
// commit — over the two backends: Pebble (one database per application
// instance, every store of every task under its own key prefix) and memory.
//
// A processor gets its stores from its context by name, typed:
//
//	counts, err := processor.GetKeyValueStore[string, int64](ctx, "counts")
//	n, _, err := counts.Get(word)
//	err = counts.Put(word, n+1)
//
// Stores are declared on the topology (topology.Materialized, or a builder
// from this package for the Processor API); the runtime builds, restores and
// commits them.
package stores
