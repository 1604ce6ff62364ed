package topology

import (
	"fmt"
	"strconv"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Windows say how a grouped stream is cut into windows: by time (tumbling,
// hopping or sliding, each with a grace period for out-of-order records) or
// by count (every N records per key). Build them with TumblingWindows,
// HoppingWindows, SlidingWindows, CountWindows or HoppingCountWindows.
//
// A time window closes when stream time passes its end plus grace; records
// for closed windows are late (see WindowedStream.LateRecords).
type Windows struct {
	kind                 windowKind
	size, advance, grace int64
}

type windowKind uint8

const (
	fixedTimeWindows windowKind = iota // tumbling and hopping
	slidingWindows
	countWindows
)

// TumblingWindows returns windows [start, start+size) of size, aligned to
// the epoch, that do not overlap, with a grace period.
func TumblingWindows(size, grace time.Duration) Windows {
	return Windows{fixedTimeWindows, size.Milliseconds(), size.Milliseconds(), grace.Milliseconds()}
}

// HoppingWindows returns windows [start, start+size) of size starting
// every advance (aligned to the epoch), so a record falls into size/advance
// windows.
func HoppingWindows(size, advance, grace time.Duration) Windows {
	return Windows{fixedTimeWindows, size.Milliseconds(), advance.Milliseconds(), grace.Milliseconds()}
}

// SlidingWindows returns Kafka Streams' sliding windows: windows
// [start, start+timeDifference] (both ends inclusive) that slide with the
// records, so each distinct set of a key's records no further apart than
// timeDifference is aggregated once. Results are keyed by windows whose
// End is Start+timeDifference.
func SlidingWindows(timeDifference, grace time.Duration) Windows {
	d := timeDifference.Milliseconds()
	return Windows{slidingWindows, d, d, grace.Milliseconds()}
}

// CountWindows returns windows of n records per key that do not overlap:
// a key's records 0..n-1, n..2n-1, and so on. Kafka Streams has no count
// windows. A result's window Start and End are the record numbers (per
// key, from 0) it covers, [Start, End); its timestamp is the largest of its
// records'. Count windows never close by time, so they have no late
// records; with EmitOnWindowClose a window is emitted once it is full.
func CountWindows(n int64) Windows {
	return Windows{countWindows, n, n, 0}
}

// HoppingCountWindows returns windows of n records per key starting every
// advance records, as HoppingWindows by record number.
func HoppingCountWindows(n, advance int64) Windows {
	return Windows{countWindows, n, advance, 0}
}

func (w Windows) validate() error {
	switch w.kind {
	case slidingWindows:
		if w.size <= 0 || w.grace < 0 {
			return fmt.Errorf("sliding windows need a positive time difference and grace >= 0 (time difference %dms, grace %dms)", w.size, w.grace)
		}
	case countWindows:
		if w.size <= 0 || w.advance <= 0 || w.advance > w.size {
			return fmt.Errorf("count windows need 0 < advance <= n (n %d, advance %d)", w.size, w.advance)
		}
	default:
		if w.size <= 0 || w.advance <= 0 || w.advance > w.size || w.grace < 0 {
			return fmt.Errorf("time windows need 0 < advance <= size and grace >= 0 (size %dms, advance %dms, grace %dms)", w.size, w.advance, w.grace)
		}
	}
	return nil
}

// windowsFor returns the starts of the windows containing ts (or record
// number ts), ascending, as Kafka Streams' TimeWindows.windowsFor.
func (w Windows) windowsFor(ts int64) []int64 {
	start := max(0, ts-w.size+w.advance) / w.advance * w.advance
	var out []int64
	for ; start <= ts; start += w.advance {
		out = append(out, start)
	}
	return out
}

// closedUpTo returns the start of the last window that is closed at
// closeTime (stream time minus grace): fixed windows [start, start+size)
// close when their end is at most closeTime, sliding windows (end
// inclusive) when their end is before it.
func (w Windows) closedUpTo(closeTime int64) int64 {
	if w.kind == slidingWindows {
		return closeTime - w.size - 1
	}
	return closeTime - w.size
}

// LateRecordHeaders are the headers eddy adds to a record it writes to a
// late-records topic.
const (
	HeaderLateReason      = "eddy.late.reason"
	HeaderLateWindowStart = "eddy.late.window.start"
	HeaderLateWindowEnd   = "eddy.late.window.end"
	HeaderLateStreamTime  = "eddy.late.stream.time"
)

// windowOpts are what all windowed streams share.
type windowOpts struct {
	emitOnClose bool
	lateTopic   string
	name        string
}

// WindowedStream is a grouped stream cut into windows.
type WindowedStream[K, V any] struct {
	g *KGroupedStream[K, V]
	w Windows
	windowOpts
}

// WindowedBy cuts the grouped stream into windows.
func (g *KGroupedStream[K, V]) WindowedBy(w Windows) *WindowedStream[K, V] {
	if err := w.validate(); err != nil {
		g.s.b.errorf("WindowedBy after %q: %v", g.s.node.Name, err)
	}
	return &WindowedStream[K, V]{g: g, w: w}
}

// EmitOnWindowClose emits each window's result once, when the window
// closes (stream time passes its end plus grace), instead of on every
// update: Kafka Streams' suppress(untilWindowCloses) /
// EmitStrategy.onWindowClose. Progress is kept in a changelogged store, so
// a final result is emitted once across restarts.
func (s *WindowedStream[K, V]) EmitOnWindowClose() *WindowedStream[K, V] {
	s.emitOnClose = true
	return s
}

// LateRecords writes records that arrive after their window closed to
// topic, unchanged, with headers saying why, which window and the stream
// time. They are counted and logged in any case; Kafka Streams only drops
// them.
func (s *WindowedStream[K, V]) LateRecords(topic string) *WindowedStream[K, V] {
	s.lateTopic = topic
	return s
}

// WindowedCount counts each key's records per window.
func WindowedCount[K, V any](s *WindowedStream[K, V], m ...MaterializedOptions[K, int64]) *KTable[serde.Windowed[K], int64] {
	return timeWindowAggregate(s, materializedOr(m), serde.Int64(),
		func(K, V) int64 { return 1 },
		func(_ K, _ V, n int64) int64 { return n + 1 }, "KSTREAM-AGGREGATE-")
}

// WindowedAggregate folds each key's values per window, from init().
func WindowedAggregate[K, V, VA any](s *WindowedStream[K, V], init func() VA, aggregator func(K, V, VA) VA, m ...MaterializedOptions[K, VA]) *KTable[serde.Windowed[K], VA] {
	return timeWindowAggregate(s, materializedOr(m), nil,
		func(k K, v V) VA { return aggregator(k, v, init()) }, aggregator, "KSTREAM-AGGREGATE-")
}

// WindowedReduce combines each key's values per window. (A function, not a
// method: Go forbids methods whose result nests the receiver's type
// parameters, as Windowed[K] does.)
func WindowedReduce[K, V any](s *WindowedStream[K, V], reducer func(agg, v V) V, m ...MaterializedOptions[K, V]) *KTable[serde.Windowed[K], V] {
	return timeWindowAggregate(s, materializedOr(m), s.g.valueSerde,
		func(_ K, v V) V { return v },
		func(_ K, v V, agg V) V { return reducer(agg, v) }, "KSTREAM-REDUCE-")
}

// parentFor returns the node a grouped stream's aggregation reads from,
// inserting a repartition topic when needed.
// aggregation names an aggregation of g as Kafka Streams does: its store
// (store, or a name generated with prefix, taken before the processor's),
// its processor, and the node it reads (a repartition when the stream
// needs one).
func (g *KGroupedStream[K, V]) aggregation(store, prefix string) (storeName, funcName string, parent *rt.NodeSpec) {
	b := g.s.b
	storeName = store
	if storeName == "" {
		storeName = b.newStoreName(prefix)
	}
	return storeName, b.newName(prefix), g.parentFor(storeName)
}

func (g *KGroupedStream[K, V]) parentFor(storeName string) *rt.NodeSpec {
	if !g.s.repartitionRequired {
		return g.s.node
	}
	prefix := storeName
	if g.name != "" {
		prefix = g.name
	}
	return repartition(g.s.b, g.s.node, prefix, g.keySerde, g.valueSerde, 0)
}

func timeWindowAggregate[K, V, VA any](s *WindowedStream[K, V], m MaterializedOptions[K, VA], vaSerde serde.Serde[VA],
	first func(K, V) VA, next func(K, V, VA) VA, prefix string) *KTable[serde.Windowed[K], VA] {
	if s.w.kind == countWindows {
		return countWindowAggregate(s, m, vaSerde, first, next, prefix)
	}
	g := s.g
	b := g.s.b
	storeName, funcName, parent := g.aggregation(m.name, prefix)
	ks, vs := addTimeWindowStore(b, storeName, m, g.keySerde, vaSerde, s.w, s.emitOnClose)
	info := &tableInfo{}
	n := addTimeWindowNode(b, funcName, parent, storeName, s.w, s.emitOnClose, s.lateTopic, info, first, next)
	return windowedTable(b, n, storeName, ks, vs, s.w, info)
}

// addTimeWindowStore adds the window store of a time-windowed aggregation
// (retention: window size plus grace, at least) and returns its serdes.
func addTimeWindowStore[K, VA any](b *Builder, storeName string, m MaterializedOptions[K, VA], keySerde serde.Serde[K], vaSerde serde.Serde[VA],
	w Windows, emitOnClose bool) (serde.Serde[K], serde.Serde[VA]) {
	ks, vs := pickSerde(m.keySerde, keySerde), pickSerde(m.valueSerde, vaSerde)
	retention := time.Duration(w.size+w.grace) * time.Millisecond
	if w.kind == slidingWindows {
		// A record reads the windows up to 2d before it (the window
		// before its left window), as in Kafka Streams.
		retention = time.Duration(2*w.size+w.grace) * time.Millisecond
	}
	if m.retention > retention {
		retention = m.retention
	}
	if ks == nil || vs == nil {
		b.errorf("windowed store %q needs serdes for [%s, %s]: pass them with Materialized(...).WithSerdes", storeName, rt.TypeOf[K](), rt.TypeOf[VA]())
		return ks, vs
	}
	b.addStore(stores.TimestampedWindow(storeName, ks, vs, retention).WithWindowSize(time.Duration(w.size)*time.Millisecond).
		WithCaching(m.caching && !emitOnClose).WithLogging(m.logging, m.logConfig).InMemory(m.backend == InMemory))
	return ks, vs
}

// addTimeWindowNode adds a node folding parent's records into the time
// windows of storeName.
func addTimeWindowNode[K, V, VA any](b *Builder, name string, parent *rt.NodeSpec, storeName string, w Windows, emitOnClose bool, lateTopic string,
	info *tableInfo, first func(K, V) VA, next func(K, V, VA) VA) *rt.NodeSpec {
	n := b.add(processorSpec[K, V, serde.Windowed[K], change[VA]](name, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[serde.Windowed[K], change[VA]](bc)
		return &timeWindowNode[K, V, VA]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[serde.Windowed[K], VA]{Children: ch},
			storeName: storeName, emitOnClose: emitOnClose, sendOld: &info.sendOld, windows: w, first: first, next: next, lateTopic: lateTopic}, err
	}), parent)
	b.connect(n, storeName)
	return n
}

