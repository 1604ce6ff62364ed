package franz

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// Producer is a Producer on franz-go: records go straight into the
// client's buffers (at most MaxUnacked unacknowledged: Produce waits
// beyond), each with a promise that keeps the first failure and the last
// offset delivered to each partition.
//
// Transactions: the offsets of a transaction go with a TxnOffsetCommit
// carrying the group's member id and generation (KIP-447: a member the
// group has moved on from is fenced). franz-go ends a transaction only if
// it wrote a partition, so offsets sent before any record of the
// transaction are held back: at CommitTransaction they go into the
// transaction if records came meanwhile, else (no output at all) they are
// committed as the group member without a transaction.
type Producer struct {
	cl    *kgo.Client
	txnID string
	// guard refuses records the brokers would refuse, before they are
	// produced.
	guard *topicGuard

	// ctx is every record's; Purge cancels it (records not sent yet
	// fail) and makes a new one.
	ctxMu  sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	// slab: where records and their bytes are cut from (guarded by
	// ctxMu).
	slab recordSlab
	// promise is delivered, bound once (a method value per record would
	// allocate).
	promise func(*kgo.Record, error)

	inflight atomic.Int64 // records produced whose promise has not run

	mu   sync.Mutex // guards the fields below
	err  error      // the first delivery failure not yet reported
	last map[kclient.TP]int64
	wake chan struct{} // closed when inflight reaches 0
	// failed: a record of the open transaction failed (it must not
	// commit).
	failed error

	// The open transaction's, owned by the caller's goroutine except
	// txnRecords (counted by Produce, read by SendOffsets on another).
	txnRecords   atomic.Int64
	sendMu       sync.Mutex   // guards offsetsAdded and held
	offsetsAdded bool         // AddOffsetsToTxn sent
	held         *heldOffsets // SendOffsets before any record
}

// heldOffsets are offsets SendOffsets held back.
type heldOffsets struct {
	offsets map[kclient.TP]int64
	meta    map[kclient.TP]string
	gm      *franzGroupMetadata
}

// Records have no delivery timeout: franz-go measures it from the
// record's timestamp, which is event time here (records hours old would
// fail at once). During an outage they wait; WaitDelivered says the
// brokers are down, and a commit that cannot complete purges them and
// processes its records again.

// NewProducer makes a producer on conf, transactional when conf has a
// transactional.id.
func NewProducer(conf ClientConfig) (*Producer, error) {
	maxRecord := int(conf.batchMaxBytes)
	if maxRecord == 0 {
		maxRecord = 1_000_012
	}
	guard := newTopicGuard(nil, maxRecord)
	opts := append(append([]kgo.Opt{}, conf.conn...),
		// Kafka's default (franz-go's is snappy): compression.type sets one.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(kclient.MaxUnacked),
		kgo.RecordPartitioner(eddyPartitioner{}),
		kgo.ProducerLinger(10*time.Millisecond),
	)
	opts = append(opts, conf.producer...)
	// After the configuration's batch.size: the guard's limit takes it
	// into account, and a topic's max.message.bytes.
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(guard.batchMax))
	if conf.txnID != "" {
		opts = append(opts, kgo.TransactionalID(conf.txnID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kclient: creating the producer: %w", err)
	}
	guard.cl = cl
	p := &Producer{cl: cl, txnID: conf.txnID, last: map[kclient.TP]int64{}, guard: guard}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.promise = p.delivered
	return p, nil
}

// eddyPartitioner puts a record where its Partition says (≥ 0), a keyed
// one where Kafka's Java client would (murmur2 of the key), one without a
// key anywhere.
type eddyPartitioner struct{}

func (eddyPartitioner) ForTopic(string) kgo.TopicPartitioner { return eddyPartitioner{} }

func (eddyPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (eddyPartitioner) Partition(r *kgo.Record, n int) int {
	switch {
	case r.Partition >= 0:
		return int(r.Partition)
	case r.Key != nil:
		return int(kclient.KeyPartition(r.Key, int32(n)))
	}
	return rand.IntN(n)
}

// Produce returns a delivery failure a retry cannot cure (a topic the
// ACLs deny) once it is known: nothing produced after a refused record may
// be committed, so the thread stops producing. A record the brokers would
// refuse is refused here (*RecordRefused), before anything after it, and
// the producer goes on.
func (p *Producer) Produce(rec *rt.OutRecord) error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil && !kclient.IsTransient(err) {
		return err
	}
	if err := p.guard.check(rec); err != nil {
		return err
	}
	// The caller reuses its slices: the record and its bytes come from
	// the producer's slab.
	p.ctxMu.Lock()
	ctx := p.ctx
	r := p.slab.record()
	buf := p.slab.bytes(len(rec.Key) + len(rec.Value))
	p.ctxMu.Unlock()
	r.Topic, r.Partition = rec.Topic, rec.Partition
	if rec.Key != nil {
		r.Key = buf[:len(rec.Key):len(rec.Key)]
		copy(r.Key, rec.Key)
	}
	if rec.Value != nil {
		r.Value = buf[len(rec.Key):]
		copy(r.Value, rec.Value)
	}
	if rec.Timestamp >= 0 {
		r.Timestamp = time.UnixMilli(rec.Timestamp)
	}
	if len(rec.Headers) > 0 {
		r.Headers = make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			r.Headers[i] = kgo.RecordHeader{Key: h.Key}
			if h.Value != nil {
				r.Headers[i].Value = append(make([]byte, 0, len(h.Value)), h.Value...)
			}
		}
	}
	p.inflight.Add(1)
	if p.txnID != "" {
		p.txnRecords.Add(1)
	}
	p.cl.Produce(ctx, r, p.promise)
	return nil
}

