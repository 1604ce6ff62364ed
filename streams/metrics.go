package streams

import (
	"strconv"
	"strings"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-go/eddy/internal/engine"
)

// The app's Prometheus metrics, each labelled application_id. Besides the
// instruments the stream threads update (eddy_records_consumed_total and
// eddy_records_produced_total by topic, eddy_process_latency_seconds,
// eddy_end_to_end_latency_seconds, eddy_commit_duration_seconds), these
// are read from the threads when scraped.
type descs struct {
	descState, descCommits, descAborts, descRebalances, descRestored, descRestoreRate, descRemaining, descProcessed, descSkipped, descDLQ, descLate, descDedup, descTTLLive, descTTLExpired, descCacheHits, descCacheMiss, descCacheRatio, descLag, descStreamTime, descStoreBytes, descDiskBytes, descGlobalApp, descGlobalSkip, descUnreachable, descCleaned, descRebuilt, descStandbyLag, descResets, descResetSkipped, descAsyncHeld, descAsyncRunning *prometheus.Desc
	descMemory, descMemoryLimit, descReadAmp, descL0Files, descCompactionDebt, descBlockCacheHit, descWriteStalls                                                                                                                                                                                                                                                                                                                                          *prometheus.Desc
}

func newDescs(constLabels prometheus.Labels) *descs {
	mk := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	return &descs{
		descState:          mk("eddy_state", "1 for the app's current lifecycle state, 0 for the others.", "state"),
		descCommits:        mk("eddy_commits_total", "Commits by the stream threads."),
		descAborts:         mk("eddy_transaction_aborts_total", "Transactions aborted (exactly-once): their records are processed again."),
		descRebalances:     mk("eddy_rebalances_total", "Partition assignments received by the stream threads."),
		descRestored:       mk("eddy_restore_records_total", "Changelog records restored into state stores."),
		descRestoreRate:    mk("eddy_restore_records_per_second", "Changelog records restored per second, over the last half second or so (0 when not restoring)."),
		descRemaining:      mk("eddy_restore_remaining_records", "Changelog records still to restore before processing starts."),
		descProcessed:      mk("eddy_records_processed_total", "Records processed by the tasks."),
		descSkipped:        mk("eddy_records_skipped_total", "Records skipped: null keys or values where an operation needs them, failed records an error handler continued past, out-of-order updates of a versioned table that a join or GroupBy ignores, and updates older than its history."),
		descDLQ:            mk("eddy_records_dead_lettered_total", "Records written to the dead-letter topic."),
		descLate:           mk("eddy_late_records_total", "Records that arrived after their window closed (window end plus grace)."),
		descDedup:          mk("eddy_records_deduplicated_total", "Duplicate records dropped by Deduplicate operators."),
		descTTLLive:        mk("eddy_store_live_entries", "Estimated live entries of a key-value store with a time to live, as of its task's last commit.", "store", "task"),
		descTTLExpired:     mk("eddy_store_expired_entries_total", "Entries a key-value store with a time to live expired, as of its task's last commit.", "store", "task"),
		descCacheHits:      mk("eddy_cache_hits_total", "Record cache reads answered by the cache."),
		descCacheMiss:      mk("eddy_cache_misses_total", "Record cache reads that went to the store."),
		descCacheRatio:     mk("eddy_cache_hit_ratio", "Cache hits over cache reads since the instance started."),
		descLag:            mk("eddy_consumer_lag", "Records in an input partition not yet consumed by its task (end offset minus position).", "topic", "partition", "task"),
		descStreamTime:     mk("eddy_task_stream_time_seconds", "A task's stream time: the largest record timestamp it processed.", "task"),
		descStoreBytes:     mk("eddy_store_disk_bytes", "Estimated bytes a store of a task takes in Pebble (not counting the memtable).", "store", "task"),
		descDiskBytes:      mk("eddy_state_disk_bytes", "Bytes the instance's Pebble state takes on disk."),
		descGlobalApp:      mk("eddy_global_records_applied_total", "Records applied to global stores."),
		descGlobalSkip:     mk("eddy_global_records_skipped_total", "Bad records skipped by global stores (each logged)."),
		descCleaned:        mk("eddy_state_cleaned_tasks_total", "Tasks whose local state was deleted because no stream thread of this instance owned them for StateCleanupDelay."),
		descRebuilt:        mk("eddy_state_rebuilt_stores_total", "Stores (global ones included) whose local state was wiped and restored in full because it was older than their changelog keeps deletes (delete.retention.ms)."),
		descStandbyLag:     mk("eddy_standby_lag_records", "Changelog records a standby task had still to read at its thread's last look (every few seconds).", "task"),
		descResets:         mk("eddy_offset_resets_total", "Offset resets of a partition: a source's committed offset its topic no longer held (reading went on as the source's reset policy says), or a store's offset its changelog or global topic no longer held (the store was read in full).", "topic", "partition", "kind"),
		descResetSkipped:   mk("eddy_offset_reset_skipped_offsets_total", "Offsets the resets of a partition jumped over: records never processed.", "topic", "partition", "kind"),
		descAsyncHeld:      mk("eddy_async_records_held", "Records a task's async operators hold: calls running, or records waiting for their key's earlier records or a free slot.", "task"),
		descAsyncRunning:   mk("eddy_async_calls_running", "Async operator calls running in the instance now (at most MaxAsyncCalls)."),
		descUnreachable:    mk("eddy_brokers_unreachable", "1 while calls to the brokers fail and are being retried (the app heals by itself when they are back), else 0."),
		descMemory:         mk("eddy_state_memory_bytes", "Memory the Pebble state store holds now, by part (memtables, block_cache).", "part"),
		descMemoryLimit:    mk("eddy_state_memory_limit_bytes", "The most each part of the state's memory may hold (memtables, block_cache, record_cache); together StateMemoryBytes.", "part"),
		descReadAmp:        mk("eddy_pebble_read_amplification", "Pebble's read amplification: the sorted runs a point read may search (memtables, L0 sublevels, non-empty levels)."),
		descL0Files:        mk("eddy_pebble_l0_files", "Files in Pebble's level 0 (a growing count means compactions lag the writes)."),
		descCompactionDebt: mk("eddy_pebble_compaction_debt_bytes", "Bytes Pebble estimates it must compact to bring its levels back in shape."),
		descBlockCacheHit:  mk("eddy_pebble_block_cache_hit_ratio", "Pebble block cache hits over lookups since the instance started."),
		descWriteStalls:    mk("eddy_pebble_write_stalls_total", "Times Pebble stopped writes (memtables full, or too many L0 files)."),
	}
}