// windowedTable is the table of a time-windowed aggregation ending at node.
func windowedTable[K, VA any](b *Builder, node *rt.NodeSpec, storeName string, ks serde.Serde[K], vs serde.Serde[VA], w Windows, info *tableInfo) *KTable[serde.Windowed[K], VA] {
	var wks serde.Serde[serde.Windowed[K]]
	if ks != nil {
		wks = serde.TimeWindowed(ks, w.size)
	}
	return &KTable[serde.Windowed[K], VA]{b: b, node: node, keySerde: wks, valueSerde: vs, store: storeName, info: info,
		windowing: &windowing[serde.Windowed[K]]{end: windowEnd[K], grace: w.grace}}
}

// windowEnd is where a windowed key's window ends.
func windowEnd[K any](w serde.Windowed[K]) int64 { return w.Window.End }

type windowStoreOf[K, V any] interface {
	stores.WindowStore[K, stores.ValueAndTimestamp[V]]
	Serdes() (serde.Serde[K], serde.Serde[stores.ValueAndTimestamp[V]], string)
}

// timeWindowNode aggregates records into the time windows that contain
// them. A window's result carries the largest timestamp of its records.
type timeWindowNode[K, V, VA any] struct {
	rt.Base
	fw        fwd[serde.Windowed[K], VA]
	storeName string
	store     windowStoreOf[K, VA]
	// emitOnClose: forward each window once, when it closes.
	emitOnClose bool
	sendOld     *bool
	cached      bool
	windows     Windows
	first       func(K, V) VA
	next        func(K, V, VA) VA
	lateTopic   string
	// EmitOnWindowClose progress: the start of the last window emitted.
	emit closeEmitter
}

