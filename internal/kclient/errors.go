package kclient

import (
	"errors"
	"fmt"

	"github.com/eddy-go/eddy/internal/rt"
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

// RecordRefused is the error of a record the brokers would refuse: its
// topic does not exist, it is larger than the topic takes
// (max.message.bytes) or than a batch holds, or it has no key for a
// compacted topic. errors.Is(err, rt.ErrRecordRefused) holds. (A topic
// the ACLs do not let the producer write is no bad record but a security
// error: every record is refused alike.)
type RecordRefused struct {
	Topic string
	// Reason says why, with the numbers.
	Reason string
	// Err is the error the brokers would answer (kerr.MessageTooLarge,
	// kerr.UnknownTopicOrPartition, …).
	Err error
}

func (e *RecordRefused) Error() string {
	return fmt.Sprintf("record for topic %q refused: %s", e.Topic, e.Reason)
}

// Unwrap returns the brokers' error and rt.ErrRecordRefused.
func (e *RecordRefused) Unwrap() []error { return []error{rt.ErrRecordRefused, e.Err} }
