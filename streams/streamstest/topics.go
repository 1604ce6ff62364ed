package streamstest

import (
	"fmt"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// InputTopic pipes typed records into a topic the topology reads.
type InputTopic[K, V any] struct {
	d     *Driver
	topic string
	ks    serde.Serde[K]
	vs    serde.Serde[V]
	// Time is the timestamp Pipe gives records (milliseconds); it starts at
	// the driver's start time and moves only when set or advanced.
	Time int64
}

// Input returns an input topic with the given serdes.
func Input[K, V any](d *Driver, topic string, ks serde.Serde[K], vs serde.Serde[V]) *InputTopic[K, V] {
	return &InputTopic[K, V]{d: d, topic: topic, ks: ks, vs: vs, Time: d.opts.StartTime}
}

// Pipe sends a record stamped with the topic's current Time.
func (in *InputTopic[K, V]) Pipe(k K, v V) { in.PipeAt(k, v, in.Time) }

// PipeAt sends a record with timestamp ts (milliseconds).
func (in *InputTopic[K, V]) PipeAt(k K, v V, ts int64) {
	in.must(in.TryPipe(processor.Record[K, V]{Key: k, Value: v, Timestamp: ts}))
}

// PipeTombstone sends a record with a null value for k at the current Time.
func (in *InputTopic[K, V]) PipeTombstone(k K) {
	in.must(in.TryPipe(processor.Record[K, V]{Key: k, NullValue: true, Timestamp: in.Time}))
}

// PipeRecord sends a record as given: timestamp, headers, NullValue.
func (in *InputTopic[K, V]) PipeRecord(r processor.Record[K, V]) { in.must(in.TryPipe(r)) }

// Advance moves the topic's Time forward by ms.
func (in *InputTopic[K, V]) Advance(ms int64) { in.Time += ms }

// TryPipe sends r and returns the error processing it caused, instead of
// failing the test: for tests of failure handling.
func (in *InputTopic[K, V]) TryPipe(r processor.Record[K, V]) error {
	kb, err := in.ks.Serialize(in.topic, r.Key)
	if err != nil {
		return err
	}
	var vb []byte
	if !r.NullValue {
		if vb, err = in.vs.Serialize(in.topic, r.Value); err != nil {
			return err
		}
		if vb == nil {
			vb = []byte{}
		}
	}
	return in.d.pipeRaw(in.d.raw(in.topic, kb, vb, r.Timestamp, r.Headers))
}

// PipeBytes sends raw key and value bytes (nil value: a tombstone), for
// tests of malformed input.
func (in *InputTopic[K, V]) PipeBytes(key, value []byte, ts int64) error {
	return in.d.pipeRaw(in.d.raw(in.topic, key, value, ts, nil))
}

func (in *InputTopic[K, V]) must(err error) {
	if err := in.d.fail(err); err != nil && in.d.tb == nil {
		panic(err)
	}
}

// OutputTopic reads what the topology wrote to a topic, in order, each
// record once.
type OutputTopic[K, V any] struct {
	d     *Driver
	topic string
	ks    serde.Serde[K]
	vs    serde.Serde[V]
	pos   int
}

// Output returns a reader of topic with the given serdes. Each reader has
// its own position, starting at the topic's first record.
func Output[K, V any](d *Driver, topic string, ks serde.Serde[K], vs serde.Serde[V]) *OutputTopic[K, V] {
	return &OutputTopic[K, V]{d: d, topic: topic, ks: ks, vs: vs}
}

// Len is the number of records not read yet.
func (o *OutputTopic[K, V]) Len() int {
	log := o.d.topics[o.topic]
	if log == nil {
		return 0
	}
	return len(log.recs) - o.pos
}

// IsEmpty reports whether every record has been read.
func (o *OutputTopic[K, V]) IsEmpty() bool { return o.Len() == 0 }

// ReadRecord returns the next record, false when there is none.
func (o *OutputTopic[K, V]) ReadRecord() (processor.Record[K, V], bool) {
	if o.Len() == 0 {
		return processor.Record[K, V]{}, false
	}
	r := o.d.topics[o.topic].recs[o.pos]
	o.pos++
	out := processor.Record[K, V]{Timestamp: r.Timestamp, Headers: r.Headers}
	var err error
	if out.Key, err = o.ks.Deserialize(o.topic, r.Key); err != nil {
		o.d.fail(err)
	}
	if r.Value == nil {
		out.NullValue = true
	} else if out.Value, err = o.vs.Deserialize(o.topic, r.Value); err != nil {
		o.d.fail(err)
	}
	return out, true
}

// ReadRecordsByPartition returns every record not read yet, by the
// partition it was written to (see Options.Partitions).
func (o *OutputTopic[K, V]) ReadRecordsByPartition() map[int32][]processor.Record[K, V] {
	out := map[int32][]processor.Record[K, V]{}
	for o.Len() > 0 {
		p := o.d.topics[o.topic].recs[o.pos].Partition
		r, _ := o.ReadRecord()
		out[p] = append(out[p], r)
	}
	return out
}

// ReadRecords returns every record not read yet.
func (o *OutputTopic[K, V]) ReadRecords() []processor.Record[K, V] {
	var out []processor.Record[K, V]
	for {
		r, ok := o.ReadRecord()
		if !ok {
			return out
		}
		out = append(out, r)
	}
}

// ReadKeyValueMap reads every record not read yet into a map: the latest
// value per key, tombstones deleting.
func ReadKeyValueMap[K comparable, V any](o *OutputTopic[K, V]) map[K]V {
	m := map[K]V{}
	for _, r := range o.ReadRecords() {
		if r.NullValue {
			delete(m, r.Key)
		} else {
			m[r.Key] = r.Value
		}
	}
	return m
}

// KeyValueStore returns the named key-value store for inspection: its
// current contents, uncommitted writes included. A DSL store (whose values
// carry timestamps) is shown as a store of plain values.
func KeyValueStore[K, V any](d *Driver, name string) stores.ReadOnlyKeyValueStore[K, V] {
	s, err := d.store(name)
	if err != nil {
		d.fail(err)
		return nil
	}
	switch kv := s.(type) {
	case stores.KeyValueStore[K, V]:
		return kv
	case stores.KeyValueStore[K, stores.ValueAndTimestamp[V]]:
		return stores.ValuesView[K, V](kv)
	case stores.ReadOnlyKeyValueStore[K, stores.ValueAndTimestamp[V]]: // a global table's
		return stores.ValuesView[K, V](kv)
	}
	d.fail(fmt.Errorf("streamstest: store %q is %T, not a key-value store of [%T, %T]", name, s, *new(K), *new(V)))
	return nil
}

// VersionedKeyValueStore returns the versioned store name (a table
// materialized WithVersioned) for reading: latest values, values as of a
// time, and a key's versions.
func VersionedKeyValueStore[K, V any](d *Driver, name string) stores.ReadOnlyVersionedKeyValueStore[K, V] {
	s, err := d.store(name)
	if err != nil {
		d.fail(err)
		return nil
	}
	if v, ok := s.(stores.ReadOnlyVersionedKeyValueStore[K, V]); ok {
		return v
	}
	d.fail(fmt.Errorf("streamstest: store %q is %T, not a versioned key-value store of [%T, %T]", name, s, *new(K), *new(V)))
	return nil
}
