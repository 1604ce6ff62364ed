package rt

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/processor"
)

// RawRecord is a record as read from a topic, before deserialization.
type RawRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte // nil: Kafka null
	Timestamp int64  // milliseconds; set by the timestamp extractor
	Headers   processor.Headers

	// prepared holds what Prepare found: the decoded record (so the source
	// does not decode it again) or why it cannot be processed.
	decoded  any
	badTime  error
	prepared bool
}

// ErrInvalidTimestamp reports a record whose timestamp is negative (Kafka's
// "no timestamp") or that a timestamp extractor refused.
var ErrInvalidTimestamp = errors.New("invalid timestamp")

// Preparer is a source that reads a record's timestamp from its content:
// it decodes the record when it is buffered, so records can be ordered by
// that timestamp before they are processed.
type Preparer interface {
	Prepare(r *RawRecord) (decoded any, ts int64, err error)
}

// OutRecord is a record a task writes: sink output, changelog writes and
// dead letters.
type OutRecord struct {
	Topic     string
	Partition int32 // -1: the producer picks by key (murmur2, as Kafka's Java client)
	Key       []byte
	Value     []byte // nil: a tombstone
	Timestamp int64
	Headers   processor.Headers
	// Store is set on changelog records: the store they log.
	Store string
}

// Collector takes what a task writes. It must not keep the slices of a
// record after Send returns.
type Collector interface {
	Send(task *Task, rec *OutRecord) error
	// Partitions returns topic's partition count, for a sink's stream
	// partitioner; a topic that does not exist is an error wrapping
	// ErrRecordRefused.
	Partitions(topic string) (int32, error)
}

// TaskConfig is what a runtime gives NewTask.
type TaskConfig struct {
	ID          processor.TaskID
	AppID       string
	Program     *Program
	Subtopology *Subtopology
	// WriteSet returns the thread's write set for a backend.
	WriteSet func(inMemory bool) *storage.WriteSet
	// Cache is the thread's record cache; nil disables caching.
	Cache     *storage.Cache
	Collector Collector
	// WallClock returns the time in milliseconds for wall-clock
	// punctuators.
	WallClock func() int64
	Handlers  Handlers
	// Log receives the task's logs. Default: none.
	Log *zap.Logger
	// Globals are the global stores' read-only views by name.
	Globals map[string]any
	// Async is what the task's async nodes share with the runtime; nil:
	// no instance-wide bound, no wake-ups, no observer.
	Async *AsyncEnv
	// EmitInterval throttles, in wall-clock milliseconds, how often
	// stream–stream left and outer joins look for expired unmatched records
	// and windowed aggregations that emit on close look for closed windows
	// (Kafka Streams: 1000 for both; its test driver: 0).
	EmitInterval int64
}

// Counters are a task's record counts, readable from any goroutine.
type Counters struct {
	Processed    atomic.Int64
	Skipped      atomic.Int64 // errors handled with Continue, records dropped by an operator
	DeadLettered atomic.Int64
	Late         atomic.Int64
	Deduplicated atomic.Int64 // duplicates a Deduplicate operator dropped
}

// Task runs one sub-topology on one partition number. It is owned by one
// goroutine.
type Task struct {
	cfg      TaskConfig
	id       processor.TaskID
	idString string

	nodes    map[string]Node
	order    []Node // creation (topological) order
	sources  map[string]SourceNode
	stores   map[string]storage.Store
	storeSeq []storage.Store // creation order: flushed upstream first
	async    []asyncNode     // in creation order

	streamTime int64
	cur        recordContext
	inRecord   bool
	curRaw     *RawRecord

	punctStream []*schedule
	punctWall   []*schedule
	shared      map[string]any

	err      error
	closed   bool
	Counters Counters
	// Log is the task's logger, with the task id as a field.
	Log *zap.Logger
}

type recordContext struct {
	meta      processor.RecordMetadata
	timestamp int64
	headers   processor.Headers
}

