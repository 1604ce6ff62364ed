// Package stores holds eddy's state stores: the typed interfaces a
// processor uses (KeyValueStore, WindowStore, SessionStore and their
// read-only views for interactive queries), the builders that declare them
// (KeyValue, Window, Session and their timestamped forms) with their
// options (caching, logging, in-memory, time to live), and the typed layer
// that serializes keys and values. The byte layers beneath it — the
// changelog, the record cache, the time index, the write set of a commit and
// the two backends, Pebble (one database per application instance, every
// store of every task under its own key prefix) and memory — are the
// runtime's (internal/storage).
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
