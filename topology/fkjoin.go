package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// Foreign-key joins, as Kafka Streams' KTable.join(other, foreignKeyExtractor,
// joiner): each row of the left table names a row of the right table by a
// foreign key taken from its value, and the result, keyed like the left
// table, changes as either row does.
//
// The two tables are partitioned differently, so, as in Kafka Streams, the
// join goes through two internal topics. The left side sends a
// subscription (its primary key and a hash of its value) to the
// "-subscription-registration" topic keyed by the foreign key; the right
// side keeps subscriptions in a store, answers each with the right row, and
// answers every subscriber again when the right row changes, through the
// "-subscription-response" topic keyed by the primary key; the left side
// drops answers whose hash no longer matches its row (the row changed
// since) and emits the joined row. The registration topic has the right
// table's partition count, the response topic the left table's.

// The subscription instructions (Kafka Streams' SubscriptionWrapper).
//
// Every change of a left row that the left table forwards gets exactly one
// final answer, sent after every earlier answer for the row with the same
// hash (answers for one hash come from one right partition, in order, or
// from the left task itself). The resolver may accept a stale answer whose
// hash happens to match — the row went back to an earlier value, or was
// deleted and created again — but the final answer always follows and
// corrects it. Kafka Streams lets an inner join stay silent when a new row
// or a new value under the same foreign key finds no right row, which
// leaves such a stale result in place; eddy answers,
// and marks the answer quiet: it retracts an existing result but, when the
// result is materialized and has no row, emits nothing, as Kafka Streams.
const (
	fkDeleteAndPropagate   byte = iota // left row deleted: retract the result
	fkDeleteNoPropagate                // the foreign key changed: forget the old subscription
	fkPropagateNullIfNone              // answer; without a right row, say so (a left join's row, or a retraction)
	fkPropagateQuietIfNone             // answer; without a right row, quietly (an inner join)
)

// fkSubscription is a registration record's value.
type fkSubscription struct {
	instruction byte
	hash        []byte // of the left value; nil for a deleted row
	primaryKey  []byte // the left key, serialized
}

type fkSubscriptionSerde struct{}

func (fkSubscriptionSerde) Serialize(_ string, s fkSubscription) ([]byte, error) {
	b := make([]byte, 0, 3+len(s.hash)+len(s.primaryKey))
	b = append(b, 0, s.instruction, byte(len(s.hash)))
	b = append(b, s.hash...)
	return append(b, s.primaryKey...), nil
}

func (fkSubscriptionSerde) Deserialize(topic string, b []byte) (fkSubscription, error) {
	if len(b) < 3 || b[0] != 0 || len(b) < 3+int(b[2]) {
		return fkSubscription{}, fmt.Errorf("%w: not a foreign-key join subscription (%d bytes) in %s", serde.ErrSize, len(b), topic)
	}
	n := 3 + int(b[2])
	s := fkSubscription{instruction: b[1], primaryKey: bytes.Clone(b[n:])}
	if b[2] > 0 {
		s.hash = bytes.Clone(b[3:n])
	}
	return s, nil
}

// fkResponse is a response record's value: the hash of the subscription it
// answers and the right row, if any. A quiet answer without a right row
// retracts an existing result only (see fkPropagateQuietIfNone).
type fkResponse[VO any] struct {
	hash  []byte
	value VO
	found bool
	quiet bool
}

// The byte after a response's hash.
const (
	fkRespNone byte = iota
	fkRespFound
	fkRespNoneQuiet
)

type fkResponseSerde[VO any] struct{ vs serde.Serde[VO] }

func (s fkResponseSerde[VO]) Serialize(topic string, r fkResponse[VO]) ([]byte, error) {
	b := append([]byte{0, byte(len(r.hash))}, r.hash...)
	if !r.found {
		if r.quiet {
			return append(b, fkRespNoneQuiet), nil
		}
		return append(b, fkRespNone), nil
	}
	v, err := s.vs.Serialize(topic, r.value)
	if err != nil {
		return nil, err
	}
	return append(append(b, fkRespFound), v...), nil
}

