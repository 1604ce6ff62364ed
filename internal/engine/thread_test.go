package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/rt"
)

// A commit under each guarantee: outputs, changelog and offsets are
// committed; exactly-once in transactions, at-least-once without.
func TestCommitUnderEachGuarantee(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			r := newRig(t, cl, countTopology(t, nil), eos, "")
			want := feed(cl, 0, 200, 7)
			run := r.start()
			wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			exactSequences(t, outputs(t, cl, true), want)
			for p := range int32(testParts) {
				if _, meta := cl.Committed(testIn, p); meta == "" {
					t.Errorf("partition %d: offset committed without the task's stream time", p)
				} else if ts, ok := decodeStreamTime(meta); !ok || ts < 1000 {
					t.Errorf("partition %d: stream time %q decodes to %d, %v", p, meta, ts, ok)
				}
			}
			var changelogRecs int
			for p := range int32(testParts) {
				changelogRecs += len(cl.Records(changelog(), p, true))
			}
			if changelogRecs != 200 {
				t.Errorf("changelog holds %d records, want one per update (200)", changelogRecs)
			}
			txns := cl.Calls("CommitTransaction")
			if eos && (txns == 0 || cl.Calls("Commit") != 0) {
				t.Errorf("exactly-once: %d transactions, %d plain offset commits", txns, cl.Calls("Commit"))
			}
			if !eos && (txns != 0 || cl.Calls("Commit") == 0) {
				t.Errorf("at-least-once: %d transactions, %d offset commits", txns, cl.Calls("Commit"))
			}
		})
	}
}

// An abortable error in a commit aborts the transaction and rewinds to the
// last commit: what the aborted transaction held is processed again, and
// the committed output is still exact.
func TestAbortableErrorAbortsAndRewinds(t *testing.T) {
	for _, op := range []string{"CommitTransaction", "SendOffsets"} {
		t.Run(op, func(t *testing.T) {
			cl := kclienttest.NewCluster()
			r := newRig(t, cl, countTopology(t, nil), true, "")
			want := feed(cl, 0, 100, 5)
			run := r.start()
			wait(t, "a first commit", func() bool { return cl.Calls("CommitTransaction") > 0 })
			cl.FailNext(op, kclienttest.Abortable(op))
			more := feed(cl, 100, 100, 5)
			for k, n := range more {
				want[k] += n
			}
			wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if n := run.th.Stats.Aborts.Load(); n != 1 {
				t.Fatalf("%d aborts, want 1", n)
			}
			exactSequences(t, outputs(t, cl, true), want)
			all, committed := 0, 0
			for _, s := range outputs(t, cl, false) {
				all += len(s)
			}
			for _, s := range outputs(t, cl, true) {
				committed += len(s)
			}
			if all <= committed {
				t.Errorf("the aborted transaction left no records in the log (%d, %d): nothing was aborted", all, committed)
			}
		})
	}
}

// A stop that comes while a commit is under way (SIGTERM mid-transaction)
// lets the commit complete: nothing is aborted, and what the commit
// carried is not left for the tasks' next owner to process again.
func TestStopDuringACommitLetsItComplete(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	var stopped atomic.Bool
	cl.OnNext("CommitTransaction", func() { run.cancel(); stopped.Store(true) })
	more := feed(cl, 100, 100, 5)
	for k, n := range more {
		want[k] += n
	}
	wait(t, "the stop during a commit", stopped.Load)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := run.th.Stats.Aborts.Load(); n != 0 {
		t.Errorf("%d aborts: the stop cut the commit under way short", n)
	}
	if !caughtUp(cl) {
		t.Errorf("input not committed to its end after the stop")
	}
	exactSequences(t, outputs(t, cl, true), want)
}

