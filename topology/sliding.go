package topology

import (
	"fmt"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Sliding windows, as Kafka Streams computes them: a window is
// [start, start+d] with both ends inclusive, and only windows that hold a
// distinct set of records exist. A record at t has a left window
// [t-d, t] (ending at it) and, when later records of the key fall within
// d after it, a right window [t+1, t+1+d]. Processing a record updates
// every existing window that contains it, creates its own left window
// (seeded from the window before it when the previous record is within d),
// its right window (a copy of the aggregate of the later records) and the
// right window of the previous record if that now holds records.
// Records before d (t < d) share a combined window [0, d], since windows
// cannot start before 0.

// slidingState is what a record learns from the existing windows around it.
type slidingState[VA any] struct {
	starts map[int64]bool
	// leftAgg is the window before the record's left window; rightAgg the
	// latest window containing the record, whose later records seed the
	// record's right window.
	leftAgg, rightAgg                   *stores.ValueAndTimestamp[VA]
	leftCreated, rightCreated, havePrev bool
	prev                                int64 // timestamp of the key's previous record, when havePrev
}

func (n *timeWindowNode[K, V, VA]) processSliding(r processor.Record[K, V], streamTime, closeTime int64) {
	d := n.windows.size
	ts := r.Timestamp
	if ts+d < closeTime {
		// Even the latest window that could hold the record, [ts, ts+d], is
		// closed.
		n.late(r, ts, ts+d, streamTime)
		n.afterProcess(streamTime, closeTime)
		return
	}
	var err error
	if ts < d {
		err = n.slidingEarly(r, streamTime, closeTime)
	} else {
		err = n.slidingRecord(r, streamTime, closeTime)
	}
	if err != nil {
		n.Fail(err)
		return
	}
	n.afterProcess(streamTime, closeTime)
}

// slidingRecord handles a record at ts >= d, walking the key's windows from
// the latest back, as Kafka Streams does with a reverse iterator (the order
// in which updates are forwarded follows from it).
func (n *timeWindowNode[K, V, VA]) slidingRecord(r processor.Record[K, V], streamTime, closeTime int64) error {
	d, ts := n.windows.size, r.Timestamp
	entries, err := n.store.FetchRange(r.Key, max(0, ts-2*d), ts+1)
	if err != nil {
		return err
	}
	st := slidingState[VA]{starts: make(map[int64]bool, len(entries))}
walk:
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		start, end := e.Start, e.Start+d
		st.starts[start] = true
		switch {
		case start == ts+1:
			st.rightCreated = true
		case end > ts:
			if st.rightAgg == nil {
				st.rightAgg = &e.Value
			}
			if err := n.slidingUpdate(r, start, &e.Value, streamTime, closeTime); err != nil {
				return err
			}
		case end == ts:
			st.leftCreated = true
			if err := n.slidingUpdate(r, start, &e.Value, streamTime, closeTime); err != nil {
				return err
			}
			if e.Value.Timestamp >= ts {
				// A record at ts came before: every window exists already.
				return nil
			}
			st.havePrev, st.prev = true, e.Value.Timestamp
		default: // end < ts: the window before the record's left window
			st.leftAgg = &e.Value
			st.havePrev, st.prev = true, e.Value.Timestamp
			break walk
		}
	}
	// The previous record's right window, when this record falls into it.
	if st.havePrev && !st.starts[st.prev+1] && st.prev+1+d >= ts {
		if err := n.slidingUpdate(r, st.prev+1, nil, streamTime, closeTime); err != nil {
			return err
		}
	}
	if !st.leftCreated {
		var base *stores.ValueAndTimestamp[VA]
		if st.havePrev && ts-d <= st.prev && st.leftAgg != nil {
			base = st.leftAgg
		}
		if err := n.slidingUpdate(r, ts-d, base, streamTime, closeTime); err != nil {
			return err
		}
	}
	if !st.rightCreated && st.rightAgg != nil && st.rightAgg.Timestamp > ts {
		return n.slidingRightWindow(r, ts, *st.rightAgg)
	}
	return nil
}

