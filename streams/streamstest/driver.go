package streamstest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/topology"
)

// Options configure a Driver. The zero value is usable.
type Options struct {
	// ApplicationID names internal topics: "<id>-<store>-changelog".
	// Default "streamstest".
	ApplicationID string
	// CacheMaxBytes is the record cache size. Default 10 MiB, as Kafka
	// Streams; negative disables caching.
	CacheMaxBytes int64
	// ManualCommit turns off the commit after every piped record; call
	// Driver.Commit. With caching on, updates of a key between commits
	// reach the output once.
	ManualCommit bool
	// StartTime is the initial wall-clock time in milliseconds, for
	// wall-clock punctuators and for Pipe's default record timestamp.
	// Default 0.
	StartTime int64
	// OnError decides what happens to failed records (default: fail).
	OnError func(*processor.RecordError) processor.ErrorAction
	// DeadLetterTopic receives dead-lettered records.
	DeadLetterTopic string
	// Partitions gives topics the topology writes a partition count (by
	// default every topic has one): a stream partitioner
	// (topology.ProducedOptions.WithStreamPartitioner) chooses among
	// them, and records it does not place go where Kafka's default
	// partitioner would (murmur2 of the key). OutputTopic's
	// ReadRecordsByPartition shows where each record went. The records
	// are still processed by one task.
	Partitions map[string]int32
	// EmitInterval throttles, on the wall clock, how often operations
	// that emit on window close look for closed windows, as the Kafka
	// runtime does (once a second). Default 0: they look after every
	// record, so output does not depend on the wall clock.
	EmitInterval time.Duration
}

// Driver runs a topology without a broker: the same nodes, stores, cache
// and commit path as the Kafka runtime, on one partition of every topic,
// with repartition topics passed along in memory. It is deterministic: the
// same input gives the same output. A Driver belongs to one goroutine.
type Driver struct {
	tb      testing.TB
	opts    Options
	prog    *rt.Program
	tasks   []*rt.Task
	bySub   map[int]*rt.Task // by sub-topology id
	byTopic map[string]*rt.Task
	globals map[string]*rt.GlobalStore // by topic
	// globalSkipped counts bad global-table records skipped.
	globalSkipped int64
	pebble        *storage.Pebble
	memory        *storage.Memory
	wsP           *storage.WriteSet
	wsM           *storage.WriteSet
	cache         *storage.Cache
	now           int64

	topics map[string]*topicLog // everything written: outputs, changelogs, repartitions
	inbox  []*rt.RawRecord      // repartition records not yet processed
	// held holds back the records of internal topics a test chose, to
	// reproduce a broker's delays (export_test.go); nil in normal use.
	held     map[string][]*rt.RawRecord
	inOffset map[string]int64
	closed   bool
}

type topicLog struct {
	recs []*rt.OutRecord
}

// New starts a driver for top; t.Cleanup closes it. Errors fail the test.
func New(t testing.TB, top *topology.Topology, opts ...Options) *Driver {
	t.Helper()
	d, err := Open(top, opts...)
	if err != nil {
		t.Fatalf("streamstest: %v", err)
	}
	d.tb = t
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("streamstest: closing: %v", err)
		}
	})
	return d
}

