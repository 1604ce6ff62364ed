package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// Topics is what PrepareTopics found and made.
type Topics struct {
	// Partitions of every topic the program reads or owns, by full name.
	Partitions map[string]int32
	// Subscription: every topic the stream threads read.
	Subscription []string
}

// PrepareTopics checks the program's source topics against the cluster and
// creates its missing internal topics with Kafka Streams' names and
// configs: it fails, naming topics and counts, when a source topic is
// missing, when topics that must be co-partitioned differ in partition
// count, or when an existing internal topic has the wrong count.
func PrepareTopics(ctx context.Context, admin kclient.Admin, prog *rt.Program, appID string, replication int16) (*Topics, error) {
	var external []string
	for _, st := range prog.Subtopologies {
		for _, t := range st.SourceTopics {
			if !prog.IsInternal(t) {
				external = append(external, t)
			}
		}
	}
	// Global tables' topics must exist too; no thread subscribes to them.
	for _, g := range prog.GlobalStores {
		external = append(external, g.Topic)
	}
	var internal []string
	for _, t := range prog.InternalTopics {
		internal = append(internal, rt.InternalTopicName(appID, t.Name))
	}
	existing, err := admin.Partitions(ctx, append(slices.Clone(external), internal...))
	if err != nil {
		return nil, fmt.Errorf("reading topic metadata: %w", err)
	}
	var missing []string
	for _, t := range external {
		if _, ok := existing[t]; !ok {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("engine: source topics do not exist: %s (create them before starting the application)", strings.Join(slices.Compact(missing), ", "))
	}
	parts := map[string]int32{}
	for _, t := range external {
		parts[t] = existing[t]
	}
	// Repartition topics take the partition count of the sub-topology that
	// writes them (the largest of its sources), resolved in dependency
	// order; changelogs take that of their store's sub-topology.
	resolve := func(topic string) string {
		if prog.IsInternal(topic) {
			return rt.InternalTopicName(appID, topic)
		}
		return topic
	}
	// stParts: the largest partition count of a sub-topology's sources
	// (but except), false while one is not known yet.
	stParts := func(st *rt.Subtopology, except string) (int32, bool) {
		var n int32
		for _, t := range st.SourceTopics {
			if t == except {
				continue
			}
			p, ok := parts[resolve(t)]
			if !ok {
				return 0, false
			}
			n = max(n, p)
		}
		return n, true
	}
	for pending := true; pending; {
		pending = false
		progress := false
		for _, t := range prog.InternalTopics {
			name := rt.InternalTopicName(appID, t.Name)
			if !t.Repartition || parts[name] > 0 {
				continue
			}
			n := t.Partitions
			if n <= 0 {
				var ok bool
				if t.SizedLikeReader {
					n, ok = stParts(prog.Subtopologies[t.ReaderSubtopology], t.Name)
				} else {
					n, ok = stParts(prog.Subtopologies[t.WriterSubtopology], "")
				}
				if !ok {
					pending = true
					continue
				}
			}
			parts[name] = n
			progress = true
		}
		if pending && !progress {
			return nil, errors.New("engine: cannot size repartition topics: their writers form a cycle")
		}
	}
	for _, t := range prog.InternalTopics {
		if t.Repartition {
			continue
		}
		st := prog.Subtopologies[prog.Stores[t.Store].Subtopology]
		n, _ := stParts(st, "")
		parts[rt.InternalTopicName(appID, t.Name)] = n
	}
	var errs []error
	for _, group := range prog.CoPartitioned {
		counts := map[string]int32{}
		for _, t := range group {
			counts[t] = parts[resolve(t)]
		}
		if distinct(counts) > 1 {
			errs = append(errs, fmt.Errorf("engine: topics %s must be co-partitioned but have different partition counts", describeCounts(counts)))
		}
	}
	// A sub-topology with state reads partition i of each of its topics in
	// one task: they must agree, or two instances would own one task.
	for _, st := range prog.Subtopologies {
		if len(st.Stores) == 0 || len(st.SourceTopics) < 2 {
			continue
		}
		counts := map[string]int32{}
		for _, t := range st.SourceTopics {
			counts[t] = parts[resolve(t)]
		}
		if distinct(counts) > 1 {
			errs = append(errs, fmt.Errorf("engine: sub-topology %d keeps state and reads %s: their partition counts must be equal", st.ID, describeCounts(counts)))
		}
	}
	var create []kclient.TopicSpec
	for _, t := range prog.InternalTopics {
		name := rt.InternalTopicName(appID, t.Name)
		want := parts[name]
		if have, ok := existing[name]; ok {
			if have != want {
				errs = append(errs, fmt.Errorf("engine: internal topic %s has %d partitions, the topology needs %d (delete it, or reset the application)", name, have, want))
			}
			continue
		}
		cfg := maps.Clone(t.Config)
		if cfg == nil {
			cfg = map[string]string{}
		}
		cfg["message.timestamp.type"] = "CreateTime"
		create = append(create, kclient.TopicSpec{Name: name, Partitions: want, ReplicationFactor: replication, Config: cfg})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := admin.CreateTopics(ctx, create); err != nil {
		return nil, fmt.Errorf("engine: creating internal topics: %w", err)
	}
	sub := map[string]bool{}
	for _, st := range prog.Subtopologies {
		for _, t := range st.SourceTopics {
			sub[resolve(t)] = true
		}
	}
	return &Topics{Partitions: parts, Subscription: slices.Sorted(maps.Keys(sub))}, nil
}

func distinct(m map[string]int32) int {
	seen := map[int32]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}

func describeCounts(m map[string]int32) string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s (%d partitions)", t, m[t]))
	}
	return strings.Join(parts, ", ")
}
