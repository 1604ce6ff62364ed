package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
)

// guarantee is the one place the processing guarantee branches: what a
// thread does around the records it sends between two commits. Exactly-once
// sends them in a transaction that also carries the input offsets;
// at-least-once waits for their acknowledgements, then commits the offsets.
type guarantee interface {
	// beforeSend runs before each record is sent: exactly-once opens the
	// transaction the record belongs to.
	beforeSend(ctx context.Context) error
	// sendOffsets starts committing the input offsets, before the stores'
	// caches are flushed: exactly-once adds them to the transaction while
	// the flush's records are produced (a commit's round trips and its
	// flush overlap); at-least-once commits them in commit, once the
	// records are acknowledged. commit and abort wait for what it started.
	sendOffsets(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string) error
	// offsetsSent waits for what sendOffsets started and returns its
	// error (nil if nothing was started or it was already awaited).
	offsetsSent() error
	// commit makes the records sent since the last commit durable, and the
	// input offsets with them. It returns where each changelog partition
	// written since the last commit ends now, for the stores' stored
	// offsets; a partition whose end is not known is missing. An error
	// means nothing may be assumed committed (failure.go decides what the
	// thread does), except that an *offsetCommitError says the records
	// were acknowledged.
	commit(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string, written map[kclient.TP]*changelogRef) (ends map[kclient.TP]int64, err error)
	// knowEnds tells commit where changelog partitions end (read at an
	// assignment, before its tasks write); forgetEnds forgets what commit
	// knows of them: the thread's tasks changed, and other members may
	// have written them.
	knowEnds(ends map[kclient.TP]int64)
	forgetEnds()
	// abort drops what was sent since the last commit where the guarantee
	// can take it back (exactly-once aborts the transaction) and forgets
	// delivery failures. An error means the producer is unusable.
	abort(ctx context.Context) error
	// pending reports whether a transaction is open.
	pending() bool
}

// retryFunc retries op while it fails with transient errors (health.go).
type retryFunc func(ctx context.Context, what string, op func() error) error

// logEndsFunc returns the partitions' ends (high watermarks) as the
// brokers see them.
type logEndsFunc func(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, error)

func newGuarantee(exactlyOnce bool, p kclient.Producer, c kclient.Consumer, retry retryFunc, logEnds logEndsFunc, w *watch) guarantee {
	if exactlyOnce {
		return &exactlyOnceCommits{p: p, c: c, retry: retry, logEnds: logEnds, ends: map[kclient.TP]int64{}, watch: w}
	}
	return &atLeastOnceCommits{p: p, c: c, watch: w}
}

// exactlyOnceCommits: one transaction per commit interval (KIP-447: the
// consumer's group metadata goes with the offsets, so a zombie's commit is
// fenced).
type exactlyOnceCommits struct {
	p     kclient.Producer
	c     kclient.Consumer
	retry retryFunc
	open  bool
	sent  chan error // SendOffsets under way (sendOffsets), until awaited
	// ends: where the changelog partitions this thread wrote end, as far
	// as known (changelogEnds).
	ends    map[kclient.TP]int64
	logEnds logEndsFunc
	// watch: the thread's, marked at each wait of a commit.
	watch *watch
}

func (g *exactlyOnceCommits) beforeSend(ctx context.Context) error {
	if g.open {
		return nil
	}
	// librdkafka begins a transaction locally; a client that asks the
	// brokers (the test double does) is retried through an outage.
	if err := g.retry(ctx, "beginning a transaction", g.p.BeginTransaction); err != nil {
		var te *kclient.TxnError
		if errors.As(err, &te) && te.Fatal {
			return fmt.Errorf("%w: %w", kclient.ErrFatal, err)
		}
		return err
	}
	g.open = true
	return nil
}

