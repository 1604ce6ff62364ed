package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/storage"
)

// StateDirectory is an instance's view of its local state across its
// stream threads, as Kafka Streams' StateDirectory: which thread owns each
// task (only its owner touches a task's state), the cleaner that deletes
// the state of tasks no thread owns once it has been left alone for the
// cleanup delay, and the rule that decides whether kept state may be
// resumed or must be rebuilt from its changelog (see storage.SyncedAt).
type StateDirectory struct {
	backends []storage.Backend
	// delay is how long a task's state stays after its last owner here
	// let it go (or after the instance started); negative: for ever.
	delay   time.Duration
	now     func() int64 // wall clock, milliseconds
	log     *zap.Logger
	started int64

	mu sync.Mutex // guards owners and released; held while state is dropped
	// owners: the thread owning each task, by task id.
	owners map[string]int
	// released: when a thread of this instance last let each task go.
	released map[string]int64

	// Cleaned counts tasks whose state the cleaner deleted; Rebuilt counts
	// stores (global ones included) wiped and restored in full because
	// their state was older than their changelog keeps deletes.
	Cleaned, Rebuilt atomic.Int64
}

// DefaultStateCleanupDelay is Kafka Streams' state.cleanup.delay.ms.
const DefaultStateCleanupDelay = 10 * time.Minute

// NewStateDirectory returns the state directory over an instance's
// backends. delay is how long the state of a task no thread owns is kept
// (negative: never deleted); now is the wall clock in milliseconds.
func NewStateDirectory(backends []storage.Backend, delay time.Duration, now func() int64, log *zap.Logger) *StateDirectory {
	return &StateDirectory{backends: backends, delay: delay, now: now, log: log.Named("state"), started: now(),
		owners: map[string]int{}, released: map[string]int64{}}
}

// Own records that thread owns tasks from now on. It waits while the
// cleaner deletes state, so a task's state is never deleted once a thread
// owns it.
func (d *StateDirectory) Own(thread int, tasks []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range tasks {
		if o, ok := d.owners[t]; ok && o != thread {
			d.log.Warn("task assigned to a thread while another thread of this instance owns it", zap.String("task", t),
				zap.Int("thread", thread), zap.Int("owner", o))
		}
		d.owners[t] = thread
	}
}

// Release records that thread no longer owns any task; the caller has
// finished writing their state (applied its commits, closed its restores).
func (d *StateDirectory) Release(thread int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for t, o := range d.owners {
		if o == thread {
			delete(d.owners, t)
			d.released[t] = now
		}
	}
}

// ReleaseTasks records that thread no longer owns tasks (their state is
// written: commits applied, restores closed).
func (d *StateDirectory) ReleaseTasks(thread int, tasks []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for _, t := range tasks {
		if o, ok := d.owners[t]; ok && o == thread {
			delete(d.owners, t)
			d.released[t] = now
		}
	}
}

// Owned reports whether a thread owns task.
func (d *StateDirectory) Owned(task string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.owners[task]
	return ok
}

// OffsetSums returns, for every task with state here, the sum of its
// stores' stored changelog offsets (storage.OffsetSum): how far its local
// state has read its changelogs, which the group's assignor weighs when it
// places a task. Stores that keep no offset (in memory, not logged) add
// nothing.
func (d *StateDirectory) OffsetSums() (map[string]int64, error) {
	out := map[string]int64{}
	for _, b := range d.backends {
		tasks, err := storage.Tasks(b)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			sum, ok, err := storage.OffsetSum(b, t)
			if err != nil {
				return nil, err
			}
			if ok {
				out[t] += sum
			}
		}
	}
	return out, nil
}

// Clean deletes the state of every task that no thread owns and that was
// last owned (by this instance, or by the one whose state it found at
// start) at least the cleanup delay ago: when its owner here let it go, or
// its newest synced time, or when the instance started, whichever is
// latest. It returns the tasks deleted.
func (d *StateDirectory) Clean() ([]string, error) {
	if d.delay < 0 {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	last := map[string]int64{}
	for _, b := range d.backends {
		tasks, err := storage.Tasks(b)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			if _, owned := d.owners[t]; owned {
				continue
			}
			at := max(d.started, d.released[t], last[t])
			if synced, ok, err := storage.LastSynced(b, t); err != nil {
				return nil, err
			} else if ok {
				at = max(at, synced)
			}
			last[t] = at
		}
	}
	var dropped []string
	for _, t := range slices.Sorted(maps.Keys(last)) {
		idle := time.Duration(now-last[t]) * time.Millisecond
		if idle < d.delay {
			continue
		}
		for _, b := range d.backends {
			if err := storage.DropTask(b, t); err != nil {
				return dropped, fmt.Errorf("deleting the state of task %s: %w", t, err)
			}
		}
		delete(d.released, t)
		d.Cleaned.Add(1)
		dropped = append(dropped, t)
		d.log.Info("deleted the local state of a task no stream thread of this instance owns",
			zap.String("task", t), zap.Duration("unowned_for", idle.Round(time.Millisecond)), zap.Duration("state_cleanup_delay", d.delay))
	}
	return dropped, nil
}

