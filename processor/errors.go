package processor

import (
	"errors"
	"fmt"
)

// ErrorKind says at which stage a record failed.
type ErrorKind int

// The stages a record can fail at.
const (
	// DeserializationError: its key, value or timestamp could not be read.
	DeserializationError ErrorKind = iota
	// ProcessingError: a processor returned an error or a function given to
	// the DSL panicked.
	ProcessingError
	// ProductionError: output could not be serialized, or the brokers
	// would refuse it (ErrRecordRefused).
	ProductionError
)

// ErrRecordRefused is the cause (errors.Is) of a ProductionError for an
// output record the brokers would refuse: its topic does not exist, it is
// larger than the topic's max.message.bytes or than a producer batch, or
// it has no key and the topic is compacted. (A topic the ACLs do not let
// the application write stops it with an authorization error: every
// record would be refused alike.) Such a record is refused before it is produced, so
// that under exactly-once the transaction goes on without it when the
// handler continues or dead-letters.
var ErrRecordRefused = errors.New("the brokers would refuse the record")

func (k ErrorKind) String() string {
	switch k {
	case ProcessingError:
		return "processing"
	case ProductionError:
		return "production"
	}
	return "deserialization"
}

// ErrorAction is what an error handler decides for a failed record.
type ErrorAction int

// The actions an error handler can take.
const (
	// Fail stops the app (or the test driver); the error names the record.
	Fail ErrorAction = iota
	// Continue skips the record, counted and logged.
	Continue
	// DeadLetter writes the record's bytes, with headers saying why, to the
	// dead-letter topic, and goes on.
	DeadLetter
)

// RecordError describes a record that failed: the stage, the task and node,
// where the input record came from (Offset -1 during punctuation), its bytes
// as read, and the cause.
type RecordError struct {
	Kind      ErrorKind
	Task      TaskID
	Node      string
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // the input record's bytes, as read
	Value     []byte
	Timestamp int64
	Err       error
}

func (e *RecordError) Error() string {
	where := "during punctuation"
	if e.Offset >= 0 {
		where = fmt.Sprintf("of record at topic %q partition %d offset %d", e.Topic, e.Partition, e.Offset)
	}
	node := ""
	if e.Node != "" {
		node = " in " + e.Node
	}
	return fmt.Sprintf("%s error in task %s%s %s: %v", e.Kind, e.Task, node, where, e.Err)
}

// Unwrap returns the cause.
func (e *RecordError) Unwrap() error { return e.Err }

// Headers of a dead-lettered record, as Kafka Streams' KIP-1034 names them:
// the cause's class and message, and where the record came from.
const (
	HeaderErrorClass     = "__streams.errors.exception"
	HeaderErrorMessage   = "__streams.errors.message"
	HeaderErrorTopic     = "__streams.errors.topic"
	HeaderErrorPartition = "__streams.errors.partition"
	HeaderErrorOffset    = "__streams.errors.offset"
)
