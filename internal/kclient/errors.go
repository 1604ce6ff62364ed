package kclient

import (
	"errors"
	"fmt"
)

// ErrTransient is wrapped by errors that a retry may cure: no broker
// reachable, a leader moving or coming back with a new epoch, a
// coordinator loading, a request timing out. The runtime retries calls that
// fail with it, with backoff, for as long as it takes.
var ErrTransient = errors.New("kafka: transient error")

// ErrBrokersDown is what Consumer.Poll returns when the client has lost
// every broker connection (it wraps ErrTransient; the client reconnects by
// itself).
var ErrBrokersDown = fmt.Errorf("%w: all brokers are down", ErrTransient)

// IsTransient reports whether a retry may cure err.
func IsTransient(err error) bool {
	var te *TxnError
	if errors.As(err, &te) {
		return te.Retriable && !te.Abortable && !te.Fatal
	}
	return errors.Is(err, ErrTransient)
}
