// Package kclient is eddy's seam to a Kafka client: the small consumer,
// reader, producer and admin interfaces the runtime needs, the member
// state and rebalances its group carries, and the error classes every
// client's failures map to. No client type crosses it. The
// implementations are in its sub-packages: franz (franz-go, the default),
// fetch (eddy's own fetcher and the group consumer built on it),
// librdkafka (confluent-kafka-go, with the eddy_librdkafka build tag), and
// backend, which picks and composes them for a build.
package kclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// Config is a client's configuration: standard Kafka client property names
// (librdkafka's spelling) and their values.
type Config map[string]any

// Subtopologies is the Config key of a stream thread's consumer's topology,
// a [][]string: the source topics (as named on the brokers) of each
// sub-topology, by id. The group's assignor (internal/assign), run by the
// group's leader, places tasks — a sub-topology on one partition number —
// by it.
const Subtopologies = "eddy.subtopologies"

// TP is a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// OffsetEarliest, given to Consumer.Assign, starts a partition at its log
// start whatever the reset policy (librdkafka's OFFSET_BEGINNING); -1
// starts it at the committed offset, or as the policy says.
const OffsetEarliest = -2

// Rebalance is a group assignment change, delivered inside Consumer.Poll.
type Rebalance struct {
	Assigned []TP // partitions given to this member (eager: the whole new assignment)
	Revoked  []TP // partitions taken away (eager: everything)
	// Lost: the partitions were taken without a clean hand-over (session
	// timeout, fencing); nothing may be committed for them.
	Lost bool
	// Standby, with an assignment (Assigned, possibly empty, and nothing
	// Revoked), is every task the member follows as a standby: the
	// changelogs of its stores are kept in local state, ready for the
	// member to take the task over. Only eddy's assignor gives standbys.
	Standby []processor.TaskID
	// Warmup, a subset of Standby, are the tasks the assignor would move
	// to this member but kept where they are because the member's
	// instance holds too little of their state (KIP-441 warm-up tasks):
	// once one is caught up (within the group's
	// MemberState.AcceptableRecoveryLag), the member asks for a rebalance
	// (StateReporter.Rejoin) and the task moves here.
	Warmup []processor.TaskID
}

// Consumer is a group member (or, with no group, an assign-only reader).
type Consumer interface {
	// Subscribe joins the group on topics; onRebalance runs inside Poll.
	Subscribe(topics []string, onRebalance func(Rebalance) error) error
	// Poll returns the next record, or nil when none arrived within timeout.
	Poll(timeout time.Duration) (*rt.RawRecord, error)
	// Assign sets the partitions to read, from the given offsets (-1: the
	// committed offset).
	Assign(offsets map[TP]int64) error
	Pause(tps []TP) error
	Resume(tps []TP) error
	Seek(tp TP, offset int64) error
	// Committed returns the group's committed offsets and their metadata;
	// under read_committed it waits for pending transactional commits
	// (KIP-447).
	Committed(ctx context.Context, tps []TP) (map[TP]int64, map[TP]string, error)
	// Position returns the next offsets to read.
	Position(tps []TP) (map[TP]int64, error)
	// HighWatermark returns the partition's end offset as last seen in a
	// fetch response (no broker round trip; -1 when unknown).
	HighWatermark(tp TP) int64
	// CaughtUp tells whether Poll returned every record of tp up to its end
	// as last seen in a fetch response: false while that end is unknown or
	// records before it are still to come (a task waits for such a
	// partition before processing its others, as Kafka Streams does).
	CaughtUp(tp TP) bool
	// Commit commits offsets, each with its metadata (may be nil),
	// synchronously (at-least-once).
	Commit(offsets map[TP]int64, meta map[TP]string) error
	// GroupMetadata is the opaque group state SendOffsets needs.
	GroupMetadata() (any, error)
	Close() error
}

// Reader reads partitions from given offsets without joining a group: what
// restoring a store from its changelog needs. A Consumer is one.
type Reader interface {
	// Assign sets the partitions to read and the offsets to read them
	// from (offsets ≥ 0), replacing any earlier assignment.
	Assign(offsets map[TP]int64) error
	// Poll returns the next record, or nil when none arrived within
	// timeout.
	Poll(timeout time.Duration) (*rt.RawRecord, error)
	// Position returns the next offsets to read: past every record Poll
	// returned and every offset that holds nothing to return (transaction
	// markers, aborted records, compacted gaps) before the next one.
	Position(tps []TP) (map[TP]int64, error)
	Close() error
}

