package rt

// Record errors: the handler decision for a failed record (fail, continue
// with a count, dead-letter), the record-error types under the runtime's
// names, and panics in user code turned into errors.

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
)

// The record-error types are public, in package processor; the runtime
// uses them under these names.
type (
	ErrorKind   = processor.ErrorKind
	ErrorAction = processor.ErrorAction
	RecordError = processor.RecordError
)

// The record-error kinds and handler actions, under the runtime's names.
const (
	ErrDeserialization = processor.DeserializationError
	ErrProcessing      = processor.ProcessingError
	ErrProduction      = processor.ProductionError

	ActionFail       = processor.Fail
	ActionContinue   = processor.Continue
	ActionDeadLetter = processor.DeadLetter
)

// ErrRecordRefused marks output the brokers would refuse (processor's): a
// collector's error wrapping it is a bad record, for the production error
// handler.
var ErrRecordRefused = processor.ErrRecordRefused

// Handlers decide what happens to failed records. A nil handler fails.
type Handlers struct {
	Handle func(e *RecordError) ErrorAction
	// DeadLetterTopic receives records the handler dead-letters.
	DeadLetterTopic string
}

// Dead-letter headers (processor's).
const (
	HeaderErrorClass     = processor.HeaderErrorClass
	HeaderErrorMessage   = processor.HeaderErrorMessage
	HeaderErrorTopic     = processor.HeaderErrorTopic
	HeaderErrorPartition = processor.HeaderErrorPartition
	HeaderErrorOffset    = processor.HeaderErrorOffset
)

// HandleError routes a failed record to the handlers: Continue counts and
// logs it, DeadLetter also writes its bytes to the dead-letter topic, Fail
// (the default) makes the task fail with it (Process and Flush then return
// the error).
func (t *Task) HandleError(kind ErrorKind, node string, err error) {
	e := &RecordError{Kind: kind, Task: t.id, Node: node, Offset: -1, Timestamp: t.cur.timestamp, Err: err}
	if t.inRecord {
		e.Topic, e.Partition, e.Offset = t.cur.meta.Topic, t.cur.meta.Partition, t.cur.meta.Offset
		if t.curRaw != nil {
			e.Key, e.Value = t.curRaw.Key, t.curRaw.Value
		}
	}
	action := ActionFail
	if errors.Is(err, serde.ErrSetup) {
		// Not the record's fault (a registry refusing the credentials):
		// every record would fail alike.
		t.fail(e)
		return
	}
	if t.cfg.Handlers.Handle != nil {
		action = t.cfg.Handlers.Handle(e)
	}
	switch action {
	case ActionContinue:
		t.Counters.Skipped.Add(1)
		t.Log.Warn("skipping a failed record", zap.Error(e), zap.String("topic", e.Topic),
			zap.Int32("partition", e.Partition), zap.Int64("offset", e.Offset))
	case ActionDeadLetter:
		if t.cfg.Handlers.DeadLetterTopic == "" || !t.inRecord {
			t.fail(fmt.Errorf("%w (dead-letter asked, but no dead-letter topic or no input record)", e))
			return
		}
		t.Counters.DeadLettered.Add(1)
		t.Log.Warn("dead-lettering a failed record", zap.Error(e), zap.String("topic", e.Topic),
			zap.Int32("partition", e.Partition), zap.Int64("offset", e.Offset), zap.String("dead_letter_topic", t.cfg.Handlers.DeadLetterTopic))
		t.Send(&OutRecord{
			Topic: t.cfg.Handlers.DeadLetterTopic, Partition: -1,
			Key: e.Key, Value: e.Value, Timestamp: e.Timestamp,
			Headers: append(append(processor.Headers{}, t.cur.headers...),
				processor.Header{Key: HeaderErrorClass, Value: []byte(errorClass(e))},
				processor.Header{Key: HeaderErrorMessage, Value: []byte(e.Err.Error())},
				processor.Header{Key: HeaderErrorTopic, Value: []byte(e.Topic)},
				processor.Header{Key: HeaderErrorPartition, Value: []byte(strconv.Itoa(int(e.Partition)))},
				processor.Header{Key: HeaderErrorOffset, Value: []byte(strconv.FormatInt(e.Offset, 10))},
			),
		})
	default:
		t.fail(e)
	}
}

// errorClass names the error's kind and Go type: that of the cause a
// serde or wrapper error carries, else the error's own.
func errorClass(e *RecordError) string {
	err := e.Err
	if inner := errors.Unwrap(err); inner != nil {
		err = inner
	}
	return fmt.Sprintf("%s:%T", e.Kind, err)
}

// processSafely runs a record through the task's nodes; a panic in user
// code (a DSL function) goes to the error handler as a processing error.
func (t *Task) processSafely(src SourceNode, r *RawRecord) {
	defer func() {
		if p := recover(); p != nil {
			t.HandleError(ErrProcessing, "", panicError(p))
		}
	}()
	src.ProcessRaw(r)
}

// PanicError is a panic recovered in user code, with the stack where it
// happened.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

func panicError(p any) error {
	return &PanicError{Value: p, Stack: string(debug.Stack())}
}

// safeCall runs user code, turning a panic into an error.
func safeCall(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	return f()
}