// NewTask builds and initializes the nodes and stores of one task.
func NewTask(cfg TaskConfig) (*Task, error) {
	t := &Task{
		cfg:        cfg,
		id:         cfg.ID,
		idString:   cfg.ID.String(),
		nodes:      map[string]Node{},
		sources:    map[string]SourceNode{},
		stores:     map[string]storage.Store{},
		streamTime: -1,
	}
	t.cur.meta.Offset = -1
	if t.cfg.Log == nil {
		t.cfg.Log = zap.NewNop()
	}
	t.Log = t.cfg.Log.With(zap.Stringer("task", cfg.ID))
	for _, ss := range cfg.Subtopology.Stores {
		if err := t.buildStore(ss); err != nil {
			t.closeAll()
			return nil, err
		}
	}
	for _, spec := range cfg.Subtopology.Nodes {
		if _, err := t.build(spec); err != nil {
			t.closeAll()
			return nil, err
		}
	}
	for _, n := range t.order {
		if err := n.Init(); err != nil {
			t.closeAll()
			return nil, fmt.Errorf("task %s: initializing %s: %w", t.id, n.Name(), err)
		}
	}
	return t, nil
}

func (t *Task) buildStore(ss *StoreSpec) error {
	spec := ss.Builder.Spec()
	env := storage.Env{
		Task:       t.idString,
		WriteSet:   t.cfg.WriteSet(spec.InMemory),
		Cache:      t.cfg.Cache,
		Topic:      spec.Name,
		Timestamp:  func() int64 { return t.cur.timestamp },
		StreamTime: func() int64 { return t.streamTime },
	}
	if spec.Logged {
		topic := ChangelogTopic(t.cfg.AppID, spec.Name)
		env.Topic = topic
		env.Changelog = &changelogWriter{t: t, topic: topic, store: spec.Name}
	}
	s, err := ss.Builder.Build(env)
	if err != nil {
		return fmt.Errorf("task %s: building store %s: %w", t.id, spec.Name, err)
	}
	t.stores[spec.Name] = s
	t.storeSeq = append(t.storeSeq, s)
	return nil
}

func (t *Task) build(spec *NodeSpec) (Node, error) {
	if n, ok := t.nodes[spec.Name]; ok {
		return n, nil
	}
	children := make([]Node, len(spec.Children))
	for i, c := range spec.Children {
		n, err := t.build(c)
		if err != nil {
			return nil, err
		}
		children[i] = n
	}
	n, err := spec.Build(&BuildCtx{Task: t, Spec: spec, children: children})
	if err != nil {
		return nil, fmt.Errorf("task %s: building %s: %w", t.id, spec.Name, err)
	}
	t.nodes[spec.Name] = n
	if spec.Kind == KindSource {
		src, ok := n.(SourceNode)
		if !ok {
			return nil, fmt.Errorf("task %s: source %s is not a source node (%T)", t.id, spec.Name, n)
		}
		for _, topic := range spec.Topics {
			t.sources[t.Topic(topic, spec.Internal)] = src
		}
	}
	// Children were appended first; keep creation order for Init by
	// inserting by index.
	pos := len(t.order)
	for i, o := range t.order {
		if t.cfg.Program.NodesByName[o.Name()].Index > spec.Index {
			pos = i
			break
		}
	}
	t.order = append(t.order, nil)
	copy(t.order[pos+1:], t.order[pos:])
	t.order[pos] = n
	return n, nil
}

// ID is the task's id.
func (t *Task) ID() processor.TaskID { return t.id }

// AppID is the application id.
func (t *Task) AppID() string { return t.cfg.AppID }

// Topic resolves a topic name of a NodeSpec: internal topics get the
// application id in front.
func (t *Task) Topic(name string, internal bool) string {
	if internal {
		return InternalTopicName(t.cfg.AppID, name)
	}
	return name
}

// SourceTopics are the resolved topics this task reads.
func (t *Task) SourceTopics() []string {
	out := make([]string, 0, len(t.sources))
	for topic := range t.sources {
		out = append(out, topic)
	}
	return out
}

// Store returns one of the task's stores.
func (t *Task) Store(name string) (storage.Store, bool) {
	s, ok := t.stores[name]
	return s, ok
}

// StreamTime is the largest record timestamp processed, -1 before any.
func (t *Task) StreamTime() int64 { return t.streamTime }