// Open starts a driver without a testing.TB (for benchmarks and examples);
// call Close. Methods that fail a test panic instead.
func Open(top *topology.Topology, opts ...Options) (*Driver, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.ApplicationID == "" {
		o.ApplicationID = "streamstest"
	}
	if o.CacheMaxBytes == 0 {
		o.CacheMaxBytes = 10 << 20
	}
	prog, ok := rt.ProgramOf(top)
	if !ok {
		return nil, errors.New("streamstest: not a built topology")
	}
	p, err := storage.OpenPebble("streamstest", storage.PebbleOptions{InMemory: true, Memory: 16 << 20})
	if err != nil {
		return nil, err
	}
	d := &Driver{
		opts: o, prog: prog, byTopic: map[string]*rt.Task{}, bySub: map[int]*rt.Task{}, globals: map[string]*rt.GlobalStore{},
		pebble: p, memory: storage.NewMemory(), now: o.StartTime,
		topics: map[string]*topicLog{}, inOffset: map[string]int64{},
	}
	d.wsP, d.wsM = storage.NewWriteSet(d.pebble), storage.NewWriteSet(d.memory)
	views := rt.GlobalViews(prog, d.pebble, d.memory)
	for _, g := range prog.GlobalStores {
		d.globals[g.Topic] = g
	}
	if o.CacheMaxBytes > 0 {
		d.cache = storage.NewCache(o.CacheMaxBytes)
	}
	for _, st := range prog.Subtopologies {
		if st.Global != nil {
			continue
		}
		task, err := rt.NewTask(rt.TaskConfig{
			ID:          processor.TaskID{Subtopology: st.ID, Partition: 0},
			AppID:       o.ApplicationID,
			Program:     prog,
			Subtopology: st,
			WriteSet: func(inMemory bool) *storage.WriteSet {
				if inMemory {
					return d.wsM
				}
				return d.wsP
			},
			Cache:        d.cache,
			Collector:    collector{d},
			WallClock:    func() int64 { return d.now },
			Handlers:     rt.Handlers{Handle: o.OnError, DeadLetterTopic: o.DeadLetterTopic},
			Globals:      views,
			EmitInterval: o.EmitInterval.Milliseconds(),
		})
		if err != nil {
			d.Close()
			return nil, err
		}
		d.tasks = append(d.tasks, task)
		d.bySub[st.ID] = task
		for _, topic := range task.SourceTopics() {
			d.byTopic[topic] = task
		}
	}
	return d, nil
}

// collector is the driver as the tasks' rt.Collector.
type collector struct{ d *Driver }

func (c collector) Send(_ *rt.Task, rec *rt.OutRecord) error { return c.d.send(rec) }

func (c collector) Partitions(topic string) (int32, error) { return c.d.partitions(topic), nil }

// partitions is topic's partition count (Options.Partitions, else 1).
func (d *Driver) partitions(topic string) int32 {
	if n := d.opts.Partitions[topic]; n > 0 {
		return n
	}
	return 1
}