func (s fkResponseSerde[VO]) Deserialize(topic string, b []byte) (fkResponse[VO], error) {
	var r fkResponse[VO]
	if len(b) < 3 || b[0] != 0 || len(b) < 3+int(b[1]) {
		return r, fmt.Errorf("%w: not a foreign-key join response (%d bytes) in %s", serde.ErrSize, len(b), topic)
	}
	n := 2 + int(b[1])
	if b[1] > 0 {
		r.hash = bytes.Clone(b[2:n])
	}
	switch b[n] {
	case fkRespNone:
	case fkRespNoneQuiet:
		r.quiet = true
	case fkRespFound:
		v, err := s.vs.Deserialize(topic, b[n+1:])
		if err != nil {
			return r, err
		}
		r.value, r.found = v, true
	default:
		return r, fmt.Errorf("%w: not a foreign-key join response (answer byte %d) in %s", serde.ErrSize, b[n], topic)
	}
	return r, nil
}

// fkHash hashes a serialized left value (128-bit FNV-1a; only eddy reads it).
func fkHash(b []byte) []byte {
	h := fnv.New128a()
	h.Write(b)
	return h.Sum(nil)
}

// ForeignKeyJoin joins each row of t with the row of other whose key
// foreignKey takes from t's row; rows without a foreign key (ok false) or
// whose foreign row does not exist have no result. Both tables must be
// materialized. The result is keyed like t; pass m (with a value serde) to
// materialize it — needed to join it, query it, or aggregate it (which
// retracts old rows); its store's name also names the join's internal
// topics and store. The store is not cached. As Kafka Streams'
// KTable.join(other, foreignKeyExtractor, joiner).
func ForeignKeyJoin[K, V, KO, VO, VR any](t *KTable[K, V], other *KTable[KO, VO], foreignKey func(V) (KO, bool), joiner func(V, VO) VR, m ...MaterializedOptions[K, VR]) *KTable[K, VR] {
	return fkJoin(t, other, foreignKey, func(v V, vo *VO) VR { return joiner(v, *vo) }, false, m)
}

// ForeignKeyLeftJoin is ForeignKeyJoin keeping every row of t: the joiner
// gets nil when the row has no foreign key or its foreign row does not
// exist. As Kafka Streams' KTable.leftJoin(other, foreignKeyExtractor,
// joiner) (3.7 and later for rows without a foreign key).
func ForeignKeyLeftJoin[K, V, KO, VO, VR any](t *KTable[K, V], other *KTable[KO, VO], foreignKey func(V) (KO, bool), joiner func(V, *VO) VR, m ...MaterializedOptions[K, VR]) *KTable[K, VR] {
	return fkJoin(t, other, foreignKey, joiner, true, m)
}

