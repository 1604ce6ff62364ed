package topology

import (
	"bytes"
	"testing"

	"github.com/eddy-go/eddy/processor"
)

// Headers kept in a buffer come back as they went in (a null value stays
// null, an empty one empty), and bytes from a damaged changelog are an
// error, never a panic.
func FuzzBufferedHeaders(f *testing.F) {
	f.Add([]byte("k1"), []byte("v1"), []byte{}, false)
	f.Add([]byte(""), []byte(nil), []byte{0x05, 0xff}, true)
	f.Fuzz(func(t *testing.T, key, value, junk []byte, null bool) {
		h := processor.Headers{{Key: string(key), Value: value}, {Key: "n"}}
		if null {
			h[0].Value = nil
		} else if h[0].Value == nil {
			h[0].Value = []byte{}
		}
		b := appendHeaders(nil, h)
		got, rest, err := readHeaders(append(b, junk...))
		if err != nil || !bytes.Equal(rest, junk) || len(got) != 2 || got[0].Key != string(key) ||
			!bytes.Equal(got[0].Value, h[0].Value) || (got[0].Value == nil) != (h[0].Value == nil) || got[1].Value != nil {
			t.Fatalf("headers %q came back as %q (rest %q, err %v)", h, got, rest, err)
		}
		readHeaders(junk) // anything: an error or headers, no panic
	})
}
