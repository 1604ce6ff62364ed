package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/processor"
)

// A standby follows its task's changelog while another instance runs the
// task, and when the task comes back it restores nothing: the records the
// other instance wrote meanwhile are in the store already. The other
// instance is played by the test, appending to the changelog an earlier
// count of a key (as if its owner had counted it from there); once the
// standby reports no lag the task comes back, reads no changelog record,
// and counts on from the other instance's value.
func TestStandbyFollowsItsChangelogAndTakesOverWithoutRestoring(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	feed(cl, 0, 100, 10)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	p1 := kclient.TP{Topic: testIn, Partition: 1}

	cl.RevokePartitions(p1)
	wait(t, "the revocation", func() bool { return len(run.th.Snapshot().Tasks) == 1 })
	cl.AssignStandbys(processor.TaskID{Partition: 1})
	wait(t, "the standby", func() bool { return len(run.th.Snapshot().Standbys) == 1 })
	if id := run.th.Snapshot().Standbys[0].ID; id != "0_1" {
		t.Fatalf("standby task %s, want 0_1", id)
	}

	// The other instance: the first changelog record of a key on partition
	// 1 (its count 1) written again, as its newest value.
	recs := cl.Records(changelog(), 1, true)
	if len(recs) == 0 {
		t.Fatal("no changelog record on partition 1")
	}
	key := recs[0].Key
	last := 0
	for _, rec := range recs {
		if bytes.Equal(rec.Key, key) {
			last++
		}
	}
	if last < 2 {
		t.Fatalf("key %s counted %d times on partition 1; want several", key, last)
	}
	cl.Produce(changelog(), 1, recs[0])
	end := cl.End(changelog(), 1)
	wait(t, "the standby to store the changelog to its end", func() bool {
		off, ok, err := storage.StoredOffset(r.cfg.Pebble, "0_1", "counts")
		return err == nil && ok && off >= end
	})
	wait(t, "the standby to report no lag", func() bool {
		sb := run.th.Snapshot().Standbys
		return len(sb) == 1 && sb[0].Lag == 0
	})

	restored := run.th.Stats.RestoredRecords.Load()
	cl.AssignPartitions(p1)
	wait(t, "the task to run again", func() bool {
		s := run.th.Snapshot()
		return len(s.Tasks) == 2 && len(s.Standbys) == 0 && !s.Tasks[1].Restoring
	})
	if n := run.th.Stats.RestoredRecords.Load() - restored; n != 0 {
		t.Fatalf("the task restored %d changelog records after its standby had read them all (changelog end %d)", n, end)
	}
	// One more record of the key: counted on from 1.
	cl.Produce(testIn, 1, kclienttest.Record{Key: key, Value: []byte("x"), Timestamp: 5000})
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	seq := outputs(t, cl, true)[string(key)]
	if got := seq[len(seq)-1]; got != 2 {
		t.Fatalf("key %s counted %v; the last count is %d, want 2 (on from the value the standby read)", key, seq, got)
	}
}