// A fenced producer makes the thread rejoin with new clients; no output
// is lost or duplicated.
func TestFencedProducerRejoins(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "a first commit", func() bool { return cl.Calls("CommitTransaction") > 0 })
	cl.Fence(run.th.transactionalID())
	more := feed(cl, 100, 100, 5)
	for k, n := range more {
		want[k] += n
	}
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := cl.Calls("NewProducer"); n != 2 {
		t.Fatalf("%d producers made, want 2 (one new after the fence)", n)
	}
	exactSequences(t, outputs(t, cl, true), want)
}

// A fenced thread leaves the transactional id alone for a while before a
// new producer claims it, so that the producer that fenced it can finish
// its own InitTransactions (whose retries would otherwise fence the new
// producer in turn); the wait doubles with each fence, up to 16 times.
func TestFencedThreadWaitsBeforeClaimingTheIDAgain(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	r.cfg.FenceBackoff = 300 * time.Millisecond
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "a first commit", func() bool { return cl.Calls("CommitTransaction") > 0 })
	fenced := time.Now()
	cl.Fence(run.th.transactionalID())
	more := feed(cl, 100, 100, 5)
	for k, n := range more {
		want[k] += n
	}
	wait(t, "a new producer", func() bool { return cl.Calls("NewProducer") >= 2 })
	if d := time.Since(fenced); d < r.cfg.FenceBackoff {
		t.Fatalf("a new producer %v after the fence, want no sooner than %v", d, r.cfg.FenceBackoff)
	}
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
	for n, want := range map[int]time.Duration{1: 300 * time.Millisecond, 2: 600 * time.Millisecond, 5: 4800 * time.Millisecond, 9: 4800 * time.Millisecond} {
		if got := run.th.fenceBackoff(n); got != want {
			t.Errorf("wait after fence %d: %v, want %v", n, got, want)
		}
	}
}

// A lost assignment drops the uncommitted work: the open transaction is
// aborted and the tasks start again from the committed state.
func TestLostAssignmentDropsUncommittedWork(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	r.cfg.CommitInterval = time.Hour // only the shutdown commits
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "all input processed", func() bool { return run.th.Stats.Produced.Load() >= 200 })
	cl.Revoke(true)
	wait(t, "the input processed again", func() bool { return run.th.Stats.Produced.Load() >= 400 })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
	if got := len(outputs(t, cl, false)["k0"]); got != 40 {
		t.Errorf("k0 has %d updates in the log, want 40: 20 aborted with the lost assignment, 20 committed", got)
	}
	if !caughtUp(cl) {
		t.Error("the shutdown did not commit the input")
	}
}

// While the group completes a rebalance (the member's JoinGroup sent, its
// SyncGroup not answered) the coordinator refuses offset commits; a
// thread's commit waits for the rebalance to complete instead of being
// refused and processing its every task's last interval again. The
// rebalance lasts 20 commit intervals here; processing goes on through it.
func TestCommitWaitsForARebalanceToComplete(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			r := newRig(t, cl, countTopology(t, nil), eos, "")
			want := feed(cl, 0, 100, 5)
			run := r.start()
			wait(t, "the input committed", func() bool { return caughtUp(cl) })
			cl.SetRebalancing(true)
			more := feed(cl, 100, 100, 5)
			wait(t, "the input processed during the rebalance", func() bool { return run.th.Stats.Produced.Load() >= 400 })
			time.Sleep(20 * r.cfg.CommitInterval) // the rebalance's length: commits fall due in it
			commits := run.th.Stats.Commits.Load()
			cl.SetRebalancing(false)
			wait(t, "a commit after the rebalance", func() bool { return caughtUp(cl) && run.th.Stats.Commits.Load() > commits })
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if n := run.th.Stats.Aborts.Load(); n != 0 {
				t.Errorf("%d aborts: a commit was refused during the rebalance", n)
			}
			for k, n := range more {
				want[k] += n
			}
			exactSequences(t, outputs(t, cl, true), want)
			if got := len(outputs(t, cl, false)["k0"]); got != 40 {
				t.Errorf("k0 has %d updates in the log, want 40: nothing processed twice", got)
			}
		})
	}
}