// recordSlab hands out the records Produce gives franz-go, and the bytes
// they carry, from blocks of many: one allocation for slabRecords records
// and one for slabBytes bytes, instead of two a record (measured: a
// stateless thread's allocations and GC were a quarter of its CPU). A
// block lives until the last record cut from it is delivered and
// dropped. Guarded by the producer's ctxMu.
type recordSlab struct {
	recs []kgo.Record
	buf  []byte
}

const (
	slabRecords = 256
	slabBytes   = 64 << 10
)

// record returns a zero record.
func (s *recordSlab) record() *kgo.Record {
	if len(s.recs) == 0 {
		s.recs = make([]kgo.Record, slabRecords)
	}
	r := &s.recs[0]
	s.recs = s.recs[1:]
	return r
}

// bytes returns n bytes (capped at n); a large n gets its own allocation.
func (s *recordSlab) bytes(n int) []byte {
	if n > slabBytes/16 {
		return make([]byte, n)
	}
	if len(s.buf) < n {
		s.buf = make([]byte, slabBytes)
	}
	b := s.buf[:n:n]
	s.buf = s.buf[n:]
	return b
}

// recordSize is about what a record takes in a batch: its bytes and
// their framing.
func recordSize(rec *rt.OutRecord) int {
	n := len(rec.Key) + len(rec.Value) + 21 + 61 // record and batch headers
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// delivered is every record's promise.
func (p *Producer) delivered(r *kgo.Record, err error) {
	tp := kclient.TP{Topic: r.Topic, Partition: r.Partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		cause := p.recordErr(r.Topic, err)
		if p.err == nil {
			p.err = fmt.Errorf("delivery to %s failed: %w", tp, cause)
		}
		if p.txnID != "" && p.failed == nil {
			p.failed = p.err
		}
	} else if p.txnID == "" {
		if off, ok := p.last[tp]; !ok || r.Offset > off {
			p.last[tp] = r.Offset
		}
	}
	if p.inflight.Add(-1) == 0 && p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// recordErr classifies the failure of a record written to topic.
func (p *Producer) recordErr(topic string, err error) error {
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return kclient.DeniedErr(fmt.Sprintf("WRITE on topic %q", topic), err)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return kclient.DeniedErr("IDEMPOTENT_WRITE on the cluster", err)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return kclient.DeniedErr(fmt.Sprintf("WRITE on transactional id %q", p.txnID), err)
	case isFencedErr(err):
		return fmt.Errorf("%w: %w: %v", kclient.ErrFatal, kclient.ErrFenced, err)
	case refusedAfter(err):
		return fmt.Errorf("%w: %w: %v", kclient.ErrFatal, kclient.ErrRefusedLate, err)
	}
	if s := franzSecurity(err, fmt.Sprintf("WRITE on topic %q", topic)); s != nil {
		return s
	}
	return ClassifyErr("producing", err)
}

// WaitDelivered waits until every record has its answer. It does not wait
// out an outage: when no answer came for a second and no broker answers a
// ping, it returns ErrBrokersDown (the records stay queued unless the
// caller purges them).
func (p *Producer) WaitDelivered(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.mu.Lock()
		if p.inflight.Load() <= 0 {
			err := p.err
			p.mu.Unlock()
			return err
		}
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
		wake, before := p.wake, p.inflight.Load()
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d records to be acknowledged: %w", p.inflight.Load(), ctx.Err())
		case <-tick.C:
			if p.inflight.Load() < before {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err := p.cl.Ping(pctx)
			cancel()
			if err != nil {
				if s := franzSecurity(err, "connecting"); s != nil {
					return s
				}
				return fmt.Errorf("waiting for %d records to be acknowledged: %w", p.inflight.Load(), kclient.ErrBrokersDown)
			}
		}
	}
}