// slidingEarly handles a record at 0 <= ts < d: it goes into the combined
// window [0, d] and the existing windows after 0 that contain it.
func (n *timeWindowNode[K, V, VA]) slidingEarly(r processor.Record[K, V], streamTime, closeTime int64) error {
	ts := r.Timestamp
	entries, err := n.store.FetchRange(r.Key, 0, ts+1)
	if err != nil {
		return err
	}
	st := slidingState[VA]{starts: make(map[int64]bool, len(entries))}
	var combined *stores.ValueAndTimestamp[VA]
	for i := range entries {
		e := entries[i]
		st.starts[e.Start] = true
		switch {
		case e.Start == 0:
			combined = &entries[i].Value
			if e.Value.Timestamp < ts {
				st.havePrev, st.prev = true, e.Value.Timestamp
			}
		case e.Start <= ts:
			st.rightAgg = &entries[i].Value
			if err := n.slidingUpdate(r, e.Start, &e.Value, streamTime, closeTime); err != nil {
				return err
			}
		case e.Start == ts+1:
			st.rightCreated = true
		default:
			return fmt.Errorf("%s: unexpected sliding window at %d for a record at %d", n.NodeName, e.Start, ts)
		}
	}
	// With no window between 0 and the record, the combined window's later
	// records are exactly those of the record's right window.
	if st.rightAgg == nil && combined != nil && combined.Timestamp > ts {
		st.rightAgg = combined
	}
	if !st.rightCreated && st.rightAgg != nil && st.rightAgg.Timestamp > ts {
		if err := n.slidingRightWindow(r, ts, *st.rightAgg); err != nil {
			return err
		}
	}
	if st.havePrev && !st.starts[st.prev+1] {
		if err := n.slidingUpdate(r, st.prev+1, nil, streamTime, closeTime); err != nil {
			return err
		}
	}
	return n.slidingUpdate(r, 0, combined, streamTime, closeTime)
}

// slidingUpdate adds the record to the window starting at start, whose
// aggregate so far is base (nil: a new window), unless the window is
// closed.
func (n *timeWindowNode[K, V, VA]) slidingUpdate(r processor.Record[K, V], start int64, base *stores.ValueAndTimestamp[VA], streamTime, closeTime int64) error {
	end := start + n.windows.size
	if end < closeTime {
		n.late(r, start, end, streamTime)
		return nil
	}
	var agg VA
	ts := r.Timestamp
	if base != nil {
		agg = n.next(r.Key, r.Value, base.Value)
		ts = max(ts, base.Timestamp)
	} else {
		agg = n.first(r.Key, r.Value)
	}
	if err := n.store.Put(r.Key, start, stores.ValueAndTimestamp[VA]{Value: agg, Timestamp: ts}); err != nil {
		return err
	}
	if !n.emitOnClose && !n.cached {
		c := change[VA]{New: agg, HasNew: true}
		if base != nil && *n.sendOld {
			c.Old, c.HasOld = base.Value, true
		}
		n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
			Key: serde.Windowed[K]{Key: r.Key, Window: serde.Window{Start: start, End: end}}, Value: c, Timestamp: ts, Headers: r.Headers})
	}
	return nil
}

// slidingRightWindow creates the record's right window [ts+1, ts+1+d] as a
// copy of agg, the aggregate of the key's records after ts within d.
func (n *timeWindowNode[K, V, VA]) slidingRightWindow(r processor.Record[K, V], ts int64, agg stores.ValueAndTimestamp[VA]) error {
	start := ts + 1
	if err := n.store.Put(r.Key, start, agg); err != nil {
		return err
	}
	if !n.emitOnClose && !n.cached {
		n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
			Key:   serde.Windowed[K]{Key: r.Key, Window: serde.Window{Start: start, End: start + n.windows.size}},
			Value: change[VA]{New: agg.Value, HasNew: true}, Timestamp: agg.Timestamp, Headers: r.Headers})
	}
	return nil
}