// A warm-up (a task the assignor holds for this thread while its state
// catches up here) asks the group for a rebalance once it is within the
// acceptable recovery lag, and not before; its join then reports the
// claim and how far its state has read, which is what the assignor
// weighs to move the task here.
func TestWarmupAsksForARebalanceOnceCaughtUp(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	r.cfg.AcceptableRecoveryLag = 5
	feed(cl, 0, 100, 10)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	p1 := kclient.TP{Topic: testIn, Partition: 1}
	cl.RevokePartitions(p1)
	wait(t, "the revocation", func() bool { return len(run.th.Snapshot().Tasks) == 1 })
	// The instance holds no state of 0_1 (as one that just joined), and
	// its changelog is held back from readers for now.
	if err := storage.DropTask(r.cfg.Pebble, "0_1"); err != nil {
		t.Fatal(err)
	}
	end := cl.End(changelog(), 1)
	if end <= r.cfg.AcceptableRecoveryLag {
		t.Fatalf("changelog 1 ends at %d: too short for the test", end)
	}
	cl.Hold(changelog(), 1)
	cl.AssignWarmups(nil, []processor.TaskID{{Partition: 1}})
	wait(t, "the warm-up to know its lag", func() bool {
		sb := run.th.Snapshot().Standbys
		return len(sb) == 1 && sb[0].Lag > r.cfg.AcceptableRecoveryLag
	})
	if n := cl.Rejoins(); n != 0 {
		t.Fatalf("the thread asked for %d rebalances with its warm-up %d records behind", n, run.th.Snapshot().Standbys[0].Lag)
	}
	cl.Release(changelog(), 1)
	wait(t, "the caught-up warm-up to ask for a rebalance", func() bool { return cl.Rejoins() == 1 })
	s, ok := cl.MemberState()
	if !ok {
		t.Fatal("the thread reported no member state")
	}
	if fmt.Sprint(s.Warmup) != "[0_1]" || s.AcceptableRecoveryLag != 5 || s.MaxWarmups != r.cfg.MaxWarmupReplicas {
		t.Fatalf("member state %+v: want the claim [0_1] and the warm-up settings", s)
	}
	if off := s.Offsets[processor.TaskID{Partition: 1}]; off < end-r.cfg.AcceptableRecoveryLag {
		t.Fatalf("the join reports 0_1's state at %d, the changelog ends at %d: the warm-up's reads were not written first", off, end)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A task restoring while a standby follows its changelog: the restore
// reads its changelog alone (the standby's waits), then the standby reads
// on. The task's state is dropped first, so it restores its changelog in
// full; both then keep up with new input, and the output is exact.
func TestRestoreReadsAloneWhileAStandbyFollows(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	want := feed(cl, 0, 100, 10)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	p0, p1 := kclient.TP{Topic: testIn, Partition: 0}, kclient.TP{Topic: testIn, Partition: 1}
	cl.RevokePartitions(p0, p1)
	wait(t, "the revocation", func() bool { return len(run.th.Snapshot().Tasks) == 0 })
	if err := storage.DropTask(r.cfg.Pebble, "0_0"); err != nil {
		t.Fatal(err)
	}
	cl.AssignStandbys(processor.TaskID{Partition: 1})
	wait(t, "the standby", func() bool { return len(run.th.Snapshot().Standbys) == 1 })
	restored := run.th.Stats.RestoredRecords.Load()
	cl.AssignWithStandbys([]kclient.TP{p0}, []processor.TaskID{{Partition: 1}})
	wait(t, "task 0_0 restored and running", func() bool {
		s := run.th.Snapshot()
		return len(s.Tasks) == 1 && !s.Tasks[0].Restoring && len(s.Standbys) == 1
	})
	if n, end := run.th.Stats.RestoredRecords.Load()-restored, cl.End(changelog(), 0); n == 0 || n > end {
		t.Fatalf("task 0_0 restored %d records of a changelog ending at %d", n, end)
	}
	// The standby reads on: new input on partition 1 (its owner played by
	// the test, writing the changelog) reaches its store.
	cl.Produce(changelog(), 1, cl.Records(changelog(), 1, true)[0])
	end := cl.End(changelog(), 1)
	wait(t, "the standby to store the changelog to its end", func() bool {
		off, ok, err := storage.StoredOffset(r.cfg.Pebble, "0_1", "counts")
		return err == nil && ok && off >= end
	})
	more := map[string]int64{}
	for i := 100; i < 200; i++ {
		k := fmt.Sprintf("k%d", i%10)
		if kclient.KeyPartition([]byte(k), testParts) == 0 {
			cl.Produce(testIn, 0, kclienttest.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i)), Timestamp: int64(1000 + i)})
			more[k]++
		}
	}
	wait(t, "partition 0 committed", func() bool {
		off, _ := cl.Committed(testIn, 0)
		return off >= cl.End(testIn, 0)
	})
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	got := outputs(t, cl, true)
	for k, n := range more {
		if seq := got[k]; len(seq) == 0 || seq[len(seq)-1] != want[k]+n {
			t.Errorf("key %s: counts %v, want the last %d", k, seq, want[k]+n)
		}
	}
}
