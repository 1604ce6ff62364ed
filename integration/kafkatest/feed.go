package kafkatest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Feeder produces records to a topic in the background at a steady rate, so
// that input keeps flowing while a test injects a fault (a SIGKILL, a
// rebalance, a fenced producer, a broker restart). A fault placed by the
// group's observed progress against a paced input happens mid-stream however
// fast or slow the machine is. Start one with Feed.
type Feeder struct {
	t        testing.TB
	topic    string
	total    int
	produced atomic.Int64
	cancel   context.CancelFunc
	done     chan struct{}

	mu  sync.Mutex // guards err
	err error      // the first produce error
}

// Feed starts producing recs to topic in the background, in order, at about
// perSecond records a second (records go to partitions as Produce sends them:
// murmur2 of the key). Each batch is acknowledged before the next is sent.
// Call Wait before relying on all of recs being in the topic; the feeder is
// stopped by t.Cleanup if the test ends first.
func Feed(t testing.TB, brokers, topic string, perSecond int, recs ...Record) *Feeder {
	t.Helper()
	if perSecond <= 0 {
		t.Fatalf("kafkatest: Feed of %q: rate %d records/s, want > 0", topic, perSecond)
	}
	cl := Client(t, brokers, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.ProducerLinger(5*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	f := &Feeder{t: t, topic: topic, total: len(recs), cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() { cancel(); <-f.done })
	const tick = 50 * time.Millisecond
	chunk := max(1, perSecond*int(tick/time.Millisecond)/1000)
	go func() {
		defer close(f.done)
		next := time.Now()
		for i := 0; i < len(recs); i += chunk {
			krs := make([]*kgo.Record, 0, chunk)
			for _, r := range recs[i:min(len(recs), i+chunk)] {
				krs = append(krs, toKgo(topic, r))
			}
			pctx, pcancel := context.WithTimeout(ctx, Timeout)
			err := cl.ProduceSync(pctx, krs...).FirstErr()
			pcancel()
			if err != nil {
				if ctx.Err() == nil {
					f.fail(fmt.Errorf("kafkatest: feeding %q (%d of %d records sent): %w", topic, i, len(recs), err))
				}
				return
			}
			f.produced.Add(int64(len(krs)))
			// A steady pace: sleep until this batch's slot ends; a feeder
			// that fell behind (slow acknowledgements) does not burst to
			// catch up.
			next = next.Add(tick)
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			} else {
				next = time.Now()
			}
		}
	}()
	return f
}

func (f *Feeder) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// Produced returns how many records the broker has acknowledged so far.
func (f *Feeder) Produced() int { return int(f.produced.Load()) }

// Total returns how many records the feeder was given.
func (f *Feeder) Total() int { return f.total }

// Wait waits until every record is acknowledged, or fails the test with the
// produce error. Call it from the test's goroutine.
func (f *Feeder) Wait() {
	f.t.Helper()
	<-f.done
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		f.t.Fatal(err)
	}
	if n := f.Produced(); n != f.total {
		f.t.Fatalf("kafkatest: feeding %q stopped after %d of %d records", f.topic, n, f.total)
	}
}

// Committed returns the offsets consumer group has committed on topic, by
// partition; a partition the group never committed is left out.
func Committed(t testing.TB, brokers, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	// A client per call, closed at once: callers poll this in loops.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatalf("kafkatest: client for %s: %v", brokers, err)
	}
	defer cl.Close()
	// A group's coordinator may still be loading (a new cluster, a broker
	// that just restarted): retry until Timeout.
	var resp kadm.OffsetResponses
	for {
		resp, err = kadm.NewClient(cl).FetchOffsets(ctx, group)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: committed offsets of group %s: %v", group, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// CommittedTotal returns the sum of the offsets consumer group has committed
// on topic's partitions. For a topic written without transactions from
// offset 0, that is the number of its records the group has processed and
// committed.
func CommittedTotal(t testing.TB, brokers, group, topic string) int64 {
	t.Helper()
	var n int64
	for _, o := range Committed(t, brokers, group, topic) {
		n += o
	}
	return n
}
