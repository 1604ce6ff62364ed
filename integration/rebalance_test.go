package integration_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// A SIGKILLed instance stops only its own tasks. Two instances share six
// partitions under exactly-once while input flows; one is SIGKILLed (placed
// by committed progress, once it has taken its share). The survivor
// revokes nothing, and each of its own input partitions commits again
// before any of the dead instance's partitions does: those wait for the
// session timeout and for the dead instance's open transaction to end
// (ended by the survivor, or by its timeout), and that wait holds back
// none of the survivor's own tasks. The output stays exact.
func TestSurvivorKeepsProcessingWhenAnInstanceDies(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 6)
	args := []string{"-guarantee", "exactly_once", "-cache=false"}
	w0 := a.start("p0", args...)
	w0.waitRunning(t, time.Minute)
	w1 := a.start("p1", args...)
	w1.waitRunning(t, 2*time.Minute)
	// p1's share moves to it once its warm-ups caught up: the kill comes
	// after that.
	deadline := time.Now().Add(2 * time.Minute)
	for len(w1.countingPartitions(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("p1 took no counting task within 2m; log:\n%s", tail(w1.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.feed(150_000, 5_000)

	var own []int32        // the survivor's input partitions when p1 dies
	var at map[int32]int64 // every input partition's committed offset then
	var before int         // the survivor's rebalance log lines then
	a.strike("SIGKILL of p1", 0.15, 0.45, func() {
		w1.kill(t)
		own = w0.inputPartitions(t)
		before = len(w0.rebalanceEntries())
		at = kafkatest.Committed(t, brokers, a.app, a.input)
	})
	killed := time.Now()
	if len(own) == 0 || len(own) == 6 {
		t.Fatalf("p0 owned input partitions %v when p1 died; want a share of the 6", own)
	}
	dead := slices.DeleteFunc([]int32{0, 1, 2, 3, 4, 5}, func(p int32) bool { return slices.Contains(own, p) })

	// Watch the committed offsets until every dead partition commits again.
	ownMoved := map[int32]time.Duration{}  // when each own partition first committed after the kill
	longest := map[int32]time.Duration{}   // each own partition's longest time without a commit
	lastMove := map[int32]time.Time{}      // …and its last commit seen
	deadMoved := map[int32]time.Duration{} // when each dead partition first committed after the kill
	firstDead := time.Duration(-1)
	for _, p := range own {
		lastMove[p] = killed
	}
	prev := maps.Clone(at)
	deadline = killed.Add(3 * time.Minute)
	for len(deadMoved) < len(dead) {
		if time.Now().After(deadline) {
			t.Fatalf("the dead instance's partitions %v did not all commit within 3m of the kill (committed again: %v)", dead, deadMoved)
		}
		time.Sleep(100 * time.Millisecond)
		now := kafkatest.Committed(t, brokers, a.app, a.input)
		since := time.Since(killed)
		for _, p := range own {
			if now[p] > prev[p] {
				if _, ok := ownMoved[p]; !ok {
					ownMoved[p] = since
				}
				longest[p] = max(longest[p], time.Since(lastMove[p]))
				lastMove[p] = time.Now()
			}
		}
		for _, p := range dead {
			if _, ok := deadMoved[p]; !ok && now[p] > at[p] {
				deadMoved[p] = since
				if firstDead < 0 {
					firstDead = since
				}
			}
		}
		prev = now
	}
	t.Logf("after the kill: own partitions %v first committed at %v, longest without a commit %v; dead partitions %v committed again at %v",
		own, ownMoved, longest, dead, deadMoved)
	for _, p := range own {
		d, ok := ownMoved[p]
		if !ok || d >= firstDead {
			t.Fatalf("survivor's own partition %d did not commit before the dead instance's partitions resumed (at %v): its tasks waited for them", p, firstDead)
		}
	}
	for _, e := range w0.rebalanceEntries()[before:] {
		if e["msg"] == "partitions revoked" || e["msg"] == "partitions lost; dropping uncommitted work" {
			t.Fatalf("the survivor gave up tasks when p1 died: %v", e)
		}
	}

	a.waitDone(5 * time.Minute)
	w0.stop(t)
	a.checkExactSequences()
}

// rebalanceEntries returns the worker's log lines about partitions
// assigned, revoked and lost, in order.
func (w *worker) rebalanceEntries() []map[string]any {
	var out []map[string]any
	for _, e := range w.all() {
		if m, _ := e["msg"].(string); strings.HasPrefix(m, "partitions ") {
			out = append(out, e)
		}
	}
	return out
}

// inputPartitions returns the input partitions the worker's tasks of the
// first sub-topology (0_p: reading the input) hold, as its log of
// assignments and cooperative revocations says.
func (w *worker) inputPartitions(t *testing.T) []int32 { return w.ownedTasks(t, 0) }

// countingPartitions returns the partitions of the word-count's counting
// tasks (1_p: the stateful sub-topology, after the repartition) the worker
// holds.
func (w *worker) countingPartitions(t *testing.T) []int32 { return w.ownedTasks(t, 1) }

// ownedTasks returns the partitions of the worker's tasks of sub-topology
// sub, as its log of assignments and cooperative revocations says.
func (w *worker) ownedTasks(t *testing.T, sub int) []int32 {
	t.Helper()
	owned := map[int32]bool{}
	for _, e := range w.rebalanceEntries() {
		tasks, _ := e["tasks"].([]any)
		switch e["msg"] {
		case "partitions assigned":
			for _, id := range tasks {
				if s, p := taskOf(t, id); s == sub {
					owned[p] = true
				}
			}
		case "partitions revoked":
			if tasks == nil { // every partition
				clear(owned)
			}
			for _, id := range tasks {
				if s, p := taskOf(t, id); s == sub {
					delete(owned, p)
				}
			}
		default:
			clear(owned)
		}
	}
	return slices.Sorted(maps.Keys(owned))
}

// taskOf reads a task id ("1_3") of a log line.
func taskOf(t *testing.T, id any) (sub int, partition int32) {
	s := fmt.Sprint(id)
	a, b, ok := strings.Cut(s, "_")
	if !ok {
		t.Fatalf("task id %q in a log line", s)
	}
	st, err1 := strconv.Atoi(a)
	p, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		t.Fatalf("task id %q in a log line", s)
	}
	return st, int32(p)
}

// With one standby replica, a SIGKILLed instance's tasks resume on the
// instance that followed them, restoring almost nothing. p1 starts alone
// and owns every task; p0 joins and takes half (warmed up first), and
// each follows the other's tasks as standbys. p1 is SIGKILLed mid-stream
// (placed by committed progress): p0 takes over p1's tasks and restores
// less than 1% of their changelogs, since its standbys had read them. The
// output stays exact.
//
// And they resume without waiting for the dead instance's open
// transaction to time out: without a record cache every count goes to
// the changelog at once, so p1 dies with a transaction open on its tasks'
// changelogs, which the brokers would abort only after its timeout (a
// minute here) and their next scan for timed-out transactions. p0 finds
// it, sees p1's process gone from the group, and ends it (a new epoch for
// its transactional id): the tasks restore within the session timeout and
// a few seconds, far inside that minute.
func TestStandbyTakesOverAfterSIGKILL(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 6)
	const txnTimeout = time.Minute
	args := []string{"-guarantee", "exactly_once", "-cache=false", "-standbys", "1", "-transaction-timeout", txnTimeout.String()}
	a.produce(30_000)
	w1 := a.start("p1", args...)
	w1.waitRunning(t, 2*time.Minute)
	w0 := a.start("p0", args...)
	w0.waitRunning(t, 2*time.Minute)
	// The warm-ups move p0's share to it; then each follows the other's
	// tasks as standbys, caught up before the input flows again.
	waitStandbysCaughtUp(t, w0)
	waitStandbysCaughtUp(t, w1)
	a.feed(120_000, 5_000)

	var theirs []int32 // the partitions of p1's counting tasks when it dies
	var before int     // p0's log lines then
	var changelog map[int32]int64
	var killed time.Time
	a.strike("SIGKILL of p1", 0.15, 0.45, func() {
		w1.kill(t)
		killed = time.Now()
		theirs = w1.countingPartitions(t)
		before = len(w0.all())
		changelog = kafkatest.EndOffsets(t, brokers, a.app+"-counts-changelog")
	})
	if len(theirs) == 0 {
		t.Fatal("p1 owned no task when it died")
	}
	a.waitDone(5 * time.Minute)
	w0.stop(t)

	var state int64 // the changelog records of p1's tasks when it died
	for _, p := range theirs {
		state += changelog[p]
	}
	var restored int64
	var lastRestore time.Time // when p0 restored the last of p1's stores
	fenced := 0
	for _, e := range w0.all()[before:] {
		switch e["msg"] {
		case "store restored":
			if n, ok := e["records"].(float64); ok {
				restored += int64(n)
			}
			if ts, ok := e["ts"].(float64); ok {
				lastRestore = time.UnixMilli(int64(ts * 1000))
			}
		case "ended the open transaction of an instance gone from the group, which held the changelogs of tasks taken over":
			fenced++
		}
	}
	t.Logf("p0 took over p1's partitions %v: restored %d changelog records of their %d, the last store %v after the kill; %d open transactions of p1 ended",
		theirs, restored, state, lastRestore.Sub(killed).Round(time.Millisecond), fenced)
	if lastRestore.IsZero() {
		t.Fatal("p0 restored none of p1's stores")
	}
	if d := lastRestore.Sub(killed); d >= txnTimeout*2/3 {
		t.Fatalf("p0 restored p1's stores %v after the kill: it waited for p1's open transaction to time out (%v)", d, txnTimeout)
	}
	if restored*100 >= state {
		t.Fatalf("p0 restored %d of the %d changelog records of p1's tasks: its standbys should have had them (want under 1%%)", restored, state)
	}
	a.checkExactSequences()
}

// waitStandbysCaughtUp waits until the worker follows standby tasks (not
// warm-ups: the group's moves are done) and each of them was, at some
// look since it was added, within the acceptable recovery lag.
func waitStandbysCaughtUp(t *testing.T, w *worker) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if standbysCaughtUp(w.all()) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s's standbys did not catch up within 2m; log:\n%s", w.name, tail(w.log))
}