// A task that comes to a thread in a rebalance commits its first output at
// once, not at the commit interval (an hour here): its partition's output
// paused while it moved. So it does when a commit came first that carried
// none of its output (here a revocation's, before its input arrived). (The
// tasks of a session's first assignment keep the interval: an app's
// start; a scaled-out instance's first active tasks come in a later one,
// after its warm-ups.)
func TestMovedTaskCommitsItsFirstOutputAtOnce(t *testing.T) {
	for _, commitFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("a_commit_first=%v", commitFirst), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			r := newRig(t, cl, countTopology(t, nil), true, "")
			r.cfg.CommitInterval = time.Hour
			feed(cl, 0, 100, 5)
			run := r.start()
			wait(t, "all input processed", func() bool { return run.th.Stats.Produced.Load() >= 200 })
			p0, p1 := kclient.TP{Topic: testIn, Partition: 0}, kclient.TP{Topic: testIn, Partition: 1}
			cl.RevokePartitions(p1)
			wait(t, "the revocation", func() bool { return len(run.th.Snapshot().Tasks) == 1 })
			commits := run.th.Stats.Commits.Load()
			cl.AssignPartitions(p1)
			if commitFirst {
				wait(t, "the task back", func() bool { return len(run.th.Snapshot().Tasks) == 2 })
				cl.RevokePartitions(p0)
				wait(t, "the other task's revocation", func() bool { return len(run.th.Snapshot().Tasks) == 1 })
			}
			cl.Produce(testIn, 1, kclienttest.Record{Key: []byte("x"), Value: []byte("1"), Timestamp: 5000})
			wait(t, "the moved task's first output committed", func() bool {
				off, _ := cl.Committed(testIn, 1)
				return off >= cl.End(testIn, 1)
			})
			if n := run.th.Stats.Commits.Load() - commits; !commitFirst && n != 1 {
				t.Errorf("%d commits after the task came back, want 1", n)
			}
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A clean revocation commits before the partitions go.
func TestRevokeCommits(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	r.cfg.CommitInterval = time.Hour
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "all input processed", func() bool { return run.th.Stats.Produced.Load() >= 200 })
	cl.Revoke(false)
	wait(t, "the revocation's commit", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
	if n := run.th.Stats.Aborts.Load(); n != 0 {
		t.Errorf("%d aborts", n)
	}
}

// A thread that fails (a processing error with the default handler) closes
// its consumer without committing anything it did since the last commit:
// the revocation that closing triggers must not commit.
func TestRevokeWhileClosingCommitsNothing(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			r := newRig(t, cl, countTopology(t, nil), eos, "")
			r.cfg.CommitInterval = time.Hour
			feed(cl, 0, 50, 5)
			cl.Produce(testIn, 0, kclienttest.Record{Key: []byte("k0"), Value: []byte("boom"), Timestamp: 2000})
			run := r.start()
			select {
			case err := <-run.done:
				run.done <- err
				if err == nil || !strings.Contains(err.Error(), "boom") {
					t.Fatalf("Run returned %v, want the processing error", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the thread did not fail")
			}
			for p := range int32(testParts) {
				if off, _ := cl.Committed(testIn, p); off >= 0 {
					t.Errorf("partition %d: offset %d committed after the failure", p, off)
				}
			}
			if eos {
				if n := len(outputs(t, cl, true)); n != 0 {
					t.Errorf("%d keys in the committed output, want none", n)
				}
			}
		})
	}
}

