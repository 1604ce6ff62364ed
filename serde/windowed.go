package serde

import (
	"encoding/binary"
	"fmt"
)

// Window is a time window [Start, End) in milliseconds. Session windows
// include both ends: [Start, End].
type Window struct {
	Start, End int64
}

// Windowed is a key with the window its value belongs to: the key type of
// windowed aggregations' results.
type Windowed[K any] struct {
	Key    K
	Window Window
}

func (w Windowed[K]) String() string {
	return fmt.Sprintf("[%v@%d/%d]", w.Key, w.Window.Start, w.Window.End)
}

// TimeWindowed is Kafka Streams' time-windowed key format: the inner key's
// bytes, then the window start in 8 big-endian bytes. The end is not
// stored; it is start + size.
func TimeWindowed[K any](inner Serde[K], size int64) Serde[Windowed[K]] {
	return timeWindowed[K]{inner, size}
}

type timeWindowed[K any] struct {
	inner Serde[K]
	size  int64
}

func (t timeWindowed[K]) Serialize(topic string, w Windowed[K]) ([]byte, error) {
	kb, err := t.inner.Serialize(topic, w.Key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(kb)+8)
	out = append(out, kb...)
	return binary.BigEndian.AppendUint64(out, uint64(w.Window.Start)), nil
}

func (t timeWindowed[K]) Deserialize(topic string, data []byte) (Windowed[K], error) {
	if len(data) < 8 {
		return Windowed[K]{}, fmt.Errorf("%w: time-windowed key needs at least 8 bytes, got %d", ErrSize, len(data))
	}
	n := len(data) - 8
	k, err := t.inner.Deserialize(topic, data[:n])
	start := int64(binary.BigEndian.Uint64(data[n:]))
	end := start + t.size
	if end < start { // overflow: the window reaches the end of time
		end = 1<<63 - 1
	}
	return Windowed[K]{Key: k, Window: Window{Start: start, End: end}}, err
}

// SessionWindowed is Kafka Streams' session-windowed key format: the inner
// key's bytes, then the session end and start, 8 big-endian bytes each.
func SessionWindowed[K any](inner Serde[K]) Serde[Windowed[K]] { return sessionWindowed[K]{inner} }

type sessionWindowed[K any] struct{ inner Serde[K] }

func (s sessionWindowed[K]) Serialize(topic string, w Windowed[K]) ([]byte, error) {
	kb, err := s.inner.Serialize(topic, w.Key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(kb)+16)
	out = append(out, kb...)
	out = binary.BigEndian.AppendUint64(out, uint64(w.Window.End))
	return binary.BigEndian.AppendUint64(out, uint64(w.Window.Start)), nil
}

func (s sessionWindowed[K]) Deserialize(topic string, data []byte) (Windowed[K], error) {
	if len(data) < 16 {
		return Windowed[K]{}, fmt.Errorf("%w: session-windowed key needs at least 16 bytes, got %d", ErrSize, len(data))
	}
	n := len(data) - 16
	k, err := s.inner.Deserialize(topic, data[:n])
	end := int64(binary.BigEndian.Uint64(data[n:]))
	start := int64(binary.BigEndian.Uint64(data[n+8:]))
	return Windowed[K]{Key: k, Window: Window{Start: start, End: end}}, err
}
