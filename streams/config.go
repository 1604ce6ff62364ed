package streams

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/engine"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
	"github.com/eddy-go/eddy/topology"
)

// Warm-up defaults (Kafka Streams' own): see Config.AcceptableRecoveryLag
// and Config.MaxWarmupReplicas.
const (
	DefaultAcceptableRecoveryLag = 10_000
	DefaultMaxWarmupReplicas     = 2
)

// Guarantee is the processing guarantee.
type Guarantee int

const (
	// AtLeastOnce: after a failure, records may be processed again, so
	// results may count them twice; nothing is lost.
	AtLeastOnce Guarantee = iota
	// ExactlyOnce: Kafka transactions make every record's effects — output,
	// state, consumed offset — happen once, even across crashes (EOS v2,
	// KIP-447).
	ExactlyOnce
)

func (g Guarantee) String() string {
	if g == ExactlyOnce {
		return "exactly_once"
	}
	return "at_least_once"
}

// ParseGuarantee parses "exactly_once" or "at_least_once".
func ParseGuarantee(s string) (Guarantee, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "-", "_")) {
	case "exactly_once", "exactly_once_v2", "eos":
		return ExactlyOnce, nil
	case "at_least_once", "alos":
		return AtLeastOnce, nil
	}
	return 0, fmt.Errorf("streams: unknown guarantee %q (exactly_once or at_least_once)", s)
}

