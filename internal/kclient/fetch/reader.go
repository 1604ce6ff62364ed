// Package fetch is eddy's fetcher: fetch requests of its own, whole
// record batches decoded in Go, the next fetch in flight while the caller
// works through the last; and the group consumer that takes a member's
// assignment (franz-go's or librdkafka's) and reads it with the fetcher.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/franz"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// Fetch sizes: a response holds at most fetchMaxBytes, a partition's share
// at most fetchPartitionBytes; up to fetchQueue partitions' worth of
// decoded records wait for the caller while the next request is in flight.
// Decoded, a megabyte of small changelog records is ~25k records and
// ~8 MB of record structs, so the queue is short: one share being read,
// two waiting (measured, 10M-record cold restore, 256 MiB state budget: a
// queue of 8 shares of 2 MiB peaked at 481–507 MiB RSS, this one at 251 MiB
// in about the same time; librdkafka's consumer at 392 MiB).
const (
	fetchMaxBytes       = 4 << 20
	fetchPartitionBytes = 1 << 20
	fetchQueue          = 2
	fetchMaxWait        = 200 * time.Millisecond
	fetchRequestTimeout = 10 * time.Second
)

// fetcher is the kclient.Reader that sends its own fetch requests.
type fetcher struct {
	cl            *kgo.Client
	readCommitted bool
	decompressor  kgo.Decompressor
	// reset is where a partition starts whose offset is negative or no
	// longer in the log (auto.offset.reset), resets the same per topic:
	// what a group member needs. A reader that is not own (a changelog
	// being restored) never resets: such an offset is an error.
	reset  kclient.Reset
	resets map[string]kclient.Reset
	// own: every record's key and value are copied out of the fetch
	// response, as librdkafka's consumer hands them over — records a
	// stream thread processes may be kept by the user's code, which must
	// not pin a whole response. A restore writes them to its store at
	// once and needs no copy.
	own bool
	// maxBytes and partBytes bound a fetch response and a partition's
	// share of it (fetchMaxBytes, fetchPartitionBytes unless set); wait is
	// how long the brokers may hold a fetch that has nothing to return.
	maxBytes, partBytes int32
	wait                time.Duration

	mu     sync.Mutex // guards cancel and done against Close racing Assign
	cancel context.CancelFunc
	done   chan struct{}
	chunks chan chunk

	// Owned by the caller's goroutine: the chunk being read (its records
	// before at were returned), the position of every assigned partition
	// as of the last chunk taken, and high watermarks from the responses.
	cur chunk
	at  int
	pos map[kclient.TP]int64
	hwm map[kclient.TP]int64
}

// chunk is what one fetch response gave for one partition: its records
// (possibly none), the offset to fetch next and the partition's high
// watermark, or an error to report.
type chunk struct {
	tp   kclient.TP
	recs []rt.RawRecord
	next int64
	hwm  int64
	err  error
}

// NewReader makes a kclient.Reader on c that sends its own fetch requests.
func NewReader(c franz.ClientConfig) (kclient.Reader, error) { return newFetcher(c) }

func newFetcher(c franz.ClientConfig) (*fetcher, error) {
	opts := append(append([]kgo.Opt{}, c.Conn()...), kgo.RetryTimeout(fetchRequestTimeout))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating a fetcher: %w", err)
	}
	f := &fetcher{cl: cl, readCommitted: c.ReadCommitted(), decompressor: kgo.DefaultDecompressor(),
		maxBytes: fetchMaxBytes, partBytes: fetchPartitionBytes, wait: fetchMaxWait, pos: map[kclient.TP]int64{}, hwm: map[kclient.TP]int64{}}
	f.sizes(c)
	return f, nil
}

// sizes applies the fetch sizes and wait the configuration sets.
func (f *fetcher) sizes(c franz.ClientConfig) {
	maxBytes, partBytes, wait := c.FetchSizes()
	if maxBytes > 0 {
		f.maxBytes = maxBytes
	}
	if partBytes > 0 {
		f.partBytes = partBytes
	}
	if wait > 0 {
		f.wait = wait
	}
}

