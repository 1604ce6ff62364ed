package topology

import (
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// Joins. Go has no overloading, so each pairing has its own functions:
//
//	stream–table:  JoinTable, LeftJoinTable
//	table–table:   TableJoin, TableLeftJoin, TableOuterJoin
//	stream–stream: JoinStream, LeftJoinStream, OuterJoinStream (windowed)
//	stream–global: JoinGlobal, LeftJoinGlobal
//
// A side that may be missing reaches the joiner as a nil pointer.

// joinable returns the table's value getter, recording an error when the
// table cannot be read by key (materialize it first).
func joinable[K, V any](b *Builder, t *KTable[K, V], what string) *getterSpec[K, V] {
	if t.getter == nil {
		b.errorf("%s: table %q cannot be read by key; materialize it (ToStream().ToTable(Materialized(...)))", what, t.node.Name)
	}
	return t.getter
}

// streamForJoin returns the stream's node, repartitioned first when its key
// may have changed.
func streamForJoin[K, V any](s *KStream[K, V], name string) *rt.NodeSpec {
	if !s.repartitionRequired {
		return s.node
	}
	return repartition(s.b, s.node, name+"-left", s.keySerde, s.valueSerde, 0)
}

// JoinTable joins each stream record with the table's current value of its
// key; records whose key is not in the table are dropped.
func JoinTable[K, V, VT, VR any](s *KStream[K, V], t *KTable[K, VT], joiner func(V, VT) VR, name ...Named) *KStream[K, VR] {
	return streamTableJoin(s, t, func(v V, vt *VT) (VR, bool) {
		var zero VR
		if vt == nil {
			return zero, false
		}
		return joiner(v, *vt), true
	}, nameOf(name), "KSTREAM-JOIN-")
}

// LeftJoinTable joins each stream record with the table's current value of
// its key, nil when the table has none.
func LeftJoinTable[K, V, VT, VR any](s *KStream[K, V], t *KTable[K, VT], joiner func(V, *VT) VR, name ...Named) *KStream[K, VR] {
	return streamTableJoin(s, t, func(v V, vt *VT) (VR, bool) { return joiner(v, vt), true }, nameOf(name), "KSTREAM-LEFTJOIN-")
}

func streamTableJoin[K, V, VT, VR any](s *KStream[K, V], t *KTable[K, VT], join func(V, *VT) (VR, bool), name, prefix string) *KStream[K, VR] {
	b := s.b
	getter := joinable(b, t, "join")
	n := b.nameOr(name, prefix)
	parent := streamForJoin(s, n)
	node := b.add(processorSpec[K, V, K, VR](n, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, VR](bc)
		if err != nil {
			return nil, err
		}
		node := &streamTableJoinNode[K, V, VT, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[K, VR]{Children: ch}, join: join}
		node.lookup, err = getter.lookup(bc.Task)
		return node, err
	}), parent)
	if getter != nil {
		b.connect(node, getter.store)
	}
	b.copartition(parent, t.node)
	return newStream[K, VR](b, node, s.keySerde, nil, false)
}

// copartition records that the sources behind two nodes must have equal
// partition counts.
func (b *Builder) copartition(nodes ...*rt.NodeSpec) {
	var group []*rt.NodeSpec
	seen := map[*rt.NodeSpec]bool{}
	var walk func(n *rt.NodeSpec)
	walk = func(n *rt.NodeSpec) {
		if seen[n] {
			return
		}
		seen[n] = true
		if n.Kind == rt.KindSource {
			group = append(group, n)
		}
		for _, p := range n.Parents {
			walk(p)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	b.copart = append(b.copart, group)
}

type streamTableJoinNode[K, V, VT, VR any] struct {
	rt.Base
	rt.Forwarder[K, VR]
	lookup asOfGetter[K, VT] // the table's value for a record's key and time
	join   func(V, *VT) (VR, bool)
}

func (n *streamTableJoinNode[K, V, VT, VR]) Process(r processor.Record[K, V]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1) // Kafka Streams drops stream records without a value
		return
	}
	n.joinOne(r)
}

// joinOne joins r with the table's value for its key and time, and
// forwards the result unless the joiner drops it.
func (n *streamTableJoinNode[K, V, VT, VR]) joinOne(r processor.Record[K, V]) {
	vt, _, ok, err := n.lookup(r.Key, r.Timestamp)
	if err != nil {
		n.Fail(err)
		return
	}
	var p *VT
	if ok {
		p = &vt
	}
	out, ok := n.join(r.Value, p)
	if !ok {
		return
	}
	n.Forward(processor.Record[K, VR]{Key: r.Key, Value: out, Timestamp: r.Timestamp, Headers: r.Headers})
}

// tableJoinKind says which sides a table–table join keeps.
type tableJoinKind int

const (
	innerJoin tableJoinKind = iota
	leftJoin
	outerJoin
)

// TableJoin joins two tables on their keys: a row exists where both have
// one, and changes as either side does.
func TableJoin[K, V, VO, VR any](t *KTable[K, V], other *KTable[K, VO], joiner func(V, VO) VR, name ...Named) *KTable[K, VR] {
	return tableTableJoin(t, other, func(a *V, b *VO) VR { return joiner(*a, *b) }, innerJoin, nameOf(name))
}

// TableLeftJoin keeps every row of t, joined with other's row or nil.
func TableLeftJoin[K, V, VO, VR any](t *KTable[K, V], other *KTable[K, VO], joiner func(V, *VO) VR, name ...Named) *KTable[K, VR] {
	return tableTableJoin(t, other, func(a *V, b *VO) VR { return joiner(*a, b) }, leftJoin, nameOf(name))
}