// Config configures an App. Zero fields take the defaults written on them;
// New fills them in and reports every invalid setting at once.
type Config struct {
	// ApplicationID names the consumer group, the prefix of internal topics
	// and the state directory. Required; letters, digits, '.', '_', '-'.
	ApplicationID string
	// BootstrapServers is the Kafka cluster, "host:port[,host:port…]".
	// Required.
	BootstrapServers string
	// StateDir holds the instance's state store, under
	// <StateDir>/<ApplicationID>. Default: <os.TempDir()>/eddy-streams.
	// Two instances on one machine need different StateDirs.
	StateDir string
	// Guarantee is AtLeastOnce (default) or ExactlyOnce.
	Guarantee Guarantee
	// NumStreamThreads is the number of stream threads. Default 1.
	NumStreamThreads int
	// CommitInterval is how often progress is committed. Default 100ms
	// under ExactlyOnce, 30s under AtLeastOnce, as Kafka Streams.
	CommitInterval time.Duration
	// CacheMaxBytes is the record cache of the instance, split between its
	// threads. Default 10 MiB. Set NoCache to disable caching.
	CacheMaxBytes int64
	// NoCache disables the record cache: every update is forwarded and
	// logged.
	NoCache bool
	// StateMemoryBytes bounds the memory of the instance's persistent
	// state, whatever its size on disk: the record cache (CacheMaxBytes,
	// counted in it) and the Pebble database shared by every store, whose
	// memtables (two, one filling and one flushing, a quarter of the rest
	// each) and block cache (the other half, index and filter blocks
	// included) share what the cache leaves. Default 256 MiB. It must leave
	// Pebble at least 32 MiB. State the instance keeps in memory stores
	// (in-memory stores, buffered join and suppress records) is not
	// counted; neither are the client's fetch and produce buffers.
	StateMemoryBytes int64
	// ReplicationFactor of the internal topics it creates. Default -1: the
	// broker's default.replication.factor.
	ReplicationFactor int16
	// InstanceID, when set, makes this instance a static group member
	// (group.instance.id "<InstanceID>-<thread>"): a restart within the
	// session timeout does not rebalance. It must be unique per instance.
	InstanceID string
	// ProcessID identifies this instance in transactional ids
	// ("<ApplicationID>-<ProcessID>-<thread>"). Default: a random id kept
	// in the state directory, so a restarted instance fences its previous
	// incarnation at once.
	ProcessID string
	// MaxTaskIdle is Kafka Streams' max.task.idle.ms. A task processes its
	// partitions' records in timestamp order; when one of its input
	// partitions has no record buffered but is known to have records not
	// fetched yet (or its end is not known yet), it waits for them, so
	// that a stream–table join sees the table rows older than its stream
	// records (Kafka Streams' default, KIP-695). MaxTaskIdle > 0 makes it
	// also wait that long for an empty partition that is caught up, for
	// records still being produced; negative never waits (Kafka Streams'
	// -1). Default 0.
	MaxTaskIdle time.Duration
	// MaxBufferedRecords bounds the records a stream thread holds ahead of
	// processing: this many per assigned partition, counted over all of
	// them; while the bound is reached the thread stops polling (and the
	// client's own bounded prefetch stops fetching). Default 1000.
	MaxBufferedRecords int
	// NumStandbyReplicas is how many standby copies of each stateful task
	// the group keeps (Kafka Streams' num.standby.replicas): an instance
	// holding a standby follows the task's changelogs into its own local
	// state, so that when the task's instance dies or leaves, the task
	// moves there and restores only what the standby lagged, instead of
	// its whole state. A standby is never on the instance of its task's
	// active, nor two of one task on one instance; with fewer other
	// instances there are fewer copies. Standbys cost each holder the
	// changelogs' reads and writes, and disk for the state. Default 0.
	// The eddy_librdkafka build cannot place standbys (its group uses
	// librdkafka's assignor): a positive value is an error there.
	NumStandbyReplicas int
	// MaxAsyncCalls bounds the calls of async operators
	// (topology.MapValuesAsync and the others) running at once in the
	// instance, over all its threads and tasks; each operator also bounds
	// its own per task (topology.AsyncOptions). Default 256.
	MaxAsyncCalls int
	// AcceptableRecoveryLag is how far behind (changelog records, summed
	// over a task's stores) an instance's local state of a stateful task
	// may be for the task to move there at once (Kafka Streams'
	// acceptable.recovery.lag). When balance would move a task to an
	// instance further behind — one that just joined, say — the task keeps
	// running where it is while a warm-up copy (a standby) catches up
	// there, and moves once it is within this lag: scaling out never
	// stops a task for a full restore. A warm-up that catches up asks the
	// group for a rebalance at once (Kafka Streams waits for its next
	// probing rebalance, every 10 minutes). Default 10,000; negative
	// means 0 (only fully caught-up state counts).
	AcceptableRecoveryLag int64
	// MaxWarmupReplicas is how many warm-up copies the group keeps at once
	// (Kafka Streams' max.warmup.replicas); the tasks beyond them keep
	// running where they are until a warm-up slot frees. Default 2;
	// negative: no warm-ups, tasks move at once and restore on their new
	// instance. The eddy_librdkafka build has no warm-ups (its group uses
	// librdkafka's assignor): there, both settings have no effect.
	MaxWarmupReplicas int
	// ClientTags label this instance for the placement of standby
	// replicas (Kafka Streams' client.tag.<key>), such as its zone or
	// rack: {"zone": "eu-west-1a"}. Only the keys RackAwareAssignmentTags
	// names are used.
	ClientTags map[string]string
	// RackAwareAssignmentTags names the ClientTags keys standby replicas
	// spread over (Kafka Streams' rack.aware.assignment.tags, KIP-708): a
	// standby copy of a task goes, where the group allows, to an instance
	// whose value of each named tag differs from the task's active's and
	// its other copies' — a zone's outage then never takes a task and all
	// its standbys. Where no such instance is in the group, copies are
	// placed as without tags. Every instance of the application should
	// name the same keys; each must be set in ClientTags.
	RackAwareAssignmentTags []string
	// StateCleanupDelay is how long the local state of a task that no
	// stream thread of this instance owns is kept before it is deleted
	// (Kafka Streams' state.cleanup.delay.ms): a task that moved to another
	// instance, or one whose state was found in StateDir at start but that
	// was not assigned here. It counts from when the task was let go, or
	// from the start for state found at start. Default 10 minutes; negative
	// keeps such state for ever (a returning task still never resumes
	// state older than its changelog keeps deletes: see the README's State
	// stores).
	StateCleanupDelay time.Duration
	// FsyncState makes every commit fsync the state store's write-ahead
	// log, so committed state survives a machine crash or power loss, at
	// the cost of an fsync per commit. Default false: each commit's
	// write-ahead log is written to the operating system, which survives the
	// process being killed (SIGKILL included) but not the machine going
	// down; a restore then replays the changelog tail after the last commit
	// that reached the disk, so results are exact either way.
	FsyncState bool
	// OffsetReset is where sources start reading a partition the
	// application has no committed offset for, or whose committed offset
	// the topic no longer holds (Kafka Streams' auto.offset.reset); a
	// source may choose its own (topology.ConsumedOptions.WithOffsetReset).
	// Repartition topics always start at their earliest offset. Default:
	// topology.ResetEarliest.
	OffsetReset topology.OffsetReset
	// Logger receives the app's logs. Default: zap.NewNop().
	Logger *zap.Logger
	// ClientConfig passes standard Kafka client properties
	// (security.protocol, sasl.*, ssl.*, timeouts, fetch and batching
	// tuning, …) to every client eddy creates. Properties eddy manages for
	// correctness are refused, and so is any property eddy's client cannot
	// carry out, by name, when New checks the Config (see the README's
	// Pointing at a real cluster for the list; built with the
	// eddy_librdkafka tag, librdkafka's properties).
	ClientConfig map[string]string
	// StateListener is called on every state change, from the goroutine
	// that made it.
	StateListener func(old, new State)

	// DeserializationErrors decides for records whose key, value or
	// timestamp cannot be read; ProcessingErrors for records a processor
	// failed on (an error returned, or a panic in user code);
	// ProductionErrors for output that cannot be serialized. nil: Fail, as
	// Kafka Streams' defaults. See Always, Continue, DeadLetter.
	DeserializationErrors, ProcessingErrors, ProductionErrors ErrorHandler
	// DeadLetterTopic receives the records a handler dead-letters. It must
	// exist; required when a handler may answer DeadLetter.
	DeadLetterTopic string

	// Metrics, when set, also registers the app's Prometheus metrics there
	// (prometheus.DefaultRegisterer, or a service's own registry); each is
	// labelled application_id. Handler serves them at /metrics either way.
	Metrics prometheus.Registerer
	// ApplicationServer is the "host:port" where this instance's Handler is
	// reachable by the other instances (or its base URL,
	// "http://host:port/prefix" or "https://host:port/prefix", when the
	// Handler is mounted under a prefix or served over TLS), for
	// interactive queries across instances (MetadataForKey,
	// GET /stores/...). The instances advertise their servers and tasks in
	// the compacted topic "<ApplicationID>-eddy-instances". Empty: queries
	// answer from this instance only.
	ApplicationServer string
	// QueryClient sends the store queries this instance forwards to the
	// instance owning a key. Set it when the instances serve https with a
	// private CA, need client certificates (mTLS), or check a token (a
	// Transport that adds the header). Default: a client with a 10 s
	// timeout and Go's default transport.
	QueryClient *http.Client
}