// AdvanceStreamTime raises stream time to ts (a restarted task resumes at
// the stream time committed with its offsets); it never lowers it.
func (t *Task) AdvanceStreamTime(ts int64) {
	if ts > t.streamTime {
		t.streamTime = ts
	}
}

// Err is the error that failed the task, if any.
func (t *Task) Err() error { return t.err }

// fail records the first fatal error.
func (t *Task) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// Prepare sets the record's timestamp from its source's timestamp
// extractor, if the source has one; runtimes call it when they buffer a
// record, before choosing the next record by timestamp.
func (t *Task) Prepare(r *RawRecord) {
	if r.prepared {
		return
	}
	r.prepared = true
	src, ok := t.sources[r.Topic]
	if !ok {
		return
	}
	p, ok := src.(Preparer)
	if !ok {
		return
	}
	decoded, ts, err := p.Prepare(r)
	if err != nil {
		r.badTime = err
		return
	}
	r.decoded, r.Timestamp = decoded, ts
}

// Process runs one record through the source that reads its topic, then
// fires due stream-time punctuators. It returns the error that failed the
// task (a handler said Fail).
func (t *Task) Process(r *RawRecord) error {
	if t.err != nil {
		return t.err
	}
	src, ok := t.sources[r.Topic]
	if !ok {
		return fmt.Errorf("task %s: no source reads topic %q", t.id, r.Topic)
	}
	t.cur = recordContext{
		meta:      processor.RecordMetadata{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset},
		timestamp: r.Timestamp,
		headers:   r.Headers,
	}
	t.curRaw = r
	t.inRecord = true
	t.Prepare(r)
	if r.badTime == nil && r.Timestamp < 0 {
		r.badTime = fmt.Errorf("%w %d (no timestamp, or a negative one)", ErrInvalidTimestamp, r.Timestamp)
	}
	if r.badTime != nil {
		// Never processed with a made-up time: the handler decides.
		t.HandleError(ErrDeserialization, "", r.badTime)
		t.inRecord = false
		t.curRaw = nil
		t.Counters.Processed.Add(1)
		return t.err
	}
	if r.Timestamp > t.streamTime {
		t.streamTime = r.Timestamp
	}
	t.processSafely(src, r)
	t.inRecord = false
	t.curRaw = nil
	t.Counters.Processed.Add(1)
	if t.err != nil {
		return t.err
	}
	return t.punctuate(&t.punctStream, t.streamTime)
}

// Flush completes every record the task's async nodes hold (their results
// forwarded) and writes every store's cached writes down (forwarding what
// caching held back), upstream stores first; again while that gave an
// async node records.
func (t *Task) Flush() error {
	for {
		if t.err != nil {
			return t.err
		}
		for _, a := range t.async {
			a.drain()
		}
		if t.err != nil {
			return t.err
		}
		for _, s := range t.storeSeq {
			// Flushing a cache forwards records downstream, through user code.
			if err := safeCall(s.Flush); err != nil {
				t.fail(fmt.Errorf("task %s: flushing store %s: %w", t.id, s.Name(), err))
				return t.err
			}
			if t.err != nil {
				return t.err
			}
		}
		if t.AsyncHeld() == 0 {
			return nil
		}
	}
}

// Pump applies the results of async calls that completed (forwarding them
// downstream) and abandons calls past their budget, without waiting. It
// returns the task's error, if that failed it.
func (t *Task) Pump() error {
	for _, a := range t.async {
		a.pump()
	}
	return t.err
}

// Accepting reports whether the task takes a new record now: false while
// one of its async nodes holds as many records as it may.
func (t *Task) Accepting() bool {
	for _, a := range t.async {
		if a.full() {
			return false
		}
	}
	return true
}

// HasAsync reports whether the task has async operators.
func (t *Task) HasAsync() bool { return len(t.async) > 0 }

// AsyncHeld is how many records the task's async nodes hold (running or
// waiting).
func (t *Task) AsyncHeld() int {
	n := 0
	for _, a := range t.async {
		n += a.held()
	}
	return n
}

// Discard drops the stores' cached writes and what the async nodes hold
// (an aborted transaction).
func (t *Task) Discard() {
	for _, a := range t.async {
		a.abandon()
	}
	for _, s := range t.storeSeq {
		s.Discard()
	}
}