// TableOuterJoin keeps every row of either table; the missing side is nil.
func TableOuterJoin[K, V, VO, VR any](t *KTable[K, V], other *KTable[K, VO], joiner func(*V, *VO) VR, name ...Named) *KTable[K, VR] {
	return tableTableJoin(t, other, joiner, outerJoin, nameOf(name))
}

func tableTableJoin[K, V, VO, VR any](t *KTable[K, V], other *KTable[K, VO], joiner func(*V, *VO) VR, kind tableJoinKind, name string) *KTable[K, VR] {
	b := t.b
	thisGetter, otherGetter := joinable(b, t, "table join"), joinable(b, other, "table join")
	mergeName := b.nameOr(name, "KTABLE-MERGE-")
	thisName, otherName := b.newName("KTABLE-JOINTHIS-"), b.newName("KTABLE-JOINOTHER-")
	if name != "" {
		thisName, otherName = name+"-join-this", name+"-join-other"
	}
	// A left join needs the left table's old values, an outer join both
	// tables': a deleted row must retract its joined row.
	if kind != innerJoin {
		t.info.enableSendOld()
	}
	if kind == outerJoin {
		other.info.enableSendOld()
	}
	info := &tableInfo{parents: []*tableInfo{t.info, other.info}}
	thisNode := b.add(processorSpec[K, change[V], K, change[VR]](thisName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[VR]](bc)
		if err != nil {
			return nil, err
		}
		g, err := otherGetter.build(bc.Task)
		return &tableJoinNode[K, V, VO, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[K, VR]{Children: ch}, get: g,
			join: joiner, thisSide: true, kind: kind, sendOld: &t.info.sendOld}, err
	}), t.node)
	otherNode := b.add(processorSpec[K, change[VO], K, change[VR]](otherName, func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[VR]](bc)
		if err != nil {
			return nil, err
		}
		g, err := thisGetter.build(bc.Task)
		return &tableJoinNode[K, VO, V, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[K, VR]{Children: ch}, get: g,
			join: func(o *VO, v *V) VR { return joiner(v, o) }, thisSide: false, kind: kind, sendOld: &other.info.sendOld}, err
	}), other.node)
	if otherGetter != nil {
		b.connect(thisNode, otherGetter.store)
	}
	if thisGetter != nil {
		b.connect(otherNode, thisGetter.store)
	}
	b.copartition(t.node, other.node)
	spec := processorSpec[K, change[VR], K, change[VR]](mergeName, buildPass[K, change[VR]])
	merge := b.add(spec, thisNode, otherNode)
	// Merge was named first, as Kafka Streams counts: move it after its
	// parents in creation order.
	b.moveToEnd(merge)
	return &KTable[K, VR]{b: b, node: merge, keySerde: t.keySerde, info: info}
}

// moveToEnd makes a node the last created (its name may have been taken
// earlier).
func (b *Builder) moveToEnd(n *rt.NodeSpec) {
	for i, x := range b.nodes {
		if x == n {
			b.nodes = append(append(b.nodes[:i:i], b.nodes[i+1:]...), n)
			break
		}
	}
	for i, x := range b.nodes {
		x.Index = i
	}
}

// tableJoinNode is one side of a table–table join: an update of this side
// is joined with the other side's current row, as Kafka Streams'
// KTableKTable{Inner,Left,Right,Outer}Join.
type tableJoinNode[K, V, VO, VR any] struct {
	rt.Base
	fw       fwd[K, VR]
	get      valueGetter[K, VO]
	join     func(*V, *VO) VR
	thisSide bool
	kind     tableJoinKind
	sendOld  *bool // this side's table sends old values
}

func (n *tableJoinNode[K, V, VO, VR]) Process(r processor.Record[K, change[V]]) {
	if r.Value.NotLatest {
		n.T.Counters.Skipped.Add(1) // an out-of-order update of a versioned table (KIP-914)
		return
	}
	o, ots, ok, err := n.get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	var other *VO
	if ok {
		other = &o
	}
	in := r.Value
	var newV, oldV *V
	if in.HasNew {
		newV = &in.New
	}
	if in.HasOld && *n.sendOld {
		oldV = &in.Old
	}
	ts := r.Timestamp
	var c change[VR]
	switch {
	case n.kind == innerJoin, n.kind == leftJoin && !n.thisSide:
		// The other side must exist: an inner join, or the right side of a
		// left join (whose left row must exist).
		if other == nil {
			return
		}
		ts = max(ts, ots)
		if n.kind == innerJoin {
			if newV != nil {
				c.New, c.HasNew = n.join(newV, other), true
			}
			if oldV != nil {
				c.Old, c.HasOld = n.join(oldV, other), true
			}
		} else {
			c.New, c.HasNew = n.join(newV, other), true
			if *n.sendOld {
				c.Old, c.HasOld = n.join(oldV, other), true
			}
		}
	default:
		// The left side of a left join, either side of an outer join: the
		// other side may be missing.
		if other == nil {
			if newV == nil && oldV == nil {
				return
			}
		} else {
			ts = max(ts, ots)
		}
		outer := n.kind == outerJoin
		if newV != nil || (outer && other != nil) {
			c.New, c.HasNew = n.join(newV, other), true
		}
		if oldV != nil || (outer && *n.sendOld && other != nil) {
			c.Old, c.HasOld = n.join(oldV, other), true
		}
	}
	n.fw.Forward(processor.Record[K, change[VR]]{Key: r.Key, Value: c, Timestamp: ts, Headers: r.Headers})
}