func (n *timeWindowNode[K, V, VA]) Init() (err error) {
	if n.store, err = rt.Store[windowStoreOf[K, VA]](n.T, n.storeName); err != nil {
		return err
	}
	if !n.emitOnClose {
		n.cached = n.forwardOnFlush()
		return nil
	}
	// A look throttled at the last record is retried from the task's
	// stream time (also restored after a restart).
	return n.T.RetryThrottled(n.NodeName, func() {
		if n.T.StreamTime() >= 0 {
			n.emitClosed(n.T.StreamTime() - n.windows.grace)
		}
	})
}

// forwardOnFlush makes the cached window store forward its updates as the
// cache flushes them.
func (n *timeWindowNode[K, V, VA]) forwardOnFlush() bool {
	cf, ok := n.store.(storage.CacheFlusher)
	if !ok {
		return false
	}
	ks, vs, topic := n.store.Serdes()
	size := n.windows.size
	return cf.SetFlushListener(func(key, newV, oldV []byte, ts int64) error {
		kb, start, ok := storage.ParseWindowKey(key)
		if !ok {
			return fmt.Errorf("%s: bad window store key", n.NodeName)
		}
		k, err := ks.Deserialize(topic, kb)
		if err != nil {
			return err
		}
		c, ts, err := decodeChange(vs, topic, newV, oldV, ts, *n.sendOld)
		if err != nil {
			return err
		}
		n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
			Key: serde.Windowed[K]{Key: k, Window: serde.Window{Start: start, End: start + size}}, Value: c, Timestamp: ts})
		return nil
	}, *n.sendOld)
}

