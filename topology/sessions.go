package topology

import (
	"cmp"
	"slices"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// SessionWindows group a key's records into sessions: records closer than
// the inactivity gap join one session, which grows, and merges with its
// neighbours, as records arrive. A session closes when stream time passes
// its end plus the gap plus grace (as in Kafka Streams); a record whose
// merged session would end before that is late.
type SessionWindows struct {
	gap, grace int64
}

// Sessions returns session windows with an inactivity gap and a grace
// period.
func Sessions(gap, grace time.Duration) SessionWindows {
	return SessionWindows{gap.Milliseconds(), grace.Milliseconds()}
}

// SessionWindowedStream is a grouped stream cut into sessions.
type SessionWindowedStream[K, V any] struct {
	g *KGroupedStream[K, V]
	w SessionWindows
	windowOpts
}

// WindowedBySession cuts the grouped stream into sessions.
func (g *KGroupedStream[K, V]) WindowedBySession(w SessionWindows) *SessionWindowedStream[K, V] {
	if w.gap <= 0 || w.grace < 0 {
		g.s.b.errorf("WindowedBySession after %q: the inactivity gap must be positive and grace not negative", g.s.node.Name)
	}
	return &SessionWindowedStream[K, V]{g: g, w: w}
}

// LateRecords writes records too late for their session to topic, as
// WindowedStream.LateRecords.
func (s *SessionWindowedStream[K, V]) LateRecords(topic string) *SessionWindowedStream[K, V] {
	s.lateTopic = topic
	return s
}

// EmitOnWindowClose emits each session once, when it can no longer grow or
// merge (stream time passes its end plus gap plus grace), instead of every
// change: Kafka Streams' EmitStrategy.onWindowClose for sessions.
func (s *SessionWindowedStream[K, V]) EmitOnWindowClose() *SessionWindowedStream[K, V] {
	s.emitOnClose = true
	return s
}

// SessionCount counts each key's records per session.
func SessionCount[K, V any](s *SessionWindowedStream[K, V], m ...MaterializedOptions[K, int64]) *KTable[serde.Windowed[K], int64] {
	return sessionAggregate(s, materializedOr(m), serde.Int64(), func() int64 { return 0 },
		func(_ K, _ V, n int64) int64 { return n + 1 },
		func(_ K, a, b int64) int64 { return a + b }, "KSTREAM-AGGREGATE-")
}

// SessionAggregate folds each key's values per session; merger combines the
// aggregates of sessions that merge.
func SessionAggregate[K, V, VA any](s *SessionWindowedStream[K, V], init func() VA, aggregator func(K, V, VA) VA, merger func(K, VA, VA) VA, m ...MaterializedOptions[K, VA]) *KTable[serde.Windowed[K], VA] {
	return sessionAggregate(s, materializedOr(m), nil, init, aggregator, merger, "KSTREAM-AGGREGATE-")
}

func sessionAggregate[K, V, VA any](s *SessionWindowedStream[K, V], m MaterializedOptions[K, VA], vaSerde serde.Serde[VA],
	init func() VA, agg func(K, V, VA) VA, merger func(K, VA, VA) VA, prefix string) *KTable[serde.Windowed[K], VA] {
	g := s.g
	b := g.s.b
	storeName, funcName, parent := g.aggregation(m.name, prefix)
	ks, vs := pickSerde(m.keySerde, g.keySerde), pickSerde(m.valueSerde, vaSerde)
	retention := time.Duration(s.w.gap+s.w.grace) * time.Millisecond
	if m.retention > retention {
		retention = m.retention
	}
	if ks == nil || vs == nil {
		b.errorf("session store %q needs serdes for [%s, %s]: pass them with Materialized(...).WithSerdes", storeName, rt.TypeOf[K](), rt.TypeOf[VA]())
	} else {
		b.addStore(stores.TimestampedSession(storeName, ks, vs, retention).
			WithCaching(false).WithLogging(m.logging, m.logConfig).InMemory(m.backend == InMemory))
	}
	info := &tableInfo{}
	w, lateTopic, emitOnClose := s.w, s.lateTopic, s.emitOnClose
	n := b.add(processorSpec[K, V, serde.Windowed[K], change[VA]](funcName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[serde.Windowed[K], change[VA]](bc)
		return &sessionNode[K, V, VA]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[serde.Windowed[K], VA]{Children: ch},
			storeName: storeName, sendOld: &info.sendOld, w: w, init: init, agg: agg, merger: merger, lateTopic: lateTopic,
			emitOnClose: emitOnClose}, err
	}), parent)
	b.connect(n, storeName)
	var wks serde.Serde[serde.Windowed[K]]
	if ks != nil {
		wks = serde.SessionWindowed(ks)
	}
	// A session closes at its end plus the gap plus grace (it can merge with
	// a record up to a gap after it).
	return &KTable[serde.Windowed[K], VA]{b: b, node: n, keySerde: wks, valueSerde: vs, store: storeName, info: info,
		windowing: &windowing[serde.Windowed[K]]{end: windowEnd[K], grace: s.w.gap + s.w.grace}}
}

