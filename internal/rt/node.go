package rt

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
)

// Node is one node of a task's graph, as the task sees it.
type Node interface {
	Name() string
	// Init runs after every node of the task is built, in topological order.
	Init() error
	Close() error
}

// Receiver is a node that takes records of type Record[K, V]: what a parent
// forwards to. Errors do not travel back up: a node reports them to its task
// (Task.HandleError), which decides to go on, dead-letter, or fail.
type Receiver[K, V any] interface {
	Node
	Process(rec processor.Record[K, V])
}

// SourceNode takes raw records from a topic.
type SourceNode interface {
	Node
	ProcessRaw(r *RawRecord)
}

// BuildCtx is what a NodeSpec's Build gets.
type BuildCtx struct {
	Task     *Task
	Spec     *NodeSpec
	children []Node
}

// Children returns the built children of the node, as receivers of
// Record[K, V].
func Children[K, V any](b *BuildCtx) ([]Receiver[K, V], error) {
	out := make([]Receiver[K, V], len(b.children))
	for i, c := range b.children {
		r, ok := c.(Receiver[K, V])
		if !ok {
			return nil, fmt.Errorf("%s cannot forward Record[%s, %s] to %s (%T)",
				b.Spec.Name, TypeOf[K](), TypeOf[V](), c.Name(), c)
		}
		out[i] = r
	}
	return out, nil
}

// TypeOf returns the reflect.Type of T (also for interface types).
func TypeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// Forwarder sends records to a node's children.
type Forwarder[K, V any] struct {
	Children []Receiver[K, V]
}

// Forward sends rec to every child.
func (f *Forwarder[K, V]) Forward(rec processor.Record[K, V]) {
	for _, c := range f.Children {
		c.Process(rec)
	}
}

// Base holds what every node has: its name and task.
type Base struct {
	NodeName string
	T        *Task
}

// Name implements Node.
func (b *Base) Name() string { return b.NodeName }

// Init implements Node.
func (b *Base) Init() error { return nil }

// Close implements Node.
func (b *Base) Close() error { return nil }

// Fail reports an error of this node for the record being processed.
func (b *Base) Fail(err error) { b.T.HandleError(ErrProcessing, b.NodeName, err) }

// Context implements processor.Context for one node of one task.
type Context[K, V any] struct {
	Forwarder[K, V]
	node      string
	t         *Task
	byName    map[string]Receiver[K, V]
	storesOK  map[string]bool
	fixedKey  bool
	fixedKeyV K
}

// NewContext returns the context of node (built by b) forwarding to its
// children.
func NewContext[K, V any](b *BuildCtx) (*Context[K, V], error) {
	ch, err := Children[K, V](b)
	if err != nil {
		return nil, err
	}
	c := &Context[K, V]{Forwarder: Forwarder[K, V]{Children: ch}, node: b.Spec.Name, t: b.Task,
		byName: map[string]Receiver[K, V]{}, storesOK: map[string]bool{}}
	for _, r := range ch {
		c.byName[r.Name()] = r
	}
	for _, s := range b.Spec.Stores {
		c.storesOK[s] = true
	}
	return c, nil
}

// Forward implements processor.Context.
func (c *Context[K, V]) Forward(rec processor.Record[K, V]) {
	if c.fixedKey {
		rec.Key = c.fixedKeyV
	}
	c.Forwarder.Forward(rec)
}

// ForwardTo implements processor.Context.
func (c *Context[K, V]) ForwardTo(child string, rec processor.Record[K, V]) error {
	r, ok := c.byName[child]
	if !ok {
		return fmt.Errorf("%s: %q is not a child of this processor", c.node, child)
	}
	if c.fixedKey {
		rec.Key = c.fixedKeyV
	}
	r.Process(rec)
	return nil
}

// Schedule implements processor.Context.
func (c *Context[K, V]) Schedule(interval time.Duration, typ processor.PunctuationType, fn processor.Punctuator) (processor.Cancellable, error) {
	return c.t.schedule(c.node, interval.Milliseconds(), typ, fn)
}

// RecordMetadata implements processor.Context.
func (c *Context[K, V]) RecordMetadata() (processor.RecordMetadata, bool) {
	return c.t.RecordMetadata()
}

// TaskID implements processor.Context.
func (c *Context[K, V]) TaskID() processor.TaskID { return c.t.id }

// ApplicationID implements processor.Context.
func (c *Context[K, V]) ApplicationID() string { return c.t.cfg.AppID }

// StreamTime implements processor.Context.
func (c *Context[K, V]) StreamTime() int64 { return c.t.streamTime }

// StateStore implements processor.Context: only stores connected to the
// node are reachable.
func (c *Context[K, V]) StateStore(name string) (any, error) {
	if !c.storesOK[name] {
		return nil, fmt.Errorf("processor %s: state store %q is not connected to it (connect it in the topology)", c.node, name)
	}
	s, ok := c.t.stores[name]
	if !ok {
		return nil, fmt.Errorf("processor %s: state store %q is not in task %s", c.node, name, c.t.id)
	}
	return s, nil
}