// Close closes the task's nodes and stores. Unflushed cached writes are
// dropped: flush and commit first for a clean close.
func (t *Task) Close() error {
	if t.closed {
		return nil
	}
	return t.closeAll()
}

func (t *Task) closeAll() error {
	t.closed = true
	var errs []error
	for i := len(t.order) - 1; i >= 0; i-- {
		if err := t.order[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", t.order[i].Name(), err))
		}
	}
	for _, s := range t.storeSeq {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing store %s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// Send writes an output record through the task's collector.
func (t *Task) Send(rec *OutRecord) {
	if err := t.cfg.Collector.Send(t, rec); err != nil {
		t.fail(fmt.Errorf("task %s: sending to %s: %w", t.id, rec.Topic, err))
	}
}

// Partitions returns topic's partition count (Collector.Partitions).
func (t *Task) Partitions(topic string) (int32, error) { return t.cfg.Collector.Partitions(topic) }

// Produce writes a sink node's record: one the brokers would refuse
// (ErrRecordRefused) goes to the production error handler, as output that
// cannot be serialized does.
func (t *Task) Produce(node string, rec *OutRecord) {
	err := t.cfg.Collector.Send(t, rec)
	switch {
	case err == nil:
	case errors.Is(err, ErrRecordRefused):
		t.HandleError(ErrProduction, node, err)
	default:
		t.fail(fmt.Errorf("task %s: sending to %s: %w", t.id, rec.Topic, err))
	}
}

// Shared returns the object the task's nodes share under key, made by mk
// on first use (the two sides of a join share a time tracker).
func (t *Task) Shared(key string, mk func() any) any {
	if t.shared == nil {
		t.shared = map[string]any{}
	}
	v, ok := t.shared[key]
	if !ok {
		v = mk()
		t.shared[key] = v
	}
	return v
}

// WallClockNow is the wall-clock time the task's punctuators use.
func (t *Task) WallClockNow() int64 {
	if t.cfg.WallClock == nil {
		return 0
	}
	return t.cfg.WallClock()
}

// EmitInterval is TaskConfig.EmitInterval.
func (t *Task) EmitInterval() int64 { return t.cfg.EmitInterval }

// RetryThrottled schedules fn on the wall clock every EmitInterval, for a
// node whose emission was throttled: final results due while no record
// arrives still go out, one interval later. Nothing is scheduled when
// emission is not throttled (EmitInterval 0).
func (t *Task) RetryThrottled(node string, fn func()) error {
	if t.cfg.EmitInterval <= 0 {
		return nil
	}
	_, err := t.schedule(node, t.cfg.EmitInterval, processor.WallClockTime, func(int64) error {
		fn()
		return nil
	})
	return err
}

// SendCurrent writes the record being processed — its key and value as
// read — to topic, with its headers and extra ones after them. Outside a
// record (punctuation) it does nothing.
func (t *Task) SendCurrent(topic string, extra processor.Headers) {
	if !t.inRecord || t.curRaw == nil {
		return
	}
	t.Send(&OutRecord{
		Topic: topic, Partition: -1, Key: t.curRaw.Key, Value: t.curRaw.Value, Timestamp: t.curRaw.Timestamp,
		Headers: append(append(processor.Headers{}, t.curRaw.Headers...), extra...),
	})
}

// CurrentTimestamp is the timestamp of the record being processed, or of
// the punctuation running.
func (t *Task) CurrentTimestamp() int64 { return t.cur.timestamp }

// CurrentHeaders are the headers of the record being processed.
func (t *Task) CurrentHeaders() processor.Headers { return t.cur.headers }

// RecordMetadata says where the record being processed came from.
func (t *Task) RecordMetadata() (processor.RecordMetadata, bool) {
	return t.cur.meta, t.inRecord
}

// changelogWriter sends a store's writes to its changelog partition: the
// partition number of the task.
type changelogWriter struct {
	t     *Task
	topic string
	store string
	out   OutRecord // reused: collectors do not keep records
}

func (c *changelogWriter) Log(key, value []byte, ts int64) {
	c.out = OutRecord{Topic: c.topic, Partition: c.t.id.Partition, Key: key, Value: value, Timestamp: ts, Store: c.store}
	c.t.Send(&c.out)
}
