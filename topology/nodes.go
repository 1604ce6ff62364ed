package topology

import (
	"fmt"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// The typed nodes of the DSL. Each is built per task by the closure its DSL
// function records, and connected to typed children: records flow as
// Record[K, V] values, never boxed.

// passNode forwards what it gets: merges, branch children, the null-key
// filter in front of repartition topics (eddy keys are never null).
type passNode[K, V any] struct {
	rt.Base
	rt.Forwarder[K, V]
}

func (n *passNode[K, V]) Process(r processor.Record[K, V]) { n.Forward(r) }

func buildPass[K, V any](b *rt.BuildCtx) (rt.Node, error) {
	ch, err := rt.Children[K, V](b)
	return &passNode[K, V]{rt.Base{NodeName: b.Spec.Name, T: b.Task}, rt.Forwarder[K, V]{Children: ch}}, err
}

// filterNode forwards the records for which pred holds (not: does not
// hold); pred gets nil for a tombstone.
type filterNode[K, V any] struct {
	rt.Base
	rt.Forwarder[K, V]
	pred func(K, *V) bool
	not  bool
}

func (n *filterNode[K, V]) Process(r processor.Record[K, V]) {
	if n.pred(r.Key, valueOrNil(r)) != n.not {
		n.Forward(r)
	}
}

// valueOrNil is a record's value, nil for a tombstone.
func valueOrNil[K, V any](r processor.Record[K, V]) *V {
	if r.NullValue {
		return nil
	}
	return &r.Value
}

type mapNode[K, V, K2, V2 any] struct {
	rt.Base
	rt.Forwarder[K2, V2]
	f func(K, V) (K2, V2)
}

func (n *mapNode[K, V, K2, V2]) Process(r processor.Record[K, V]) {
	k, v := n.f(r.Key, r.Value)
	if r.NullValue {
		// A tombstone stays one: f gives the new key, its value is dropped.
		var zero V2
		n.Forward(processor.Record[K2, V2]{Key: k, Value: zero, NullValue: true, Timestamp: r.Timestamp, Headers: r.Headers})
		return
	}
	n.Forward(processor.Record[K2, V2]{Key: k, Value: v, Timestamp: r.Timestamp, Headers: r.Headers})
}

type mapValuesNode[K, V, V2 any] struct {
	rt.Base
	rt.Forwarder[K, V2]
	f func(K, V) V2
}

func (n *mapValuesNode[K, V, V2]) Process(r processor.Record[K, V]) {
	if r.NullValue { // passes through; f never sees a tombstone
		n.Forward(processor.Record[K, V2]{Key: r.Key, NullValue: true, Timestamp: r.Timestamp, Headers: r.Headers})
		return
	}
	n.Forward(processor.Record[K, V2]{Key: r.Key, Value: n.f(r.Key, r.Value), Timestamp: r.Timestamp, Headers: r.Headers})
}

type mapNullableNode[K, V, V2 any] struct {
	rt.Base
	rt.Forwarder[K, V2]
	f func(K, *V) *V2
}

func (n *mapNullableNode[K, V, V2]) Process(r processor.Record[K, V]) {
	var in *V
	if !r.NullValue {
		in = &r.Value
	}
	out := processor.Record[K, V2]{Key: r.Key, NullValue: true, Timestamp: r.Timestamp, Headers: r.Headers}
	if v := n.f(r.Key, in); v != nil {
		out.Value, out.NullValue = *v, false
	}
	n.Forward(out)
}

type flatMapNode[K, V, K2, V2 any] struct {
	rt.Base
	rt.Forwarder[K2, V2]
	f func(K, V) []KeyValue[K2, V2]
}

func (n *flatMapNode[K, V, K2, V2]) Process(r processor.Record[K, V]) {
	for _, kv := range n.f(r.Key, r.Value) {
		out := processor.Record[K2, V2]{Key: kv.Key, Value: kv.Value, Timestamp: r.Timestamp, Headers: r.Headers}
		if r.NullValue { // each key f gives gets the tombstone
			var zero V2
			out.Value, out.NullValue = zero, true
		}
		n.Forward(out)
	}
}

type flatMapValuesNode[K, V, V2 any] struct {
	rt.Base
	rt.Forwarder[K, V2]
	f func(K, V) []V2
}

func (n *flatMapValuesNode[K, V, V2]) Process(r processor.Record[K, V]) {
	if r.NullValue { // passes through, once; f never sees a tombstone
		n.Forward(processor.Record[K, V2]{Key: r.Key, NullValue: true, Timestamp: r.Timestamp, Headers: r.Headers})
		return
	}
	for _, v := range n.f(r.Key, r.Value) {
		n.Forward(processor.Record[K, V2]{Key: r.Key, Value: v, Timestamp: r.Timestamp, Headers: r.Headers})
	}
}

type selectKeyNode[K, V, K2 any] struct {
	rt.Base
	rt.Forwarder[K2, V]
	f func(K, V) K2
}

func (n *selectKeyNode[K, V, K2]) Process(r processor.Record[K, V]) {
	n.Forward(processor.Record[K2, V]{Key: n.f(r.Key, r.Value), Value: r.Value, Timestamp: r.Timestamp, Headers: r.Headers, NullValue: r.NullValue})
}

// peekNode calls f for each record (nil for a tombstone) and passes it on.
type peekNode[K, V any] struct {
	rt.Base
	rt.Forwarder[K, V]
	f func(K, *V)
}

func (n *peekNode[K, V]) Process(r processor.Record[K, V]) {
	n.f(r.Key, valueOrNil(r))
	n.Forward(r)
}

// branchNode sends each record to the first branch whose predicate holds,
// else to the default branch when there is one; a tombstone to every
// branch and the default, without calling the predicates.
type branchNode[K, V any] struct {
	rt.Base
	branches []rt.Receiver[K, V]
	preds    []func(K, V) bool
	deflt    rt.Receiver[K, V]
}

func (n *branchNode[K, V]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		for _, b := range n.branches {
			b.Process(r)
		}
		if n.deflt != nil {
			n.deflt.Process(r)
		}
		return
	}
	for i, p := range n.preds {
		if p(r.Key, r.Value) {
			n.branches[i].Process(r)
			return
		}
	}
	if n.deflt != nil {
		n.deflt.Process(r)
	}
}

