package fetch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/franz"
)

// The fetcher starts a partition with no committed offset where the
// topic's policy says: by duration, at the first record at most that old;
// none, with an error naming the partition and its offsets.
func TestFetcherStartsAsTheTopicsPolicySays(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "hours", "strict", "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := strings.Join(c.ListenAddrs(), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	now := time.Now()
	var recs []*kgo.Record
	for i := range 10 { // hours: one record an hour, the last 1h old
		recs = append(recs, &kgo.Record{Topic: "hours", Value: []byte{byte(i)}, Timestamp: now.Add(-time.Duration(10-i) * time.Hour)})
		recs = append(recs, &kgo.Record{Topic: "strict", Value: []byte{byte(i)}})
	}
	recs = append(recs, &kgo.Record{Topic: "fresh", Value: []byte{0}, Timestamp: now.Add(-2 * time.Hour)})
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cc, err := franz.ParseConfig(kclient.Config{"bootstrap.servers": addr, "auto.offset.reset": "earliest",
		kclient.TopicResets: map[string]kclient.Reset{"hours": {Policy: kclient.ResetByDuration, Back: 3*time.Hour + 30*time.Minute},
			"strict": {Policy: kclient.ResetNone}, "fresh": {Policy: kclient.ResetByDuration, Back: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFetcher(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.reset, f.resets, f.own = cc.Reset(), cc.Resets(), true

	hours, strict, fresh := kclient.TP{Topic: "hours"}, kclient.TP{Topic: "strict"}, kclient.TP{Topic: "fresh"}
	next := map[kclient.TP]int64{hours: -1, fresh: -1}
	if err := f.resolve(context.Background(), next, nil); err != nil {
		t.Fatal(err)
	}
	if next[hours] != 7 {
		t.Errorf("hours, 3h30m back: starts at %d, want 7 (the record 3h old)", next[hours])
	}
	if next[fresh] != 1 {
		t.Errorf("fresh, 1h back, its only record 2h old: starts at %d, want its end, 1", next[fresh])
	}
	err = f.resolve(context.Background(), map[kclient.TP]int64{strict: -1}, nil)
	var refused *kclient.OffsetOutOfRange
	if !errors.As(err, &refused) || refused.TP != strict || refused.Earliest != 0 || refused.Latest != 10 {
		t.Fatalf("strict, none, nothing committed: %v, want an *kclient.OffsetOutOfRange for strict-0 holding 0..10", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "topic strict partition 0: no committed offset") || !strings.Contains(msg, "earliest available offset 0, end 10") {
		t.Errorf("error %q does not name the partition and its offsets", msg)
	}
	err = f.resolve(context.Background(), map[kclient.TP]int64{strict: 25}, []kclient.TP{strict})
	if !errors.As(err, &refused) || refused.Offset != 25 || !strings.Contains(err.Error(), "offset 25 is not in the partition (earliest available offset 0, end 10)") {
		t.Errorf("strict, none, offset 25 out of range: %v", err)
	}
}

func TestReaderRefusesOffsetsItCannotStartFrom(t *testing.T) {
	c, err := franz.ParseConfig(kclient.Config{"bootstrap.servers": "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Assign(map[kclient.TP]int64{{Topic: "t", Partition: 0}: -1}); err == nil {
		t.Fatal("Assign from offset -1: no error")
	}
	if _, err := r.Position([]kclient.TP{{Topic: "t", Partition: 0}}); err == nil {
		t.Fatal("Position of a partition not assigned: no error")
	}
}