func (n *timeWindowNode[K, V, VA]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1)
		return
	}
	streamTime := n.T.StreamTime()
	closeTime := streamTime - n.windows.grace
	if n.windows.kind == slidingWindows {
		n.processSliding(r, streamTime, closeTime)
		return
	}
	for _, start := range n.windows.windowsFor(r.Timestamp) {
		end := start + n.windows.size
		if end <= closeTime {
			n.late(r, start, end, streamTime)
			continue
		}
		old, ok, err := n.store.Fetch(r.Key, start)
		if err != nil {
			n.Fail(err)
			return
		}
		var agg VA
		ts := r.Timestamp
		if ok {
			agg = n.next(r.Key, r.Value, old.Value)
			ts = max(ts, old.Timestamp)
		} else {
			agg = n.first(r.Key, r.Value)
		}
		if err := n.store.Put(r.Key, start, stores.ValueAndTimestamp[VA]{Value: agg, Timestamp: ts}); err != nil {
			n.Fail(err)
			return
		}
		if !n.emitOnClose && !n.cached {
			c := change[VA]{New: agg, HasNew: true}
			if ok && *n.sendOld {
				c.Old, c.HasOld = old.Value, true
			}
			n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
				Key: serde.Windowed[K]{Key: r.Key, Window: serde.Window{Start: start, End: end}}, Value: c, Timestamp: ts, Headers: r.Headers})
		}
	}
	n.afterProcess(streamTime, closeTime)
}