func (f *fetcher) Assign(offsets map[kclient.TP]int64) error {
	for tp, off := range offsets {
		if off < 0 && !f.own {
			return fmt.Errorf("reading %s: the changelog reader needs an offset, got %d", tp, off)
		}
	}
	f.stop()
	f.pos = make(map[kclient.TP]int64, len(offsets))
	next := make(map[kclient.TP]int64, len(offsets))
	for tp, off := range offsets {
		f.pos[tp], next[tp] = off, off
	}
	for tp := range f.hwm {
		if _, ok := offsets[tp]; !ok {
			delete(f.hwm, tp)
		}
	}
	f.cur, f.at = chunk{}, 0
	if len(next) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.mu.Lock()
	f.cancel, f.done, f.chunks = cancel, make(chan struct{}), make(chan chunk, fetchQueue)
	done, chunks := f.done, f.chunks
	f.mu.Unlock()
	go f.run(ctx, next, chunks, done)
	return nil
}

// stop ends the fetch loop, if one runs, and waits for it.
func (f *fetcher) stop() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel, f.done, f.chunks = nil, nil, nil
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (f *fetcher) Poll(timeout time.Duration) (*rt.RawRecord, error) {
	var expire <-chan time.Time
	for {
		if f.at < len(f.cur.recs) {
			r := &f.cur.recs[f.at]
			f.at++
			if f.at == len(f.cur.recs) {
				f.pos[f.cur.tp] = f.cur.next
			}
			return r, nil
		}
		if f.chunks == nil {
			return nil, nil
		}
		var c chunk
		select {
		case c = <-f.chunks:
		default:
			if timeout <= 0 {
				return nil, nil
			}
			if expire == nil {
				t := time.NewTimer(timeout)
				defer t.Stop()
				expire = t.C
			}
			select {
			case c = <-f.chunks:
			case <-expire:
				return nil, nil
			}
		}
		if c.err != nil {
			return nil, c.err
		}
		f.cur, f.at = c, 0
		f.hwm[c.tp] = c.hwm
		if len(c.recs) == 0 {
			f.pos[c.tp] = c.next
		}
	}
}

func (f *fetcher) Position(tps []kclient.TP) (map[kclient.TP]int64, error) {
	out := make(map[kclient.TP]int64, len(tps))
	for _, tp := range tps {
		off, ok := f.position(tp)
		if !ok {
			return nil, fmt.Errorf("position of %s: not assigned", tp)
		}
		out[tp] = off
	}
	return out, nil
}

// position is tp's next offset to read: past the records Poll returned
// (within the chunk being read, past the last one returned). A partition
// whose start offset is not resolved yet has the negative offset it was
// assigned.
func (f *fetcher) position(tp kclient.TP) (int64, bool) {
	if f.at > 0 && f.at < len(f.cur.recs) && f.cur.tp == tp {
		return f.cur.recs[f.at-1].Offset + 1, true
	}
	off, ok := f.pos[tp]
	return off, ok
}

// highWatermark is tp's end as the last response taken said (the last
// stable offset when reading committed records; -1 unknown).
func (f *fetcher) highWatermark(tp kclient.TP) int64 {
	if h, ok := f.hwm[tp]; ok {
		return h
	}
	return -1
}

// caughtUp tells whether every record of tp up to its end as the last
// response taken said was returned (false while the end is unknown).
func (f *fetcher) caughtUp(tp kclient.TP) bool {
	end, ok := f.hwm[tp]
	if !ok || end < 0 {
		return false
	}
	pos, ok := f.position(tp)
	return ok && pos >= end
}

func (f *fetcher) Close() error {
	f.stop()
	f.cl.Close()
	return nil
}

