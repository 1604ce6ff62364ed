package engine

import (
	"encoding/base64"
	"encoding/binary"
	"testing"
)

func TestStreamTimeMetadata(t *testing.T) {
	for _, ts := range []int64{0, 1, 1_700_000_000_123} {
		got, ok := decodeStreamTime(encodeStreamTime(ts))
		if !ok || got != ts {
			t.Fatalf("round trip of %d: got %d, %v", ts, got, ok)
		}
	}
	// Kafka Streams' version 2 adds processor metadata after the time.
	v2 := binary.BigEndian.AppendUint64([]byte{2}, 42)
	v2 = binary.BigEndian.AppendUint32(v2, 0)
	if got, ok := decodeStreamTime(base64.StdEncoding.EncodeToString(v2)); !ok || got != 42 {
		t.Fatalf("version 2: got %d, %v", got, ok)
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString([]byte{9, 0, 0, 0, 0, 0, 0, 0, 1})} {
		if _, ok := decodeStreamTime(bad); ok {
			t.Fatalf("%q decoded", bad)
		}
	}
}
