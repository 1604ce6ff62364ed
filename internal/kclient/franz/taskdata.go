package franz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/eddy-go/eddy/internal/assign"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
)

// The user data of eddy's group protocols (taskBalancer): a member's
// MemberState in its join, its standbys, warm-ups and follow-up in its
// assignment. eddy-tasks-2 writes member states of version 4 and
// assignments of version 3, by task; eddy-tasks (the releases before it)
// member states of version 3 (2 before client tags) and assignments of
// version 2, by partition number. Any version is read where it can be
// (the processes of a group's members, TxnFencer, are read from either).
const (
	memberStateVersion       = 4
	legacyMemberStateVersion = 3
	assignmentVersion        = 3
	legacyAssignmentVersion  = 2
)

// encodeMemberState writes s as a member's user data (version 4): the
// version byte, the process (length and bytes), the standby replicas
// wanted, the acceptable recovery lag, the warm-ups allowed, the tasks'
// offset sums (appendTasks, each followed by its sum as a varint), the
// standby and the warm-up tasks, then the tags (a count, then each key
// and value, length and bytes, in key order). A thousand tasks take a few
// kilobytes.
func encodeMemberState(s kclient.MemberState) []byte {
	b := appendStateHead([]byte{memberStateVersion}, s)
	tasks := slices.SortedFunc(maps.Keys(s.Offsets), assign.Compare)
	b = appendTasks(b, tasks, func(b []byte, id processor.TaskID) []byte { return binary.AppendVarint(b, s.Offsets[id]) })
	b = appendTasks(b, sortedTasks(s.Standby), nil)
	b = appendTasks(b, sortedTasks(s.Warmup), nil)
	return appendTags(b, s.Tags)
}

// encodeLegacyMemberState writes s as eddy-tasks' user data (version 3),
// by partition number: a partition's offset sum is the sum of its tasks'
// (a count, then per partition the uvarint step from the previous one and
// the sum as a varint), its standby and warm-up partitions those of any
// of its tasks.
func encodeLegacyMemberState(s kclient.MemberState) []byte {
	b := appendStateHead([]byte{legacyMemberStateVersion}, s)
	sums := map[int32]int64{}
	for id, off := range s.Offsets {
		sums[id.Partition] += off
	}
	parts := slices.Sorted(maps.Keys(sums))
	b = binary.AppendUvarint(b, uint64(len(parts)))
	prev := int32(0)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(p-prev))
		b = binary.AppendVarint(b, sums[p])
		prev = p
	}
	b = appendPartitions(b, partitionsOf(s.Standby))
	b = appendPartitions(b, partitionsOf(s.Warmup))
	return appendTags(b, s.Tags)
}

func appendStateHead(b []byte, s kclient.MemberState) []byte {
	b = binary.AppendUvarint(b, uint64(len(s.Process)))
	b = append(b, s.Process...)
	b = binary.AppendUvarint(b, uint64(max(s.Standbys, 0)))
	b = binary.AppendUvarint(b, uint64(max(s.AcceptableRecoveryLag, 0)))
	return binary.AppendUvarint(b, uint64(max(s.MaxWarmups, 0)))
}

func appendTags(b []byte, tags map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(tags)))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(tags[k])))
		b = append(b, tags[k]...)
	}
	return b
}

func sortedTasks(ids []processor.TaskID) []processor.TaskID {
	return slices.Compact(slices.SortedFunc(slices.Values(ids), assign.Compare))
}

