package engine

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Where an offset reset happened.
const (
	// ResetSource: a source partition's committed offset was not in its
	// topic; the consumer went on where the source's policy says.
	ResetSource = "source"
	// ResetChangelog: a store's offset was outside its changelog; the
	// store was wiped and restored in full.
	ResetChangelog = "changelog"
	// ResetGlobal: a global store's offset was outside its topic; the
	// store was wiped and its topic read in full.
	ResetGlobal = "global"
)

// OffsetResets records every offset reset of an instance, whatever its
// policy: none goes unnoticed. The stream threads, their restorers and the
// global reader add to it; metrics and GET /state read it.
type OffsetResets struct {
	mu   sync.Mutex
	byTP map[kclient.TP]*OffsetResetReport
}

// OffsetResetReport is a partition's resets: the last one's facts and
// the totals.
type OffsetResetReport struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Kind: ResetSource, ResetChangelog or ResetGlobal.
	Kind string `json:"kind"`
	// Policy is the source's policy (auto.offset.reset's form), or
	// "full restore" for changelogs and global topics.
	Policy string `json:"policy"`
	// From is the offset that was not in the partition, To where reading
	// went on, Earliest the partition's first offset then (-1: unknown).
	From     int64 `json:"from"`
	To       int64 `json:"to"`
	Earliest int64 `json:"earliest"`
	// Resets and Skipped count every reset of the partition and the
	// offsets they jumped over.
	Resets  int64     `json:"resets"`
	Skipped int64     `json:"skipped"`
	At      time.Time `json:"at"`
}

// fullRestore is the policy of a changelog's or global topic's reset.
const fullRestore = "full restore"

// add records a reset and logs it at Error: records between from and to
// were never processed (a source) or never applied (a store); a nil r
// only logs.
func (r *OffsetResets) add(log *zap.Logger, kind string, e kclient.OffsetReset) {
	policy := e.Policy.String()
	if kind != ResetSource {
		policy = fullRestore
	}
	log.Error("offset reset: the partition no longer holds the offset to read from; records were skipped",
		zap.String("kind", kind), zap.String("topic", e.TP.Topic), zap.Int32("partition", e.TP.Partition),
		zap.Int64("missing_offset", e.From), zap.Int64("earliest_available", e.Earliest),
		zap.Int64("reset_to", e.To), zap.Int64("skipped_offsets", e.Skipped()), zap.String("policy", policy))
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byTP == nil {
		r.byTP = map[kclient.TP]*OffsetResetReport{}
	}
	rep := r.byTP[e.TP]
	if rep == nil {
		rep = &OffsetResetReport{Topic: e.TP.Topic, Partition: e.TP.Partition}
		r.byTP[e.TP] = rep
	}
	rep.Kind, rep.Policy, rep.From, rep.To, rep.Earliest = kind, policy, e.From, e.To, e.Earliest
	rep.Resets++
	rep.Skipped += e.Skipped()
	rep.At = time.Now()
}

// Reports returns every partition's resets, by topic and partition.
func (r *OffsetResets) Reports() []OffsetResetReport {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tps := slices.SortedFunc(maps.Keys(r.byTP), func(a, b kclient.TP) int {
		if a.Topic != b.Topic {
			return cmp.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	out := make([]OffsetResetReport, 0, len(tps))
	for _, tp := range tps {
		out = append(out, *r.byTP[tp])
	}
	return out
}
