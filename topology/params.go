package topology

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/eddy-go/eddy/processor"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Named names an operator. Names keep generated node, store and topic names
// stable when a topology changes: with Named, "KSTREAM-FILTER-0000000003"
// becomes your name.
type Named string

func nameOf(n []Named) string {
	if len(n) > 0 {
		return string(n[0])
	}
	return ""
}

// ConsumedOptions are the parameters of a source: serdes, name, timestamp
// extractor.
type ConsumedOptions[K, V any] struct {
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	name       string
	extractor  TimestampExtractor[K, V]
	reset      OffsetReset
}

// OffsetReset is where a source starts reading a partition when the
// application has no committed offset for it (its first run), or when its
// committed offset is no longer in the log (retention deleted the records
// before they were processed): Kafka Streams' AutoOffsetReset. Every reset
// of a committed offset is counted (eddy_offset_resets_total and
// eddy_offset_reset_skipped_offsets_total), logged at Error with the offsets
// it skipped, and listed in GET /state.
type OffsetReset string

// The offset reset policies; ResetByDuration makes the fourth.
const (
	// ResetEarliest reads from the oldest record the partition holds (the
	// default, as in Kafka Streams).
	ResetEarliest OffsetReset = "earliest"
	// ResetLatest reads only records written from now on.
	ResetLatest OffsetReset = "latest"
	// ResetNone refuses: the application stops with an error naming the
	// topic, the partition, the missing offset and the earliest one
	// available. On a first run (no committed offsets) it stops too.
	ResetNone OffsetReset = "none"
)

// ResetByDuration reads from the first record at most d old (by record
// timestamp), or from the end when there is none.
func ResetByDuration(d time.Duration) OffsetReset {
	return OffsetReset("by_duration:" + isoDuration(d))
}

// isoDuration writes d as an ISO-8601 duration (PT1H30M), the form Kafka
// 4's auto.offset.reset=by_duration takes.
func isoDuration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	return "PT" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
}

// WithOffsetReset sets the source's offset reset policy (default: the
// application's, streams.Config.OffsetReset). A global table always reads
// its topic in full and takes none.
func (c ConsumedOptions[K, V]) WithOffsetReset(r OffsetReset) ConsumedOptions[K, V] {
	c.reset = r
	return c
}

// TimestampExtractor gives a record its timestamp in milliseconds; the
// record arrives with the Kafka record's timestamp. A negative result, or
// an error, sends the record to the error handler: it is never processed
// with a made-up time.
type TimestampExtractor[K, V any] func(rec processor.Record[K, V]) (int64, error)

// RecordTime uses the Kafka record's timestamp (the default).
func RecordTime[K, V any]() TimestampExtractor[K, V] {
	return func(rec processor.Record[K, V]) (int64, error) { return rec.Timestamp, nil }
}

// WallClockTime stamps each record with the time it is read (processing
// time).
func WallClockTime[K, V any]() TimestampExtractor[K, V] {
	return func(processor.Record[K, V]) (int64, error) { return time.Now().UnixMilli(), nil }
}

// EventTime reads the timestamp from the record's value (event time).
func EventTime[K, V any](f func(V) time.Time) TimestampExtractor[K, V] {
	return func(rec processor.Record[K, V]) (int64, error) {
		if rec.NullValue {
			return rec.Timestamp, nil // deletions keep the Kafka timestamp
		}
		t := f(rec.Value)
		if t.IsZero() {
			return -1, fmt.Errorf("the value has no event time")
		}
		return t.UnixMilli(), nil
	}
}

// WithTimestampExtractor sets how the source's records get their
// timestamps (stream time, windows and joins follow them).
func (c ConsumedOptions[K, V]) WithTimestampExtractor(e TimestampExtractor[K, V]) ConsumedOptions[K, V] {
	c.extractor = e
	return c
}

// Consumed returns source parameters with the key and value serdes.
func Consumed[K, V any](ks serde.Serde[K], vs serde.Serde[V]) ConsumedOptions[K, V] {
	return ConsumedOptions[K, V]{keySerde: ks, valueSerde: vs}
}

// WithName names the source node.
func (c ConsumedOptions[K, V]) WithName(name string) ConsumedOptions[K, V] {
	c.name = name
	return c
}

// ProducedOptions are the parameters of a sink: serdes, name and stream
// partitioner.
type ProducedOptions[K, V any] struct {
	keySerde    serde.Serde[K]
	valueSerde  serde.Serde[V]
	name        string
	partitioner StreamPartitioner[K, V]
}