func fkJoin[K, V, KO, VO, VR any](t *KTable[K, V], other *KTable[KO, VO], foreignKey func(V) (KO, bool), joiner func(V, *VO) VR, left bool, ms []MaterializedOptions[K, VR]) *KTable[K, VR] {
	b := t.b
	leftGetter, rightGetter := joinable(b, t, "foreign-key join"), joinable(b, other, "foreign-key join")
	if t.keySerde == nil || t.valueSerde == nil || other.keySerde == nil || other.valueSerde == nil {
		b.errorf("foreign-key join: both tables need key and value serdes (Consumed or Materialized(...).WithSerdes)")
		return &KTable[K, VR]{b: b, node: t.node, info: &tableInfo{}}
	}
	ks, vs, kos := t.keySerde, t.valueSerde, other.keySerde
	materialized := len(ms) > 0
	var mo MaterializedOptions[K, VR]
	prefix := ""
	if materialized {
		mo = ms[0]
		prefix = mo.name
	}
	if prefix == "" {
		prefix = b.newName("KTABLE-FK-JOIN-")
	}
	regTopic, respTopic := prefix+"-subscription-registration", prefix+"-subscription-response"
	subStore, outStore := prefix+"-subscription-store", ""
	if materialized {
		outStore = prefix
		if mo.name == "" {
			outStore = prefix + "-STATE-STORE"
		}
		mo.caching = false
		if mo.ttl > 0 {
			b.errorf("foreign-key join %s: WithTTL is not supported on a foreign-key join's result (its rows follow the joined tables: give those the TTL)", prefix)
		}
		materialize(b, mo, outStore, ks, nil)
	}
	t.info.enableSendOld()     // a changed foreign key retracts the old subscription
	other.info.enableSendOld() // a deleted right row is told from a no-op

	// Left side: send subscriptions.
	send := b.add(processorSpec[K, change[V], KO, fkSubscription](prefix+"-subscription-send", func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[KO, fkSubscription](bc)
		return &fkSendNode[K, V, KO]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[KO, fkSubscription]{Children: ch},
			fk: foreignKey, ks: ks, vs: vs, kos: kos, left: left,
			regTopic: bc.Task.Topic(regTopic, true), respTopic: bc.Task.Topic(respTopic, true)}, err
	}), t.node)
	sinkNode(b, prefix+"-subscription-registration-sink", send, regTopic, nil, kos, serde.Serde[fkSubscription](fkSubscriptionSerde{}), true)
	respSerde := fkResponseSerde[VO]{other.valueSerde}
	b.repart = append(b.repart,
		&rt.InternalTopic{Name: regTopic, Repartition: true, SizedLikeReader: true, Config: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}},
		&rt.InternalTopic{Name: respTopic, Repartition: true, SizedLikeReader: true, Config: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}})

	// Right side: keep subscriptions, answer them, and answer again when
	// the right row changes.
	b.addStore(stores.KeyValue(subStore, serde.Bytes(), serde.Bytes()))
	regSource := sourceNode(b, prefix+"-subscription-registration-source", []string{regTopic}, kos, serde.Serde[fkSubscription](fkSubscriptionSerde{}), true)
	receive := b.add(processorSpec[KO, fkSubscription, []byte, fkResponse[VO]](prefix+"-subscription-receive", func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[[]byte, fkResponse[VO]](bc)
		if err != nil {
			return nil, err
		}
		subs, err := rt.Store[stores.KeyValueStore[[]byte, []byte]](bc.Task, subStore)
		if err != nil {
			return nil, err
		}
		g, err := rightGetter.build(bc.Task)
		return &fkReceiveNode[KO, VO]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[[]byte, fkResponse[VO]]{Children: ch},
			subs: subs, get: g, kos: kos, regTopic: bc.Task.Topic(regTopic, true)}, err
	}), regSource)
	b.connect(receive, subStore)
	if rightGetter != nil {
		b.connect(receive, rightGetter.store)
	}
	foreign := b.add(processorSpec[KO, change[VO], []byte, fkResponse[VO]](prefix+"-foreign-table-send", func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[[]byte, fkResponse[VO]](bc)
		if err != nil {
			return nil, err
		}
		subs, err := rt.Store[stores.KeyValueStore[[]byte, []byte]](bc.Task, subStore)
		return &fkForeignNode[KO, VO]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, Forwarder: rt.Forwarder[[]byte, fkResponse[VO]]{Children: ch},
			subs: subs, kos: kos, regTopic: bc.Task.Topic(regTopic, true)}, err
	}), other.node)
	b.connect(foreign, subStore)
	answers := b.add(processorSpec[[]byte, fkResponse[VO], []byte, fkResponse[VO]](prefix+"-subscription-response-merge", buildPass[[]byte, fkResponse[VO]]), receive, foreign)
	sinkNode(b, prefix+"-subscription-response-sink", answers, respTopic, nil, serde.Bytes(), serde.Serde[fkResponse[VO]](respSerde), true)
	b.copartition(regSource, other.node)

	// Left side again: resolve answers against the current left row.
	respSource := sourceNode(b, prefix+"-subscription-response-source", []string{respTopic}, ks, serde.Serde[fkResponse[VO]](respSerde), true)
	info := &tableInfo{}
	b.onBuild = append(b.onBuild, func() {
		if info.sendOld && !materialized {
			b.errorf("foreign-key join %s: its result is joined or aggregated, which needs its old rows: materialize it (pass Materialized with a value serde)", prefix)
		}
	})
	resolver := b.add(processorSpec[K, fkResponse[VO], K, change[VR]](prefix+"-subscription-response-resolver", func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[K, change[VR]](bc)
		if err != nil {
			return nil, err
		}
		g, err := leftGetter.build(bc.Task)
		if err != nil {
			return nil, err
		}
		var out timestampedStore[K, VR]
		if outStore != "" {
			out, err = rt.Store[timestampedStore[K, VR]](bc.Task, outStore)
		}
		return &fkResolveNode[K, V, VO, VR]{Base: rt.Base{NodeName: bc.Spec.Name, T: bc.Task}, fw: fwd[K, VR]{Children: ch},
			get: g, out: out, vs: vs, joiner: joiner, left: left, sendOld: &info.sendOld, respTopic: bc.Task.Topic(respTopic, true)}, err
	}), respSource)
	if leftGetter != nil {
		b.connect(resolver, leftGetter.store)
	}
	b.copartition(respSource, t.node)
	res := &KTable[K, VR]{b: b, node: resolver, keySerde: ks, info: info}
	if materialized {
		b.connect(resolver, outStore)
		res.store, res.valueSerde, res.getter = outStore, mo.valueSerde, storeGetter[K, VR](outStore)
	}
	return res
}