// Committed offsets move past transaction markers once a partition is
// drained (so the group's lag reaches zero on transactional input), as
// Kafka Streams commits; the committed offset is never past a record not
// processed yet.
func TestCommittedOffsetsPastMarkers(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	// Transactional input: an upstream producer's records, then its
	// commit marker.
	up, err := cl.NewProducer(kclient.Config{"transactional.id": "upstream"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	must(t, up.InitTransactions(ctx))
	must(t, up.BeginTransaction())
	for i := range 20 {
		must(t, up.Produce(&rt.OutRecord{Topic: testIn, Partition: 0, Key: fmt.Appendf(nil, "k%d", i%3), Value: fmt.Append(nil, i), Timestamp: int64(1000 + i)}))
	}
	must(t, up.CommitTransaction(ctx))
	end := cl.End(testIn, 0) // 20 records and a marker
	if end != 21 {
		t.Fatalf("input ends at %d, want 21", end)
	}
	run := r.start()
	wait(t, "offsets past the marker", func() bool { off, _ := cl.Committed(testIn, 0); return off == end })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := outputs(t, cl, true); len(got["k0"]) != 7 {
		t.Errorf("k0 updates %v, want 7", got["k0"])
	}
	if off, _ := cl.Committed(testIn, 1); off >= 0 {
		t.Errorf("partition 1 (never written) has committed offset %d", off)
	}
}

// Restore: a store with no state reads its whole changelog; a store that
// fell behind reads exactly the records written after its stored offset; a
// store that is up to date reads nothing.
func TestRestoreFromStoredOffsetAndFromZero(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			prog := countTopology(t, nil)
			dirA, dirB := t.TempDir(), t.TempDir()
			runOn := func(dir string, from, n int) *running {
				t.Helper()
				r := newRig(t, cl, prog, eos, dir)
				feed(cl, from, n, 5)
				run := r.start()
				wait(t, "the thread to run", func() bool { return r.state.Load() == int32(ThreadRunning) })
				wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
				if err := run.stop(t); err != nil {
					t.Fatal(err)
				}
				r.closeStores()
				return run
			}
			changelogRecords := func() int64 {
				var n int
				for p := range int32(testParts) {
					n += len(cl.Records(changelog(), p, true))
				}
				return int64(n)
			}
			a := runOn(dirA, 0, 100) // A's store: 100 updates
			if n := a.th.Stats.RestoredRecords.Load(); n != 0 {
				t.Fatalf("first run restored %d records", n)
			}
			b := runOn(dirB, 100, 60) // a new store: reads all 100, then 60 more
			if n := b.th.Stats.RestoredRecords.Load(); n != 100 {
				t.Fatalf("empty store restored %d records, want the whole changelog (100)", n)
			}
			c := runOn(dirA, 160, 0) // A is 60 behind
			if n := c.th.Stats.RestoredRecords.Load(); n != 60 {
				t.Fatalf("store behind restored %d records, want the 60 written after its offset", n)
			}
			d := runOn(dirA, 160, 40) // A is up to date
			if n := d.th.Stats.RestoredRecords.Load(); n != 0 {
				t.Fatalf("up-to-date store restored %d records", n)
			}
			if n := changelogRecords(); n != 200 {
				t.Fatalf("changelog holds %d records, want 200", n)
			}
			// Counting went on from the restored state: exact throughout.
			exactSequences(t, outputs(t, cl, true), counts(0, 200, 5))
		})
	}
}

// A thread told to stop while it is still setting up a new assignment
// (here: reading the changelogs' ends, retried through a broker error)
// neither processes nor commits the new tasks: their stores were never
// restored, and counting on from an empty store, then committing, would
// write wrong counts to the changelog that every later owner restores
// (seen once in TestScaling: a scaled-in instance stopped mid-assignment).
func TestStopDuringAssignmentProcessesNothing(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			prog := countTopology(t, nil)
			runOn := func(from, n int, during func(*running)) {
				t.Helper()
				r := newRig(t, cl, prog, eos, t.TempDir()) // a new instance: empty stores
				feed(cl, from, n, 5)
				run := r.start()
				if during != nil {
					during(run)
				} else {
					wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
				}
				if err := run.stop(t); err != nil {
					t.Fatal(err)
				}
				r.closeStores()
			}
			runOn(0, 100, nil)
			committed := func() (n int64) {
				for p := range int32(testParts) {
					off, _ := cl.Committed(testIn, p)
					n += off
				}
				return n
			}
			before := committed()
			for range 1000 {
				cl.FailNext("Offsets", kclienttest.ErrUnreachable)
			}
			calls := cl.Calls("Offsets")
			runOn(100, 50, func(run *running) {
				// The assignment waits out the error; stop it there, with
				// new input readable.
				wait(t, "the assignment to retry the changelog ends", func() bool { return cl.Calls("Offsets") >= calls+2 })
			})
			cl.ClearFaults("Offsets")
			if got := committed(); got != before {
				t.Errorf("the stopped thread committed input offsets %d -> %d without restoring its stores", before, got)
			}
			runOn(150, 30, nil)
			exactSequences(t, outputs(t, cl, eos), counts(0, 180, 5))
		})
	}
}