// run fetches from each partition's leader until ctx ends, handing each
// partition's share of a response to the caller in order. Errors are
// handed over too (one per failed round, then a pause that grows to a
// second): transient ones for the caller to report while the loop goes on,
// others for it to give up on.
func (f *fetcher) run(ctx context.Context, next map[kclient.TP]int64, chunks chan<- chunk, done chan struct{}) {
	defer close(done)
	var leaders map[kclient.TP]int32
	var pending <-chan []fetchResult // the fetch in flight, if any
	// told is each partition's end as last handed to the caller: an
	// empty share is handed over when it says the end moved, so that the
	// caller knows whether a partition it has no records of is caught up.
	told := map[kclient.TP]int64{}
	pause := 50 * time.Millisecond
	fail := func(err error) bool {
		select {
		case chunks <- chunk{err: err}:
		case <-ctx.Done():
			return false
		}
		t := time.NewTimer(pause)
		defer t.Stop()
		pause = min(2*pause, time.Second)
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		if err := f.resolve(ctx, next, nil); err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		if leaders == nil {
			l, err := f.leaders(ctx, next)
			if err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			leaders = l
		}
		if pending == nil {
			pending = f.startFetch(ctx, leaders, next)
		}
		var resps []fetchResult
		select {
		case resps = <-pending:
		case <-ctx.Done():
			return
		}
		pending = nil
		// First what each partition's share says about itself, and where
		// the next fetch starts: from the batches' headers alone, so that
		// it is in flight while the records are decoded.
		type share struct {
			tp       kclient.TP
			p        *kmsg.FetchResponseTopicPartition
			from, to int64
		}
		var shares []share
		var failed error
		var outOfRange []kclient.TP
		for _, r := range resps {
			if r.err != nil {
				failed = r.err
				continue
			}
			for _, t := range r.resp.Topics {
				for i := range t.Partitions {
					p := &t.Partitions[i]
					tp := kclient.TP{Topic: t.Topic, Partition: p.Partition}
					from, ok := next[tp]
					if !ok {
						continue
					}
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						if errors.Is(err, kerr.OffsetOutOfRange) && f.own {
							outOfRange = append(outOfRange, tp)
							continue
						}
						failed = franz.PartitionErr(tp, from, err)
						continue
					}
					shares = append(shares, share{tp, p, from, nextOffset(p.RecordBatches, from)})
				}
			}
		}
		if failed == nil && len(outOfRange) == 0 {
			after := maps.Clone(next)
			for _, sh := range shares {
				after[sh.tp] = sh.to
			}
			pending = f.startFetch(ctx, leaders, after)
		}
		for _, sh := range shares {
			recs, to, err := f.decode(sh.tp, sh.p, sh.from)
			if to != sh.to {
				pending = nil // fetching from elsewhere than the records end
			}
			if err != nil {
				failed = fmt.Errorf("reading %s at offset %d: %w", sh.tp, sh.from, err)
				continue
			}
			end := sh.p.HighWatermark
			if f.readCommitted && sh.p.LastStableOffset >= 0 {
				end = sh.p.LastStableOffset
			}
			if e, ok := told[sh.tp]; ok && e == end && to <= sh.from && len(recs) == 0 {
				continue // nothing new, not even where the partition ends
			}
			told[sh.tp] = end
			next[sh.tp] = to
			select {
			case chunks <- chunk{tp: sh.tp, recs: recs, next: to, hwm: end}:
			case <-ctx.Done():
				return
			}
		}
		if len(outOfRange) > 0 {
			// Reset as each partition's policy says, and say so: the
			// caller counts and reports every reset.
			from := maps.Clone(next)
			if err := f.resolve(ctx, next, outOfRange); err != nil {
				failed = err
			} else {
				starts := map[kclient.TP]int64{}
				for _, tp := range outOfRange {
					starts[tp] = -2
				}
				earliest, err := f.listOffsets(ctx, starts)
				if err != nil {
					earliest = nil // reported without it
				}
				for _, tp := range outOfRange {
					reset := &kclient.OffsetReset{TP: tp, Policy: f.policy(tp), From: from[tp], To: next[tp], Earliest: -1}
					if e, ok := earliest[tp]; ok {
						reset.Earliest = e
					}
					select {
					case chunks <- chunk{err: reset}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
		if failed != nil {
			pending = nil
			leaders = nil // look the leaders up again: one may have moved
			if !fail(failed) {
				return
			}
			continue
		}
		pause = 50 * time.Millisecond
	}
}

// startFetch sends, to each partition's leader, a fetch of its partitions
// from the offsets in next (copied: the caller may change next meanwhile),
// and returns where the responses arrive, all at once. Nothing need read
// them: a fetch whose results are no longer wanted ends by itself.
func (f *fetcher) startFetch(ctx context.Context, leaders map[kclient.TP]int32, next map[kclient.TP]int64) <-chan []fetchResult {
	offsets := maps.Clone(next)
	byLeader := map[int32][]kclient.TP{}
	for tp := range offsets {
		byLeader[leaders[tp]] = append(byLeader[leaders[tp]], tp)
	}
	out := make(chan []fetchResult, 1)
	go func() {
		resps := make([]fetchResult, 0, len(byLeader))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for leader, tps := range byLeader {
			wg.Go(func() {
				resp, err := f.fetch(ctx, leader, tps, offsets)
				mu.Lock()
				resps = append(resps, fetchResult{resp, err})
				mu.Unlock()
			})
		}
		wg.Wait()
		out <- resps
	}()
	return out
}

// policy is tp's offset reset policy.
func (f *fetcher) policy(tp kclient.TP) kclient.Reset {
	if r, ok := f.resets[tp.Topic]; ok {
		return r
	}
	return f.reset
}

// resolve replaces, in next, every negative offset and the offsets of
// reset (out of range) by the offsets they stand for: the log start for
// OffsetEarliest, else where the partition's reset policy says. Under the
// policy none it fails with an *OffsetOutOfRange.
func (f *fetcher) resolve(ctx context.Context, next map[kclient.TP]int64, reset []kclient.TP) error {
	want := map[kclient.TP]int64{} // partition → ListOffsets timestamp (-2 start, -1 end)
	var refused []kclient.TP
	now := time.Now()
	byPolicy := func(tp kclient.TP) {
		switch r := f.policy(tp); r.Policy {
		case kclient.ResetEarliest:
			want[tp] = -2
		case kclient.ResetLatest:
			want[tp] = -1
		case kclient.ResetByDuration:
			want[tp] = now.Add(-r.Back).UnixMilli()
		default:
			refused = append(refused, tp)
		}
	}
	for tp, off := range next {
		switch {
		case off == kclient.OffsetEarliest:
			want[tp] = -2
		case off < 0:
			byPolicy(tp)
		}
	}
	for _, tp := range reset {
		byPolicy(tp)
	}
	if len(refused) > 0 {
		tp := refused[0]
		ends := map[kclient.TP]int64{tp: -2}
		earliest, err := f.listOffsets(ctx, ends)
		if err != nil {
			return err
		}
		ends[tp] = -1
		latest, err := f.listOffsets(ctx, ends)
		if err != nil {
			return err
		}
		return &kclient.OffsetOutOfRange{TP: tp, Offset: next[tp], Earliest: earliest[tp], Latest: latest[tp]}
	}
	if len(want) == 0 {
		return nil
	}
	got, err := f.listOffsets(ctx, want)
	if err != nil {
		return err
	}
	// A time after the partition's last record: its end.
	ends := map[kclient.TP]int64{}
	for tp, ts := range want {
		if ts >= 0 && got[tp] < 0 {
			ends[tp] = -1
		}
	}
	if len(ends) > 0 {
		end, err := f.listOffsets(ctx, ends)
		if err != nil {
			return err
		}
		maps.Copy(got, end)
	}
	for tp := range want {
		off, ok := got[tp]
		if !ok || off < 0 {
			return fmt.Errorf("%w: no offset known for %s", kclient.ErrTransient, tp)
		}
		next[tp] = off
	}
	return nil
}

// listOffsets asks the partitions' leaders for the offsets of want's
// timestamps (-2 the log start, -1 its end, else the first record at or
// after that time; -1 when none is).
func (f *fetcher) listOffsets(ctx context.Context, want map[kclient.TP]int64) (map[kclient.TP]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if f.readCommitted {
		req.IsolationLevel = 1
	}
	topics, parts := franz.ByTopic(slices.Collect(maps.Keys(want)))
	for _, topic := range topics {
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = topic
		for _, tp := range parts[topic] {
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition = tp.Partition
			p.Timestamp = want[tp]
			t.Partitions = append(t.Partitions, p)
		}
		req.Topics = append(req.Topics, t)
	}
	rctx, cancel := context.WithTimeout(ctx, fetchRequestTimeout)
	defer cancel()
	resp, err := req.RequestWith(rctx, f.cl) // the client sends each partition to its leader
	if err != nil {
		return nil, franz.ClassifyErr("looking up partition offsets", err)
	}
	got := map[kclient.TP]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			tp := kclient.TP{Topic: t.Topic, Partition: p.Partition}
			if _, ok := want[tp]; !ok {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, franz.PartitionErr(tp, -1, err)
			}
			got[tp] = p.Offset
		}
	}
	for tp := range want {
		if _, ok := got[tp]; !ok {
			return nil, fmt.Errorf("%w: no offset known for %s", kclient.ErrTransient, tp)
		}
	}
	return got, nil
}

type fetchResult struct {
	resp *kmsg.FetchResponse
	err  error
}

func (f *fetcher) isolation() kgo.IsolationLevel {
	if f.readCommitted {
		return kgo.ReadCommitted()
	}
	return kgo.ReadUncommitted()
}

// fetch sends one fetch request for tps to their leader.
func (f *fetcher) fetch(ctx context.Context, leader int32, tps []kclient.TP, next map[kclient.TP]int64) (*kmsg.FetchResponse, error) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = int32(f.wait.Milliseconds())
	req.MinBytes = 1
	req.MaxBytes = f.maxBytes
	if f.readCommitted {
		req.IsolationLevel = 1
	}
	topics, parts := franz.ByTopic(tps)
	for _, topic := range topics {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for _, tp := range parts[topic] {
			p := kmsg.NewFetchRequestTopicPartition()
			p.Partition = tp.Partition
			p.FetchOffset = next[tp]
			p.PartitionMaxBytes = f.partBytes
			rt.Partitions = append(rt.Partitions, p)
		}
		req.Topics = append(req.Topics, rt)
	}
	rctx, cancel := context.WithTimeout(ctx, fetchRequestTimeout)
	defer cancel()
	resp, err := f.cl.Broker(int(leader)).RetriableRequest(rctx, req)
	if err != nil {
		return nil, franz.ClassifyErr(fmt.Sprintf("fetching from broker %d", leader), err)
	}
	return resp.(*kmsg.FetchResponse), nil
}