// collector reports the app's state, counts, lag, stream time and store
// sizes from the threads' snapshots when scraped.
type collector struct {
	a *App
	*descs
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.descState, c.descCommits, c.descAborts, c.descRebalances, c.descRestored, c.descRestoreRate, c.descRemaining,
		c.descProcessed, c.descSkipped, c.descDLQ, c.descLate, c.descDedup, c.descTTLLive, c.descTTLExpired, c.descCacheHits, c.descCacheMiss, c.descCacheRatio, c.descLag,
		c.descStreamTime, c.descStoreBytes, c.descDiskBytes, c.descGlobalApp, c.descGlobalSkip, c.descUnreachable, c.descCleaned, c.descRebuilt, c.descStandbyLag, c.descResets, c.descResetSkipped,
		c.descMemory, c.descMemoryLimit, c.descReadAmp, c.descL0Files, c.descCompactionDebt, c.descBlockCacheHit, c.descWriteStalls} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	defer a.mu.Unlock() // held so the state store cannot close while read
	send := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err == nil {
			ch <- m
		}
	}
	for s := Created; s <= Error; s++ {
		v := 0.0
		if s == a.state {
			v = 1
		}
		send(c.descState, prometheus.GaugeValue, v, s.String())
	}
	var commits, aborts, rebalances, restored, remaining int64
	var restoreRate float64
	var counts engine.Counts
	for _, th := range a.threads {
		commits += th.Stats.Commits.Load()
		aborts += th.Stats.Aborts.Load()
		rebalances += th.Stats.Rebalances.Load()
		restored += th.Stats.RestoredRecords.Load()
		remaining += th.Stats.RestoreRemaining.Load()
		snap := th.Snapshot()
		counts.Add(snap.Counts)
		restoreRate += snap.RestoreRate
		for _, sb := range snap.Standbys {
			if sb.Lag >= 0 {
				send(c.descStandbyLag, prometheus.GaugeValue, float64(sb.Lag), sb.ID)
			}
		}
		for _, tk := range snap.Tasks {
			if tk.AsyncHeld > 0 || a.prog.HasAsync() {
				send(c.descAsyncHeld, prometheus.GaugeValue, float64(tk.AsyncHeld), tk.ID)
			}
			if tk.StreamTime >= 0 {
				send(c.descStreamTime, prometheus.GaugeValue, float64(tk.StreamTime)/1000, tk.ID)
			}
			for _, p := range tk.Partitions {
				if p.Lag >= 0 {
					send(c.descLag, prometheus.GaugeValue, float64(p.Lag), p.Topic, strconv.Itoa(int(p.Partition)), tk.ID)
				}
			}
			for _, s := range a.taskStoreSpecs(tk.ID) {
				b := a.backend(s.InMemory)
				if s.TTL <= 0 || b == nil {
					continue
				}
				if live, expired, ok, err := storage.TTLStats(b, tk.ID, s.Name); err == nil && ok {
					send(c.descTTLLive, prometheus.GaugeValue, float64(live), s.Name, tk.ID)
					send(c.descTTLExpired, prometheus.CounterValue, float64(expired), s.Name, tk.ID)
				}
			}
			if a.pebble != nil {
				for _, s := range a.taskStores(tk.ID) {
					if n, err := a.pebble.StoreDiskBytes(tk.ID, s); err == nil {
						send(c.descStoreBytes, prometheus.GaugeValue, float64(n), s, tk.ID)
					}
				}
			}
		}
	}
	send(c.descCommits, prometheus.CounterValue, float64(commits))
	send(c.descAborts, prometheus.CounterValue, float64(aborts))
	send(c.descRebalances, prometheus.CounterValue, float64(rebalances))
	send(c.descRestored, prometheus.CounterValue, float64(restored))
	send(c.descRemaining, prometheus.GaugeValue, float64(remaining))
	send(c.descRestoreRate, prometheus.GaugeValue, restoreRate)
	send(c.descProcessed, prometheus.CounterValue, float64(counts.Processed))
	send(c.descSkipped, prometheus.CounterValue, float64(counts.Skipped))
	send(c.descDLQ, prometheus.CounterValue, float64(counts.DeadLettered))
	send(c.descLate, prometheus.CounterValue, float64(counts.Late))
	send(c.descDedup, prometheus.CounterValue, float64(counts.Deduplicated))
	send(c.descCacheHits, prometheus.CounterValue, float64(counts.CacheHits))
	send(c.descCacheMiss, prometheus.CounterValue, float64(counts.CacheMisses))
	if reads := counts.CacheHits + counts.CacheMisses; reads > 0 {
		send(c.descCacheRatio, prometheus.GaugeValue, float64(counts.CacheHits)/float64(reads))
	}
	if a.pebble != nil {
		m := a.pebble.Metrics()
		send(c.descDiskBytes, prometheus.GaugeValue, float64(m.DiskSpaceUsage()))
		send(c.descMemory, prometheus.GaugeValue, float64(m.MemTable.Size), "memtables")
		send(c.descMemory, prometheus.GaugeValue, float64(m.BlockCache.Size), "block_cache")
		memtables, blockCache := a.pebble.MemoryLimits()
		send(c.descMemoryLimit, prometheus.GaugeValue, float64(memtables), "memtables")
		send(c.descMemoryLimit, prometheus.GaugeValue, float64(blockCache), "block_cache")
		send(c.descMemoryLimit, prometheus.GaugeValue, float64(a.cfg.CacheMaxBytes), "record_cache")
		send(c.descReadAmp, prometheus.GaugeValue, float64(m.ReadAmp()))
		send(c.descL0Files, prometheus.GaugeValue, float64(m.Levels[0].TablesCount))
		send(c.descCompactionDebt, prometheus.GaugeValue, float64(m.Compact.EstimatedDebt))
		if lookups := m.BlockCache.Hits + m.BlockCache.Misses; lookups > 0 {
			send(c.descBlockCacheHit, prometheus.GaugeValue, float64(m.BlockCache.Hits)/float64(lookups))
		}
		send(c.descWriteStalls, prometheus.CounterValue, float64(a.pebble.WriteStalls()))
	}
	if a.asyncLimit != nil && a.prog.HasAsync() {
		send(c.descAsyncRunning, prometheus.GaugeValue, float64(a.asyncLimit.Running()))
	}
	unreachable := 0.0
	if down, _, _ := a.brokersUnreachableLocked(); down {
		unreachable = 1
	}
	send(c.descUnreachable, prometheus.GaugeValue, unreachable)
	if d := a.stateDir; d != nil {
		send(c.descCleaned, prometheus.CounterValue, float64(d.Cleaned.Load()))
		send(c.descRebuilt, prometheus.CounterValue, float64(d.Rebuilt.Load()))
	}
	for _, r := range a.resets.Reports() {
		p := strconv.Itoa(int(r.Partition))
		send(c.descResets, prometheus.CounterValue, float64(r.Resets), r.Topic, p, r.Kind)
		send(c.descResetSkipped, prometheus.CounterValue, float64(r.Skipped), r.Topic, p, r.Kind)
	}
	if g := a.globals; g != nil {
		send(c.descGlobalApp, prometheus.CounterValue, float64(g.Applied.Load()))
		send(c.descGlobalSkip, prometheus.CounterValue, float64(g.Skipped.Load()))
	}
}