// Run cleans until ctx ends: every quarter of the cleanup delay (at most
// every minute, at least every 10 ms).
func (d *StateDirectory) Run(ctx context.Context) {
	if d.delay < 0 {
		return
	}
	every := min(max(d.delay/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := d.Clean(); err != nil {
				d.log.Warn("cleaning unowned state failed; trying again later", zap.Error(err))
			}
		}
	}
}

// defaultDeleteRetention is Kafka's default delete.retention.ms, assumed
// for a changelog whose configs cannot be read.
const defaultDeleteRetention = 24 * time.Hour

// tombstoneRetention is how long a changelog keeps a delete once compaction
// reached it; a topic that is not compacted never drops a delete while
// keeping what came before it (retention moves the log start instead).
type tombstoneRetention struct {
	compacted bool
	keep      time.Duration
	assumed   bool // the configs could not be read: Kafka's defaults
}

// retentionOf reads a topic's cleanup.policy and delete.retention.ms;
// what is missing takes Kafka's defaults for a changelog (compacted, 24 h).
func retentionOf(cfg map[string]string) tombstoneRetention {
	r := tombstoneRetention{compacted: true, keep: defaultDeleteRetention}
	if p, ok := cfg["cleanup.policy"]; ok && p != "" {
		r.compacted = slices.Contains(strings.Split(strings.ReplaceAll(p, " ", ""), ","), "compact")
	}
	if v, err := strconv.ParseInt(cfg["delete.retention.ms"], 10, 64); err == nil && v >= 0 {
		r.keep = time.Duration(v) * time.Millisecond
	}
	return r
}

// readRetentions reads the tombstone retention of topics, retrying
// transient failures until ctx ends; when the brokers refuse to describe
// the configs (no DESCRIBE_CONFIGS ACL, an old broker), Kafka's defaults
// are assumed and said so once.
func readRetentions(ctx context.Context, h *Health, log *zap.Logger, admin func() (kclient.Admin, error), reset func(int), topics []string) (map[string]tombstoneRetention, error) {
	var cfgs map[string]map[string]string
	err := retry(ctx, h, log, "describing changelog configs", func() error {
		adm, err := admin()
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cfgs, err = adm.TopicConfigs(cctx, topics)
		return err
	}, reset)
	if ctx.Err() != nil {
		return nil, err
	}
	out := make(map[string]tombstoneRetention, len(topics))
	for _, t := range topics {
		if c, ok := cfgs[t]; ok && err == nil {
			out[t] = retentionOf(c)
		} else {
			out[t] = tombstoneRetention{compacted: true, keep: defaultDeleteRetention, assumed: true}
		}
	}
	if err != nil {
		log.Info("cannot read the changelogs' delete.retention.ms; assuming Kafka's default of 24h", zap.Strings("topics", topics), zap.Error(err))
	}
	return out, nil
}

// staleness says why state kept in a store may not be resumed from its
// stored offset ("" when it may), as of now: synced is the store's synced
// time (ok false: none is stored), r its changelog's retention of deletes.
func staleness(now, synced int64, ok bool, r tombstoneRetention) string {
	switch {
	case !r.compacted:
		return ""
	case !ok:
		return "it records no time it was last in step with its changelog (it was written by an older eddy)"
	case now-synced >= r.keep.Milliseconds():
		return fmt.Sprintf("it was last in step with its changelog %v ago, and the changelog keeps deletes for %v (delete.retention.ms): deletes written since may have been compacted away",
			(time.Duration(now-synced) * time.Millisecond).Round(time.Millisecond), r.keep)
	}
	return ""
}

// resumeDeadline is when a restore that resumes a store from its stored
// offset must have read its changelog to the end by (wall-clock ms; 0: no
// limit): past it, deletes it has not read yet may be gone.
func resumeDeadline(synced int64, r tombstoneRetention) int64 {
	if !r.compacted {
		return 0
	}
	return synced + r.keep.Milliseconds()
}