// ProcessorNode runs a user processor.
type ProcessorNode[KIn, VIn, KOut, VOut any] struct {
	Base
	ctx  *Context[KOut, VOut]
	proc processor.Processor[KIn, VIn, KOut, VOut]
	// fixKey, when set, makes forwarded records keep the key of the input
	// record (ProcessValues).
	fixKey func(KIn)
}

// NewProcessorNode builds a node running p.
func NewProcessorNode[KIn, VIn, KOut, VOut any](b *BuildCtx, p processor.Processor[KIn, VIn, KOut, VOut]) (*ProcessorNode[KIn, VIn, KOut, VOut], error) {
	ctx, err := NewContext[KOut, VOut](b)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("%s: the processor supplier returned nil", b.Spec.Name)
	}
	return &ProcessorNode[KIn, VIn, KOut, VOut]{Base: Base{b.Spec.Name, b.Task}, ctx: ctx, proc: p}, nil
}

// Init implements Node.
func (n *ProcessorNode[KIn, VIn, KOut, VOut]) Init() error {
	return safeCall(func() error { return n.proc.Init(n.ctx) })
}

// Close implements Node.
func (n *ProcessorNode[KIn, VIn, KOut, VOut]) Close() error {
	return safeCall(n.proc.Close)
}

// Process implements Receiver.
func (n *ProcessorNode[KIn, VIn, KOut, VOut]) Process(rec processor.Record[KIn, VIn]) {
	if n.fixKey != nil {
		n.fixKey(rec.Key)
	}
	err := safeCall(func() error { return n.proc.Process(rec) })
	n.ctx.fixedKey = false
	if err != nil {
		n.Fail(err)
	}
}

// NewFixedKeyProcessorNode builds a node running p whose forwarded records
// always carry the key of the record being processed.
func NewFixedKeyProcessorNode[K, VIn, VOut any](b *BuildCtx, p processor.Processor[K, VIn, K, VOut]) (*ProcessorNode[K, VIn, K, VOut], error) {
	n, err := NewProcessorNode(b, p)
	if err != nil {
		return nil, err
	}
	n.fixKey = func(k K) { n.ctx.fixedKey, n.ctx.fixedKeyV = true, k }
	return n, nil
}

// SourceNodeOf deserializes raw records and forwards them.
type SourceNodeOf[K, V any] struct {
	Base
	Forwarder[K, V]
	ks serde.Serde[K]
	vs serde.Serde[V]
	// Extract, when set, reads the record's timestamp from the record
	// (event time); the Kafka timestamp is in rec.Timestamp.
	Extract func(rec processor.Record[K, V]) (int64, error)
}

// sourcePrepared is a record a source decoded when it was buffered.
type sourcePrepared[K, V any] struct {
	rec processor.Record[K, V]
	err error // a deserialization error: reported when processed
}

// NewSourceNode builds a source with the given serdes.
func NewSourceNode[K, V any](b *BuildCtx, ks serde.Serde[K], vs serde.Serde[V]) (*SourceNodeOf[K, V], error) {
	ch, err := Children[K, V](b)
	if err != nil {
		return nil, err
	}
	return &SourceNodeOf[K, V]{Base: Base{b.Spec.Name, b.Task}, Forwarder: Forwarder[K, V]{ch}, ks: ks, vs: vs}, nil
}

// Process implements Receiver: a source also takes typed records (from the
// test driver's global stores and the like).
func (s *SourceNodeOf[K, V]) Process(rec processor.Record[K, V]) { s.Forward(rec) }

func (s *SourceNodeOf[K, V]) decode(r *RawRecord) (processor.Record[K, V], error) {
	rec := processor.Record[K, V]{Timestamp: r.Timestamp, Headers: r.Headers}
	var err error
	if rec.Key, err = s.ks.Deserialize(r.Topic, r.Key); err != nil {
		return rec, &serde.Error{Op: "deserialize", Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, IsKey: true, Err: err}
	}
	if r.Value == nil {
		rec.NullValue = true
	} else if rec.Value, err = s.vs.Deserialize(r.Topic, r.Value); err != nil {
		return rec, &serde.Error{Op: "deserialize", Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
	}
	return rec, nil
}

// Prepare implements Preparer for sources with a timestamp extractor.
func (s *SourceNodeOf[K, V]) Prepare(r *RawRecord) (any, int64, error) {
	if s.Extract == nil {
		return nil, r.Timestamp, nil
	}
	rec, err := s.decode(r)
	if err != nil {
		return &sourcePrepared[K, V]{err: err}, r.Timestamp, nil
	}
	ts, err := s.Extract(rec)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: the timestamp extractor of %s: %w", ErrInvalidTimestamp, s.NodeName, err)
	}
	if ts < 0 {
		return nil, 0, fmt.Errorf("%w %d from the timestamp extractor of %s", ErrInvalidTimestamp, ts, s.NodeName)
	}
	rec.Timestamp = ts
	return &sourcePrepared[K, V]{rec: rec}, ts, nil
}