// fkSendNode sends the left table's subscriptions, as Kafka Streams'
// SubscriptionSendProcessorSupplier.
type fkSendNode[K, V, KO any] struct {
	rt.Base
	rt.Forwarder[KO, fkSubscription]
	fk   func(V) (KO, bool)
	ks   serde.Serde[K]
	vs   serde.Serde[V]
	kos  serde.Serde[KO]
	left bool
	// The internal topics' full names, which serdes are called with.
	regTopic, respTopic string
}

func (n *fkSendNode[K, V, KO]) Process(r processor.Record[K, change[V]]) {
	if r.Value.NotLatest {
		n.T.Counters.Skipped.Add(1) // an out-of-order update of a versioned table (KIP-914)
		return
	}
	pk, err := n.ks.Serialize(n.respTopic, r.Key)
	if err != nil {
		n.Fail(fmt.Errorf("serializing the primary key: %w", err))
		return
	}
	c := r.Value
	var oldFK, newFK KO
	var oldFKB, newFKB []byte
	hasOld, hasNew := false, false
	if c.HasOld {
		if oldFK, hasOld = n.fk(c.Old); hasOld {
			if oldFKB, err = n.kos.Serialize(n.regTopic, oldFK); err != nil {
				n.Fail(fmt.Errorf("serializing the foreign key: %w", err))
				return
			}
		}
	}
	send := func(fk KO, instr byte, hash []byte) {
		n.Forward(processor.Record[KO, fkSubscription]{Key: fk, Value: fkSubscription{instruction: instr, hash: hash, primaryKey: pk},
			Timestamp: r.Timestamp, Headers: r.Headers})
	}
	// answerSelf answers the resolver directly (through the response
	// topic, so the answer is ordered after those already in flight) that
	// there is no right row: for rows without a foreign key, and deleted
	// rows that had none.
	answerSelf := func(hash []byte, quiet bool) {
		b, err := fkResponseSerde[struct{}]{}.Serialize(n.respTopic, fkResponse[struct{}]{hash: hash, quiet: quiet})
		if err != nil {
			n.Fail(err)
			return
		}
		n.T.Send(&rt.OutRecord{Topic: n.respTopic, Partition: n.T.ID().Partition, Key: pk, Value: b,
			Timestamp: r.Timestamp, Headers: r.Headers})
	}
	if !c.HasNew {
		if hasOld && n.left {
			// As Kafka Streams: a left join retracts a deleted row at
			// once (at the deletion's time) and only forgets the
			// subscription on the right.
			send(oldFK, fkDeleteNoPropagate, nil)
			answerSelf(nil, false)
		} else if hasOld {
			// An inner join's retraction comes back from the right
			// side, at the later of the deletion's and the right row's
			// time (Kafka Streams' result timestamp).
			send(oldFK, fkDeleteAndPropagate, nil)
		} else {
			// The row had no foreign key, or, as far as this table
			// forwarded, did not exist (the cache held a short-lived row
			// back). A result may still have been made from an answer
			// whose hash matched the row meanwhile: retract it. Kafka
			// Streams is silent here except for a left join's row.
			answerSelf(nil, !(c.HasOld && n.left))
		}
		return
	}
	vb, err := n.vs.Serialize(n.respTopic, c.New)
	if err != nil {
		n.Fail(fmt.Errorf("serializing the left value to hash it: %w", err))
		return
	}
	hash := fkHash(vb)
	if newFK, hasNew = n.fk(c.New); hasNew {
		if newFKB, err = n.kos.Serialize(n.regTopic, newFK); err != nil {
			n.Fail(fmt.Errorf("serializing the foreign key: %w", err))
			return
		}
	}
	changed := hasOld && (!hasNew || !bytes.Equal(oldFKB, newFKB))
	if changed && !hasNew && !n.left {
		// An inner join's row losing its foreign key: the retraction
		// comes back from the old right row, at the later of the two
		// times, as Kafka Streams.
		send(oldFK, fkDeleteAndPropagate, hash)
		return
	}
	if changed {
		send(oldFK, fkDeleteNoPropagate, hash)
	}
	if !hasNew {
		// No foreign key: there is no right row to ask. Losing the foreign
		// key retracts (as Kafka Streams); otherwise an inner join answers
		// quietly.
		answerSelf(hash, !changed && !n.left)
		return
	}
	// An inner join answers quietly where Kafka Streams stays silent (a
	// new row, or a new value under the same foreign key, without a right
	// row); a changed foreign key retracts the old result even without a
	// right row for the new one, as Kafka Streams.
	instr := fkPropagateNullIfNone
	if !n.left && !changed {
		instr = fkPropagateQuietIfNone
	}
	send(newFK, instr, hash)
}

