package storage

import (
	"encoding/binary"
	"time"
)

// The key layout of window and session stores (package stores writes it):
//
//	window:  <segment 8B> <key> <window start 8B>
//	session: <segment 8B> <key> <session end 8B> <session start 8B>

// SegmentInterval is the segment size Kafka Streams picks for a
// retention: half of it, at least a minute.
func SegmentInterval(retention time.Duration) int64 {
	return max(retention.Milliseconds()/2, 60_000)
}

// ParseWindowKey splits a window store key (as a flush listener sees it)
// into the user key and the window start.
func ParseWindowKey(k []byte) (key []byte, start int64, ok bool) {
	if len(k) < 16 {
		return nil, 0, false
	}
	return k[8 : len(k)-8], int64(binary.BigEndian.Uint64(k[len(k)-8:])), true
}

// ParseSessionKey splits a session store key (as a flush listener sees
// it) into the user key, the session start and its end.
func ParseSessionKey(k []byte) (key []byte, start, end int64, ok bool) {
	if len(k) < 24 {
		return nil, 0, 0, false
	}
	n := len(k)
	return k[8 : n-16], int64(binary.BigEndian.Uint64(k[n-8:])), int64(binary.BigEndian.Uint64(k[n-16 : n-8])), true
}