// standbysCaughtUp reports whether, in a worker's log, the latest set of
// standby tasks has no warm-up, and each of them logged "standby task
// caught up" after it was last added.
func standbysCaughtUp(log []map[string]any) bool {
	var current []any
	addedAt := map[string]int{}
	caught := map[string]int{}
	for i, e := range log {
		switch e["msg"] {
		case "standby tasks":
			if ws, _ := e["warmups"].([]any); len(ws) > 0 {
				current = nil
				continue
			}
			current, _ = e["standbys"].([]any)
			added, _ := e["added"].([]any)
			for _, id := range added {
				addedAt[fmt.Sprint(id)] = i
			}
		case "standby task caught up":
			caught[fmt.Sprint(e["task"])] = i
		}
	}
	if len(current) == 0 {
		return false
	}
	for _, id := range current {
		at, ok := caught[fmt.Sprint(id)]
		if !ok || at < addedAt[fmt.Sprint(id)] {
			return false
		}
	}
	return true
}

// Scaling out warms up first (KIP-441): an instance joining a stateful app
// gets none of its tasks at once; they keep running where they are while
// warm-up copies catch up on the new instance, which then asks for a
// rebalance and takes them over, restoring only the little its warm-ups
// had not read. The old instance gives up only what moves, and the output
// stays exact.
func TestScaleOutWarmsUpFirst(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 6)
	args := []string{"-guarantee", "exactly_once", "-cache=false"}
	a.produce(40_000) // state for the warm-ups to catch up on
	w0 := a.start("p0", args...)
	w0.waitRunning(t, 2*time.Minute)
	a.feed(100_000, 4_000)
	var w1 *worker
	a.strike("p1 joins", 0.1, 0.4, func() { w1 = a.start("p1", args...) })
	// p1 takes its share of the counting tasks, the warm-ups caught up
	// first (the stateless tasks reading the input move at once).
	deadline := time.Now().Add(3 * time.Minute)
	for len(w1.countingPartitions(t)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("p1 owns counting tasks of partitions %v 3m after joining; want 3; log:\n%s", w1.countingPartitions(t), tail(w1.log))
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.waitDone(5 * time.Minute)
	w1.stop(t)
	w0.stop(t)

	// In p1's log: warm-ups before any stateful task, a caught-up warm-up
	// asking for the rebalance, and restores of the moved tasks that read
	// a small part of their changelogs.
	var warmed, asked, firstTask int = -1, -1, -1
	for i, e := range w1.all() {
		switch e["msg"] {
		case "standby tasks":
			if ws, _ := e["warmups"].([]any); len(ws) > 0 && warmed < 0 {
				warmed = i
			}
		case "warm-up tasks caught up; asking the group for a rebalance to move them here":
			if asked < 0 {
				asked = i
			}
		case "partitions assigned":
			ts, _ := e["tasks"].([]any)
			if firstTask < 0 && slices.ContainsFunc(ts, func(id any) bool { s, _ := taskOf(t, id); return s == 1 }) {
				firstTask = i
			}
		}
	}
	if warmed < 0 || asked < 0 || firstTask < warmed || firstTask < asked {
		t.Fatalf("p1's log: first warm-up at line %d, first caught-up warm-up at %d, first task at %d; want warm-ups, then counting tasks; log:\n%s", warmed, asked, firstTask, tail(w1.log))
	}
	total := a.changelogRecords()
	restored := w1.restored()
	t.Logf("p1 restored %d changelog records for the tasks it took (the changelogs hold %d in all)", restored, total)
	if restored*20 > int64(total) {
		t.Fatalf("p1 restored %d of %d changelog records when its tasks moved: its warm-ups should have read them (want under 5%%)", restored, total)
	}
	for _, e := range w0.rebalanceEntries() {
		if e["msg"] == "partitions lost; dropping uncommitted work" {
			t.Fatalf("p0 lost partitions: %v", e)
		}
	}
	a.checkExactSequences()
}