// sendOffsets sends the offsets on a goroutine of its own: librdkafka
// takes the records the flush produces meanwhile (only other transactional
// calls must wait for it, and commit and abort do).
func (g *exactlyOnceCommits) sendOffsets(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	if len(offsets) == 0 {
		return nil
	}
	if err := g.beforeSend(ctx); err != nil {
		return err
	}
	gm, err := g.c.GroupMetadata()
	if err != nil {
		return err
	}
	g.sent = make(chan error, 1)
	go func(sent chan<- error) {
		// A call that timed out (the coordinator unreachable) may be made
		// again: librdkafka resumes it.
		sent <- g.retry(ctx, "sending offsets to the transaction", func() error {
			return attempt(ctx, func(c context.Context) error { return g.p.SendOffsets(c, offsets, meta, gm) })
		})
	}(g.sent)
	// Let the goroutine make its call now: this goroutine goes on to flush
	// the caches, and with every P busy (the sender enqueuing, the
	// client's poller) the new goroutine otherwise waits for this one's
	// time slice to end. Measured on the windowed benchmark under
	// exactly-once: the call started 0.75-1.5 ms (p50) and 5.5-6 ms (p90)
	// after the go statement; with the yield, 0.01 ms and under 1 ms.
	runtime.Gosched()
	return nil
}

func (g *exactlyOnceCommits) offsetsSent() error {
	if g.sent == nil {
		return nil
	}
	err := <-g.sent
	g.sent = nil
	return err
}

// commit needs no flush of its own: CommitTransaction sends every record
// of the transaction at once and fails (abortably) if one was not
// delivered. The offsets went with sendOffsets.
func (g *exactlyOnceCommits) commit(ctx context.Context, _ map[kclient.TP]int64, _ map[kclient.TP]string, written map[kclient.TP]*changelogRef) (map[kclient.TP]int64, error) {
	g.watch.mark(doingSendOffsets)
	if err := g.offsetsSent(); err != nil {
		return nil, err
	}
	if err := g.beforeSend(ctx); err != nil {
		return nil, err
	}
	g.watch.mark(doingCommitTransaction)
	if err := g.retry(ctx, "committing the transaction", func() error {
		return attempt(ctx, g.p.CommitTransaction)
	}); err != nil {
		return nil, err
	}
	g.open = false
	g.watch.mark(doingChangelogEnds)
	return g.changelogEnds(ctx, written), nil
}

// changelogEnds returns where each changelog partition the committed
// transaction wrote ends now, counted rather than read from delivery
// reports (the transactional producer asks for none: a report per record
// cost an eighth of exactly-once's CPU, and the commit waited for the
// client to hand them all over). Only this thread writes a changelog
// partition while it owns the task (a zombie is fenced before this
// producer's first record), so a transaction's n records lie there one
// after the other, followed by its commit marker: a partition that ended
// at e ends at e+n+1.
//
// The count is never past the real end: the base was an end once, records
// only append, and every record counted is written once (the transaction
// committed; the producer is idempotent). What else lands there (an
// aborted transaction's records, another member's while this one did not
// own the task) only leaves it behind, and a restore from a stored offset
// behind the store replays records the store has, which changes nothing.
// To stay close, an abort and a new assignment forget the ends; an
// assignment's restore tells the ends it read (no transaction pending on
// them, before this thread writes); a partition without one asks the
// brokers once, now that the transaction is committed: the high watermark is past all its records (acknowledged
// by every in-sync replica), and it may lack the marker, which leaves the
// stored offset one behind. If the brokers do not answer, the end stays
// unknown (the stored offset stays as it was) until a later commit.
func (g *exactlyOnceCommits) changelogEnds(ctx context.Context, written map[kclient.TP]*changelogRef) map[kclient.TP]int64 {
	var unknown []kclient.TP
	for tp, ref := range written {
		if end, ok := g.ends[tp]; ok {
			g.ends[tp] = end + ref.n + 1
		} else {
			unknown = append(unknown, tp)
		}
	}
	if len(unknown) > 0 {
		if got, err := g.logEnds(ctx, unknown); err == nil {
			for _, tp := range unknown {
				if end, ok := got[tp]; ok && end >= 0 {
					g.ends[tp] = end
				}
			}
		}
	}
	ends := make(map[kclient.TP]int64, len(written))
	for tp := range written {
		if end, ok := g.ends[tp]; ok {
			ends[tp] = end
		}
	}
	return ends
}

