package fetch

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A stream thread's records may be kept by the user's code: their keys and
// values must not be slices of the fetch response (which would pin it, and
// change under them if the buffer were reused). A restore's records go
// straight into the store and may share it.
func TestRawRecordsOwnTheirBytes(t *testing.T) {
	buf := []byte("k1v1k2v2")
	recs := []*kgo.Record{
		{Key: buf[0:2], Value: buf[2:4], Offset: 7},
		{Key: buf[4:6], Value: buf[6:8], Offset: 8},
		{Key: nil, Value: nil, Offset: 9}, // a tombstone without a key
		{Key: []byte{}, Value: []byte("x"), Offset: 10},
	}
	owned := rawRecords(recs, true)
	shared := rawRecords(recs, false)
	copy(buf, "XXXXXXXX")
	for i, want := range [][2]string{{"k1", "v1"}, {"k2", "v2"}} {
		if got := [2]string{string(owned[i].Key), string(owned[i].Value)}; got != want {
			t.Errorf("record %d owned: %q, want %q after the response's buffer changed", i, got, want)
		}
		if string(shared[i].Value) != "XX" {
			t.Errorf("record %d shared: %q, want the response's bytes", i, shared[i].Value)
		}
	}
	// Appending to a value does not write over its key.
	_ = append(owned[0].Value, 'Z', 'Z')
	if string(owned[0].Key) != "k1" {
		t.Errorf("key %q after appending to the value", owned[0].Key)
	}
	if owned[2].Key != nil || owned[2].Value != nil {
		t.Errorf("tombstone: key %v value %v, want both nil", owned[2].Key, owned[2].Value)
	}
	if owned[3].Key == nil || len(owned[3].Key) != 0 || string(owned[3].Value) != "x" {
		t.Errorf("empty key: %v, value %q; want an empty non-nil key", owned[3].Key, owned[3].Value)
	}
	for i, r := range owned {
		if r.Offset != recs[i].Offset {
			t.Errorf("record %d: offset %d, want %d", i, r.Offset, recs[i].Offset)
		}
	}
}
