package franz

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// The check every produced record passes: a known topic's facts, a record
// within its limits.
func BenchmarkTopicGuardCheck(b *testing.B) {
	g := newTopicGuard(nil, 1_000_012)
	g.facts["out"] = &topicFacts{maxBytes: 1_048_588}
	g.facts["other"] = &topicFacts{maxBytes: 1_048_588}
	// A count's output and its changelog, in turn.
	recs := []*rt.OutRecord{{Topic: "out", Partition: -1, Key: []byte("key-123"), Value: make([]byte, 100)},
		{Topic: "other", Partition: -1, Key: []byte("key-123"), Value: make([]byte, 8)}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := g.check(recs[i&1]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// What the guard refuses, and why, from a topic's facts.
func TestTopicGuardRefuses(t *testing.T) {
	g := newTopicGuard(nil, 50_000)
	g.facts["small"] = &topicFacts{maxBytes: 1000}
	g.facts["gone"] = &topicFacts{missing: true, until: time.Now().Add(time.Hour)}
	g.facts["table"] = &topicFacts{compacted: true}
	g.facts["big"] = &topicFacts{}
	for _, c := range []struct {
		rec  rt.OutRecord
		want string // "" accepted
	}{
		{rt.OutRecord{Topic: "small", Key: []byte("k"), Value: make([]byte, 900)}, ""},
		{rt.OutRecord{Topic: "small", Key: []byte("k"), Value: make([]byte, 1000)}, "1083 bytes, more than the topic's max.message.bytes (1000)"},
		{rt.OutRecord{Topic: "gone", Key: []byte("k")}, "the topic does not exist"},
		{rt.OutRecord{Topic: "table", Value: []byte("v")}, "no key, and the topic is compacted"},
		{rt.OutRecord{Topic: "table", Key: []byte("k")}, ""},
		{rt.OutRecord{Topic: "big", Key: []byte("k"), Value: make([]byte, 60_000)}, "more than a batch holds (50000; batch.size)"},
	} {
		for range 2 { // the second time from what the guard keeps
			err := g.check(&c.rec)
			var refused *kclient.RecordRefused
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s, %d bytes: %v", c.rec.Topic, len(c.rec.Value), err)
			case c.want != "" && (!errors.As(err, &refused) || !errors.Is(err, rt.ErrRecordRefused) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s, %d bytes: %v, want a refusal saying %q", c.rec.Topic, len(c.rec.Value), err, c.want)
			}
		}
	}
	if n := g.batchMax("small"); n != 1000 {
		t.Errorf("batches for a topic of max.message.bytes 1000: %d bytes", n)
	}
	if n := g.batchMax("big"); n != 50_000 {
		t.Errorf("batches for a topic without a limit known: %d bytes, want batch.size", n)
	}
}