// StreamPartitioner chooses the partitions of a record written to a topic
// of numPartitions partitions (Kafka Streams' StreamPartitioner, KIP-837):
// with ok false the default partitioner places it (murmur2 of the
// serialized key, as Kafka's Java client); else it goes to each partition
// returned (several: multicast, each a copy; none: dropped). value is nil
// for a tombstone, and for interactive queries, which ask where a key is
// (MetadataForKey): a partitioner that looks at values cannot answer those
// by key alone. A partition out of range is a production error.
type StreamPartitioner[K, V any] func(topic string, key K, value *V, numPartitions int32) (partitions []int32, ok bool)

// WithStreamPartitioner places the sink's records with sp.
func (p ProducedOptions[K, V]) WithStreamPartitioner(sp StreamPartitioner[K, V]) ProducedOptions[K, V] {
	p.partitioner = sp
	return p
}

// Produced returns sink parameters with the key and value serdes.
func Produced[K, V any](ks serde.Serde[K], vs serde.Serde[V]) ProducedOptions[K, V] {
	return ProducedOptions[K, V]{keySerde: ks, valueSerde: vs}
}

// WithName names the sink node.
func (p ProducedOptions[K, V]) WithName(name string) ProducedOptions[K, V] {
	p.name = name
	return p
}

// GroupedOptions are the parameters of a grouping: the serdes of the
// repartition topic and its name.
type GroupedOptions[K, V any] struct {
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	name       string
}

// Grouped returns grouping parameters with the key and value serdes.
func Grouped[K, V any](ks serde.Serde[K], vs serde.Serde[V]) GroupedOptions[K, V] {
	return GroupedOptions[K, V]{keySerde: ks, valueSerde: vs}
}

// WithName names the grouping: the repartition topic becomes
// "<application id>-<name>-repartition".
func (g GroupedOptions[K, V]) WithName(name string) GroupedOptions[K, V] {
	g.name = name
	return g
}

// RepartitionedOptions are the parameters of an explicit repartition.
type RepartitionedOptions[K, V any] struct {
	keySerde    serde.Serde[K]
	valueSerde  serde.Serde[V]
	name        string
	partitions  int32
	partitioner StreamPartitioner[K, V]
}

// WithStreamPartitioner places the records in the repartition topic with
// sp (so they reach the tasks sp chooses); a store downstream is then
// queried where sp puts each key.
func (r RepartitionedOptions[K, V]) WithStreamPartitioner(sp StreamPartitioner[K, V]) RepartitionedOptions[K, V] {
	r.partitioner = sp
	return r
}

// Repartitioned returns repartition parameters with the serdes.
func Repartitioned[K, V any](ks serde.Serde[K], vs serde.Serde[V]) RepartitionedOptions[K, V] {
	return RepartitionedOptions[K, V]{keySerde: ks, valueSerde: vs}
}

// WithName names the repartition topic "<application id>-<name>-repartition".
func (r RepartitionedOptions[K, V]) WithName(name string) RepartitionedOptions[K, V] {
	r.name = name
	return r
}

// WithPartitions sets the repartition topic's partition count (default:
// that of the upstream source topics).
func (r RepartitionedOptions[K, V]) WithPartitions(n int32) RepartitionedOptions[K, V] {
	r.partitions = n
	return r
}

// Backend picks where a store keeps its data.
type Backend int

const (
	// Persistent keeps the store in the instance's Pebble database (default).
	Persistent Backend = iota
	// InMemory keeps the store in memory; it restores fully from its
	// changelog at every start.
	InMemory
)

// MaterializedOptions are the parameters of a state store created by the
// DSL: name, serdes, caching, logging, backend.
type MaterializedOptions[K, V any] struct {
	name       string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	caching    bool
	logging    bool
	logConfig  map[string]string
	backend    Backend
	retention  time.Duration
	ttl        time.Duration
	ttlClock   stores.TTLClock
	ttlSilent  bool
	// versioned, with its history retention: a versioned key-value store.
	versioned bool
	history   time.Duration
}

// Materialized returns store parameters naming the store; an empty name
// lets the builder generate one (then the store is not queryable). Caching
// and logging are on, the backend is Persistent.
func Materialized[K, V any](name string) MaterializedOptions[K, V] {
	return MaterializedOptions[K, V]{name: name, caching: true, logging: true}
}