// sessionNode merges each record into the sessions within the gap, as
// Kafka Streams' KStreamSessionWindowAggregate: merged sessions are
// forwarded as deletions, then the new session, each stamped with its end.
type sessionNode[K, V, VA any] struct {
	rt.Base
	fw        fwd[serde.Windowed[K], VA]
	storeName string
	store     stores.SessionStore[K, stores.ValueAndTimestamp[VA]]
	sendOld   *bool
	w         SessionWindows
	init      func() VA
	agg       func(K, V, VA) VA
	merger    func(K, VA, VA) VA
	lateTopic string
	// EmitOnWindowClose: forward each session once, when final; emit
	// keeps the end of the last session emitted.
	emitOnClose bool
	emit        closeEmitter
}

func (n *sessionNode[K, V, VA]) Init() (err error) {
	if n.store, err = rt.Store[stores.SessionStore[K, stores.ValueAndTimestamp[VA]]](n.T, n.storeName); err != nil || !n.emitOnClose {
		return err
	}
	// A look throttled at the last record is retried from the task's
	// stream time (also restored after a restart).
	return n.T.RetryThrottled(n.NodeName, func() {
		if n.T.StreamTime() >= 0 {
			n.emitClosed(n.T.StreamTime() - n.w.grace - n.w.gap)
		}
	})
}

func (n *sessionNode[K, V, VA]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1)
		return
	}
	streamTime := n.T.StreamTime()
	// As Kafka Streams: a merged session is too late once it ended more
	// than grace plus the gap before stream time (the point where
	// emit-on-close closes it), not grace alone.
	closeTime := streamTime - n.w.grace - n.w.gap
	ts := r.Timestamp
	merged, err := n.store.FindSessions(r.Key, ts-n.w.gap, ts+n.w.gap, streamTime)
	if err != nil {
		n.Fail(err)
		return
	}
	start, end := ts, ts
	agg := n.init()
	for _, s := range merged {
		agg = n.merger(r.Key, agg, s.Value.Value)
		start, end = min(start, s.Start), max(end, s.End)
	}
	if end < closeTime {
		lateRecord(&n.Base, n.lateTopic, start, end, streamTime)
		return
	}
	if start != ts || end != ts {
		for _, s := range merged {
			if n.emitOnClose {
				if err := n.store.Remove(r.Key, s.Start, s.End); err != nil {
					n.Fail(err)
					return
				}
				continue
			}
			if err := n.store.Remove(r.Key, s.Start, s.End); err != nil {
				n.Fail(err)
				return
			}
			c := change[VA]{}
			if *n.sendOld {
				c.Old, c.HasOld = s.Value.Value, true
			}
			n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
				Key: serde.Windowed[K]{Key: r.Key, Window: serde.Window{Start: s.Start, End: s.End}}, Value: c, Timestamp: s.End, Headers: r.Headers})
		}
	}
	agg = n.agg(r.Key, r.Value, agg)
	if err := n.store.Put(r.Key, start, end, stores.ValueAndTimestamp[VA]{Value: agg, Timestamp: end}); err != nil {
		n.Fail(err)
		return
	}
	if n.emitOnClose {
		if n.emitClosed(streamTime - n.w.grace - n.w.gap) {
			return // closed sessions wait for a throttled emission: keep them
		}
	} else {
		n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
			Key: serde.Windowed[K]{Key: r.Key, Window: serde.Window{Start: start, End: end}}, Value: change[VA]{New: agg, HasNew: true}, Timestamp: end, Headers: r.Headers})
	}
	if err := n.store.ExpireBefore(streamTime); err != nil {
		n.Fail(err)
	}
}

// emitClosed forwards every session that ended before closeTime since the
// last emission, by end, and remembers how far it got. It reports whether
// closed sessions remain unemitted (throttled).
func (n *sessionNode[K, V, VA]) emitClosed(closeTime int64) (pending bool) {
	return emitClosedEntries(&n.Base, &n.emit, n.store, closeTime-1, nil,
		func(entries []stores.KeyWindowEntry[K, stores.ValueAndTimestamp[VA]]) {
			// In Kafka Streams' order: by end, then start (its time-ordered
			// session store's key layout); the store orders by end, then key.
			slices.SortStableFunc(entries, func(a, b stores.KeyWindowEntry[K, stores.ValueAndTimestamp[VA]]) int {
				return cmp.Or(cmp.Compare(a.End, b.End), cmp.Compare(a.Start, b.Start))
			})
			for _, e := range entries {
				n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
					Key:   serde.Windowed[K]{Key: e.Key, Window: serde.Window{Start: e.Start, End: e.End}},
					Value: change[VA]{New: e.Value.Value, HasNew: true}, Timestamp: e.Value.Timestamp})
			}
		})
}
