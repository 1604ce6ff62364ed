package engine

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// Metrics are the instruments stream threads update as they work; the
// streams package registers them with the rest of its collector.
type Metrics struct {
	Consumed, Produced *prometheus.CounterVec // by topic
	ProcessLatency     prometheus.Histogram   // per record, through its task
	EndToEnd           prometheus.Histogram   // processing time minus record time
	CommitDuration     prometheus.Histogram
	// Async operators' calls: how long each took (all attempts), how long
	// its record waited before it began, and the failed ones, by node.
	AsyncCall, AsyncWait *prometheus.HistogramVec
	AsyncFailed          *prometheus.CounterVec
}

// NewMetrics makes the instruments, with constLabels on each.
func NewMetrics(constLabels prometheus.Labels) *Metrics {
	return &Metrics{
		Consumed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_records_consumed_total",
			Help: "Records read from each topic by the stream threads.", ConstLabels: constLabels}, []string{"topic"}),
		Produced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_records_produced_total",
			Help: "Records written to each topic (outputs, repartition topics, changelogs, dead letters).", ConstLabels: constLabels}, []string{"topic"}),
		ProcessLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eddy_process_latency_seconds",
			Help: "Time to process one record through its task.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10)}),
		EndToEnd: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eddy_end_to_end_latency_seconds",
			Help: "Wall-clock time when a record is processed minus its timestamp.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}),
		CommitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eddy_commit_duration_seconds",
			Help: "Time of each commit (cache flush, producer flush, offsets or transaction, stores).", ConstLabels: constLabels,
			Buckets: CommitDurationBuckets()}),
		AsyncCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eddy_async_call_duration_seconds",
			Help: "Time of each async operator call, its retries included.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0005, 3, 12)}, []string{"node"}),
		AsyncWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eddy_async_queue_wait_seconds",
			Help: "Time a record waited in an async operator (for its key's earlier records, a free slot) before its call began.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0005, 3, 12)}, []string{"node"}),
		AsyncFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_async_calls_failed_total",
			Help: "Async operator calls that failed (errors and timeouts; each goes to the processing error handler).", ConstLabels: constLabels}, []string{"node"}),
	}
}

// observeAsync records one completed async call.
func (m *Metrics) observeAsync(node string, waited, took time.Duration, err error) {
	m.AsyncWait.WithLabelValues(node).Observe(waited.Seconds())
	m.AsyncCall.WithLabelValues(node).Observe(took.Seconds())
	if err != nil {
		m.AsyncFailed.WithLabelValues(node).Inc()
	}
}

// Collectors are the instruments, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Consumed, m.Produced, m.ProcessLatency, m.EndToEnd, m.CommitDuration,
		m.AsyncCall, m.AsyncWait, m.AsyncFailed}
}

// PartitionSnapshot is one input partition of a task.
type PartitionSnapshot struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Position is the offset after the last record processed (-1: none
	// yet), Committed the last committed one (-1: none).
	Position  int64 `json:"position"`
	Committed int64 `json:"committed"`
	// Lag is the partition's end offset minus what the task has consumed
	// (processed or committed), -1 when the end is not known yet.
	Lag      int64 `json:"lag"`
	Buffered int   `json:"buffered"`
}

// TaskSnapshot is one task of a thread.
type TaskSnapshot struct {
	ID         string              `json:"id"`
	Restoring  bool                `json:"restoring"`
	StreamTime int64               `json:"stream_time"`
	Partitions []PartitionSnapshot `json:"partitions"`
	// AsyncHeld is how many records the task's async operators hold
	// (calls running, or records waiting for their key or a slot).
	AsyncHeld int `json:"async_held,omitempty"`
}

// StandbySnapshot is one standby task of a thread.
type StandbySnapshot struct {
	ID string `json:"id"`
	// Lag is how many changelog records the standby had still to read at
	// the last look (every few seconds); -1 before the first.
	Lag int64 `json:"lag"`
}

// Counts are records counted since the instance started.
type Counts struct {
	Processed    int64 `json:"processed"`
	Skipped      int64 `json:"skipped"`
	DeadLettered int64 `json:"dead_lettered"`
	Late         int64 `json:"late"`
	Deduplicated int64 `json:"deduplicated"`
	CacheHits    int64 `json:"cache_hits"`
	CacheMisses  int64 `json:"cache_misses"`
}

// Add adds o's counts to c.
func (c *Counts) Add(o Counts) {
	c.Processed += o.Processed
	c.Skipped += o.Skipped
	c.DeadLettered += o.DeadLettered
	c.Late += o.Late
	c.Deduplicated += o.Deduplicated
	c.CacheHits += o.CacheHits
	c.CacheMisses += o.CacheMisses
}

