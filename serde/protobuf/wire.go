package protobuf

import (
	"encoding/binary"
	"fmt"

	"github.com/eddy-go/eddy/serde/registry"
)

// The Confluent Protobuf wire format: the registry header (magic byte,
// schema id), then the message indexes — the path to the record's message
// in the schema's file, as zig-zag varints, a count first, with the path
// [0] (the file's first message) written as the single byte 0 — then the
// message's own bytes.

// appendIndexes appends the message indexes in the wire format.
func appendIndexes(buf []byte, indexes []int) []byte {
	if len(indexes) == 1 && indexes[0] == 0 {
		return append(buf, 0)
	}
	buf = binary.AppendVarint(buf, int64(len(indexes)))
	for _, i := range indexes {
		buf = binary.AppendVarint(buf, int64(i))
	}
	return buf
}

// maxDepth bounds the message indexes read: deeper nesting than this is
// not a record but damage.
const maxDepth = 100

// readIndexes reads the message indexes at the start of payload and
// returns them and the message bytes after them.
func readIndexes(payload []byte) ([]int, []byte, error) {
	n, k := binary.Varint(payload)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: no message indexes after the schema id", registry.ErrWireFormat)
	}
	payload = payload[k:]
	if n == 0 {
		return []int{0}, payload, nil
	}
	if n < 0 || n > maxDepth {
		return nil, nil, fmt.Errorf("%w: %d message indexes", registry.ErrWireFormat, n)
	}
	indexes := make([]int, n)
	for j := range indexes {
		i, k := binary.Varint(payload)
		switch {
		case k <= 0:
			return nil, nil, fmt.Errorf("%w: message index %d of %d is cut short", registry.ErrWireFormat, j+1, n)
		case i < 0:
			return nil, nil, fmt.Errorf("%w: message index %d of %d is negative (%d)", registry.ErrWireFormat, j+1, n, i)
		case i > 1<<20:
			return nil, nil, fmt.Errorf("%w: message index %d of %d is %d, past any file's messages", registry.ErrWireFormat, j+1, n, i)
		}
		indexes[j] = int(i)
		payload = payload[k:]
	}
	return indexes, payload, nil
}
