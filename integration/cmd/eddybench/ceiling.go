package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ceilingFranz is a plain franz-go loop: consume every input record,
// produce it unchanged, commit as often as the systems do (under
// exactly-once, a transaction with the offsets every commit interval, in
// franz-go's GroupTransactSession), with franz-go's defaults.
func ceilingFranz(ctx context.Context, brokers, group, in, out string, eos bool, every time.Duration) {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers), kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ProducerLinger(10 * time.Millisecond),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { running() })}
	if !eos {
		cl := must(kgo.NewClient(opts...))
		defer cl.Close()
		last := time.Now()
		for ctx.Err() == nil {
			pctx, cancel := context.WithDeadline(ctx, last.Add(every))
			fs := cl.PollFetches(pctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) {
				cl.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil)
			})
			if time.Since(last) >= every {
				last = time.Now()
				if err := cl.Flush(ctx); err != nil && ctx.Err() == nil {
					fail("flush: %v", err)
				}
				if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
					fail("commit: %v", err)
				}
			}
		}
		return
	}
	opts = append(opts, kgo.TransactionalID(group+"-ceiling"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	s := must(kgo.NewGroupTransactSession(opts...))
	defer s.Close()
	for ctx.Err() == nil {
		if err := s.Begin(); err != nil {
			fail("begin: %v", err)
		}
		end := time.Now().Add(every)
		for time.Now().Before(end) && ctx.Err() == nil {
			pctx, cancel := context.WithDeadline(ctx, end)
			fs := s.PollFetches(pctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) {
				s.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil)
			})
		}
		if ctx.Err() != nil {
			s.End(context.Background(), kgo.TryAbort)
			return
		}
		if _, err := s.End(ctx, kgo.TryCommit); err != nil {
			fail("commit: %v", err)
		}
	}
}

// running says, once, that the loop has its partitions.
var running = func() func() {
	said := false
	return func() {
		if !said {
			said = true
			fmt.Println("RUNNING")
		}
	}
}()