// ProcessRaw implements SourceNode.
func (s *SourceNodeOf[K, V]) ProcessRaw(r *RawRecord) {
	var rec processor.Record[K, V]
	var err error
	if p, ok := r.decoded.(*sourcePrepared[K, V]); ok {
		rec, err = p.rec, p.err
	} else {
		rec, err = s.decode(r)
	}
	if err != nil {
		s.T.HandleError(ErrDeserialization, s.NodeName, err)
		return
	}
	s.Forward(rec)
}

// TopicChooser picks a sink's topic per record.
type TopicChooser[K, V any] func(rec processor.Record[K, V]) string

// Partitioner chooses the partitions of a sink's record (value nil for a
// tombstone) among numPartitions: ok false leaves it to the default
// partitioner; several partitions multicast it, none drop it.
type Partitioner[K, V any] func(topic string, key K, value *V, numPartitions int32) (partitions []int32, ok bool)

// SinkNode serializes records and sends them to a topic.
type SinkNode[K, V any] struct {
	Base
	topic       string
	chooser     TopicChooser[K, V]
	partitioner Partitioner[K, V]
	ks          serde.Serde[K]
	vs          serde.Serde[V]
	internal    bool
	out         OutRecord // reused: collectors do not keep records
}

// NewSinkNode builds a sink to a fixed topic (resolved if internal) or to
// the topic chooser picks, placing records with partitioner (nil: the
// default partitioner).
func NewSinkNode[K, V any](b *BuildCtx, ks serde.Serde[K], vs serde.Serde[V], chooser TopicChooser[K, V], partitioner Partitioner[K, V]) *SinkNode[K, V] {
	return &SinkNode[K, V]{
		Base:        Base{b.Spec.Name, b.Task},
		topic:       b.Task.Topic(b.Spec.Topic, b.Spec.Internal),
		chooser:     chooser,
		partitioner: partitioner,
		ks:          ks,
		vs:          vs,
		internal:    b.Spec.Internal,
	}
}

// Process implements Receiver.
func (s *SinkNode[K, V]) Process(rec processor.Record[K, V]) {
	topic := s.topic
	if s.chooser != nil {
		topic = s.chooser(rec)
		if topic == "" {
			s.Fail(fmt.Errorf("sink %s: the topic chooser returned no topic", s.NodeName))
			return
		}
	}
	kb, err := s.ks.Serialize(topic, rec.Key)
	if err != nil {
		s.T.HandleError(ErrProduction, s.NodeName, &serde.Error{Op: "serialize", Topic: topic, Partition: -1, Offset: -1, IsKey: true, Err: err})
		return
	}
	var vb []byte
	if !rec.NullValue {
		if vb, err = s.vs.Serialize(topic, rec.Value); err != nil {
			s.T.HandleError(ErrProduction, s.NodeName, &serde.Error{Op: "serialize", Topic: topic, Partition: -1, Offset: -1, Err: err})
			return
		}
		if vb == nil {
			vb = []byte{} // a value that serializes to nothing is not a tombstone
		}
	}
	s.out = OutRecord{Topic: topic, Partition: -1, Key: kb, Value: vb, Timestamp: rec.Timestamp, Headers: rec.Headers}
	if s.partitioner == nil {
		s.T.Produce(s.NodeName, &s.out)
		return
	}
	var value *V
	if !rec.NullValue {
		value = &rec.Value
	}
	parts, ok, err := s.place(topic, rec.Key, value)
	switch {
	case err != nil:
		s.T.HandleError(ErrProduction, s.NodeName, err)
	case !ok:
		s.T.Produce(s.NodeName, &s.out)
	default:
		for _, p := range parts {
			s.out.Partition = p
			s.T.Produce(s.NodeName, &s.out)
		}
	}
}

// place asks the sink's partitioner where a record goes: its partitions,
// each once and in range, or ok false for the default partitioner.
func (s *SinkNode[K, V]) place(topic string, key K, value *V) ([]int32, bool, error) {
	n, err := s.T.Partitions(topic)
	if err != nil {
		return nil, false, err
	}
	return CheckPartitions(s.NodeName, topic, n, func() ([]int32, bool) { return s.partitioner(topic, key, value, n) })
}

// CheckPartitions runs a stream partitioner's choice for a topic of n
// partitions: repeats are dropped, a partition out of range is an error.
func CheckPartitions(node, topic string, n int32, choose func() ([]int32, bool)) ([]int32, bool, error) {
	parts, ok := choose()
	if !ok {
		return nil, false, nil
	}
	out := make([]int32, 0, len(parts))
	for _, p := range parts {
		if p < 0 || p >= n {
			return nil, false, fmt.Errorf("sink %s: the stream partitioner chose partition %d of topic %q, which has %d partitions", node, p, topic, n)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, true, nil
}

// Store returns the task's store name as T.
func Store[T any](t *Task, name string) (T, error) {
	var zero T
	var s any
	if ts, ok := t.stores[name]; ok {
		s = ts
	} else if g, ok := t.cfg.Globals[name]; ok {
		s = g
	} else {
		return zero, fmt.Errorf("task %s: no state store %q", t.id, name)
	}
	v, ok := s.(T)
	if !ok {
		return zero, fmt.Errorf("task %s: state store %q is %T, not %s", t.id, name, s, TypeOf[T]())
	}
	return v, nil
}
