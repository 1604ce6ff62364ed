package topology

import (
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/stores"
)

// throttle limits how often an operation looks for closed windows: at most
// once per emit interval of wall-clock time, as Kafka Streams.
type throttle struct{ next int64 }

// wait reports whether a look now must wait; otherwise the look happens and
// the next one is due an interval later.
func (th *throttle) wait(t *rt.Task) bool {
	now := t.WallClockNow()
	if now < th.next {
		return true
	}
	th.next = now + t.EmitInterval()
	return false
}

// emittedMarker is a store that keeps, with its data, how far final results
// were emitted.
type emittedMarker interface {
	EmittedUpTo() (int64, bool, error)
	SetEmittedUpTo(int64) error
}

// closeEmitter is the state of an operation that emits final results when
// windows close (EmitOnWindowClose): how far it emitted — kept in its store,
// so it survives restarts, and read from there once — and its throttle.
type closeEmitter struct {
	throttle
	loaded, any bool
	emitted     int64
}

// from returns the first time (window start, or session end) not emitted
// yet, when something up to upTo is new; ok is false when nothing is.
func (e *closeEmitter) from(s emittedMarker, upTo int64) (from int64, ok bool, err error) {
	if upTo < 0 {
		return 0, false, nil
	}
	if !e.loaded {
		last, any, err := s.EmittedUpTo()
		if err != nil {
			return 0, false, err
		}
		e.loaded, e.emitted, e.any = true, last, any
	}
	if !e.any {
		return 0, true, nil
	}
	return e.emitted + 1, upTo > e.emitted, nil
}

// done records that everything up to upTo was emitted.
func (e *closeEmitter) done(s emittedMarker, upTo int64) error {
	if err := s.SetEmittedUpTo(upTo); err != nil {
		return err
	}
	e.emitted, e.any = upTo, true
	return nil
}

// closedEntries is the part of a window or session store an emission
// reads.
type closedEntries[K, VA any] interface {
	emittedMarker
	FetchAll(from, to int64) ([]stores.KeyWindowEntry[K, stores.ValueAndTimestamp[VA]], error)
}

// emitClosedEntries gives send, when e's throttle allows, the entries of
// store that closed since the last emission, up to upTo (window starts, or
// session ends), and records how far it got. skip, when set, says whether
// nothing new can have closed between from and upTo. It reports whether
// closed entries remain unemitted (throttled, or a failure the node
// reported).
func emitClosedEntries[K, VA any](b *rt.Base, e *closeEmitter, store closedEntries[K, VA], upTo int64, skip func(from int64) bool,
	send func([]stores.KeyWindowEntry[K, stores.ValueAndTimestamp[VA]])) (pending bool) {
	from, ok, err := e.from(store, upTo)
	if err != nil {
		b.Fail(err)
		return true
	}
	if !ok || (skip != nil && skip(from)) {
		return false
	}
	if e.wait(b.T) {
		return true
	}
	entries, err := store.FetchAll(from, upTo)
	if err != nil {
		b.Fail(err)
		return true
	}
	send(entries)
	if err := e.done(store, upTo); err != nil {
		b.Fail(err)
		return true
	}
	return false
}