// Backpressure: the thread buffers at most MaxBufferedRecords per assigned
// partition; beyond that it stops polling.
func TestBufferedRecordsAreBounded(t *testing.T) {
	cl := kclienttest.NewCluster()
	var th atomic.Pointer[Thread]
	var processed, worst int64
	peek := func(string, string) {
		processed++
		if t := th.Load(); t != nil {
			worst = max(worst, t.Stats.Consumed.Load()-processed)
		}
	}
	r := newRig(t, cl, countTopology(t, peek), false, "")
	r.cfg.MaxBufferedRecords = 10
	want := feed(cl, 0, 2000, 13)
	run := r.start()
	th.Store(run.th)
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if limit := int64(10 * testParts); worst > limit {
		t.Fatalf("up to %d records buffered, want at most %d", worst, limit)
	}
	if worst == 0 {
		t.Fatal("nothing was ever buffered ahead of processing")
	}
	exactSequences(t, outputs(t, cl, true), want)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A broker outage is waited out: while every call fails transiently, the
// thread retries (reporting the brokers unreachable) and goes on exactly
// when they are back — under each guarantee, while committing, restoring
// or idle.
func TestBrokerOutageIsWaitedOut(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			cl := kclienttest.NewCluster()
			r := newRig(t, cl, countTopology(t, nil), eos, "")
			want := feed(cl, 0, 100, 5)
			run := r.start()
			wait(t, "a first commit", func() bool { return caughtUp(cl) })
			cl.SetDown(true)
			more := feed(cl, 100, 100, 5)
			for k, n := range more {
				want[k] += n
			}
			wait(t, "the thread to see the outage", func() bool { down, _, _ := run.th.Health.Unreachable(); return down })
			calls := cl.Calls("Poll")
			wait(t, "the thread to keep retrying", func() bool { return cl.Calls("Poll") > calls+10 })
			cl.SetDown(false)
			wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
			wait(t, "the thread to see the brokers back", func() bool { down, _, _ := run.th.Health.Unreachable(); return !down })
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			exactSequences(t, outputs(t, cl, true), want)
		})
	}
}

// An outage while a task restores (and while the thread rejoins after a
// lost assignment) is waited out too.
func TestBrokerOutageDuringRestore(t *testing.T) {
	cl := kclienttest.NewCluster()
	prog := countTopology(t, nil)
	r := newRig(t, cl, prog, true, "")
	feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	// A new instance with no state must restore; the brokers go away as it
	// starts and come back once it is stuck retrying.
	r2 := newRig(t, cl, prog, true, t.TempDir())
	cl.SetDown(true)
	run2 := r2.start()
	wait(t, "the thread to see the outage", func() bool { down, _, _ := run2.th.Health.Unreachable(); return down })
	calls := cl.Calls("Subscribe") + cl.Calls("Committed") + cl.Calls("Offsets")
	wait(t, "retries", func() bool {
		return cl.Calls("Subscribe")+cl.Calls("Committed")+cl.Calls("Offsets") > calls+3 || cl.Calls("Poll") > 50
	})
	cl.SetDown(false)
	feed(cl, 100, 50, 5)
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run2.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := run2.th.Stats.RestoredRecords.Load(); n != 100 {
		t.Fatalf("restored %d records, want 100", n)
	}
	exactSequences(t, outputs(t, cl, true), counts(0, 150, 5))
}

