package serde

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Serde turns values of type T into the bytes of a Kafka record key or value
// and back. The topic is passed so that formats that depend on it (schema
// registry subjects, for example) can use it.
//
// A nil byte slice is Kafka's null: the runtime never hands nil to
// Deserialize for a record value; it treats a null value as a tombstone
// before deserializing.
type Serde[T any] interface {
	Serialize(topic string, v T) ([]byte, error)
	Deserialize(topic string, data []byte) (T, error)
}

// ErrSetup is wrapped by errors that are not the record's fault but the
// serde's: a schema registry refusing the credentials, for one. The runtime
// stops the app with such an error instead of giving the record to an
// error handler, which would skip or dead-letter every record alike.
var ErrSetup = errors.New("serde: the serde cannot work")

// ErrSize reports data of the wrong length for a fixed-size encoding.
var ErrSize = errors.New("serde: wrong data length")

// Error is a serialization or deserialization failure. Topic, Partition and
// Offset say where the record came from when known (Partition and Offset are
// -1 otherwise).
type Error struct {
	Op        string // "serialize" or "deserialize"
	Topic     string
	Partition int32
	Offset    int64
	IsKey     bool
	Err       error
}

func (e *Error) Error() string {
	what := "value"
	if e.IsKey {
		what = "key"
	}
	where := fmt.Sprintf("topic %q", e.Topic)
	if e.Partition >= 0 {
		where += fmt.Sprintf(" partition %d", e.Partition)
	}
	if e.Offset >= 0 {
		where += fmt.Sprintf(" offset %d", e.Offset)
	}
	return fmt.Sprintf("serde: %s %s of record at %s: %v", e.Op, what, where, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Func builds a Serde from two functions.
func Func[T any](ser func(topic string, v T) ([]byte, error), de func(topic string, data []byte) (T, error)) Serde[T] {
	return funcSerde[T]{ser, de}
}

type funcSerde[T any] struct {
	ser func(string, T) ([]byte, error)
	de  func(string, []byte) (T, error)
}

func (f funcSerde[T]) Serialize(topic string, v T) ([]byte, error)      { return f.ser(topic, v) }
func (f funcSerde[T]) Deserialize(topic string, data []byte) (T, error) { return f.de(topic, data) }

// String is UTF-8 text, as Kafka's StringSerializer.
func String() Serde[string] { return stringSerde{} }

type stringSerde struct{}

func (stringSerde) Serialize(_ string, v string) ([]byte, error)      { return []byte(v), nil }
func (stringSerde) Deserialize(_ string, data []byte) (string, error) { return string(data), nil }

// Bytes passes bytes through unchanged, as Kafka's ByteArraySerializer.
func Bytes() Serde[[]byte] { return bytesSerde{} }

type bytesSerde struct{}

func (bytesSerde) Serialize(_ string, v []byte) ([]byte, error)      { return v, nil }
func (bytesSerde) Deserialize(_ string, data []byte) ([]byte, error) { return data, nil }

// Int32 is a 4-byte big-endian two's-complement integer, as Kafka's
// IntegerSerializer.
func Int32() Serde[int32] { return int32Serde{} }

type int32Serde struct{}

func (int32Serde) Serialize(_ string, v int32) ([]byte, error) {
	return binary.BigEndian.AppendUint32(make([]byte, 0, 4), uint32(v)), nil
}

func (int32Serde) Deserialize(_ string, data []byte) (int32, error) {
	if len(data) != 4 {
		return 0, fmt.Errorf("%w: int32 needs 4 bytes, got %d", ErrSize, len(data))
	}
	return int32(binary.BigEndian.Uint32(data)), nil
}

// Int64 is an 8-byte big-endian two's-complement integer, as Kafka's
// LongSerializer.
func Int64() Serde[int64] { return int64Serde{} }

type int64Serde struct{}

func (int64Serde) Serialize(_ string, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(v)), nil
}

func (int64Serde) Deserialize(_ string, data []byte) (int64, error) {
	if len(data) != 8 {
		return 0, fmt.Errorf("%w: int64 needs 8 bytes, got %d", ErrSize, len(data))
	}
	return int64(binary.BigEndian.Uint64(data)), nil
}

// Float64 is an IEEE 754 double in 8 big-endian bytes, as Kafka's
// DoubleSerializer.
func Float64() Serde[float64] { return float64Serde{} }

type float64Serde struct{}

func (float64Serde) Serialize(_ string, v float64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), math.Float64bits(v)), nil
}

func (float64Serde) Deserialize(_ string, data []byte) (float64, error) {
	if len(data) != 8 {
		return 0, fmt.Errorf("%w: float64 needs 8 bytes, got %d", ErrSize, len(data))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(data)), nil
}

// JSON encodes T with encoding/json.
func JSON[T any]() Serde[T] { return jsonSerde[T]{} }

type jsonSerde[T any] struct{}

func (jsonSerde[T]) Serialize(_ string, v T) ([]byte, error) { return json.Marshal(v) }

func (jsonSerde[T]) Deserialize(_ string, data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}