// subscriptionKey is a subscription store key: the foreign key's length
// and bytes, then the primary key's bytes, so one foreign key's
// subscribers are one prefix.
func subscriptionKey(fk, pk []byte) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(fk)+len(pk)), uint32(len(fk)))
	return append(append(b, fk...), pk...)
}

// fkReceiveNode keeps subscriptions and answers them with the right row,
// as Kafka Streams' SubscriptionReceiveProcessorSupplier and
// SubscriptionJoinProcessorSupplier.
type fkReceiveNode[KO, VO any] struct {
	rt.Base
	rt.Forwarder[[]byte, fkResponse[VO]]
	subs     stores.KeyValueStore[[]byte, []byte]
	get      valueGetter[KO, VO]
	kos      serde.Serde[KO]
	regTopic string
}

func (n *fkReceiveNode[KO, VO]) Process(r processor.Record[KO, fkSubscription]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1)
		return
	}
	fkb, err := n.kos.Serialize(n.regTopic, r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	s := r.Value
	key := subscriptionKey(fkb, s.primaryKey)
	switch s.instruction {
	case fkDeleteAndPropagate, fkDeleteNoPropagate:
		if _, _, err := n.subs.Delete(key); err != nil {
			n.Fail(err)
			return
		}
		if s.instruction == fkDeleteAndPropagate {
			_, ts, found, err := n.get(r.Key)
			if err != nil {
				n.Fail(err)
				return
			}
			if !found {
				ts = r.Timestamp
			}
			n.Forward(processor.Record[[]byte, fkResponse[VO]]{Key: s.primaryKey, Value: fkResponse[VO]{hash: s.hash}, Timestamp: max(r.Timestamp, ts), Headers: r.Headers})
		}
		return
	case fkPropagateNullIfNone, fkPropagateQuietIfNone:
	default:
		n.Fail(fmt.Errorf("unknown foreign-key subscription instruction %d", s.instruction))
		return
	}
	if err := n.subs.Put(key, s.hash); err != nil {
		n.Fail(err)
		return
	}
	vo, ts, found, err := n.get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	n.Forward(processor.Record[[]byte, fkResponse[VO]]{Key: s.primaryKey,
		Value:     fkResponse[VO]{hash: s.hash, value: vo, found: found, quiet: !found && s.instruction == fkPropagateQuietIfNone},
		Timestamp: max(r.Timestamp, ts), Headers: r.Headers})
}