// A producer fenced again and again (another instance with the same
// process id) stops the thread after ten fresh starts in five minutes,
// with an error that says so.
func TestRepeatedFencingStops(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	feed(cl, 0, 100, 5)
	run := r.start()
	for i := 1; i <= 10; i++ {
		wait(t, "a new producer's first commit", func() bool {
			return cl.Calls("NewProducer") >= i && cl.Calls("CommitTransaction") >= i
		})
		cl.Fence(run.th.transactionalID())
		feed(cl, 100*i, 10, 5) // something to commit
	}
	select {
	case err := <-run.done:
		run.done <- err
		if err == nil || !strings.Contains(err.Error(), "fenced 10 times") {
			t.Fatalf("Run returned %v, want the repeated fencing", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the thread kept going")
	}
}

// Committed offsets that cannot be read for a while (a previous owner's
// transaction pending, a coordinator loading after a broker restart) are
// waited for with the same clients: replacing the consumer would start
// another rebalance of the whole group. Processing resumes exactly once the
// offsets can be read.
func TestUnreadableCommittedOffsetsAreWaitedFor(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "a first commit", func() bool { return caughtUp(cl) })
	timedOut := fmt.Errorf("%w: Local: Timed out", kclient.ErrTransient)
	for range 5 {
		cl.FailNext("Committed", timedOut)
	}
	base := cl.Calls("Committed")
	cl.Revoke(false)
	for k, n := range feed(cl, 100, 100, 5) {
		want[k] += n
	}
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if n := cl.Calls("Committed"); n < base+6 {
		t.Fatalf("%d committed-offset reads, want at least 6 (5 failed)", n-base)
	}
	if n := cl.Calls("NewConsumer"); n != 1 {
		t.Fatalf("%d consumers made, want 1: waiting for committed offsets must not replace the clients", n)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
}

// At-least-once, a member that was away while the group moved on (the
// brokers restarted; its session expired) comes back with records it
// processed but never committed: its offset commit fails. Its stores must
// not take those writes with the changelog's end, which is past what the
// partitions' new owner wrote meanwhile: a restore from that offset would
// skip the new owner's updates, and counting would go on from stale counts
// (seen against a real broker: counts lost after two broker restarts).
func TestZombieOffsetCommitKeepsTheStoreBehind(t *testing.T) {
	cl := kclienttest.NewCluster()
	gateKey := ""
	for i := 0; gateKey == ""; i++ {
		if k := fmt.Sprintf("gate%d", i); kclient.KeyPartition([]byte(k), testParts) == testParts-1 {
			gateKey = k // in the last task: processed after every other record of its batch
		}
	}
	reached, release := make(chan struct{}), make(chan struct{})
	gate := func(k, _ string) {
		if k == gateKey {
			close(reached)
			<-release
		}
	}
	dirA := t.TempDir()
	a := newRig(t, cl, countTopology(t, gate), false, dirA)
	want := feed(cl, 0, 100, 5)
	runA := a.start()
	wait(t, "A to commit the first input", func() bool { return caughtUp(cl) })
	// A processes five more records (changelog written, offsets not yet
	// committed), then stops at the gate record.
	for k, n := range feed(cl, 100, 5, 5) {
		want[k] += n
	}
	cl.Produce(testIn, testParts-1, kclienttest.Record{Key: []byte(gateKey), Value: []byte("g"), Timestamp: 5000})
	want[gateKey] = 1
	<-reached
	// B takes the group over (A's assignment is lost at its next poll),
	// processes the same records again and 40 more, and commits.
	b := newRig(t, cl, countTopology(t, nil), false, t.TempDir())
	b.cfg.ProcessID = "p1"
	runB := b.start()
	for k, n := range feed(cl, 105, 40, 5) {
		want[k] += n
	}
	wait(t, "B to commit all input", func() bool { return caughtUp(cl) })
	// A goes on: it counts the gate record and commits before its next
	// poll, as a member back from an outage does; the group refuses it.
	close(release)
	wait(t, "A to learn its assignment is lost", func() bool { return a.state.Load() == int32(ThreadRebalancing) })
	must(t, runA.stop(t))
	if n := runA.th.Stats.Aborts.Load(); n != 1 {
		t.Errorf("A rewound %d times after its refused offset commit, want 1", n)
	}
	a.closeStores()
	must(t, runB.stop(t))
	// A starts again on its state directory and takes the partitions.
	a2 := newRig(t, cl, countTopology(t, nil), false, dirA)
	for k, n := range feed(cl, 145, 10, 5) {
		want[k] += n
	}
	run := a2.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	must(t, run.stop(t))
	got := outputs(t, cl, false)
	for k, n := range want {
		seq := got[k]
		if len(seq) == 0 || seq[len(seq)-1] < n {
			t.Errorf("key %s: last count %v, want at least %d (updates: %v)", k, seq[len(seq)-1:], n, seq)
		}
	}
}

// At-least-once, records produced while the brokers are down wait in the
// producer's queue. The commit that cannot deliver them rewinds to the last
// commit and purges them: they are processed again when the brokers are
// back, never delivered late as well (a member the group replaced meanwhile
// would deliver stale results after the new owner's, and a later restore
// of the changelog would take them).
func TestOutageRecordsArePurgedNotDeliveredLate(t *testing.T) {
	cl := kclienttest.NewCluster()
	gateKey := ""
	for i := 0; gateKey == ""; i++ {
		if k := fmt.Sprintf("gate%d", i); kclient.KeyPartition([]byte(k), testParts) == testParts-1 {
			gateKey = k
		}
	}
	// The gate record takes the brokers away while it is processed: its
	// results, and those of the records after it, are queued.
	var once sync.Once
	r := newRig(t, cl, countTopology(t, func(k, _ string) {
		if k == gateKey {
			once.Do(func() { cl.SetDown(true) })
		}
	}), false, "")
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "the first input committed", func() bool { return caughtUp(cl) })
	cl.Produce(testIn, testParts-1, kclienttest.Record{Key: []byte(gateKey), Value: []byte("g"), Timestamp: 5000})
	want[gateKey] = 1
	wait(t, "the commit during the outage to rewind", func() bool { return run.th.Stats.Aborts.Load() > 0 })
	cl.SetDown(false)
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	must(t, run.stop(t))
	exactSequences(t, outputs(t, cl, false), want)
	var gateWrites int
	for p := range int32(testParts) {
		for _, rec := range cl.Records(changelog(), p, false) {
			if string(rec.Key) != "" && bytes.Contains(rec.Key, []byte(gateKey)) {
				gateWrites++
			}
		}
	}
	if gateWrites != 1 {
		t.Errorf("the changelog has %d updates of %s, want 1: the update queued during the outage was delivered too", gateWrites, gateKey)
	}
}

// Exactly-once counts where a changelog ends after each commit: from the
// end the brokers gave when it was not known (the first commit after an
// assignment or an abort), n records plus the commit marker per
// transaction; a partition the brokers gave no end for stays unknown.
func TestExactlyOnceCountsChangelogEnds(t *testing.T) {
	a, b := kclient.TP{Topic: "cl", Partition: 0}, kclient.TP{Topic: "cl", Partition: 1}
	var asked [][]kclient.TP
	brokers := map[kclient.TP]int64{a: 40}
	var down bool
	g := newGuarantee(true, nil, nil, nil, func(_ context.Context, tps []kclient.TP) (map[kclient.TP]int64, error) {
		asked = append(asked, tps)
		if down {
			return nil, errors.New("no broker answers")
		}
		ends := map[kclient.TP]int64{}
		for _, tp := range tps {
			if end, ok := brokers[tp]; ok {
				ends[tp] = end
			}
		}
		return ends, nil
	}, &watch{}).(*exactlyOnceCommits)
	ctx := context.Background()
	sent := func(n map[kclient.TP]int64) map[kclient.TP]*changelogRef {
		w := map[kclient.TP]*changelogRef{}
		for tp, k := range n {
			w[tp] = &changelogRef{n: k}
		}
		return w
	}
	check := func(step string, got, want map[kclient.TP]int64, asks int) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s: ends %v, want %v", step, got, want)
		}
		if len(asked) != asks {
			t.Errorf("%s: asked the brokers %d times, want %d", step, len(asked), asks)
		}
	}
	// a unknown: the brokers say 40 (b: no answer for it, stays unknown).
	check("first commit", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 5, b: 3})), map[kclient.TP]int64{a: 40}, 1)
	// a counted on: 40 + 7 records + marker; b asked again.
	brokers[b] = 10
	check("second commit", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 7, b: 2})), map[kclient.TP]int64{a: 48, b: 10}, 2)
	check("third commit", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 1, b: 4})), map[kclient.TP]int64{a: 50, b: 15}, 2)
	// Only the partitions written are returned.
	check("commit writing b only", g.changelogEnds(ctx, sent(map[kclient.TP]int64{b: 1})), map[kclient.TP]int64{b: 17}, 2)
	// A new assignment forgets: ask again; the brokers being away leaves
	// the ends unknown, and the next commit asks once more.
	g.forgetEnds()
	down = true
	check("commit during an outage", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 1})), map[kclient.TP]int64{}, 3)
	down, brokers[a] = false, 90
	check("commit after the outage", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 2})), map[kclient.TP]int64{a: 90}, 4)
	check("and then counted", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 2})), map[kclient.TP]int64{a: 93}, 4)
	// The ends an assignment's restore read need no asking.
	g.forgetEnds()
	g.knowEnds(map[kclient.TP]int64{a: 200, b: 300})
	check("after an assignment", g.changelogEnds(ctx, sent(map[kclient.TP]int64{a: 3, b: 1})), map[kclient.TP]int64{a: 204, b: 302}, 4)
}

