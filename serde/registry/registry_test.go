package registry

import (
	"errors"
	"testing"
)

func TestHeader(t *testing.T) {
	b := AppendHeader([]byte{}, 258)
	if string(b) != "\x00\x00\x00\x01\x02" {
		t.Fatalf("header % x", b)
	}
	id, rest, err := ParseHeader(append(b, 'x'))
	if err != nil || id != 258 || string(rest) != "x" {
		t.Fatalf("%d %q %v", id, rest, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0}, {1, 0, 0, 0, 1}} {
		if _, _, err := ParseHeader(bad); !errors.Is(err, ErrWireFormat) {
			t.Fatalf("% x: %v", bad, err)
		}
	}
}

func TestSubjectStrategies(t *testing.T) {
	for _, c := range []struct {
		s    SubjectStrategy
		key  bool
		want string
	}{{TopicName, false, "t-value"}, {TopicName, true, "t-key"}, {RecordName, false, "shop.Order"}, {TopicRecordName, true, "t-shop.Order"}} {
		if got := c.s.Subject("t", c.key, "shop.Order"); got != c.want {
			t.Fatalf("%v key=%v: %q, want %q", c.s, c.key, got, c.want)
		}
	}
}
