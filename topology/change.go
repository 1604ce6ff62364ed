package topology

import (
	"encoding/binary"
	"errors"

	"github.com/eddy-go/eddy/serde"
)

// changeSerde encodes a table update on a repartition topic: one flag byte
// (1: has new, 2: has old), then the new value's length as a uvarint and its
// bytes, then the old value's bytes. Only eddy reads these topics; the
// format is eddy's own, not Kafka Streams'.
func changeSerde[V any](vs serde.Serde[V]) serde.Serde[change[V]] { return changeCodec[V]{vs} }

type changeCodec[V any] struct{ vs serde.Serde[V] }

var errChange = errors.New("topology: corrupt table change record")

func (c changeCodec[V]) Serialize(topic string, ch change[V]) ([]byte, error) {
	var nb, ob []byte
	var err error
	flags := byte(0)
	if ch.HasNew {
		flags |= 1
		if nb, err = c.vs.Serialize(topic, ch.New); err != nil {
			return nil, err
		}
	}
	if ch.HasOld {
		flags |= 2
		if ob, err = c.vs.Serialize(topic, ch.Old); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(nb)+len(ob))
	out = append(out, flags)
	out = binary.AppendUvarint(out, uint64(len(nb)))
	out = append(out, nb...)
	return append(out, ob...), nil
}

func (c changeCodec[V]) Deserialize(topic string, data []byte) (change[V], error) {
	var ch change[V]
	if len(data) < 2 {
		return ch, errChange
	}
	flags := data[0]
	n, used := binary.Uvarint(data[1:])
	if used <= 0 || uint64(len(data)-1-used) < n {
		return ch, errChange
	}
	rest := data[1+used:]
	var err error
	if flags&1 != 0 {
		if ch.New, err = c.vs.Deserialize(topic, rest[:n]); err != nil {
			return ch, err
		}
		ch.HasNew = true
	}
	if flags&2 != 0 {
		if ch.Old, err = c.vs.Deserialize(topic, rest[n:]); err != nil {
			return ch, err
		}
		ch.HasOld = true
	}
	return ch, nil
}
