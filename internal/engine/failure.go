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
//   - A failed commit under exactly-once aborts the transaction and rewinds
//     to the last commit (abortAndRewind); under at-least-once a failed
//     offset commit is only logged (the records are processed again).
//   - Anything else stops the app: Run returns it.

// errRejoin ends a thread's group session so it starts a new one with new
// clients: what a fenced producer or a fatal client error needs.
var errRejoin = errors.New("engine: rejoining the group with new clients")

// isFatalClient reports whether err makes the thread's clients unusable.
func isFatalClient(err error) bool {
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
	switch {
	case isFatalClient(err):
		return fmt.Errorf("%w: %v", errRejoin, err)
	case th.cfg.ExactlyOnce:
		th.log.Warn("transaction failed; aborting", zap.Error(err))
		return th.abortAndRewind(err)
	}
	return err
}
