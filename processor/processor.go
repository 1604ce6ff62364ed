package processor

import (
	"errors"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/stores"
)

// Processor is user code in a topology: it receives records of type
// Record[KIn, VIn] and forwards records of type Record[KOut, VOut] to its
// children through the Context given to Init.
//
// Each task gets its own Processor (from the Supplier), and a task calls
// its processor from one goroutine at a time: a processor needs no locks.
// An error returned from Process goes to the application's processing error
// handler; it does not crash the application by itself.
type Processor[KIn, VIn, KOut, VOut any] interface {
	Init(ctx Context[KOut, VOut]) error
	Process(rec Record[KIn, VIn]) error
	Close() error
}

// Supplier returns a new Processor for each task.
type Supplier[KIn, VIn, KOut, VOut any] func() Processor[KIn, VIn, KOut, VOut]

// PunctuationType says which clock drives a punctuator.
type PunctuationType int

const (
	// StreamTime punctuators fire as the task's stream time (the largest
	// record timestamp it has processed) advances: never without input.
	StreamTime PunctuationType = iota
	// WallClockTime punctuators fire on the system clock, with or without
	// input.
	WallClockTime
)

func (p PunctuationType) String() string {
	if p == WallClockTime {
		return "wall-clock-time"
	}
	return "stream-time"
}

// Punctuator is called by a schedule with the time (milliseconds since the
// epoch) of the clock that triggered it.
type Punctuator func(timestamp int64) error

// Cancellable cancels a schedule.
type Cancellable interface{ Cancel() }

// Context is a processor's view of its task: forwarding to children,
// scheduling punctuators, the current record's metadata and state stores.
type Context[K, V any] interface {
	// Forward sends rec to every child of the processor.
	Forward(rec Record[K, V])
	// ForwardTo sends rec to the named child only; naming a node that is not
	// a child is an error.
	ForwardTo(child string, rec Record[K, V]) error
	// Schedule calls fn every interval of the given clock until cancelled.
	Schedule(interval time.Duration, typ PunctuationType, fn Punctuator) (Cancellable, error)
	// RecordMetadata says where the record being processed came from; false
	// during punctuation.
	RecordMetadata() (RecordMetadata, bool)
	// TaskID is the task this processor instance belongs to.
	TaskID() TaskID
	// ApplicationID is the application's id (Config.ApplicationID).
	ApplicationID() string
	// StreamTime is the task's stream time in milliseconds, -1 before the
	// first record.
	StreamTime() int64
	// StateStore returns a store connected to this processor. Prefer the
	// typed helpers, such as GetKeyValueStore.
	StateStore(name string) (any, error)
}

// StoreProvider is the part of Context that finds state stores.
type StoreProvider interface {
	StateStore(name string) (any, error)
}

// ErrStoreType is returned when a store exists but has other types than the
// ones asked for.
var ErrStoreType = errors.New("processor: state store has other types")

// GetKeyValueStore returns the key-value store name, connected to the
// processor whose context is ctx.
func GetKeyValueStore[K, V any](ctx StoreProvider, name string) (stores.KeyValueStore[K, V], error) {
	s, err := ctx.StateStore(name)
	if err != nil {
		return nil, err
	}
	kv, ok := s.(stores.KeyValueStore[K, V])
	if !ok {
		return nil, fmt.Errorf("%w: store %q is %T, not a KeyValueStore[%T, %T]", ErrStoreType, name, s, *new(K), *new(V))
	}
	return kv, nil
}