// fkForeignNode answers every subscriber of a right row when it changes,
// as Kafka Streams' ForeignTableJoinProcessorSupplier.
type fkForeignNode[KO, VO any] struct {
	rt.Base
	rt.Forwarder[[]byte, fkResponse[VO]]
	subs     stores.KeyValueStore[[]byte, []byte]
	kos      serde.Serde[KO]
	regTopic string
}

func (n *fkForeignNode[KO, VO]) Process(r processor.Record[KO, change[VO]]) {
	if r.Value.NotLatest {
		n.T.Counters.Skipped.Add(1) // an out-of-order update of a versioned table (KIP-914)
		return
	}
	// A change with neither value (a tombstone for a row that did not
	// exist, or a row the cache held back and that is gone again) answers
	// every subscriber that there is no row, as Kafka Streams does for the
	// tombstone: the result is retracted, or a tombstone says there is none.
	fkb, err := n.kos.Serialize(n.regTopic, r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	prefix := subscriptionKey(fkb, nil)
	it := n.subs.Range(prefix, append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	type sub struct{ pk, hash []byte }
	var subs []sub
	for k, hash := range it.Seq() {
		if bytes.HasPrefix(k, prefix) {
			subs = append(subs, sub{bytes.Clone(k[len(prefix):]), bytes.Clone(hash)})
		}
	}
	if err := it.Err(); err != nil {
		n.Fail(err)
		return
	}
	for _, s := range subs {
		n.Forward(processor.Record[[]byte, fkResponse[VO]]{Key: s.pk, Value: fkResponse[VO]{hash: s.hash, value: r.Value.New, found: r.Value.HasNew},
			Timestamp: r.Timestamp, Headers: r.Headers})
	}
}

// fkResolveNode turns answers into result rows, dropping those whose hash
// does not match the current left row, as Kafka Streams'
// ResponseJoinProcessorSupplier.
type fkResolveNode[K, V, VO, VR any] struct {
	rt.Base
	fw        fwd[K, VR]
	get       valueGetter[K, V]
	out       timestampedStore[K, VR]
	vs        serde.Serde[V]
	joiner    func(V, *VO) VR
	left      bool
	sendOld   *bool
	respTopic string
}

func (n *fkResolveNode[K, V, VO, VR]) Process(r processor.Record[K, fkResponse[VO]]) {
	if r.NullValue {
		n.T.Counters.Skipped.Add(1)
		return
	}
	v, _, found, err := n.get(r.Key)
	if err != nil {
		n.Fail(err)
		return
	}
	var current []byte
	if found {
		vb, err := n.vs.Serialize(n.respTopic, v)
		if err != nil {
			n.Fail(err)
			return
		}
		current = fkHash(vb)
	}
	resp := r.Value
	if !bytes.Equal(current, resp.hash) {
		return // the left row changed since: a newer answer is on its way
	}
	var c change[VR]
	ok := false
	if n.out != nil {
		var old stores.ValueAndTimestamp[VR]
		if old, ok, err = n.out.Get(r.Key); err != nil {
			n.Fail(err)
			return
		}
		if ok && *n.sendOld {
			c.Old, c.HasOld = old.Value, true
		}
	}
	if found && (resp.found || n.left) {
		var vo *VO
		if resp.found {
			vo = &resp.value
		}
		c.New, c.HasNew = n.joiner(v, vo), true
		if n.out != nil {
			err = n.out.Put(r.Key, stores.ValueAndTimestamp[VR]{Value: c.New, Timestamp: r.Timestamp})
		}
	} else if ok {
		_, _, err = n.out.Delete(r.Key)
	} else if resp.quiet && n.out != nil {
		return // nothing to retract
	}
	// Otherwise a tombstone is forwarded even when there was no row to
	// retract (or, not materialized, no way to know), as Kafka Streams does.
	if err != nil {
		n.Fail(err)
		return
	}
	n.fw.Forward(processor.Record[K, change[VR]]{Key: r.Key, Value: c, Timestamp: r.Timestamp, Headers: r.Headers})
}