// change is an update of a table row as it flows between table operators:
// the new value and, when downstream asked for it, the old one.
type change[V any] struct {
	New, Old       V
	HasNew, HasOld bool
	// NotLatest marks an out-of-order update of a versioned table: it went
	// into the table's history, not its latest value (KIP-914). Joins and
	// table GroupBy drop it; ToStream forwards it.
	NotLatest bool
}

// timestampedStore is the typed view the DSL's materializing nodes use.
type timestampedStore[K, V any] interface {
	stores.KeyValueStore[K, stores.ValueAndTimestamp[V]]
	Serdes() (serde.Serde[K], serde.Serde[stores.ValueAndTimestamp[V]], string)
}

type fwd[K, V any] = rt.Forwarder[K, change[V]]

// forwardOnFlush makes a cached store forward a table's updates as the
// cache flushes them, as Kafka Streams' TimestampedTupleForwarder; it
// returns false when the store is not cached (forward on every update then).
// A store with a time to live forwards its expiries as deletions: through
// the cache's flush when cached, as they happen otherwise.
func forwardOnFlush[K, V any](store timestampedStore[K, V], fw *fwd[K, V], sendOld *bool) bool {
	ks, vs, topic := store.Serdes()
	// forward sends a row's change: newV nil for a deletion, oldV when
	// known and asked for.
	forward := func(key, newV, oldV []byte, ts int64) error {
		k, err := ks.Deserialize(topic, key)
		if err != nil {
			return err
		}
		c, ts, err := decodeChange(vs, topic, newV, oldV, ts, *sendOld)
		if err != nil {
			return err
		}
		fw.Forward(processor.Record[K, change[V]]{Key: k, Value: c, Timestamp: ts})
		return nil
	}
	cached := false
	if cf, ok := store.(storage.CacheFlusher); ok {
		cached = cf.SetFlushListener(forward, *sendOld)
	}
	if ex, ok := store.(storage.Expirer); ok && !cached {
		if ttl, _ := ex.TTL(); ttl > 0 {
			ex.SetExpiryListener(func(key, old []byte, ts int64) error { return forward(key, nil, old, ts) })
		}
	}
	return cached
}

// decodeChange decodes the new and old values of a row a cache flushed or
// a store expired (newV nil: a deletion; oldV only when sendOld) into a
// change, and gives the timestamp to forward it with: the new value's, else
// ts.
func decodeChange[V any](vs serde.Serde[stores.ValueAndTimestamp[V]], topic string, newV, oldV []byte, ts int64, sendOld bool) (change[V], int64, error) {
	var c change[V]
	if newV != nil {
		nv, err := vs.Deserialize(topic, newV)
		if err != nil {
			return c, ts, err
		}
		c.New, c.HasNew, ts = nv.Value, true, nv.Timestamp
	}
	if oldV != nil && sendOld {
		ov, err := vs.Deserialize(topic, oldV)
		if err != nil {
			return c, ts, err
		}
		c.Old, c.HasOld = ov.Value, true
	}
	return c, ts, nil
}