// minPebbleMemory is the least StateMemoryBytes may leave the Pebble
// database beyond the record cache: two 8 MiB memtables and a 16 MiB block
// cache.
const minPebbleMemory = 32 << 20

var validID = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ensureDefaults fills zero fields with defaults.
func (c *Config) ensureDefaults() {
	if c.StateDir == "" {
		c.StateDir = filepath.Join(os.TempDir(), "eddy-streams")
	}
	if c.NumStreamThreads == 0 {
		c.NumStreamThreads = 1
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 30 * time.Second
		if c.Guarantee == ExactlyOnce {
			c.CommitInterval = 100 * time.Millisecond
		}
	}
	if c.CacheMaxBytes == 0 && !c.NoCache {
		c.CacheMaxBytes = 10 << 20
	}
	if c.NoCache {
		c.CacheMaxBytes = 0
	}
	if c.StateMemoryBytes == 0 {
		c.StateMemoryBytes = 256 << 20
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.MaxBufferedRecords == 0 {
		c.MaxBufferedRecords = 1000
	}
	if c.MaxAsyncCalls == 0 {
		c.MaxAsyncCalls = 256
	}
	if c.StateCleanupDelay == 0 {
		c.StateCleanupDelay = engine.DefaultStateCleanupDelay
	}
	switch {
	case c.AcceptableRecoveryLag == 0:
		c.AcceptableRecoveryLag = DefaultAcceptableRecoveryLag
	case c.AcceptableRecoveryLag < 0:
		c.AcceptableRecoveryLag = 0
	}
	switch {
	case c.MaxWarmupReplicas == 0:
		c.MaxWarmupReplicas = DefaultMaxWarmupReplicas
	case c.MaxWarmupReplicas < 0:
		c.MaxWarmupReplicas = 0
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.OffsetReset == "" {
		c.OffsetReset = topology.ResetEarliest
	}
}

// validate returns every problem of c in one error.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("streams: "+format, args...)) }
	switch {
	case c.ApplicationID == "":
		bad("ApplicationID is required")
	case !validID.MatchString(c.ApplicationID) || len(c.ApplicationID) > 200:
		bad("ApplicationID %q may hold only letters, digits, '.', '_' and '-' (at most 200)", c.ApplicationID)
	}
	if strings.TrimSpace(c.BootstrapServers) == "" {
		bad("BootstrapServers is required")
	}
	if c.Guarantee != AtLeastOnce && c.Guarantee != ExactlyOnce {
		bad("Guarantee %d is neither AtLeastOnce nor ExactlyOnce", c.Guarantee)
	}
	if c.NumStreamThreads < 1 {
		bad("NumStreamThreads must be at least 1, got %d", c.NumStreamThreads)
	}
	if c.CommitInterval < 0 {
		bad("CommitInterval must be positive, got %v", c.CommitInterval)
	}
	if c.CacheMaxBytes < 0 {
		bad("CacheMaxBytes must not be negative, got %d", c.CacheMaxBytes)
	}
	if c.StateMemoryBytes-c.CacheMaxBytes < minPebbleMemory {
		bad("StateMemoryBytes (%d) must leave at least %d bytes for the Pebble state store beyond CacheMaxBytes (%d): raise StateMemoryBytes or lower CacheMaxBytes",
			c.StateMemoryBytes, minPebbleMemory, c.CacheMaxBytes)
	}
	if c.ReplicationFactor < -1 || c.ReplicationFactor == 0 {
		bad("ReplicationFactor must be -1 (broker default) or at least 1, got %d", c.ReplicationFactor)
	}
	switch {
	case c.NumStandbyReplicas < 0:
		bad("NumStandbyReplicas must not be negative, got %d", c.NumStandbyReplicas)
	case c.NumStandbyReplicas > 0 && backend.Name != "franz-go":
		bad("NumStandbyReplicas %d needs eddy's own group assignor; this build (%s, -tags eddy_librdkafka) uses librdkafka's range assignor, which has no standbys", c.NumStandbyReplicas, backend.Name)
	}
	for _, k := range c.RackAwareAssignmentTags {
		if _, ok := c.ClientTags[k]; !ok {
			bad("RackAwareAssignmentTags names %q, which ClientTags does not set", k)
		}
	}
	if _, err := kclient.ParseReset(string(c.OffsetReset)); err != nil {
		bad("OffsetReset: %v", err)
	}
	if c.MaxBufferedRecords < 1 {
		bad("MaxBufferedRecords must be at least 1, got %d", c.MaxBufferedRecords)
	}
	if c.MaxAsyncCalls < 1 {
		bad("MaxAsyncCalls must be at least 1, got %d", c.MaxAsyncCalls)
	}
	if s := c.ApplicationServer; strings.Contains(s, "://") && !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		bad("ApplicationServer %q: the scheme must be http or https", s)
	}
	if c.InstanceID != "" && !validID.MatchString(c.InstanceID) {
		bad("InstanceID %q may hold only letters, digits, '.', '_' and '-'", c.InstanceID)
	}
	if c.ProcessID != "" && !validID.MatchString(c.ProcessID) {
		bad("ProcessID %q may hold only letters, digits, '.', '_' and '-'", c.ProcessID)
	}
	var refused []string
	for k := range c.ClientConfig {
		if managed[k] {
			refused = append(refused, k)
		}
	}
	if _, ok := c.ClientConfig["auto.offset.reset"]; ok {
		bad("ClientConfig may not set auto.offset.reset: set Config.OffsetReset (or a source's, topology.ConsumedOptions.WithOffsetReset)")
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		bad("ClientConfig may not set %s: eddy manages them", strings.Join(refused, ", "))
	} else if strings.TrimSpace(c.BootstrapServers) != "" {
		cc := kclient.Config{"bootstrap.servers": c.BootstrapServers}
		for k, v := range c.ClientConfig {
			cc[k] = v
		}
		if err := backend.CheckConfig(cc); err != nil {
			bad("ClientConfig: %v", err)
		}
	}
	return errors.Join(errs...)
}

// rackTags returns the client tags standby placement spreads over: the
// ClientTags RackAwareAssignmentTags names.
func (c *Config) rackTags() map[string]string {
	if len(c.RackAwareAssignmentTags) == 0 {
		return nil
	}
	out := make(map[string]string, len(c.RackAwareAssignmentTags))
	for _, k := range c.RackAwareAssignmentTags {
		out[k] = c.ClientTags[k]
	}
	return out
}