// leaders looks up the leader of every partition in next.
func (f *fetcher) leaders(ctx context.Context, next map[kclient.TP]int64) (map[kclient.TP]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	seen := map[string]bool{}
	for tp := range next {
		if !seen[tp.Topic] {
			seen[tp.Topic] = true
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(tp.Topic)
			req.Topics = append(req.Topics, t)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, fetchRequestTimeout)
	defer cancel()
	resp, err := req.RequestWith(rctx, f.cl)
	if err != nil {
		return nil, franz.ClassifyErr("looking up partition leaders", err)
	}
	out := make(map[kclient.TP]int32, len(next))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, franz.PartitionErr(kclient.TP{Topic: *t.Topic, Partition: -1}, -1, err)
		}
		for _, p := range t.Partitions {
			tp := kclient.TP{Topic: *t.Topic, Partition: p.Partition}
			if _, ok := next[tp]; !ok {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && p.Leader < 0 {
				return nil, franz.PartitionErr(tp, -1, err)
			}
			out[tp] = p.Leader
		}
	}
	for tp := range next {
		if l, ok := out[tp]; !ok || l < 0 {
			return nil, fmt.Errorf("%w: no leader known for %s", kclient.ErrTransient, tp)
		}
	}
	return out, nil
}

// decode returns the records of one partition's share of a fetch response
// from offset from on, and the offset to fetch next.
func (f *fetcher) decode(tp kclient.TP, p *kmsg.FetchResponseTopicPartition, from int64) ([]rt.RawRecord, int64, error) {
	d := batchDecoder{topic: tp.Topic, partition: tp.Partition, readCommitted: f.readCommitted, own: f.own, decompressor: f.decompressor}
	recs, to, err := d.decode(nil, p, from)
	if !errors.Is(err, errOldFormat) {
		return recs, to, err
	}
	fp, to := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset: from, IsolationLevel: f.isolation(), Topic: tp.Topic, Partition: tp.Partition,
	}, p, f.decompressor, nil)
	return rawRecords(fp.Records, f.own), to, fp.Err
}

// rawRecords converts a fetch's records, in one allocation; keys and
// values stay in the response's buffer unless own, when each record's key
// and value get one allocation of their own.
func rawRecords(recs []*kgo.Record, own bool) []rt.RawRecord {
	out := make([]rt.RawRecord, len(recs))
	for i, r := range recs {
		out[i] = rt.RawRecord{
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli(),
		}
		if own {
			out[i].Key, out[i].Value = ownBytes(r.Key, r.Value)
		}
		if len(r.Headers) > 0 {
			hs := make(processor.Headers, len(r.Headers))
			for j, h := range r.Headers {
				hs[j] = processor.Header{Key: h.Key, Value: h.Value}
			}
			out[i].Headers = hs
		}
	}
	return out
}