// afterProcess emits the windows that closed (EmitOnWindowClose) and
// expires old segments.
func (n *timeWindowNode[K, V, VA]) afterProcess(streamTime, closeTime int64) {
	if n.emitOnClose && n.emitClosed(closeTime) {
		// Closed windows wait for a throttled emission: expiring now
		// would drop them unemitted (a jump in stream time can close and
		// expire a window at once).
		return
	}
	if err := n.store.ExpireBefore(streamTime); err != nil {
		n.Fail(err)
	}
}

// emitClosed forwards the final result of every window that closed since
// the last emission, in store order, and remembers how far it got. It
// reports whether closed windows remain unemitted (throttled).
func (n *timeWindowNode[K, V, VA]) emitClosed(closeTime int64) (pending bool) {
	upTo := n.windows.closedUpTo(closeTime)
	var skip func(from int64) bool
	if n.windows.kind == fixedTimeWindows {
		// Window starts are multiples of advance: nothing new closed until
		// upTo reaches the next one.
		skip = func(from int64) bool {
			return (from+n.windows.advance-1)/n.windows.advance*n.windows.advance > upTo
		}
	}
	return emitClosedEntries(&n.Base, &n.emit, n.store, upTo, skip,
		func(entries []stores.KeyWindowEntry[K, stores.ValueAndTimestamp[VA]]) {
			for _, e := range entries {
				n.fw.Forward(processor.Record[serde.Windowed[K], change[VA]]{
					Key:   serde.Windowed[K]{Key: e.Key, Window: serde.Window{Start: e.Start, End: e.Start + n.windows.size}},
					Value: change[VA]{New: e.Value.Value, HasNew: true}, Timestamp: e.Value.Timestamp})
			}
		})
}

// late handles a record for a closed window: counted, logged at Debug, and
// written unchanged to the late-records topic when there is one.
func (n *timeWindowNode[K, V, VA]) late(r processor.Record[K, V], start, end, streamTime int64) {
	lateRecord(&n.Base, n.lateTopic, start, end, streamTime)
}

// lateRecord counts a late record and writes the record being processed,
// as read, to topic (when set) with headers saying why.
func lateRecord(b *rt.Base, topic string, start, end, streamTime int64) {
	b.T.Counters.Late.Add(1)
	if ce := b.T.Log.Check(zap.DebugLevel, "late record"); ce != nil {
		md, _ := b.T.RecordMetadata()
		ce.Write(zap.String("node", b.NodeName), zap.String("topic", md.Topic), zap.Int32("partition", md.Partition),
			zap.Int64("offset", md.Offset), zap.Int64("window_start", start), zap.Int64("window_end", end), zap.Int64("stream_time", streamTime))
	}
	if topic == "" {
		return
	}
	b.T.SendCurrent(topic, processor.Headers{
		{Key: HeaderLateReason, Value: []byte("window closed: record later than window end plus grace")},
		{Key: HeaderLateWindowStart, Value: []byte(strconv.FormatInt(start, 10))},
		{Key: HeaderLateWindowEnd, Value: []byte(strconv.FormatInt(end, 10))},
		{Key: HeaderLateStreamTime, Value: []byte(strconv.FormatInt(streamTime, 10))},
	})
}
