package serde_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/eddy-go/eddy/serde"
)

// Every built-in serde's Deserialize takes any bytes: a value or an error,
// never a panic; and a value it reads writes back to the same bytes (for
// JSON: to bytes that read back the same).
func FuzzBuiltinSerdes(f *testing.F) {
	for _, b := range [][]byte{nil, {}, {0, 0, 0, 7}, {1, 2, 3, 4, 5, 6, 7, 8}, []byte("key\x00\x00\x00\x00\x00\x00\x01\x00"),
		[]byte("k\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x01"), []byte(`{"a":[1,2,{"b":null}],"c":"d"}`)} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		same := func(name string, out []byte, err error) {
			t.Helper()
			if err != nil || !bytes.Equal(out, data) {
				t.Fatalf("%s: % x read, written back as % x (%v)", name, data, out, err)
			}
		}
		if v, err := serde.Int32().Deserialize("t", data); err == nil {
			out, err := serde.Int32().Serialize("t", v)
			same("int32", out, err)
		}
		if v, err := serde.Int64().Deserialize("t", data); err == nil {
			out, err := serde.Int64().Serialize("t", v)
			same("int64", out, err)
		}
		if v, err := serde.Float64().Deserialize("t", data); err == nil && !math.IsNaN(v) {
			out, err := serde.Float64().Serialize("t", v)
			same("float64", out, err)
		}
		if v, err := serde.TimeWindowed(serde.String(), 60_000).Deserialize("t", data); err == nil {
			if v.Window.End < v.Window.Start {
				t.Fatalf("time window %+v ends before it starts", v.Window)
			}
			out, err := serde.TimeWindowed(serde.String(), 60_000).Serialize("t", v)
			same("time-windowed", out, err)
		}
		if v, err := serde.SessionWindowed(serde.String()).Deserialize("t", data); err == nil {
			out, err := serde.SessionWindowed(serde.String()).Serialize("t", v)
			same("session-windowed", out, err)
		}
		js := serde.JSON[any]()
		if v, err := js.Deserialize("t", data); err == nil {
			out, err := js.Serialize("t", v)
			if err != nil {
				t.Fatalf("json: %q read, not written: %v", data, err)
			}
			again, err := js.Deserialize("t", out)
			if err != nil {
				t.Fatalf("json: %q written as %q, which does not read: %v", data, out, err)
			}
			if out2, _ := js.Serialize("t", again); !bytes.Equal(out, out2) {
				t.Fatalf("json: %q and %q", out, out2)
			}
		}
	})
}
