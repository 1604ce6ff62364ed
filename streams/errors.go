package streams

import (
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// RecordError describes a record that failed: where (deserializing it, in
// a processor — an error returned or a panic recovered — or serializing
// output), in which task and node, the input record's topic, partition,
// offset, key and value bytes, and the error. Its Error method names all of
// it.
type RecordError = processor.RecordError

// ErrorKind says at which stage a record failed.
type ErrorKind = processor.ErrorKind

// The stages a record can fail at.
const (
	DeserializationError = processor.DeserializationError
	ProcessingError      = processor.ProcessingError
	ProductionError      = processor.ProductionError
)

// ErrorAction is what an ErrorHandler decides for a failed record.
type ErrorAction = processor.ErrorAction

// The actions.
const (
	// Fail stops the app; Run returns the RecordError, which names the
	// record.
	Fail = processor.Fail
	// Continue skips the record: it is counted (metrics, Counters) and
	// logged at Warn.
	Continue = processor.Continue
	// DeadLetter writes the input record's key and value bytes, unchanged,
	// to Config.DeadLetterTopic — in the same transaction as the task's
	// other output under exactly-once — with the headers of Kafka Streams'
	// KIP-1034 (HeaderErrorClass … HeaderErrorOffset), and continues.
	DeadLetter = processor.DeadLetter
)

// Dead-letter record headers (Kafka Streams' KIP-1034 names).
const (
	HeaderErrorClass     = processor.HeaderErrorClass
	HeaderErrorMessage   = processor.HeaderErrorMessage
	HeaderErrorTopic     = processor.HeaderErrorTopic
	HeaderErrorPartition = processor.HeaderErrorPartition
	HeaderErrorOffset    = processor.HeaderErrorOffset
)

// ErrorHandler decides what happens to a failed record. It runs on the
// stream thread that hit the error and must not block.
type ErrorHandler func(e *RecordError) ErrorAction

// Always returns a handler that answers action for every error.
func Always(action ErrorAction) ErrorHandler {
	return func(*RecordError) ErrorAction { return action }
}

// handlers combines the per-stage handlers of c (nil: Fail) into the
// runtime's.
func (c *Config) handlers() rt.Handlers {
	byKind := map[ErrorKind]ErrorHandler{
		DeserializationError: c.DeserializationErrors,
		ProcessingError:      c.ProcessingErrors,
		ProductionError:      c.ProductionErrors,
	}
	return rt.Handlers{
		DeadLetterTopic: c.DeadLetterTopic,
		Handle: func(e *RecordError) ErrorAction {
			if h := byKind[e.Kind]; h != nil {
				return h(e)
			}
			return Fail
		},
	}
}

// ErrAuthentication is wrapped by the error Run returns when a client could
// not log in to the cluster: SASL credentials or mechanism refused, or a
// TLS handshake that failed (an untrusted broker certificate). It is not
// retried.
var ErrAuthentication = kclient.ErrAuthentication

// ErrAuthorization is wrapped by the error Run returns when the cluster's
// ACLs deny an operation the app needs; the error names the operation and
// the resource ("WRITE on topic \"totals\""). It is not retried. The
// README's Security section lists the ACLs an app needs.
var ErrAuthorization = kclient.ErrAuthorization
