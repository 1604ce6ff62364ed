package protobuf

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/eddy-go/eddy/serde/registry"
)

// Message indexes round-trip, [0] is the single byte 0, and damaged
// indexes are wire-format errors, not panics.
func TestMessageIndexes(t *testing.T) {
	for _, idx := range [][]int{{0}, {1}, {1, 2, 0}, {0, 0}, {300, 7}} {
		b := appendIndexes(nil, idx)
		if len(idx) == 1 && idx[0] == 0 && len(b) != 1 {
			t.Fatalf("[0] written as % x", b)
		}
		got, rest, err := readIndexes(append(b, 0xaa))
		if err != nil || !reflect.DeepEqual(got, idx) || len(rest) != 1 {
			t.Fatalf("%v: read %v, rest % x, %v", idx, got, rest, err)
		}
	}
	for _, bad := range [][]byte{nil, {0x80}, {0x03}, {0x04, 0x02}, {0x02, 0x01}, {0xfe, 0x01}} {
		if _, _, err := readIndexes(bad); !errors.Is(err, registry.ErrWireFormat) {
			t.Fatalf("% x: %v", bad, err)
		}
	}
	// Each damage is named: one index of -1 (zigzag 0x01), one cut short.
	for bad, want := range map[string]string{"\x02\x01": "message index 1 of 1 is negative (-1)", "\x04\x02": "message index 2 of 2 is cut short"} {
		if _, _, err := readIndexes([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("% x: %v, want %q", bad, err, want)
		}
	}
}

func FuzzReadIndexes(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{6, 2, 4, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, rest, err := readIndexes(b)
		if err != nil {
			return
		}
		again, _, err := readIndexes(append(appendIndexes(nil, idx), rest...))
		if err != nil || !reflect.DeepEqual(again, idx) {
			t.Fatalf("% x: %v re-read as %v, %v", b, idx, again, err)
		}
	})
}