// WithSerdes sets the store's serdes (default: inherited, or the built-in
// serde of the type).
func (m MaterializedOptions[K, V]) WithSerdes(ks serde.Serde[K], vs serde.Serde[V]) MaterializedOptions[K, V] {
	m.keySerde, m.valueSerde = ks, vs
	return m
}

// WithCaching turns the record cache on (default) or off. With caching off,
// every update is forwarded downstream and logged.
func (m MaterializedOptions[K, V]) WithCaching(on bool) MaterializedOptions[K, V] {
	m.caching = on
	return m
}

// WithLogging turns the changelog on (default) or off; config adds
// changelog topic configs.
func (m MaterializedOptions[K, V]) WithLogging(on bool, config map[string]string) MaterializedOptions[K, V] {
	m.logging = on
	m.logConfig = maps.Clone(config)
	return m
}

// WithRetention keeps a windowed store's windows for d (default: window
// size plus grace, the least that works).
func (m MaterializedOptions[K, V]) WithRetention(d time.Duration) MaterializedOptions[K, V] {
	m.retention = d
	return m
}

// WithTTL gives a table's or an aggregation's key-value store a time to
// live: a key not updated for d of stream time (by default; or wall-clock
// time with stores.WallClockTime) expires — deleted from the store, a
// tombstone to its changelog in the same commit, and a tombstone downstream
// (a deletion, as if the table's topic had one), so joins and queries
// forget it too. A key's age is measured from its timestamp: the record
// that last wrote it for a table, the newest record folded in for an
// aggregation. Stream-time expiry is deterministic: a replay expires the
// same keys at the same records. Wall-clock expiry is not reproducible.
// d <= 0 keeps keys forever (the default).
func (m MaterializedOptions[K, V]) WithTTL(d time.Duration, clock ...stores.TTLClock) MaterializedOptions[K, V] {
	m.ttl = max(d, 0)
	m.ttlClock = stores.StreamTime
	if len(clock) > 0 {
		m.ttlClock = clock[0]
	}
	return m
}

// WithSilentExpiry makes WithTTL's expiry silent: an expired key leaves the
// store and its changelog, but no tombstone goes downstream, so downstream
// tables and topics keep the last value they saw (lookups into this table,
// such as a stream-table join's, miss the key all the same).
func (m MaterializedOptions[K, V]) WithSilentExpiry() MaterializedOptions[K, V] {
	m.ttlSilent = true
	return m
}

// WithVersioned materializes a table in a versioned key-value store that
// keeps each key's values over time, for historyRetention of stream time
// (stores.VersionedKeyValue; Kafka Streams' persistentVersionedKeyValueStore):
//
//   - a stream–table join looks the stream record's key up as of the
//     record's timestamp, not the table's latest value (and may wait for
//     late table updates: JoinTableWithGrace);
//   - an update older than the key's latest value (out of order) goes
//     into the history only: table–table joins, foreign-key joins and
//     table GroupBy ignore it, ToStream still forwards it (KIP-914);
//   - an update older than stream time minus historyRetention is dropped.
//
// Versioned stores are never cached, and take no time to live. They
// materialize source tables: Table and KStream.ToTable.
func (m MaterializedOptions[K, V]) WithVersioned(historyRetention time.Duration) MaterializedOptions[K, V] {
	m.versioned, m.history = true, historyRetention
	return m
}

// WithBackend picks Persistent (Pebble, default) or InMemory.
func (m MaterializedOptions[K, V]) WithBackend(b Backend) MaterializedOptions[K, V] {
	m.backend = b
	return m
}

// materializedOr returns the first of ms, or defaults (caching and logging
// on, generated name).
func materializedOr[K, V any](ms []MaterializedOptions[K, V]) MaterializedOptions[K, V] {
	if len(ms) > 0 {
		return ms[0]
	}
	return Materialized[K, V]("")
}

// defaultSerde returns the Kafka serde of the basic types: string, []byte,
// int32, int64, float64.
func defaultSerde[T any]() (serde.Serde[T], bool) {
	var s any
	switch any(*new(T)).(type) {
	case string:
		s = serde.String()
	case []byte:
		s = serde.Bytes()
	case int32:
		s = serde.Int32()
	case int64:
		s = serde.Int64()
	case float64:
		s = serde.Float64()
	default:
		return nil, false
	}
	return s.(serde.Serde[T]), true
}

// pickSerde returns the first non-nil serde, else the default of the type.
func pickSerde[T any](ss ...serde.Serde[T]) serde.Serde[T] {
	for _, s := range ss {
		if s != nil {
			return s
		}
	}
	s, _ := defaultSerde[T]()
	return s
}