func (p *Producer) DeliveryErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	p.err = nil
	return err
}

func (p *Producer) LastOffsets() map[kclient.TP]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.last
	p.last = make(map[kclient.TP]int64, len(out))
	return out
}

// Purge fails every record not sent yet; those in flight get their
// answers before it returns.
func (p *Producer) Purge() error {
	p.ctxMu.Lock()
	p.cancel()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.ctxMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.cl.AbortBufferedRecords(ctx)
}

func (p *Producer) InitTransactions(ctx context.Context) error {
	_, _, err := p.cl.ProducerID(ctx)
	return p.txnError("InitTransactions", err)
}

// txnFailed returns the failure of a record of the open transaction.
func (p *Producer) txnFailed() error {
	if p.txnID == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

func (p *Producer) BeginTransaction() error {
	p.txnRecords.Store(0)
	p.mu.Lock()
	p.failed = nil
	p.mu.Unlock()
	p.sendMu.Lock()
	p.offsetsAdded, p.held = false, nil
	p.sendMu.Unlock()
	return p.txnError("BeginTransaction", p.cl.BeginTransaction())
}

func (p *Producer) SendOffsets(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string, gm any) error {
	g, ok := gm.(*franzGroupMetadata)
	if !ok {
		return &kclient.TxnError{Op: "SendOffsets", Err: fmt.Errorf("group metadata is %T", gm)}
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.txnRecords.Load() == 0 {
		p.held = &heldOffsets{offsets: offsets, meta: meta, gm: g}
		return nil
	}
	return p.sendTxnOffsets(ctx, offsets, meta, g)
}

// concurrentTxnBackoff is how soon an AddOffsetsToTxn answered
// CONCURRENT_TRANSACTIONS is sent again, for up to concurrentTxnWait: the
// coordinator answers so while it writes the previous transaction's
// markers, which takes milliseconds; the caller's retry backoff (100 ms
// and up) would hold the commit, and every task's output, that long. (The
// Java producer retries AddPartitionsToTxn after 20 ms for the same
// reason.)
const (
	concurrentTxnBackoff = 5 * time.Millisecond
	concurrentTxnWait    = time.Second
)

// addOffsetsToTxn adds group's offsets to the transaction, asking again
// while the previous transaction completes.
func addOffsetsToTxn(ctx context.Context, cl *kgo.Client, txnID string, id int64, epoch int16, group string) error {
	deadline := time.Now().Add(concurrentTxnWait)
	for {
		req := kmsg.NewPtrAddOffsetsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = txnID, id, epoch, group
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if !errors.Is(err, kerr.ConcurrentTransactions) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(concurrentTxnBackoff):
		}
	}
}

// sendTxnOffsets adds the offsets to the open transaction.
func (p *Producer) sendTxnOffsets(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string, g *franzGroupMetadata) error {
	id, epoch, err := p.cl.ProducerID(ctx)
	if err != nil {
		return p.txnError("SendOffsets", err)
	}
	// AddOffsetsToTxn first, also where the brokers run transactions
	// version 2 (KIP-890 part 2) and a TxnOffsetCommit alone would add the
	// offsets: without it, a TxnOffsetCommit sent while the previous
	// transaction's markers are still being written was answered
	// CONCURRENT_TRANSACTIONS and retried for about 2.3 s, in one commit of
	// four (stateless exactly-once, six runs each way).
	if !p.offsetsAdded {
		if err := addOffsetsToTxn(ctx, p.cl, p.txnID, id, epoch, g.group); err != nil {
			return p.txnError("AddOffsetsToTxn", err)
		}
		p.offsetsAdded = true
	}
	send := func(memberID string, generation int32) error {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = p.txnID, g.group, id, epoch
		req.Generation, req.MemberID = generation, memberID
		if g.instanceID != "" {
			req.InstanceID = &g.instanceID
		}
		topics, parts := offsetsByTopic(offsets)
		for _, t := range topics {
			ct := kmsg.NewTxnOffsetCommitRequestTopic()
			ct.Topic = t
			for _, tp := range parts[t] {
				cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				cp.Partition, cp.Offset, cp.LeaderEpoch = tp.Partition, offsets[tp], -1
				if md, ok := meta[tp]; ok {
					cp.Metadata = &md
				}
				ct.Partitions = append(ct.Partitions, cp)
			}
			req.Topics = append(req.Topics, ct)
		}
		resp, err := req.RequestWith(ctx, p.cl)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, cp := range t.Partitions {
				if err := kerr.ErrorForCode(cp.ErrorCode); err != nil {
					return fmt.Errorf("%s-%d: %w", t.Topic, cp.Partition, err)
				}
			}
		}
		return nil
	}
	if g.member != nil {
		err = g.member.commitThroughRebalance(ctx, g.memberID, g.generation, send)
	} else {
		err = send(g.memberID, g.generation)
	}
	return p.txnError("TxnOffsetCommit", err)
}