// storeOf looks a DSL store up in the node's task.
func storeOf[K, V any](b *rt.Base, name string) (timestampedStore[K, V], error) {
	s, err := rt.Store[timestampedStore[K, V]](b.T, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.NodeName, err)
	}
	return s, nil
}

// table is what every node that keeps a DSL table in its store shares:
// the store, the forwarder of the table's changes and whether the store's
// cache forwards them as it flushes.
type table[K, V any] struct {
	fw        fwd[K, V]
	storeName string
	store     timestampedStore[K, V]
	sendOld   *bool // set by downstream nodes that need old values
	cached    bool
}

// init finds the store in the node's task and installs the forwarding.
func (t *table[K, V]) init(b *rt.Base) (err error) {
	if t.store, err = storeOf[K, V](b, t.storeName); err != nil {
		return err
	}
	t.cached = forwardOnFlush(t.store, &t.fw, t.sendOld)
	return nil
}

// changed forwards a row's change (newV when hasNew; a deletion otherwise),
// with the old value when there was one and downstream asked for it. A
// cached store forwards as it flushes instead.
func (t *table[K, V]) changed(key K, newV V, hasNew bool, old V, hasOld bool, ts int64, h processor.Headers) {
	if t.cached {
		return
	}
	c := change[V]{New: newV, HasNew: hasNew}
	if hasOld && *t.sendOld {
		c.Old, c.HasOld = old, true
	}
	t.fw.Forward(processor.Record[K, change[V]]{Key: key, Value: c, Timestamp: ts, Headers: h})
}

// aggregateNode is KStream aggregation (Count, Reduce, Aggregate): the
// result carries the largest timestamp of the records that made it, as in
// Kafka Streams 4.
type aggregateNode[K, V, VA any] struct {
	rt.Base
	table[K, VA]
	// first makes the aggregate of a key's first record; next folds a record
	// into an existing aggregate.
	first func(K, V) VA
	next  func(K, V, VA) VA
}

func (n *aggregateNode[K, V, VA]) Init() error { return n.init(&n.Base) }

func (n *aggregateNode[K, V, VA]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		// Kafka Streams ignores records with null values in aggregations.
		n.T.Counters.Skipped.Add(1)
		return
	}
	old, ok, err := n.store.Get(r.Key)
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
	if err := n.store.Put(r.Key, stores.ValueAndTimestamp[VA]{Value: agg, Timestamp: ts}); err != nil {
		n.Fail(err)
		return
	}
	n.changed(r.Key, agg, true, old.Value, ok, ts, r.Headers)
}

// tableSourceNode materializes a stream of upserts and tombstones into a
// table (Table sources and KStream.ToTable).
type tableSourceNode[K, V any] struct {
	rt.Base
	table[K, V]
}

func (n *tableSourceNode[K, V]) Init() error { return n.init(&n.Base) }

func (n *tableSourceNode[K, V]) Process(r processor.Record[K, V]) {
	old, ok, err := n.store.Get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	if r.NullValue {
		_, _, err = n.store.Delete(r.Key)
	} else {
		err = n.store.Put(r.Key, stores.ValueAndTimestamp[V]{Value: r.Value, Timestamp: r.Timestamp})
	}
	if err != nil {
		n.Fail(err)
		return
	}
	n.changed(r.Key, r.Value, !r.NullValue, old.Value, ok, r.Timestamp, r.Headers)
}

type tableFilterNode[K, V any] struct {
	rt.Base
	fw      fwd[K, V]
	pred    func(K, V) bool
	not     bool
	sendOld *bool
}

func (n *tableFilterNode[K, V]) Process(r processor.Record[K, change[V]]) {
	in := r.Value
	c := change[V]{NotLatest: in.NotLatest}
	if in.HasNew && n.pred(r.Key, in.New) != n.not {
		c.New, c.HasNew = in.New, true
	}
	if *n.sendOld {
		if in.HasOld && n.pred(r.Key, in.Old) != n.not {
			c.Old, c.HasOld = in.Old, true
		}
		if !c.HasOld && !c.HasNew {
			return // nothing was there and nothing is: no need to forward
		}
	}
	n.fw.Forward(processor.Record[K, change[V]]{Key: r.Key, Value: c, Timestamp: r.Timestamp, Headers: r.Headers})
}

