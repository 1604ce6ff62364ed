package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Broker outages are healed, not fatal: every call to the brokers that
// fails with a transient error (kclient.IsTransient) is retried with
// backoff for as long as it takes, while the thread's Health says the
// brokers are unreachable (the app's /readyz and metrics show it) and a Warn
// line is logged when the outage starts and every 20 seconds while it
// lasts — not on every retry.

// Health is what a thread knows of the brokers, readable from any
// goroutine.
type Health struct {
	flag atomic.Bool // mirrors !downSince.IsZero(), for the hot path

	mu sync.Mutex // guards the fields below
	// downSince is when calls to the brokers began to fail (zero: they
	// work); cause is the last failure.
	downSince time.Time
	cause     string
	attempts  int
	lastLog   time.Time
}

// Unreachable reports whether the brokers are unreachable, since when and
// why.
func (h *Health) Unreachable() (bool, time.Time, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.downSince.IsZero(), h.downSince, h.cause
}

// down records a failed call to the brokers.
func (h *Health) down(log *zap.Logger, what string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.attempts++
	h.cause = fmt.Sprintf("%s: %v", what, err)
	switch {
	case h.downSince.IsZero():
		h.downSince, h.lastLog, h.attempts = now, now, 1
		h.flag.Store(true)
		log.Warn("brokers unreachable; retrying until they are back", zap.String("doing", what), zap.Error(err))
	case now.Sub(h.lastLog) >= 20*time.Second:
		h.lastLog = now
		log.Warn("brokers still unreachable; retrying", zap.String("doing", what), zap.Error(err),
			zap.Duration("for", now.Sub(h.downSince).Round(time.Second)), zap.Int("attempts", h.attempts))
	}
}

// up records a call to the brokers that worked.
func (h *Health) up(log *zap.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.downSince.IsZero() {
		return
	}
	log.Info("brokers reachable again", zap.Duration("after", time.Since(h.downSince).Round(100*time.Millisecond)),
		zap.Int("attempts", h.attempts))
	h.downSince, h.cause, h.attempts = time.Time{}, "", 0
	h.flag.Store(false)
}

// isDown is a cheap check for the hot path.
func (h *Health) isDown() bool { return h.flag.Load() }

// Retry is retry for callers outside the engine (the app's start-up).
func Retry(ctx context.Context, h *Health, log *zap.Logger, what string, op func() error) error {
	return retry(ctx, h, log, what, op, nil)
}

// retry calls op until it succeeds, fails with an error a retry cannot
// cure, or ctx ends. Between attempts it waits 100 ms, doubling up to 5 s.
// onFailure, when set, runs after each transient failure with the count of
// consecutive ones (to replace a client stuck on stale metadata).
func retry(ctx context.Context, h *Health, log *zap.Logger, what string, op func() error, onFailure func(n int)) error {
	backoff := 100 * time.Millisecond
	for n := 1; ; n++ {
		err := op()
		if err == nil {
			if n > 1 {
				h.up(log)
			}
			return nil
		}
		if !kclient.IsTransient(err) {
			return err
		}
		h.down(log, what, err)
		if onFailure != nil {
			onFailure(n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// retry is the thread's retry: until the thread stops.
func (th *Thread) retry(ctx context.Context, what string, op func() error) error {
	return retry(ctx, &th.Health, th.log, what, op, nil)
}

// lazyAdmin is an admin client made on first use and replaced after
// every third failure in a row, so that one stuck on stale metadata is
// replaced (librdkafka's admin client could keep sending a stale leader
// epoch after a broker restart: FENCED_LEADER_EPOCH on every ListOffsets,
// where a new client succeeded at once). Each stream thread has its own,
// as has each global reader's loop.
type lazyAdmin struct {
	newAdmin func() (kclient.Admin, error)
	log      *zap.Logger // nil: replacements are not logged
	adm      kclient.Admin
	// failures counts the failures in a row (failed, ok).
	failures int
}

// get returns the client, making it if there is none.
func (a *lazyAdmin) get() (kclient.Admin, error) {
	if a.adm == nil {
		adm, err := a.newAdmin()
		if err != nil {
			return nil, fmt.Errorf("creating admin client: %w", err)
		}
		a.adm = adm
	}
	return a.adm, nil
}

// reset drops the client after the n-th failure in a row when n is a
// multiple of three; the next get makes a new one.
func (a *lazyAdmin) reset(n int) {
	if n%3 == 0 && a.adm != nil {
		if a.log != nil {
			a.log.Info("replacing the admin client after repeated failures", zap.Int("failures", n))
		}
		a.close()
	}
}

// failed counts a failure of a call, replacing the client every third.
func (a *lazyAdmin) failed() {
	a.failures++
	a.reset(a.failures)
}

// ok ends a run of failures.
func (a *lazyAdmin) ok() { a.failures = 0 }

// close closes the client, if any.
func (a *lazyAdmin) close() {
	if a.adm != nil {
		a.adm.Close()
		a.adm = nil
	}
}

// errShuttingDown: a call gave up because the thread is stopping.
var errShuttingDown = errors.New("engine: shutting down")

// probeEvery is how often a component that saw the brokers go away asks
// them whether they are back, when nothing else it does would tell.
const probeEvery = 2 * time.Second

// probe asks the brokers for topics' metadata when h says they are
// unreachable and the last probe is probeEvery old: an idle thread (no
// input, nothing to commit) learns that the brokers are back.
func probe(h *Health, log *zap.Logger, last *time.Time, adm func() (kclient.Admin, error), topics []string) {
	if !h.isDown() || time.Since(*last) < probeEvery {
		return
	}
	*last = time.Now()
	a, err := adm()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := a.Partitions(ctx, topics); err == nil {
		h.up(log)
	}
}