// MemberState is what a stream thread's group member tells the group's
// assignor about its instance each time it joins.
type MemberState struct {
	// Process identifies the instance; its stream threads share its local
	// state.
	Process string
	// Offsets holds, for each task whose state the instance keeps, the
	// sum of its stores' changelog offsets: the higher, the less a restore
	// there has to read.
	Offsets map[processor.TaskID]int64
	// Standbys is how many standby copies of each task the instance wants
	// (Kafka Streams' num.standby.replicas; 0 for a topology without
	// logged stores); the group's leader places as many as the largest
	// number a member asks for.
	Standbys int
	// Standby lists the member's standby tasks now, which it keeps if it
	// may: its standbys and warm-ups.
	Standby []processor.TaskID
	// Warmup lists the member's warm-ups now (Rebalance.Warmup): tasks the
	// assignor is to give it once caught up.
	Warmup []processor.TaskID
	// AcceptableRecoveryLag is how far (changelog records, summed over a
	// task's stores) an instance's state of a task may be behind the
	// task's current owner's for the task to move there at once (Kafka
	// Streams' acceptable.recovery.lag); further behind, the task stays
	// and a warm-up copy catches up first. The leader takes the largest
	// a member reports.
	AcceptableRecoveryLag int64
	// MaxWarmups is how many warm-up copies the group may have at once
	// (Kafka Streams' max.warmup.replicas); the leader takes the largest
	// a member reports. 0: a task moves at once, without warming up.
	MaxWarmups int
	// Tags are the instance's client tags that standby placement spreads
	// over (Kafka Streams' client.tag.<key> for the keys in
	// rack.aware.assignment.tags): a standby copy of a task goes, where
	// the group allows, to an instance whose value of each tag differs
	// from those of the task's active's instance and its other copies'.
	Tags map[string]string
}

// StateReporter is a Consumer whose group assignor places tasks by where
// their state is (the franz-go backend's): state is called at every join.
type StateReporter interface {
	ReportState(state func() MemberState)
	// Rejoin asks the group for a rebalance: the member's state changed
	// (a warm-up caught up) and the assignor should weigh it now.
	Rejoin()
}

// Notices is an instance's rebalance-notice channel, shared by its group
// members (one per stream thread): each member says on a topic of the
// app's when it joins or leaves the group, and the instance's other
// members, hearing it, probe the group at once instead of at their next
// heartbeat. Run reads notices until its context ends; Close releases the
// channel's clients. Only franz-go's members use one.
type Notices interface {
	Run(ctx context.Context)
	Close()
}

// NoticeUser is a Consumer whose group member can send and hear rebalance
// notices (see Notices); UseNotices comes before Subscribe.
type NoticeUser interface {
	UseNotices(n Notices)
}

// RebalanceWatcher is a Consumer whose group member tells when its group is
// completing a rebalance: while the member's SyncGroup is under way, when
// the coordinator refuses offset commits (REBALANCE_IN_PROGRESS, or
// ILLEGAL_GENERATION for the generation before). While members join, the
// coordinator still accepts the generation they have.
type RebalanceWatcher interface {
	Rebalancing() bool
}

// Producer writes records; transactional when built with a transactional id.
type Producer interface {
	// Produce enqueues rec; it does not keep rec or its slices.
	Produce(rec *rt.OutRecord) error
	// WaitDelivered waits until every record produced so far has its
	// delivery report, and returns the first delivery failure not yet
	// forgotten (it stays for DeliveryErr). It does not hurry the producer:
	// records go out as linger.ms allows. A transactional producer gets no
	// report of a success (CommitTransaction waits for the records and
	// fails if one was not delivered): it waits only until the client has
	// every record.
	WaitDelivered(ctx context.Context) error
	// DeliveryErr returns, and forgets, the first delivery failure since
	// the last call.
	DeliveryErr() error
	// LastOffsets returns, and forgets, the offset of the last record
	// delivered to each partition since the previous call (none for a
	// transactional producer, see WaitDelivered).
	LastOffsets() map[TP]int64
	// Purge drops every record not yet delivered (still queued, or sent
	// and not acknowledged): none of them is delivered after it returns;
	// their delivery reports come at once, as failures. At-least-once
	// purges what it is about to process again, so that a member the group
	// replaced while the brokers were away cannot deliver old results late,
	// after the partitions' new owner wrote.
	Purge() error
	InitTransactions(ctx context.Context) error
	BeginTransaction() error
	SendOffsets(ctx context.Context, offsets map[TP]int64, meta map[TP]string, groupMetadata any) error
	CommitTransaction(ctx context.Context) error
	AbortTransaction(ctx context.Context) error
	Close()
}