func (p *Producer) CommitTransaction(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return p.txnError("CommitTransaction", err)
	}
	if err := p.txnFailed(); err != nil {
		// A record was refused: the transaction must not commit.
		var te *kclient.TxnError
		if errors.As(err, &te) || kclient.IsSecurity(err) || errors.Is(err, kclient.ErrFatal) {
			return err
		}
		return &kclient.TxnError{Op: "CommitTransaction", Abortable: true, Err: err}
	}
	p.sendMu.Lock()
	held := p.held
	p.held = nil
	if held != nil && p.txnRecords.Load() > 0 {
		err := p.sendTxnOffsets(ctx, held.offsets, held.meta, held.gm)
		if err != nil {
			p.sendMu.Unlock()
			return err
		}
		held = nil
	}
	p.sendMu.Unlock()
	if err := p.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return p.txnError("CommitTransaction", err)
	}
	if held != nil {
		// No record at all: the offsets are the member's to commit, for
		// its generation (a zombie is refused).
		if err := held.gm.member.Commit(held.offsets, held.meta); err != nil {
			if kclient.IsSecurity(err) {
				return err
			}
			return &kclient.TxnError{Op: "CommitTransaction", Abortable: true, Err: err}
		}
	}
	return nil
}

func (p *Producer) AbortTransaction(ctx context.Context) error {
	p.sendMu.Lock()
	p.held = nil
	p.sendMu.Unlock()
	if err := p.cl.AbortBufferedRecords(ctx); err != nil {
		return p.txnError("AbortTransaction", err)
	}
	return p.txnError("AbortTransaction", p.cl.EndTransaction(ctx, kgo.TryAbort))
}

func (p *Producer) Close() {
	p.ctxMu.Lock()
	p.cancel()
	p.ctxMu.Unlock()
	p.cl.Close()
}

// isFencedErr reports whether err means a newer producer with the same
// transactional id took over.
func isFencedErr(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// txnError classifies the failure of a transactional call: a refused login
// or an operation the ACLs deny (no retry, abort or new producer cures
// them), else a TxnError.
func (p *Producer) txnError(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Errorf("%s: %w", op, kclient.DeniedErr(fmt.Sprintf("WRITE on transactional id %q", p.txnID), err))
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("%s: %w", op, kclient.DeniedErr("READ on the consumer group (committing offsets in a transaction)", err))
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Errorf("%s: %w", op, kclient.DeniedErr("WRITE on a topic the transaction wrote to", err))
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("%s: %w", op, kclient.DeniedErr("IDEMPOTENT_WRITE on the cluster", err))
	}
	if s := franzSecurity(err, op); s != nil {
		return fmt.Errorf("%s: %w", op, s)
	}
	te := &kclient.TxnError{Op: op, Err: err}
	var ke *kerr.Error
	switch {
	case isFencedErr(err), errors.Is(err, kgo.ErrClientClosed):
		te.Fatal, te.Fenced = true, isFencedErr(err)
	case errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.UnknownMemberID),
		errors.Is(err, kerr.FencedInstanceID), errors.Is(err, kerr.RebalanceInProgress),
		errors.Is(err, kerr.TransactionAbortable), errors.Is(err, kerr.OperationNotAttempted),
		errors.Is(err, kerr.InvalidTxnState), errors.Is(err, kerr.UnknownProducerID),
		errors.Is(err, kerr.InvalidProducerIDMapping):
		te.Abortable = true
	case errors.Is(err, kerr.ConcurrentTransactions), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ke) && ke.Retriable:
		te.Retriable = true
	case op == "CommitTransaction":
		// An outcome franz-go could not confirm: abort (it reloads the
		// producer id, which fences whatever is still open).
		te.Abortable = true
	default:
		te.Retriable = errors.Is(ClassifyErr(op, err), kclient.ErrTransient)
	}
	return te
}
