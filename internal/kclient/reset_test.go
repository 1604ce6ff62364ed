package kclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseReset(t *testing.T) {
	for in, want := range map[string]Reset{
		"earliest": {Policy: ResetEarliest}, "Smallest": {Policy: ResetEarliest}, "latest": {Policy: ResetLatest},
		"end": {Policy: ResetLatest}, "none": {Policy: ResetNone}, "error": {Policy: ResetNone},
		"by_duration:PT1H":        {Policy: ResetByDuration, Back: time.Hour},
		"BY_DURATION:P1DT12H30M":  {Policy: ResetByDuration, Back: 36*time.Hour + 30*time.Minute},
		"by_duration:PT0.5S":      {Policy: ResetByDuration, Back: 500 * time.Millisecond},
		"by_duration:P2D":         {Policy: ResetByDuration, Back: 48 * time.Hour},
		" by_duration:pt15m ":     {Policy: ResetByDuration, Back: 15 * time.Minute},
		"by_duration:PT90061.25S": {Policy: ResetByDuration, Back: 90061250 * time.Millisecond},
	} {
		got, err := ParseReset(in)
		if err != nil || got != want {
			t.Errorf("ParseReset(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil {
			again, err := ParseReset(got.String())
			if err != nil || again != got {
				t.Errorf("ParseReset(%q.String() = %q) = %+v, %v", in, got.String(), again, err)
			}
		}
	}
	for _, in := range []string{"", "begin", "by_duration:", "by_duration:1h", "by_duration:P", "by_duration:PT", "by_duration:P1H",
		"by_duration:PT1D", "by_duration:PT-1H", "by_duration:PTxS", "by_duration:P99999999999D"} {
		if _, err := ParseReset(in); err == nil {
			t.Errorf("ParseReset(%q): no error", in)
		}
	}
}

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
	cc, err := parseClientConfig(Config{"bootstrap.servers": addr, "auto.offset.reset": "earliest",
		TopicResets: map[string]Reset{"hours": {Policy: ResetByDuration, Back: 3*time.Hour + 30*time.Minute},
			"strict": {Policy: ResetNone}, "fresh": {Policy: ResetByDuration, Back: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFetcher(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.reset, f.resets, f.own = cc.reset, cc.resets, true

	hours, strict, fresh := TP{Topic: "hours"}, TP{Topic: "strict"}, TP{Topic: "fresh"}
	next := map[TP]int64{hours: -1, fresh: -1}
	if err := f.resolve(context.Background(), next, nil); err != nil {
		t.Fatal(err)
	}
	if next[hours] != 7 {
		t.Errorf("hours, 3h30m back: starts at %d, want 7 (the record 3h old)", next[hours])
	}
	if next[fresh] != 1 {
		t.Errorf("fresh, 1h back, its only record 2h old: starts at %d, want its end, 1", next[fresh])
	}
	err = f.resolve(context.Background(), map[TP]int64{strict: -1}, nil)
	var refused *OffsetOutOfRange
	if !errors.As(err, &refused) || refused.TP != strict || refused.Earliest != 0 || refused.Latest != 10 {
		t.Fatalf("strict, none, nothing committed: %v, want an *OffsetOutOfRange for strict-0 holding 0..10", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "topic strict partition 0: no committed offset") || !strings.Contains(msg, "earliest available offset 0, end 10") {
		t.Errorf("error %q does not name the partition and its offsets", msg)
	}
	err = f.resolve(context.Background(), map[TP]int64{strict: 25}, []TP{strict})
	if !errors.As(err, &refused) || refused.Offset != 25 || !strings.Contains(err.Error(), "offset 25 is not in the partition (earliest available offset 0, end 10)") {
		t.Errorf("strict, none, offset 25 out of range: %v", err)
	}
}