// TopicSpec describes a topic to create.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16 // -1: the broker's default
	Config            map[string]string
}

// Admin manages topics and offsets.
type Admin interface {
	// Partitions returns the partition count of each topic that exists.
	Partitions(ctx context.Context, topics []string) (map[string]int32, error)
	// CreateTopics creates topics; existing ones are not an error.
	CreateTopics(ctx context.Context, specs []TopicSpec) error
	// Offsets returns each partition's earliest offset and its end (the
	// last stable offset when readCommitted, else the high watermark).
	Offsets(ctx context.Context, tps []TP, readCommitted bool) (start, end map[TP]int64, err error)
	// DeleteRecords deletes records below the given offsets.
	DeleteRecords(ctx context.Context, before map[TP]int64) error
	// TopicConfigs returns the configs of each topic that exists, as the
	// brokers describe them (set ones and the defaults that apply).
	TopicConfigs(ctx context.Context, topics []string) (map[string]map[string]string, error)
	Close()
}

// TxnFencer is an Admin that can end the open transaction of an instance
// gone from a group (franz-go's; librdkafka's admin client cannot): the
// brokers abort an open transaction only when it times out, and a dead
// instance's holds the changelogs of its tasks until then.
type TxnFencer interface {
	// OpenTransactions returns the transactional ids of the producers
	// with a transaction open (ongoing) on any of tps.
	OpenTransactions(ctx context.Context, tps []TP) ([]string, error)
	// GroupProcesses returns the processes (MemberState.Process) of the
	// group's members; ok is false when they cannot be told (the group is
	// rebalancing, or a member is not eddy's).
	GroupProcesses(ctx context.Context, group string) (procs map[string]bool, ok bool, err error)
	// Fence claims transactionalID with a new producer epoch: the
	// coordinator aborts its open transaction, and the producer that
	// opened it can commit nothing more.
	Fence(ctx context.Context, transactionalID string) error
}

// TxnError classifies a transaction failure.
type TxnError struct {
	Op string
	// Abortable: abort the transaction and go on.
	Abortable bool
	// Fatal: the producer is unusable (fenced); make a new one.
	Fatal bool
	// Retriable: the call timed out or could not reach the coordinator;
	// calling it again is safe and may succeed.
	Retriable bool
	// Fenced: a producer with the same transactional id and a newer epoch
	// exists (another instance, or the broker bumped the epoch of a
	// transaction that timed out).
	Fenced bool
	Err    error
}

func (e *TxnError) Error() string {
	kind := "error"
	switch {
	case e.Fatal:
		kind = "fatal error"
	case e.Abortable:
		kind = "abortable error"
	case e.Retriable:
		kind = "retriable error"
	}
	return fmt.Sprintf("kafka: %s in %s: %v", kind, e.Op, e.Err)
}

// Unwrap returns the client's error, and ErrFenced for a fenced producer.
func (e *TxnError) Unwrap() []error {
	if e.Fenced {
		return []error{e.Err, ErrFenced}
	}
	return []error{e.Err}
}

// ErrFenced is wrapped by the errors of a fenced producer (see
// TxnError.Fenced).
var ErrFenced = errors.New("kafka: producer fenced")

// ErrRefusedLate is wrapped (with ErrFatal) by the delivery failure of a
// record the brokers refused although the producer's checks let it
// through (the topic's config changed since the producer learned it): a
// new producer learns the topic afresh and refuses such records before
// they are produced (RecordRefused), so the thread starts over with new
// clients and processes again what was not committed.
var ErrRefusedLate = errors.New("kafka: the brokers refused a record the producer's checks allowed")

// ErrFatal is wrapped by errors that make a client unusable.
var ErrFatal = errors.New("kafka: fatal client error")

// MaxUnacked is how many records a producer keeps unacknowledged (in the
// outbox, in librdkafka's queue, in flight to the brokers) before Produce
// waits for acknowledgements; RoomUnacked is how few let it go on. A
// transaction's commit (and an at-least-once commit) waits for every one of
// them, so this bounds the commit's wait: where a topology produces faster
// than the brokers take records (word count's repartition topic, on two
// cores shared with the broker, held 18k-76k records unacknowledged at its
// commits), the wait spreads over the interval instead of stalling the
// commit. Twenty thousand keep the brokers fed: measured, no workload lost
// throughput, where 10,000 cost stateless and word count a fifth of theirs.
// (Kafka's Java producer blocks send the same way, on buffer.memory.)
const MaxUnacked, RoomUnacked = 20_000, 15_000
