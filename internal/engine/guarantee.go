package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/eddy-go/eddy/internal/kclient"
)

// guarantee is the one place the processing guarantee branches: what a
// thread does around the records it sends between two commits. Exactly-once
// sends them in a transaction that also carries the input offsets;
// at-least-once waits for their acknowledgements, then commits the offsets.
type guarantee interface {
	// beforeSend runs before each record is sent: exactly-once opens the
	// transaction the record belongs to.
	beforeSend() error
	// commit makes the records sent since the last commit durable, and the
	// input offsets with them. An error means nothing may be assumed
	// committed (failure.go decides what the thread does).
	commit(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string) error
	// abort drops what was sent since the last commit where the guarantee
	// can take it back (exactly-once aborts the transaction) and forgets
	// delivery failures. An error means the producer is unusable.
	abort(ctx context.Context) error
	// pending reports whether a transaction is open.
	pending() bool
}

func newGuarantee(exactlyOnce bool, p kclient.Producer, c kclient.Consumer) guarantee {
	if exactlyOnce {
		return &exactlyOnceCommits{p: p, c: c}
	}
	return &atLeastOnceCommits{p: p, c: c}
}

// exactlyOnceCommits: one transaction per commit interval (KIP-447: the
// consumer's group metadata goes with the offsets, so a zombie's commit is
// fenced).
type exactlyOnceCommits struct {
	p    kclient.Producer
	c    kclient.Consumer
	open bool
}

func (g *exactlyOnceCommits) beforeSend() error {
	if g.open {
		return nil
	}
	if err := g.p.BeginTransaction(); err != nil {
		var te *kclient.TxnError
		if errors.As(err, &te) && te.Fatal {
			return fmt.Errorf("%w: %v", kclient.ErrFatal, err)
		}
		return err
	}
	g.open = true
	return nil
}

func (g *exactlyOnceCommits) commit(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	if err := g.p.Flush(ctx); err != nil {
		return fmt.Errorf("producer flush failed: %w", err)
	}
	if err := g.beforeSend(); err != nil {
		return err
	}
	if len(offsets) > 0 {
		gm, err := g.c.GroupMetadata()
		if err != nil {
			return err
		}
		if err := g.p.SendOffsets(ctx, offsets, meta, gm); err != nil {
			return err
		}
	}
	if err := g.p.CommitTransaction(ctx); err != nil {
		return err
	}
	g.open = false
	return nil
}

func (g *exactlyOnceCommits) abort(ctx context.Context) error {
	defer g.p.DeliveryErr()
	if !g.open {
		return nil
	}
	err := g.p.AbortTransaction(ctx)
	g.open = false
	var te *kclient.TxnError
	if err != nil && (!errors.As(err, &te) || te.Fatal) {
		return err
	}
	return nil
}

func (g *exactlyOnceCommits) pending() bool { return g.open }

// atLeastOnceCommits: records acknowledged first, then the offsets
// committed; a failed offset commit only means records are processed again.
type atLeastOnceCommits struct {
	p kclient.Producer
	c kclient.Consumer
}

func (g *atLeastOnceCommits) beforeSend() error { return nil }

func (g *atLeastOnceCommits) commit(ctx context.Context, offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	if err := g.p.Flush(ctx); err != nil {
		return fmt.Errorf("producing records failed: %w", err)
	}
	if err := g.p.DeliveryErr(); err != nil {
		return fmt.Errorf("producing records failed: %w", err)
	}
	if err := g.c.Commit(offsets, meta); err != nil {
		return &offsetCommitError{err}
	}
	return nil
}

func (g *atLeastOnceCommits) abort(context.Context) error {
	g.p.DeliveryErr()
	return nil
}

func (g *atLeastOnceCommits) pending() bool { return false }

// offsetCommitError: at-least-once offsets were not committed, but every
// record sent is acknowledged; the commit goes on (the records are
// processed again by the partitions' next owner).
type offsetCommitError struct{ err error }

func (e *offsetCommitError) Error() string { return "committing offsets failed: " + e.err.Error() }
func (e *offsetCommitError) Unwrap() error { return e.err }
