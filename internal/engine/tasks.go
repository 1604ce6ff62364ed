package engine

import (
	"encoding/base64"
	"encoding/binary"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// task is one task of the thread: its runtime task and input partitions.
type task struct {
	t     *rt.Task
	id    processor.TaskID
	parts []*partition
	state taskState
	// since: when it was assigned (how long a task not started waits).
	since     time.Time
	restoring int // changelog partitions still restoring
	idleSince time.Time
}

// next picks the task's partition whose head record has the lowest
// timestamp. As Kafka Streams does by default (KIP-695), a task with an
// empty partition that is known to have records not fetched yet (or whose
// end is not known yet) waits for them, so that records are processed in
// timestamp order across partitions — a stream–table join sees the table
// rows older than its stream records; with MaxTaskIdle > 0 it then waits
// that long for a caught-up empty partition too; a negative MaxTaskIdle
// never waits. behind: the task waits for records not fetched yet (the
// thread then fetches even with full buffers).
func (tk *task) next(now time.Time, maxIdle time.Duration, c kclient.Consumer) (_ *partition, behind bool) {
	var best *partition
	empty := false
	for _, p := range tk.parts {
		if p.size() == 0 {
			empty = true
			if !behind && maxIdle >= 0 && !p.paused && !c.CaughtUp(p.tp) {
				behind = true
			}
			continue
		}
		if best == nil || p.buf[p.head].Timestamp < best.buf[best.head].Timestamp {
			best = p
		}
	}
	if best == nil {
		tk.idleSince = time.Time{}
		return nil, false
	}
	if behind {
		tk.idleSince = time.Time{}
		return nil, true
	}
	if empty && maxIdle > 0 {
		if tk.idleSince.IsZero() {
			tk.idleSince = now
		}
		if now.Sub(tk.idleSince) < maxIdle {
			return nil, false
		}
	} else {
		tk.idleSince = time.Time{}
	}
	return best, false
}

// taskState is where a task is on its way from assigned to running. Only
// a running task processes, punctuates and commits; the others' partitions
// are paused.
type taskState int8

const (
	// taskPending: its partitions' committed offsets are not read yet
	// (a transaction of their previous owner may be pending).
	taskPending taskState = iota
	// taskStarting: its changelogs' ends are not read yet (a transaction
	// may be pending on them).
	taskStarting
	// taskRestoring: its changelogs are being read into its stores.
	taskRestoring
	taskRunning
)

// taskRegistry holds a thread's assignment, as Kafka Streams' Tasks: its
// tasks (in id order too, for fair processing), their input partitions,
// the group's committed offsets and stream times it read for them, and
// its standby tasks. The task manager (taskmanager.go) owns it; only its
// methods reset it.
type taskRegistry struct {
	tasks map[processor.TaskID]*task
	order []*task
	parts map[kclient.TP]*partition
	// committed: the group's committed offset of each partition, as read
	// at assignment and moved by each commit.
	committed map[kclient.TP]int64
	// committedTime: the stream time committed with each partition's
	// offset, restored into tasks (re)built for it.
	committedTime map[kclient.TP]int64
	// standby: the standby tasks the thread follows (standby.go), warm-ups
	// among them; claims: the tasks the group's assignor holds for the
	// thread, which it follows as warm-ups if it may.
	standby map[processor.TaskID]*standbyTask
	claims  []processor.TaskID
	// moved: the tasks made running after the session's first assignment
	// (moved here by a rebalance: a scaled-out instance's first active
	// tasks come after its warm-ups, in a later one) whose output no
	// commit carried yet (see movedOutput); assignedOnce: the session's
	// first assignment was handled (its tasks keep the commit interval,
	// so that an app's start is not a burst of commits).
	moved        []*task
	assignedOnce bool
	// following: what the thread follows, as the group member's joins
	// read it on the client's goroutine (publish).
	following atomic.Pointer[followState]
}

// followState is what a thread follows, for the group member's joins
// (kclient.MemberState): its standby tasks (warm-ups included), and the
// tasks held for it (claims).
type followState struct {
	standby, claims []processor.TaskID
}

// clear forgets the whole assignment (its tasks already closed, its
// standbys' reading stopped).
func (m *taskRegistry) clear() {
	m.dropTasks()
	m.assignedOnce = false
	m.standby = map[processor.TaskID]*standbyTask{}
	m.claims = nil
	m.parts = map[kclient.TP]*partition{}
	m.committed = map[kclient.TP]int64{}
	m.committedTime = map[kclient.TP]int64{}
	m.publish()
}

// setStandbys makes want the standby tasks, those of claimed partitions
// marked as warm-ups (claims: the tasks held for the thread): it returns
// the tasks added, the ones gone (whose reading the caller stops) and the
// warm-ups, each in id order.
func (m *taskRegistry) setStandbys(want, claims map[processor.TaskID]bool) (added, gone, warm []processor.TaskID) {
	for id := range m.standby {
		if !want[id] {
			delete(m.standby, id)
			gone = append(gone, id)
		}
	}
	for id := range want {
		sb := m.standby[id]
		if sb == nil {
			sb = &standbyTask{id: id, lag: -1}
			m.standby[id] = sb
			added = append(added, id)
		}
		if sb.warmup = claims[id]; sb.warmup {
			warm = append(warm, id)
		}
	}
	m.claims = slices.SortedFunc(maps.Keys(claims), compareTaskIDs)
	m.publish()
	for _, ids := range [][]processor.TaskID{added, gone, warm} {
		slices.SortFunc(ids, compareTaskIDs)
	}
	return added, gone, warm
}

// removeStandby forgets a standby task (an active task takes it over).
func (m *taskRegistry) removeStandby(id processor.TaskID) {
	delete(m.standby, id)
	m.publish()
}

// publish keeps what the thread follows where the group member's join
// reads it (following).
func (m *taskRegistry) publish() {
	standby := slices.SortedFunc(maps.Keys(m.standby), compareTaskIDs)
	m.following.Store(&followState{standby: standby, claims: m.claims})
}

// dropTasks forgets the tasks (already closed), keeping what was read of
// the partitions.
func (m *taskRegistry) dropTasks() {
	m.tasks = map[processor.TaskID]*task{}
	m.order = nil
	m.moved = nil
}

// readCommitted takes the group's committed offsets and their metadata (the
// stream times) for newly assigned partitions.
func (m *taskRegistry) readCommitted(offsets map[kclient.TP]int64, meta map[kclient.TP]string) {
	for tp, off := range offsets {
		m.committed[tp] = off
		if ts, ok := decodeStreamTime(meta[tp]); ok {
			m.committedTime[tp] = ts
		}
	}
}

// committedAt records a commit of offsets, with each partition's task's
// stream time as of it.
func (m *taskRegistry) committedAt(offsets map[kclient.TP]int64) {
	// A moved task stays moved until a commit carries its output: one
	// that came before the task processed anything (its input not
	// fetched yet) leaves it to commit at once when it has.
	kept := m.moved[:0]
	for _, tk := range m.moved {
		if m.tasks[tk.id] == tk && tk.state == taskRunning &&
			!slices.ContainsFunc(tk.parts, func(p *partition) bool { _, ok := offsets[p.tp]; return ok }) {
			kept = append(kept, tk)
		}
	}
	clear(m.moved[len(kept):])
	m.moved = kept
	for tp, off := range offsets {
		m.committed[tp] = off
		if p := m.parts[tp]; p != nil && p.task.t.StreamTime() >= 0 {
			m.committedTime[tp] = p.task.t.StreamTime()
		}
	}
}

// addTask adds a task (pending), keeping the id order.
func (m *taskRegistry) addTask(id processor.TaskID, t *rt.Task) *task {
	tk := &task{t: t, id: id, since: time.Now()}
	m.tasks[id] = tk
	i, _ := slices.BinarySearchFunc(m.order, tk, func(a, b *task) int { return compareTaskIDs(a.id, b.id) })
	m.order = slices.Insert(m.order, i, tk)
	return tk
}

// addPartition adds an input partition of tk.
func (m *taskRegistry) addPartition(tk *task, tp kclient.TP, consumed prometheus.Counter) {
	p := &partition{tp: tp, task: tk, next: -1, consumed: consumed}
	tk.parts = append(tk.parts, p)
	m.parts[tp] = p
}

// removePartition forgets a partition; when its task has none left, the
// task is returned (to be closed, then removeTask).
func (m *taskRegistry) removePartition(tp kclient.TP) *task {
	p := m.parts[tp]
	if p == nil {
		return nil
	}
	delete(m.parts, tp)
	delete(m.committed, tp)
	delete(m.committedTime, tp)
	tk := p.task
	tk.parts = slices.DeleteFunc(tk.parts, func(q *partition) bool { return q == p })
	if len(tk.parts) == 0 {
		return tk
	}
	return nil
}

// removeTask forgets a closed task.
func (m *taskRegistry) removeTask(tk *task) {
	delete(m.tasks, tk.id)
	m.order = slices.DeleteFunc(m.order, func(t *task) bool { return t == tk })
}

// starting reports whether a task waits to start (pending or starting).
func (m *taskRegistry) starting() bool {
	return slices.ContainsFunc(m.order, func(tk *task) bool { return tk.state == taskPending || tk.state == taskStarting })
}

// A task's way from assigned to running, as the thread moves it along
// (rebalance.go): assigned (addTask, or restart for a running task that
// gets a partition more) and paused; pending until its partitions'
// committed offsets are read (readFor); starting until its changelogs'
// ends are read; restoring while the restorer reads them (restoring);
// running (run). Only these methods change a task's state.

// restart makes a running task that gets a partition more start again.
func (m *taskRegistry) restart(tk *task) {
	tk.state, tk.since = taskPending, time.Now()
}

// pause marks the partitions of tasks (new or restarted) paused and
// returns them, for the consumer to pause.
func (m *taskRegistry) pause(tasks []*task) []kclient.TP {
	var tps []kclient.TP
	for _, tk := range tasks {
		for _, p := range tk.parts {
			p.paused = true
			tps = append(tps, p.tp)
		}
	}
	return tps
}

// toStart returns the tasks not started yet: pending (their committed
// offsets unread) and starting (their changelogs' ends unread), in id
// order.
func (m *taskRegistry) toStart() (pending, starting []*task) {
	for _, tk := range m.order {
		switch tk.state {
		case taskPending:
			pending = append(pending, tk)
		case taskStarting:
			starting = append(starting, tk)
		}
	}
	return pending, starting
}

// readFor takes the committed offsets (and their stream times) read for
// pending tasks: they start at those stream times, and are starting.
func (m *taskRegistry) readFor(pending []*task, offsets map[kclient.TP]int64, meta map[kclient.TP]string) {
	m.readCommitted(offsets, meta)
	for _, tk := range pending {
		m.restoreStreamTime(tk)
		tk.state = taskStarting
	}
}

// restoring marks the tasks among started ones that the restorer reads
// changelogs for as restoring, and returns the others (ready to run).
func (m *taskRegistry) restoring(started []*task) (ready []*task) {
	for _, tk := range started {
		if tk.restoring > 0 {
			tk.state = taskRestoring
		} else {
			ready = append(ready, tk)
		}
	}
	return ready
}

// run makes tasks running and returns their partitions, to be resumed
// from their committed offsets (from); their buffers start empty.
func (m *taskRegistry) run(tasks []*task) []kclient.TP {
	var tps []kclient.TP
	for _, tk := range tasks {
		tk.state = taskRunning
		if m.assignedOnce {
			m.moved = append(m.moved, tk)
		}
		for _, p := range tk.parts {
			tps = append(tps, p.tp)
			p.paused = false
			p.reset()
		}
	}
	return tps
}

// movedOutput reports whether a task made running (see moved) has
// processed records no commit carried yet: its output, which paused while
// the task moved (or was not there before), is committed at once rather
// than at the commit interval.
func (m *taskRegistry) movedOutput() bool {
	for _, tk := range m.moved {
		if m.tasks[tk.id] != tk || tk.state != taskRunning {
			continue // gone since
		}
		for _, p := range tk.parts {
			if c, ok := m.committed[p.tp]; p.next >= 0 && (!ok || p.next > c) {
				return true
			}
		}
	}
	return false
}

// from is where a partition's reading starts: its committed offset, or
// the beginning (-2) when nothing was ever committed.
func (m *taskRegistry) from(tp kclient.TP) int64 {
	off, ok := m.committed[tp]
	if !ok || off < 0 {
		return -2
	}
	return off
}

// revokePartitions forgets partitions revoked from running tasks and
// returns the tasks left with none (to be closed, then removeTask).
func (m *taskRegistry) revokePartitions(tps []kclient.TP) []*task {
	var closed []*task
	for _, tp := range tps {
		if tk := m.removePartition(tp); tk != nil {
			closed = append(closed, tk)
		}
	}
	return closed
}

// rebuilt replaces a task's runtime task (closed) with t, rebuilt from
// the committed stores, at the committed stream time.
func (m *taskRegistry) rebuilt(tk *task, t *rt.Task) {
	tk.t = t
	m.restoreStreamTime(tk)
}

// restoreStreamTime starts a (re)built task at the stream time committed
// for its partitions.
func (m *taskRegistry) restoreStreamTime(tk *task) {
	for _, p := range tk.parts {
		if ts, ok := m.committedTime[p.tp]; ok {
			tk.t.AdvanceStreamTime(ts)
		}
	}
}

// runningIDs returns the ids of the running tasks, in order.
func (m *taskRegistry) runningIDs() []processor.TaskID {
	var out []processor.TaskID
	for _, tk := range m.order {
		if tk.state == taskRunning {
			out = append(out, tk.id)
		}
	}
	return out
}

// asyncHeld reports whether a running task holds records in async calls.
func (m *taskRegistry) asyncHeld() bool {
	for _, tk := range m.order {
		if tk.state == taskRunning && tk.t.AsyncHeld() > 0 {
			return true
		}
	}
	return false
}

// offsetMeta is the metadata committed with each offset: its task's stream
// time (see encodeStreamTime).
func (m *taskRegistry) offsetMeta(offsets map[kclient.TP]int64) map[kclient.TP]string {
	meta := make(map[kclient.TP]string, len(offsets))
	for tp := range offsets {
		if p := m.parts[tp]; p != nil {
			if ts := p.task.t.StreamTime(); ts >= 0 {
				meta[tp] = encodeStreamTime(ts)
			}
		}
	}
	return meta
}

// Stream time survives restarts and hand-overs: each committed offset
// carries its task's stream time as metadata, in Kafka Streams' encoding
// (base64 of a version byte, 1, and the 8-byte big-endian timestamp), so
// records that were late stay late after a restart.

func encodeStreamTime(ts int64) string {
	b := binary.BigEndian.AppendUint64([]byte{1}, uint64(ts))
	return base64.StdEncoding.EncodeToString(b)
}

// decodeStreamTime reads the stream time from offset metadata written by
// eddy or by Kafka Streams (versions 1 and 2 start alike).
func decodeStreamTime(meta string) (int64, bool) {
	b, err := base64.StdEncoding.DecodeString(meta)
	if err != nil || len(b) < 9 || (b[0] != 1 && b[0] != 2) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[1:9])), true
}

// compareTaskIDs orders task ids by sub-topology, then partition.
func compareTaskIDs(a, b processor.TaskID) int {
	if a.Subtopology != b.Subtopology {
		return a.Subtopology - b.Subtopology
	}
	return int(a.Partition - b.Partition)
}
