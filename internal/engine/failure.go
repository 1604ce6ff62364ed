package engine

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
)

// What a thread does about an error is decided here and only here:
//
//   - A bad record (unreadable, a processor's error or panic, output that
//     cannot be serialized) never reaches the thread as an error: its task
//     gives it to the configured handler (rt.Task.HandleError), which
//     continues, dead-letters or fails. Only a handler's Fail comes out of
//     a task, and it stops the app.
//   - A client that became unusable (kclient.ErrFatal: a fenced producer, a
//     fatal librdkafka error; a fatal *kclient.TxnError) ends the group
//     session: tasks close without committing and the thread rejoins with a
//     new consumer and producer (errRejoin).
//   - A call to the brokers that fails with a transient error (no broker
//     reachable, a leader moving, a coordinator loading, a timeout) is
//     retried with backoff until it works or the thread stops (health.go):
//     an outage is waited out, however long, and never ends the app.
//   - A failed commit under exactly-once aborts the transaction and rewinds
//     to the last commit (taskManager.rewind); so does, under at-least-once, a
//     record whose delivery failed transiently (it timed out while the
//     brokers were away): the records since the last commit are processed
//     again. So does a failed at-least-once offset commit: the records are
//     acknowledged, but the stores' writes are not applied.
//   - A security failure (kclient.IsSecurity: a refused login or TLS
//     handshake, an operation the ACLs deny) stops the app: Run returns the
//     error, which names the cause (for a denial, the operation and the
//     resource). Nothing but a configuration change cures it, so it is
//     neither retried nor cured by new clients.
//   - A producer fenced again and again (another instance with the same
//     process id) stops the app after ten fresh starts in five minutes.
//   - Anything else stops the app: Run returns it.

// errRejoin ends a thread's group session so it starts a new one with new
// clients: what a fenced producer or a fatal client error needs.
var errRejoin = errors.New("engine: rejoining the group with new clients")

// isFatalClient reports whether err makes the thread's clients unusable.
func isFatalClient(err error) bool {
	if kclient.IsSecurity(err) {
		return false
	}
	var te *kclient.TxnError
	return errors.Is(err, kclient.ErrFatal) || (errors.As(err, &te) && te.Fatal)
}

// rejoinIfFatal turns a failure of an unusable client (a fenced producer)
// into a rejoin with new clients; other errors stay fatal to the app.
func rejoinIfFatal(err error) error {
	if err != nil && isFatalClient(err) && !errors.Is(err, errRejoin) {
		return fmt.Errorf("%w: %w", errRejoin, err)
	}
	return err
}

// commitFailed decides what a failed commit (guarantee.commit) means; when
// it returns nil the commit is over (aborted and rewound).
func (th *Thread) commitFailed(err error) error {
	var oce *offsetCommitError
	switch {
	case kclient.IsSecurity(err):
		return err
	case isFatalClient(err):
		return fmt.Errorf("%w: %w", errRejoin, err)
	case th.cfg.ExactlyOnce:
		th.log.Warn("transaction failed; aborting", zap.Error(err))
		return th.tm.rewind(err)
	case errors.As(err, &oce):
		// At-least-once: the records are acknowledged, the offsets are
		// not committed, and the partitions may already be another
		// member's (the group moved on while the brokers were away). The
		// stores' writes are not applied: a store's stored changelog
		// offset must never pass records it does not hold, and another
		// owner may have written the changelog meanwhile (seen: a member
		// back from an outage stored the end past the new owner's
		// records, later restored from there and skipped them — counts
		// lost). Processing starts again from the last commit.
		th.log.Warn("committing offsets failed; processing again from the last commit", zap.Error(err))
		return th.tm.rewind(err)
	case kclient.IsTransient(err):
		th.log.Warn("records not delivered; processing again from the last commit", zap.Error(err))
		return th.tm.rewind(err)
	}
	return err
}
