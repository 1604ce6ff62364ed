// Package engine runs a compiled topology on Kafka: stream threads, each a
// consumer-group member with its own producer, tasks and record buffers;
// commits (transactional under exactly-once); changelog restore.
package engine

import (
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// Config is what the streams package gives the engine, defaults applied.
type Config struct {
	AppID       string
	ProcessID   string
	Program     *rt.Program
	ExactlyOnce bool
	// CommitInterval is how often a thread commits.
	CommitInterval time.Duration
	// MaxTaskIdle is how long a task whose empty input partition is caught
	// up waits for it before processing the others; a partition with
	// records not fetched yet is always waited for, unless MaxTaskIdle is
	// negative (never wait).
	MaxTaskIdle time.Duration
	// CacheBytes is each thread's record cache.
	CacheBytes int64
	// MaxBufferedRecords per partition; the partition pauses when full.
	MaxBufferedRecords int
	// FenceBackoff is how long a thread whose producer was fenced waits
	// before a new producer claims the transactional id (1 s when zero),
	// doubled for each further fence within five minutes, up to 16 times.
	// The producer that fenced it may still be retrying its own
	// InitTransactions (librdkafka retries every 500 ms while the fenced
	// transaction is being aborted); a thread that came straight back
	// would open a transaction that retry fences again, round after round.
	FenceBackoff time.Duration
	// NumStandbyReplicas is how many standby copies of each stateful task
	// the instance asks the group's assignor for (Kafka Streams'
	// num.standby.replicas).
	NumStandbyReplicas int
	// AcceptableRecoveryLag and MaxWarmupReplicas are the warm-up settings
	// the instance tells the group's assignor (Kafka Streams'
	// acceptable.recovery.lag and max.warmup.replicas): a stateful task
	// moves to an instance only when that instance's state of it is
	// within AcceptableRecoveryLag changelog records of its owner's; else
	// it stays while a warm-up copy catches up there, at most
	// MaxWarmupReplicas at once (0: tasks move at once).
	AcceptableRecoveryLag int64
	MaxWarmupReplicas     int
	// ClientTags are the instance's client tags the group's assignor
	// spreads standby copies over (Kafka Streams' client.tag.<key> for the
	// keys in rack.aware.assignment.tags).
	ClientTags map[string]string
	// InstanceID, when set, makes each thread a static member
	// ("<InstanceID>-<thread>").
	InstanceID string
	// Base client configs, pass-through settings merged in. Global reads
	// global tables' topics (assign-only).
	Consumer, Producer, Restore, Global kclient.Config
	Admin                               kclient.Admin
	Log                                 *zap.Logger
	Pebble                              storage.Backend
	Memory                              storage.Backend
	// StateDirectory records which thread owns each task's state, deletes
	// state no thread owns, and counts stores rebuilt because their state
	// was older than their changelog keeps deletes.
	StateDirectory *StateDirectory
	// Resets records every offset reset (nil: they are only logged).
	Resets *OffsetResets
	// Partitions of every topic the program reads, internal ones by full
	// name.
	Partitions map[string]int32
	// Topics the threads subscribe to (resolved names).
	Subscription []string
	// Handlers for failed records.
	Handlers rt.Handlers
	// WallClock returns the time in milliseconds (time.Now by default).
	WallClock func() int64
	// AsyncLimit bounds the async calls running at once across the
	// instance (nil: each operator's concurrency per task only).
	AsyncLimit *rt.AsyncLimit
	// Notices is the instance's rebalance-notice channel its threads'
	// group members share (nil: none).
	Notices kclient.Notices
	// Metrics, when set, are updated as threads work.
	Metrics *Metrics
	// OnState reports thread state changes.
	OnState func(thread int, s ThreadState)
	// NewConsumer and NewProducer make clients (tests may replace them).
	NewConsumer func(kclient.Config) (kclient.Consumer, error)
	NewProducer func(kclient.Config) (kclient.Producer, error)
	// NewGroupConsumer makes a stream thread's consumer (NewConsumer when
	// nil).
	NewGroupConsumer func(kclient.Config) (kclient.Consumer, error)
	// NewReader makes the reader of changelogs being restored (NewConsumer
	// when nil).
	NewReader func(kclient.Config) (kclient.Reader, error)
	// NewAdmin makes an admin client: each thread (and the global reader)
	// has its own, replaced when it keeps failing.
	NewAdmin func() (kclient.Admin, error)
}

// ThreadState is a stream thread's lifecycle state.
type ThreadState int

// The thread states.
const (
	ThreadStarting ThreadState = iota
	ThreadRebalancing
	ThreadRunning
	ThreadStopped
	ThreadFailed
)

func (s ThreadState) String() string {
	return [...]string{"starting", "rebalancing", "running", "stopped", "failed"}[s]
}