// A thread told to stop while a rebalance gives it new partitions (the
// stop lands as the new tasks read their committed offsets, so the
// assignment is cut short) publishes nothing of what its other tasks did
// since the last commit: the open transaction is aborted, and the
// partitions' next owner processes those records once. (Seen in
// TestScaling on the real broker: an instance scaled in while its peers'
// tasks moved to it committed, at shutdown, a transaction holding its own
// tasks' uncommitted output without their input offsets — which the next
// owner processed again: counts two too high.)
func TestStopDuringAnAssignmentPublishesNothingUncommitted(t *testing.T) {
	cl := kclienttest.NewCluster()
	prog := countTopology(t, nil)
	r := newRig(t, cl, prog, true, t.TempDir())
	r.cfg.CommitInterval = time.Hour // nothing commits but the revocation
	in1 := kclient.TP{Topic: testIn, Partition: 1}
	want := feed(cl, 0, 40, 5)
	run := r.start()
	wait(t, "the first records processed", func() bool { return run.th.Stats.Consumed.Load() == 40 })
	cl.RevokePartitions(in1) // commits everything so far
	wait(t, "the revocation's commit", func() bool { off, _ := cl.Committed(testIn, 0); return off == cl.End(testIn, 0) })
	from := cl.End(testIn, 0)
	for k, n := range feed(cl, 40, 40, 5) {
		want[k] += n
	}
	wait(t, "partition 0's new records processed, uncommitted", func() bool {
		return run.th.Stats.Consumed.Load() == 40+cl.End(testIn, 0)-from
	})
	cl.OnNext("Committed", run.cancel) // the stop, as the new task reads its offsets
	cl.AssignPartitions(in1)
	if err := <-run.done; err != nil {
		t.Fatal(err)
	}
	run.done <- nil
	r.closeStores()
	// A new instance processes everything left, from the committed offsets.
	r2 := newRig(t, cl, prog, true, t.TempDir())
	run2 := r2.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run2.stop(t); err != nil {
		t.Fatal(err)
	}
	exactSequences(t, outputs(t, cl, true), want)
}