type tableMapValuesNode[K, V, V2 any] struct {
	rt.Base
	fw      fwd[K, V2]
	f       func(K, V) V2
	sendOld *bool
}

func (n *tableMapValuesNode[K, V, V2]) Process(r processor.Record[K, change[V]]) {
	in := r.Value
	c := change[V2]{NotLatest: in.NotLatest}
	if in.HasNew {
		c.New, c.HasNew = n.f(r.Key, in.New), true
	}
	if *n.sendOld && in.HasOld {
		c.Old, c.HasOld = n.f(r.Key, in.Old), true
	}
	n.fw.Forward(processor.Record[K, change[V2]]{Key: r.Key, Value: c, Timestamp: r.Timestamp, Headers: r.Headers})
}

type toStreamNode[K, V any] struct {
	rt.Base
	rt.Forwarder[K, V]
}

func (n *toStreamNode[K, V]) Process(r processor.Record[K, change[V]]) {
	n.Forward(processor.Record[K, V]{Key: r.Key, Value: r.Value.New, NullValue: !r.Value.HasNew, Timestamp: r.Timestamp, Headers: r.Headers})
}

// tableSelectNode re-keys a table's updates for a table GroupBy: the old row
// is retracted under its old group and the new one added under its new
// group; when both fall in the same group, one record carries both.
type tableSelectNode[K, V, K2, V2 any] struct {
	rt.Base
	fw       fwd[K2, V2]
	f        func(K, V) (K2, V2)
	keySerde serde.Serde[K2]
	topic    string
}

func (n *tableSelectNode[K, V, K2, V2]) Process(r processor.Record[K, change[V]]) {
	in := r.Value
	if in.NotLatest {
		n.T.Counters.Skipped.Add(1) // an out-of-order update of a versioned table (KIP-914)
		return
	}
	var ok, nk K2
	var ov, nv V2
	if in.HasOld {
		ok, ov = n.f(r.Key, in.Old)
	}
	if in.HasNew {
		nk, nv = n.f(r.Key, in.New)
	}
	if in.HasOld && in.HasNew {
		ob, err1 := n.keySerde.Serialize(n.topic, ok)
		nb, err2 := n.keySerde.Serialize(n.topic, nk)
		if err1 == nil && err2 == nil && string(ob) == string(nb) {
			n.fw.Forward(processor.Record[K2, change[V2]]{Key: nk, Value: change[V2]{New: nv, HasNew: true, Old: ov, HasOld: true}, Timestamp: r.Timestamp, Headers: r.Headers})
			return
		}
	}
	if in.HasOld {
		n.fw.Forward(processor.Record[K2, change[V2]]{Key: ok, Value: change[V2]{Old: ov, HasOld: true}, Timestamp: r.Timestamp, Headers: r.Headers})
	}
	if in.HasNew {
		n.fw.Forward(processor.Record[K2, change[V2]]{Key: nk, Value: change[V2]{New: nv, HasNew: true}, Timestamp: r.Timestamp, Headers: r.Headers})
	}
}

// tableAggregateNode aggregates a re-keyed table (KGroupedTable): the
// subtractor retracts a row's old value, the adder adds its new one.
type tableAggregateNode[K, V, VA any] struct {
	rt.Base
	table[K, VA]
	first func(K, V) VA // the aggregate of a group's first value
	add   func(K, V, VA) VA
	sub   func(K, V, VA) VA
}

func (n *tableAggregateNode[K, V, VA]) Init() error { return n.init(&n.Base) }

func (n *tableAggregateNode[K, V, VA]) Process(r processor.Record[K, change[V]]) {
	old, hasOld, err := n.store.Get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	in := r.Value
	agg, hasAgg := old.Value, hasOld
	ts := r.Timestamp
	if in.HasOld && hasOld {
		agg = n.sub(r.Key, in.Old, agg)
		ts = max(ts, old.Timestamp)
	}
	if in.HasNew {
		if hasAgg {
			agg = n.add(r.Key, in.New, agg)
		} else {
			agg = n.first(r.Key, in.New)
		}
		hasAgg = true
		if hasOld {
			ts = max(ts, old.Timestamp)
		}
	}
	if !hasAgg {
		return
	}
	if err := n.store.Put(r.Key, stores.ValueAndTimestamp[VA]{Value: agg, Timestamp: ts}); err != nil {
		n.Fail(err)
		return
	}
	n.changed(r.Key, agg, true, old.Value, hasOld, ts, r.Headers)
}