func (g *exactlyOnceCommits) knowEnds(ends map[kclient.TP]int64) { maps.Copy(g.ends, ends) }

func (g *exactlyOnceCommits) forgetEnds() { clear(g.ends) }

func (g *exactlyOnceCommits) abort(ctx context.Context) error {
	defer g.watch.mark(g.watch.mark(doingAbort))
	defer g.p.DeliveryErr()
	g.offsetsSent() //nolint:errcheck // the transaction is aborted either way
	g.forgetEnds()
	if !g.open {
		return nil
	}
	err := g.retry(ctx, "aborting the transaction", func() error {
		return attempt(ctx, g.p.AbortTransaction)
	})
	g.open = false
	attempt(ctx, g.p.WaitDelivered) // the records still queued: forget their failures
	return err
}

// attempt runs one attempt of a call with its own timeout: librdkafka's
// transactional calls take one, and a call that ran out may be made again.
func attempt(ctx context.Context, call func(context.Context) error) error {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return call(c)
}

func (g *exactlyOnceCommits) pending() bool { return g.open }

// atLeastOnceCommits: records acknowledged first, then the offsets
// committed; a failed offset commit only means records are processed again.
type atLeastOnceCommits struct {
	p     kclient.Producer
	c     kclient.Consumer
	watch *watch
}

func (g *atLeastOnceCommits) beforeSend(context.Context) error { return nil }

func (g *atLeastOnceCommits) sendOffsets(context.Context, map[kclient.TP]int64, map[kclient.TP]string) error {
	return nil
}

func (g *atLeastOnceCommits) offsetsSent() error { return nil }

func (g *atLeastOnceCommits) commit(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string, _ map[kclient.TP]*changelogRef) (map[kclient.TP]int64, error) {
	g.watch.mark(doingAcknowledgements)
	if err := g.p.WaitDelivered(ctx); err != nil {
		return nil, fmt.Errorf("producing records failed: %w", err)
	}
	if err := g.p.DeliveryErr(); err != nil {
		return nil, fmt.Errorf("producing records failed: %w", err)
	}
	ends := endsAfter(g.p.LastOffsets(), 1)
	g.watch.mark(doingOffsetCommit)
	if err := g.c.Commit(offsets, meta); err != nil {
		return nil, &offsetCommitError{err}
	}
	return ends, nil
}

// abort: records already delivered stay written (they are processed again:
// duplicates, as at-least-once allows); those not yet delivered are purged,
// so none lands after the partitions' next owner wrote — after a broker
// restart every member of the group may have been replaced while its
// records waited in the producer's queue.
func (g *atLeastOnceCommits) abort(ctx context.Context) error {
	defer g.watch.mark(g.watch.mark(doingAbort))
	if err := g.p.Purge(); err != nil {
		return fmt.Errorf("purging undelivered records: %w", err)
	}
	g.p.WaitDelivered(ctx) // the purged records' reports: forget them
	g.p.LastOffsets()
	g.p.DeliveryErr()
	return nil
}

func (g *atLeastOnceCommits) pending() bool { return false }

// knowEnds and forgetEnds: at-least-once takes the ends from the delivery
// reports.
func (g *atLeastOnceCommits) knowEnds(map[kclient.TP]int64) {}
func (g *atLeastOnceCommits) forgetEnds()                   {}

// offsetCommitError: at-least-once offsets were not committed, but every
// record sent is acknowledged (failure.go: processing starts again from the
// last commit).
type offsetCommitError struct{ err error }

func (e *offsetCommitError) Error() string { return "committing offsets failed: " + e.err.Error() }
func (e *offsetCommitError) Unwrap() error { return e.err }

// endsAfter turns the offsets of the last records delivered into the
// partitions' ends: the last offset + n.
func endsAfter(last map[kclient.TP]int64, n int64) map[kclient.TP]int64 {
	for tp, off := range last {
		last[tp] = off + n
	}
	return last
}