// send takes what a task writes: records to repartition topics are queued
// for the sub-topology reading them; everything is logged per topic.
func (d *Driver) send(rec *rt.OutRecord) error {
	cp := *rec
	cp.Key = cloneBytes(rec.Key)
	cp.Value = cloneBytes(rec.Value)
	if n := d.partitions(cp.Topic); cp.Partition < 0 || cp.Partition >= n {
		cp.Partition = 0
		if rec.Key != nil && n > 1 {
			cp.Partition = kclient.KeyPartition(rec.Key, n)
		}
	}
	log := d.topics[cp.Topic]
	if log == nil {
		log = &topicLog{}
		d.topics[cp.Topic] = log
	}
	log.recs = append(log.recs, &cp)
	// As Kafka Streams' TopologyTestDriver: what goes to a topic the
	// topology reads (repartition topics, and any source topic) is read back.
	if _, read := d.byTopic[cp.Topic]; read {
		r := d.raw(cp.Topic, cp.Key, cp.Value, cp.Timestamp, cp.Headers)
		if q, hold := d.held[cp.Topic]; hold {
			d.held[cp.Topic] = append(q, r)
		} else {
			d.inbox = append(d.inbox, r)
		}
	}
	return nil
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (d *Driver) raw(topic string, key, value []byte, ts int64, h processor.Headers) *rt.RawRecord {
	off := d.inOffset[topic]
	d.inOffset[topic] = off + 1
	return &rt.RawRecord{Topic: topic, Partition: 0, Offset: off, Key: key, Value: value, Timestamp: ts, Headers: h}
}

// pipeRaw processes one input record and everything it sends through
// repartition topics, then commits unless ManualCommit.
func (d *Driver) pipeRaw(r *rt.RawRecord) error {
	if d.closed {
		return errors.New("streamstest: driver closed")
	}
	if g, ok := d.globals[r.Topic]; ok {
		return d.applyGlobal(g, r)
	}
	task, ok := d.byTopic[r.Topic]
	if !ok {
		return fmt.Errorf("streamstest: no source reads topic %q", r.Topic)
	}
	if err := task.Process(r); err != nil {
		return err
	}
	if err := d.drain(); err != nil {
		return err
	}
	if !d.opts.ManualCommit {
		return d.Commit()
	}
	return nil
}

// applyGlobal writes a global table's record into its store at once, as
// the runtime's global reader does; a bad record is skipped and counted.
func (d *Driver) applyGlobal(g *rt.GlobalStore, r *rt.RawRecord) error {
	rec, err := rt.GlobalRecord(g, r)
	if err != nil {
		d.globalSkipped++
		return nil
	}
	b := storage.Pick[storage.Backend](g.InMemory, d.pebble, d.memory)
	return storage.ApplyGlobal(b, g.Name, r.Partition, []storage.ChangelogRecord{rec}, r.Offset+1)
}

func (d *Driver) drain() error {
	for len(d.inbox) > 0 {
		r := d.inbox[0]
		d.inbox = d.inbox[1:]
		if err := d.byTopic[r.Topic].Process(r); err != nil {
			return err
		}
	}
	return nil
}

// Commit flushes every task's stores (forwarding what the cache held back,
// sub-topologies upstream first, repartitioned records processed), then
// applies the stores' writes and changelog offsets atomically — the runtime's
// commit, with the in-memory topics as the committed Kafka side.
func (d *Driver) Commit() error {
	for {
		for _, t := range d.tasks {
			if err := t.Flush(); err != nil {
				return err
			}
		}
		if len(d.inbox) == 0 {
			break
		}
		if err := d.drain(); err != nil {
			return err
		}
	}
	for _, name := range d.prog.StoreOrder {
		spec := d.prog.Stores[name]
		if !spec.Builder.Spec().Logged {
			continue
		}
		topic := rt.ChangelogTopic(d.opts.ApplicationID, name)
		next := int64(0)
		if log := d.topics[topic]; log != nil {
			next = int64(len(log.recs))
		}
		ws := storage.Pick(spec.Builder.Spec().InMemory, d.wsP, d.wsM)
		ws.SetOffset(d.bySub[spec.Subtopology].ID().String(), name, next)
	}
	if err := d.wsM.Commit(); err != nil {
		return err
	}
	return d.wsP.Commit()
}

// AdvanceWallClock moves the wall clock forward and fires the wall-clock
// punctuators that became due.
func (d *Driver) AdvanceWallClock(ms int64) error {
	d.now += ms
	for _, t := range d.tasks {
		if err := t.PunctuateWallClock(d.now); err != nil {
			return d.fail(err)
		}
	}
	if err := d.drain(); err != nil {
		return d.fail(err)
	}
	if !d.opts.ManualCommit {
		return d.fail(d.Commit())
	}
	return nil
}

// WallClock is the driver's wall-clock time in milliseconds.
func (d *Driver) WallClock() int64 { return d.now }

func (d *Driver) fail(err error) error {
	if err != nil && d.tb != nil {
		d.tb.Helper()
		d.tb.Fatalf("streamstest: %v", err)
	}
	return err
}

// Counters returns the processed, skipped and dead-lettered record counts
// over all tasks.
func (d *Driver) Counters() (processed, skipped, deadLettered int64) {
	for _, t := range d.tasks {
		processed += t.Counters.Processed.Load()
		skipped += t.Counters.Skipped.Load()
		deadLettered += t.Counters.DeadLettered.Load()
	}
	skipped += d.globalSkipped
	return
}

// LateRecords returns how many records arrived after their window closed
// (counted once per window they missed).
func (d *Driver) LateRecords() (n int64) {
	for _, t := range d.tasks {
		n += t.Counters.Late.Load()
	}
	return n
}

// Deduplicated returns how many duplicates Deduplicate and
// DeduplicateByKey operators dropped.
func (d *Driver) Deduplicated() (n int64) {
	for _, t := range d.tasks {
		n += t.Counters.Deduplicated.Load()
	}
	return n
}

// Close closes the tasks and stores. Writes not committed are dropped.
func (d *Driver) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, t := range d.tasks {
		errs = append(errs, t.Close())
	}
	d.wsP.ReleaseReads()
	d.wsM.ReleaseReads()
	errs = append(errs, d.memory.Close(), d.pebble.Close())
	return errors.Join(errs...)
}

// store returns the named store of the task that owns it.
func (d *Driver) store(name string) (any, error) {
	spec, ok := d.prog.Stores[name]
	if !ok {
		for _, g := range d.prog.GlobalStores {
			if g.Name == name {
				return rt.GlobalViews(d.prog, d.pebble, d.memory)[name], nil
			}
		}
		return nil, fmt.Errorf("streamstest: no state store %q", name)
	}
	s, _ := d.bySub[spec.Subtopology].Store(name)
	return s, nil
}
