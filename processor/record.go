package processor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Headers are a record's headers in order. Keys may repeat, as in Kafka.
type Headers []Header

// Get returns the value of the last header named key.
func (h Headers) Get(key string) ([]byte, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return nil, false
}

// With returns h with a header appended; h itself is not modified.
func (h Headers) With(key string, value []byte) Headers {
	out := make(Headers, len(h), len(h)+1)
	copy(out, h)
	return append(out, Header{Key: key, Value: value})
}

// Record is a keyed record flowing through a topology.
//
// Timestamp is in milliseconds since the Unix epoch, as Kafka's. NullValue
// marks a record whose value is Kafka's null — a tombstone when written to a
// compacted topic, a deletion when read into a table; Value is then the zero
// value of V and carries no meaning.
type Record[K, V any] struct {
	Key       K
	Value     V
	Timestamp int64
	Headers   Headers
	NullValue bool
}

// Time returns the record's timestamp as a time.Time.
func (r Record[K, V]) Time() time.Time { return time.UnixMilli(r.Timestamp) }

// WithValue returns a copy of r with another value (and type of value).
func WithValue[K, V, V2 any](r Record[K, V], v V2) Record[K, V2] {
	return Record[K, V2]{Key: r.Key, Value: v, Timestamp: r.Timestamp, Headers: r.Headers}
}

// WithKeyValue returns a copy of r with another key and value.
func WithKeyValue[K, V, K2, V2 any](r Record[K, V], k K2, v V2) Record[K2, V2] {
	return Record[K2, V2]{Key: k, Value: v, Timestamp: r.Timestamp, Headers: r.Headers}
}

// TaskID names a task: a sub-topology and the partition number it processes,
// written "<subtopology>_<partition>" as in Kafka Streams.
type TaskID struct {
	Subtopology int
	Partition   int32
}

func (t TaskID) String() string {
	return strconv.Itoa(t.Subtopology) + "_" + strconv.Itoa(int(t.Partition))
}

// ParseTaskID parses "<subtopology>_<partition>".
func ParseTaskID(s string) (TaskID, error) {
	a, b, ok := strings.Cut(s, "_")
	if !ok {
		return TaskID{}, fmt.Errorf("processor: task id %q is not <subtopology>_<partition>", s)
	}
	st, err1 := strconv.Atoi(a)
	p, err2 := strconv.ParseInt(b, 10, 32)
	if err1 != nil || err2 != nil || st < 0 || p < 0 {
		return TaskID{}, fmt.Errorf("processor: task id %q is not <subtopology>_<partition>", s)
	}
	return TaskID{Subtopology: st, Partition: int32(p)}, nil
}

// RecordMetadata says where the record being processed was read from.
type RecordMetadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

type metadataKey struct{}

// ContextWithRecordMetadata returns ctx carrying md: eddy's async operators
// (topology.MapValuesAsync and the others) give each call a context with
// the metadata of the input record it runs for.
func ContextWithRecordMetadata(ctx context.Context, md RecordMetadata) context.Context {
	return context.WithValue(ctx, metadataKey{}, md)
}

// RecordMetadataFrom returns the metadata of the input record an async
// call runs for (topic, partition, offset: an idempotency key for the
// call's side effects), and false outside such a call or for a record not
// read from a topic (one a punctuator forwarded).
func RecordMetadataFrom(ctx context.Context) (RecordMetadata, bool) {
	md, ok := ctx.Value(metadataKey{}).(RecordMetadata)
	return md, ok
}