// partitionsOf returns the partition numbers of tasks, ascending, once
// each.
func partitionsOf(ids []processor.TaskID) []int32 {
	out := make([]int32, 0, len(ids))
	for _, id := range ids {
		out = append(out, id.Partition)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// appendTasks appends ascending tasks: a count, then each as the uvarint
// step from the previous task's sub-topology and its partition (the step
// from the previous partition within the same sub-topology, else the
// partition itself), then what each adds (nil: nothing).
func appendTasks(b []byte, ids []processor.TaskID, each func([]byte, processor.TaskID) []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	prev := processor.TaskID{}
	for i, id := range ids {
		b = binary.AppendUvarint(b, uint64(id.Subtopology-prev.Subtopology))
		if i > 0 && id.Subtopology == prev.Subtopology {
			b = binary.AppendUvarint(b, uint64(id.Partition-prev.Partition))
		} else {
			b = binary.AppendUvarint(b, uint64(id.Partition))
		}
		if each != nil {
			b = each(b, id)
		}
		prev = id
	}
	return b
}

// decodeMemberState reads what encodeMemberState or
// encodeLegacyMemberState (or eddy-tasks' version 2, without tags) wrote;
// in a legacy one, the state of partition p is that of task 0_p (the unit
// eddy-tasks places). Anything else (another client's user data, nothing)
// is an error, and the assignor then places the member's tasks without
// its state.
func decodeMemberState(b []byte) (kclient.MemberState, error) {
	r := userData{b: b}
	v := r.version(2, legacyMemberStateVersion, memberStateVersion)
	var s kclient.MemberState
	s.Process = string(r.bytes())
	s.Standbys = int(min(r.uvarint(), 1<<16))
	s.AcceptableRecoveryLag = int64(min(r.uvarint(), math.MaxInt64))
	s.MaxWarmups = int(min(r.uvarint(), 1<<20))
	if v >= memberStateVersion {
		s.Offsets = map[processor.TaskID]int64{}
		r.tasks(func(id processor.TaskID) { s.Offsets[id] = r.varint() })
		s.Standby = r.tasks(nil)
		s.Warmup = r.tasks(nil)
	} else {
		n := r.count()
		s.Offsets = make(map[processor.TaskID]int64, n)
		p := uint64(0)
		for range n {
			p += r.uvarint()
			off := r.varint()
			if p > math.MaxInt32 {
				r.fail()
			}
			s.Offsets[processor.TaskID{Partition: int32(p)}] = off
		}
		s.Standby = legacyTasks(slices.Compact(r.partitions()))
		s.Warmup = legacyTasks(slices.Compact(r.partitions()))
	}
	if v >= legacyMemberStateVersion {
		if n := r.count(); n > 0 {
			s.Tags = make(map[string]string, n)
			for range n {
				k := string(r.bytes())
				s.Tags[k] = string(r.bytes())
			}
		}
	}
	if err := r.end(); err != nil {
		return kclient.MemberState{}, fmt.Errorf("kclient: member state: %w", err)
	}
	return s, nil
}

// legacyTasks returns partition numbers as eddy-tasks' unit, tasks 0_p.
func legacyTasks(ps []int32) []processor.TaskID {
	if len(ps) == 0 {
		return nil
	}
	out := make([]processor.TaskID, len(ps))
	for i, p := range ps {
		out[i] = processor.TaskID{Partition: p}
	}
	return out
}

// memberAssignment is what a member's assignment says beside its
// partitions: the tasks it follows as standbys (warm-ups included), the
// warm-ups among them, and whether a task is moving between members in
// two steps (followUp: the member rejoins at once, so that the follow-up
// rebalance that completes the move does not wait for heartbeats).
type memberAssignment struct {
	standby, warmup []processor.TaskID
	followUp        bool
}

// encodeMemberAssignment writes an assignment's user data (version 3): the
// version byte, a flags byte (1: follow-up), then the standby and the
// warm-up tasks (appendTasks).
func encodeMemberAssignment(standby, warmup []processor.TaskID, followUp bool) []byte {
	b := []byte{assignmentVersion, 0}
	if followUp {
		b[1] = 1
	}
	b = appendTasks(b, sortedTasks(standby), nil)
	return appendTasks(b, sortedTasks(warmup), nil)
}

// encodeLegacyMemberAssignment writes eddy-tasks' assignment user data
// (version 2): the version byte, a flags byte (1: follow-up), then the
// standby and the warm-up partitions, each as the number of topics and
// per topic its name and partitions.
func encodeLegacyMemberAssignment(standby, warmup map[string][]int32, followUp bool) []byte {
	b := []byte{legacyAssignmentVersion, 0}
	if followUp {
		b[1] = 1
	}
	for _, byTopic := range []map[string][]int32{standby, warmup} {
		b = binary.AppendUvarint(b, uint64(len(byTopic)))
		for _, t := range slices.Sorted(maps.Keys(byTopic)) {
			b = binary.AppendUvarint(b, uint64(len(t)))
			b = append(b, t...)
			b = appendPartitions(b, slices.Compact(slices.Sorted(slices.Values(byTopic[t]))))
		}
	}
	return b
}

// decodeMemberAssignment reads what encodeMemberAssignment wrote. No user
// data is no standby, warm-up or follow-up.
func decodeMemberAssignment(b []byte) (memberAssignment, error) {
	if len(b) == 0 {
		return memberAssignment{}, nil
	}
	r := userData{b: b}
	r.version(assignmentVersion)
	out := memberAssignment{followUp: r.flags()}
	out.standby = r.tasks(nil)
	out.warmup = r.tasks(nil)
	if err := r.end(); err != nil {
		return memberAssignment{}, fmt.Errorf("kclient: standby assignment: %w", err)
	}
	return out, nil
}

// decodeLegacyMemberAssignment reads what encodeLegacyMemberAssignment
// wrote, each partition as the tasks tasksOf says read it.
func decodeLegacyMemberAssignment(b []byte, tasksOf func(topic string, p int32) []processor.TaskID) (memberAssignment, error) {
	if len(b) == 0 {
		return memberAssignment{}, nil
	}
	r := userData{b: b}
	r.version(legacyAssignmentVersion)
	out := memberAssignment{followUp: r.flags()}
	for _, into := range []*[]processor.TaskID{&out.standby, &out.warmup} {
		for range r.count() {
			t := string(r.bytes())
			for _, p := range r.partitions() {
				*into = append(*into, tasksOf(t, p)...)
			}
		}
		*into = sortedTasks(*into)
	}
	if err := r.end(); err != nil {
		return memberAssignment{}, fmt.Errorf("kclient: standby assignment: %w", err)
	}
	return out, nil
}

// appendPartitions appends ascending partitions: a count, then each as the
// step from the previous.
func appendPartitions(b []byte, ps []int32) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	prev := int32(0)
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p-prev))
		prev = p
	}
	return b
}

