// Package rt is the runtime core shared by the Kafka runtime and the
// in-memory test driver: the compiled form of a topology (Program), and the
// Task that runs one sub-topology on one partition — its node instances,
// state stores, stream time and punctuators. It knows nothing of Kafka
// clients: records come in as RawRecords and leave through a Collector.
package rt

import (
	"reflect"
	"slices"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
)

// NodeKind is the role of a node in the graph.
type NodeKind int

// The kinds of node.
const (
	KindSource NodeKind = iota
	KindProcessor
	KindSink
)

// NodeSpec is one node of a compiled topology. The DSL and the Processor
// API create them; Build makes the node of one task.
type NodeSpec struct {
	Name     string
	Kind     NodeKind
	Parents  []*NodeSpec
	Children []*NodeSpec
	Stores   []string // names of the stores the node uses

	// Sources: the topics read. Internal topics are named without the
	// application id ("<name>-repartition"); Topic resolves them.
	Topics []string
	// Sinks: the topic written, or "" when TopicFunc picks one per record.
	Topic       string
	DynamicSink bool
	// Internal marks a source or sink of a repartition topic.
	Internal bool
	// OffsetReset: a source's offset reset policy, in auto.offset.reset's
	// form ("": the application's).
	OffsetReset string
	// KeyPartitions, for a sink with a stream partitioner, gives the
	// partitions a serialized key goes to (as for a tombstone: the value
	// unknown) among n, ok false for the default partitioner: how
	// interactive queries find keys the partitioner placed.
	KeyPartitions func(key []byte, n int32) (partitions []int32, ok bool, err error)

	// AsyncBudget, for an async node, is the longest one record's call
	// may take (a commit waits that long at most).
	AsyncBudget time.Duration

	// Types of the records the node takes and gives, checked by Validate.
	InKey, InValue, OutKey, OutValue reflect.Type

	// Build makes the node for one task. Its children are already built.
	Build func(b *BuildCtx) (Node, error)

	// Subtopology is set by the topology compiler.
	Subtopology int
	// Index is the node's position in creation order.
	Index int
}

// StoreSpec is a state store of the topology and the processors it is
// connected to.
type StoreSpec struct {
	Builder    storage.Builder // the runtime side of the stores.Builder the topology was given
	Processors []string
	// Subtopology is set by the topology compiler.
	Subtopology int
}

// Name is the store's name.
func (s *StoreSpec) Name() string { return s.Builder.Spec().Name }

// InternalTopic is a topic the application creates and owns.
type InternalTopic struct {
	// Name without the application id: "<store>-changelog" or
	// "<name>-repartition". The full name is "<application id>-<Name>".
	Name string
	// Repartition: true for repartition topics, false for changelogs.
	Repartition bool
	// Partitions, or 0 to use the partition count of the sub-topology's
	// source topics.
	Partitions int32
	// Config: topic configs besides the defaults of its kind.
	Config map[string]string
	// Store is the store a changelog belongs to.
	Store string
	// WriterSubtopology is the sub-topology writing a repartition topic,
	// ReaderSubtopology the one reading it.
	WriterSubtopology, ReaderSubtopology int
	// SizedLikeReader: the topic takes the partition count of the other
	// sources of the sub-topology that reads it (a foreign-key join's
	// topics, co-partitioned with the table they are joined into), not
	// its writer's.
	SizedLikeReader bool
}

// Subtopology is a connected part of the graph: what one task runs.
type Subtopology struct {
	ID    int
	Nodes []*NodeSpec // creation order
	// SourceTopics: every topic read, external and internal (unresolved).
	SourceTopics []string
	Stores       []*StoreSpec
	// Global is set, and everything else empty, for a global store's
	// sub-topology: it takes an id but generates no tasks.
	Global *GlobalStore
}

// Program is a compiled, validated topology.
type Program struct {
	Nodes          []*NodeSpec
	NodesByName    map[string]*NodeSpec
	Subtopologies  []*Subtopology
	Stores         map[string]*StoreSpec
	StoreOrder     []string         // creation order
	InternalTopics []*InternalTopic // repartition topics, then changelogs, in creation order
	// CoPartitioned lists groups of source topics that must have equal
	// partition counts (the sources of one sub-topology).
	CoPartitioned [][]string
	// GlobalStores are the global tables' stores, in creation order.
	GlobalStores []*GlobalStore
}

// GlobalStore is the store of a global table: every instance reads all
// partitions of Topic into it before its stream threads process anything,
// then keeps it current. The topic is the store's changelog: records are
// stored as read (value prefixed with the record timestamp).
type GlobalStore struct {
	Name  string
	Topic string
	// SourceName and ProcessorName are the nodes Describe shows.
	SourceName, ProcessorName string
	InMemory                  bool
	// Check deserializes a record's key and value (nil: a tombstone) and
	// returns what is wrong with them; bad records are skipped and counted.
	Check func(key, value []byte) error
	// View returns the typed, read-only store over the global data in b
	// that tasks read (Global returns it).
	View func(b storage.Backend) any
}

// ChangelogTopic returns the full name of a store's changelog topic.
func ChangelogTopic(appID, store string) string { return appID + "-" + store + "-changelog" }

// InternalTopicName returns the full name of an internal topic.
func InternalTopicName(appID, name string) string { return appID + "-" + name }

// IsInternal reports whether topic (as written in a NodeSpec) is one of the
// program's internal topics.
func (p *Program) IsInternal(topic string) bool {
	for _, t := range p.InternalTopics {
		if t.Repartition && t.Name == topic {
			return true
		}
	}
	return false
}

// hook lets the topology package hand its compiled Program to the runtime
// packages without a public accessor.
var programOf func(any) (*Program, bool)

// RegisterProgramAccessor is called once by the topology package.
func RegisterProgramAccessor(f func(any) (*Program, bool)) { programOf = f }

// ProgramOf returns the Program of a *topology.Topology.
func ProgramOf(topology any) (*Program, bool) {
	if programOf == nil {
		return nil, false
	}
	return programOf(topology)
}

// HasLoggedStores reports whether a task of the program has a store
// backed by a changelog (state a standby replica can follow).
func (p *Program) HasLoggedStores() bool {
	for _, st := range p.Subtopologies {
		for _, s := range st.Stores {
			if s.Builder.Spec().Logged {
				return true
			}
		}
	}
	return false
}

// KeyPartitions returns how the records of sub-topology sub's stores are
// placed when a sink with a stream partitioner writes one of its source
// topics (NodeSpec.KeyPartitions); nil: by Kafka's default partitioner.
func (p *Program) KeyPartitions(sub int) func(key []byte, n int32) ([]int32, bool, error) {
	for _, st := range p.Subtopologies {
		if st.ID != sub {
			continue
		}
		for _, n := range p.Nodes {
			if n.Kind == KindSink && n.KeyPartitions != nil && slices.Contains(st.SourceTopics, n.Topic) {
				return n.KeyPartitions
			}
		}
	}
	return nil
}

// HasAsync reports whether the program has an async operator.
func (p *Program) HasAsync() bool {
	for _, n := range p.Nodes {
		if n.AsyncBudget > 0 {
			return true
		}
	}
	return false
}
