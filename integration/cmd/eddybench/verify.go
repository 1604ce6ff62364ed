package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// expectation is what a workload's output must hold once its input is
// processed, so that a row compares systems that did the same work: a
// system whose output differs is reported as failed, not timed.
type expectation struct {
	// records: the output's record count (a record out per record in).
	records int
	// sum: the sum over the output's keys of each key's last value (an
	// 8-byte count): the aggregates' totals, whatever intermediate
	// updates the record cache forwarded or suppressed.
	sum int64
}

// verify reads topic (committed records only) up to its end and checks it
// against w.expect; it returns a short account of what it found.
func (b *bench) verify(topic string, w workload) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("output end offsets: %w", err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	n, last := 0, map[string]int64{}
	if len(want) > 0 {
		// Transaction markers come through as control records, so that
		// reading reaches each partition's end even when it is a marker.
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.o.brokers, ",")...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		if err != nil {
			return "", err
		}
		defer cl.Close()
		for len(want) > 0 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return "", fmt.Errorf("reading the output %s: %d records read, %d partitions short of their end after 3 minutes", topic, n, len(want))
			}
			if err := fs.Err0(); err != nil {
				return "", fmt.Errorf("reading the output %s: %w", topic, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
					delete(want, r.Partition)
				}
				if r.Attrs.IsControl() {
					return
				}
				n++
				if w.expect.sum != 0 && len(r.Value) == 8 {
					last[string(r.Key)] = int64(binary.BigEndian.Uint64(r.Value))
				}
			})
		}
	}
	if w.expect.sum != 0 {
		var sum int64
		for _, v := range last {
			sum += v
		}
		if sum != w.expect.sum {
			return "", fmt.Errorf("output: the last counts of its %d keys sum to %d, want %d (%d records read)", len(last), sum, w.expect.sum, n)
		}
		return fmt.Sprintf("output: %d keys, counts summing to %d", len(last), sum), nil
	}
	if n != w.expect.records {
		return "", fmt.Errorf("output: %d records, want %d", n, w.expect.records)
	}
	return fmt.Sprintf("output: %d records", n), nil
}