// ThreadSnapshot is a thread's assignment and progress, refreshed about
// twice a second.
type ThreadSnapshot struct {
	Thread int            `json:"thread"`
	State  string         `json:"state"`
	Tasks  []TaskSnapshot `json:"tasks"`
	// Standbys are the thread's standby tasks, in id order.
	Standbys []StandbySnapshot `json:"standbys,omitempty"`
	Counts   Counts            `json:"counts"`
	// RestoreRate is changelog records restored per second since the
	// previous snapshot (0 when not restoring).
	RestoreRate float64   `json:"restore_rate"`
	Taken       time.Time `json:"taken"`
	// Waiting is the thread's current step when it has lasted longer than
	// a second (read when the snapshot is asked for, not refreshed by the
	// thread, which is stuck in it).
	Waiting *Waiting `json:"waiting,omitempty"`
}

// snapshotter keeps a thread's last snapshot and the counts of tasks and
// caches it no longer has.
type snapshotter struct {
	mu   sync.Mutex
	snap ThreadSnapshot
	// gone: counts of closed tasks and replaced caches.
	gone Counts
	last time.Time
	// restored: the thread's restored-records count at the last snapshot.
	restored int64
}

// Snapshot returns the thread's last snapshot.
func (th *Thread) Snapshot() ThreadSnapshot {
	th.snapshots.mu.Lock()
	defer th.snapshots.mu.Unlock()
	s := th.snapshots.snap
	s.Waiting = th.watch.long(time.Now())
	s.Tasks = append([]TaskSnapshot(nil), s.Tasks...)
	s.Standbys = append([]StandbySnapshot(nil), s.Standbys...)
	return s
}

// retireTask keeps a closing task's counts.
func (th *Thread) retireTask(t *rt.Task) {
	th.snapshots.mu.Lock()
	defer th.snapshots.mu.Unlock()
	addCounters(&th.snapshots.gone, t)
}

// retireCache keeps a replaced cache's hit counts.
func (th *Thread) retireCache() {
	if th.cache == nil {
		return
	}
	h, m, _ := th.cache.Stats()
	th.snapshots.mu.Lock()
	defer th.snapshots.mu.Unlock()
	th.snapshots.gone.CacheHits += h
	th.snapshots.gone.CacheMisses += m
}

func addCounters(c *Counts, t *rt.Task) {
	c.Processed += t.Counters.Processed.Load()
	c.Skipped += t.Counters.Skipped.Load()
	c.DeadLettered += t.Counters.DeadLettered.Load()
	c.Late += t.Counters.Late.Load()
	c.Deduplicated += t.Counters.Deduplicated.Load()
}

// snapshot refreshes the thread's snapshot when it is older than 500ms (or
// now, when force).
func (th *Thread) snapshot(force bool) {
	now := time.Now()
	if !force && now.Sub(th.snapshots.last) < 500*time.Millisecond {
		return
	}
	s := ThreadSnapshot{Thread: th.idx, State: th.state.String(), Taken: now}
	restored := th.Stats.RestoredRecords.Load()
	if dt := now.Sub(th.snapshots.last).Seconds(); dt > 0 && !th.snapshots.last.IsZero() {
		s.RestoreRate = float64(restored-th.snapshots.restored) / dt
	}
	th.snapshots.last, th.snapshots.restored = now, restored
	var c Counts
	for _, tk := range th.tm.reg.order {
		ts := TaskSnapshot{ID: tk.id.String(), Restoring: tk.state != taskRunning, StreamTime: tk.t.StreamTime(), AsyncHeld: tk.t.AsyncHeld()}
		for _, p := range tk.parts {
			ps := PartitionSnapshot{Topic: p.tp.Topic, Partition: p.tp.Partition, Position: p.next, Committed: -1, Lag: -1, Buffered: p.size()}
			if off, ok := th.tm.reg.committed[p.tp]; ok {
				ps.Committed = off
			}
			if hw := th.hwm(p.tp); hw >= 0 {
				consumed := max(ps.Position, ps.Committed, 0)
				ps.Lag = max(hw-consumed, 0)
			}
			ts.Partitions = append(ts.Partitions, ps)
		}
		addCounters(&c, tk.t)
		s.Tasks = append(s.Tasks, ts)
	}
	for _, id := range slices.SortedFunc(maps.Keys(th.tm.reg.standby), compareTaskIDs) {
		s.Standbys = append(s.Standbys, StandbySnapshot{ID: id.String(), Lag: th.tm.reg.standby[id].lag})
	}
	if th.cache != nil {
		h, m, _ := th.cache.Stats()
		c.CacheHits, c.CacheMisses = h, m
	}
	th.snapshots.mu.Lock()
	c.Add(th.snapshots.gone)
	s.Counts = c
	th.snapshots.snap = s
	th.snapshots.mu.Unlock()
}

func (th *Thread) hwm(tp kclient.TP) int64 {
	if th.consumer == nil {
		return -1
	}
	return th.consumer.HighWatermark(tp)
}

// CommitDurationBuckets are eddy_commit_duration_seconds' buckets: 1 ms to
// ~2.3 s in steps of 40%, fine enough to read a p50 and p99 of commits off
// the histogram. make bench puts Kafka Streams' commit durations through
// the same ones.
func CommitDurationBuckets() []float64 { return prometheus.ExponentialBuckets(0.001, 1.4, 24) }