// taskStores returns the Pebble stores of a task ("<subtopology>_<p>").
func (a *App) taskStores(task string) []string {
	var out []string
	for _, s := range a.taskStoreSpecs(task) {
		if !s.InMemory {
			out = append(out, s.Name)
		}
	}
	return out
}

// taskStoreSpecs returns the specs of the stores of task's sub-topology.
func (a *App) taskStoreSpecs(task string) []storage.Spec {
	sub, _, ok := strings.Cut(task, "_")
	if !ok {
		return nil
	}
	id, err := strconv.Atoi(sub)
	if err != nil {
		return nil
	}
	var out []storage.Spec
	for _, st := range a.prog.Subtopologies {
		if st.ID != id {
			continue
		}
		for _, s := range st.Stores {
			out = append(out, s.Builder.Spec())
		}
	}
	return out
}

// registerMetrics makes the app's instruments and collector and registers
// them with its own registry (served by Handler) and with cfg.Metrics.
func (a *App) registerMetrics() error {
	labels := prometheus.Labels{"application_id": a.cfg.ApplicationID}
	a.metrics = engine.NewMetrics(labels)
	a.registry = prometheus.NewRegistry()
	cs := append(a.metrics.Collectors(), &collector{a: a, descs: newDescs(labels)})
	for _, r := range []prometheus.Registerer{a.registry, a.cfg.Metrics} {
		if r == nil {
			continue
		}
		for _, c := range cs {
			if err := r.Register(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// brokersUnreachableLocked reports whether a thread or the global reader is
// retrying calls to unreachable brokers, since when (the earliest) and why.
// a.mu is held.
func (a *App) brokersUnreachableLocked() (bool, time.Time, string) {
	var since time.Time
	cause := ""
	note := func(down bool, s time.Time, c string) {
		if down && (since.IsZero() || s.Before(since)) {
			since, cause = s, c
		}
	}
	for _, th := range a.threads {
		note(th.Health.Unreachable())
	}
	if a.globals != nil {
		note(a.globals.Health.Unreachable())
	}
	note(a.startup.Unreachable())
	return !since.IsZero(), since, cause
}

// brokersUnreachable is brokersUnreachableLocked for callers without a.mu.
func (a *App) brokersUnreachable() (bool, time.Time, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.brokersUnreachableLocked()
}
