package topology

import (
	"encoding/binary"
	"errors"

	"github.com/eddy-go/eddy/processor"
)

// The buffers of Suppress and of a stream–table join with grace keep each
// held record's headers with it, so what they emit later carries the
// headers the record came with: a count, then each header's key and value,
// each as a uvarint length and bytes (a value's length is stored plus one,
// 0 for a null value).

var errBufferedHeaders = errors.New("topology: corrupt headers in a buffered record")

// appendHeaders appends h, encoded, to b.
func appendHeaders(b []byte, h processor.Headers) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	for _, x := range h {
		b = binary.AppendUvarint(b, uint64(len(x.Key)))
		b = append(b, x.Key...)
		if x.Value == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(x.Value))+1)
		b = append(b, x.Value...)
	}
	return b
}

// readHeaders decodes the headers at the start of b and returns the rest.
func readHeaders(b []byte) (processor.Headers, []byte, error) {
	next := func() (uint64, bool) {
		n, used := binary.Uvarint(b)
		if used <= 0 {
			return 0, false
		}
		b = b[used:]
		return n, true
	}
	n, ok := next()
	if !ok || n > uint64(len(b)) {
		return nil, nil, errBufferedHeaders
	}
	var h processor.Headers
	if n > 0 {
		h = make(processor.Headers, 0, n)
	}
	for range n {
		kl, ok := next()
		if !ok || kl > uint64(len(b)) {
			return nil, nil, errBufferedHeaders
		}
		k := string(b[:kl])
		b = b[kl:]
		vl, ok := next()
		if !ok || (vl > 0 && vl-1 > uint64(len(b))) {
			return nil, nil, errBufferedHeaders
		}
		var v []byte
		if vl > 0 {
			v = append([]byte{}, b[:vl-1]...)
			b = b[vl-1:]
		}
		h = append(h, processor.Header{Key: k, Value: v})
	}
	return h, b, nil
}