// userData reads the assignor's user data; the first thing that does not
// fit is kept as its error, and every read after it returns zero.
type userData struct {
	b   []byte
	err error
}

var errUserData = errors.New("not eddy's user data, or of another version, or cut short")

func (r *userData) fail() {
	if r.err == nil {
		r.err = errUserData
	}
	r.b = nil
}

func (r *userData) version(accepted ...byte) byte {
	if len(r.b) == 0 || !slices.Contains(accepted, r.b[0]) {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *userData) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *userData) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *userData) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a number of items, each at least a byte long.
func (r *userData) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *userData) bytes() []byte {
	n := r.count()
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *userData) partitions() []int32 {
	n := r.count()
	out := make([]int32, 0, n)
	p := uint64(0)
	for range n {
		if p += r.uvarint(); p > math.MaxInt32 {
			r.fail()
			return nil
		}
		out = append(out, int32(p))
	}
	return out
}

func (r *userData) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	return r.err
}

// flags reads an assignment's flags byte: 1 is a follow-up.
func (r *userData) flags() bool {
	switch f := r.byte(); f {
	case 0, 1:
		return f == 1
	default:
		r.fail()
		return false
	}
}

// tasks reads what appendTasks wrote, calling each after each task (nil:
// nothing follows a task).
func (r *userData) tasks(each func(processor.TaskID)) []processor.TaskID {
	n := r.count()
	if n == 0 {
		return nil
	}
	out := make([]processor.TaskID, 0, n)
	var prev processor.TaskID
	for i := range n {
		step := r.uvarint()
		sub := uint64(prev.Subtopology) + step
		p := r.uvarint()
		if i > 0 && step == 0 {
			if p == 0 {
				r.fail() // the same task twice: not what appendTasks writes
				return nil
			}
			p += uint64(prev.Partition)
		}
		if sub > math.MaxInt32 || p > math.MaxInt32 || r.err != nil {
			r.fail()
			return nil
		}
		id := processor.TaskID{Subtopology: int(sub), Partition: int32(p)}
		if each != nil {
			each(id)
		}
		out = append(out, id)
		prev = id
	}
	return out
}
