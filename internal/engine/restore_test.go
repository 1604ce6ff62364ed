package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// The restorer starts a restore only on stable changelogs and waits for
// nothing: while a transaction is open on a task's changelog it starts no
// task and names the changelog (the thread keeps its other tasks going and
// asks again); once the transaction commits, each store with no local state
// reads its changelog from the start to the end just read, and its task is
// done when every record before that end is in the store.
func TestRestorerStartsOnStableChangelogsOnly(t *testing.T) {
	ctx := context.Background()
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	for i := range 3 {
		cl.Produce(changelog(), 0, kclienttest.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte{0, 0, 0, 0, 0, 0, 0, 1}})
	}
	zombie, err := cl.NewProducer(kclient.Config{"transactional.id": "zombie"})
	if err != nil {
		t.Fatal(err)
	}
	if err := zombie.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Produce(&rt.OutRecord{Topic: changelog(), Partition: 1, Key: []byte("k9"), Value: []byte{0, 0, 0, 0, 0, 0, 0, 2}}); err != nil {
		t.Fatal(err)
	}

	var stats ThreadStats
	var health Health
	res := newRestorer(r.cfg, r.cfg.Log, &stats, &health, &lazyAdmin{newAdmin: r.cfg.NewAdmin})
	defer res.clear()
	var tm taskRegistry
	tm.clear()
	t0 := tm.addTask(processor.TaskID{Subtopology: 0, Partition: 0}, nil)
	t1 := tm.addTask(processor.TaskID{Subtopology: 0, Partition: 1}, nil)
	t0.state, t1.state = taskStarting, taskStarting

	started, ends, pendingOn, err := res.startRestore(ctx, []*task{t0, t1})
	if err != nil || started != nil || ends != nil {
		t.Fatalf("with a transaction open: started %v, ends %v, err %v; want nothing started", started, ends, err)
	}
	if fmt.Sprint(pendingOn) != fmt.Sprint([]kclient.TP{{Topic: changelog(), Partition: 1}}) {
		t.Fatalf("pending on %v, want the changelog partition with the open transaction", pendingOn)
	}
	if res.busy() {
		t.Fatal("a restore began while a transaction was open")
	}

	if err := zombie.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	started, ends, pendingOn, err = res.startRestore(ctx, []*task{t0, t1})
	if err != nil || len(pendingOn) > 0 || len(started) != 2 {
		t.Fatalf("once stable: started %v, pending on %v, err %v", started, pendingOn, err)
	}
	c0, c1 := kclient.TP{Topic: changelog(), Partition: 0}, kclient.TP{Topic: changelog(), Partition: 1}
	if ends[c0] != 3 || ends[c1] != 2 { // a record and its commit marker
		t.Fatalf("changelog ends %v", ends)
	}
	if ready := tm.restoring(started); len(ready) != 0 || t0.state != taskRestoring || t1.state != taskRestoring {
		t.Fatalf("ready %v, states %v %v: both tasks have a changelog to read", ready, t0.state, t1.state)
	}
	done := map[processor.TaskID]bool{}
	for res.busy() {
		tasks, err := res.step()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks {
			done[tk.id] = true
		}
	}
	if !done[t0.id] || !done[t1.id] || stats.RestoredRecords.Load() != 4 {
		t.Fatalf("restores done %v, %d records restored; want both tasks, 4 records", done, stats.RestoredRecords.Load())
	}
}

// A store whose offset its changelog no longer holds (records before it
// were deleted) is wiped and restored in full, and the reset is counted
// with the offsets it skipped.
func TestChangelogResetIsCountedAndRestoredInFull(t *testing.T) {
	ctx := context.Background()
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), false, "")
	r.cfg.Resets = &OffsetResets{}
	c0 := kclient.TP{Topic: changelog(), Partition: 0}
	put := func(from, to int) {
		for i := from; i < to; i++ {
			cl.Produce(changelog(), 0, kclienttest.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte{0, 0, 0, 0, 0, 0, 0, 1}})
		}
	}
	restore := func() int64 {
		var stats ThreadStats
		var health Health
		res := newRestorer(r.cfg, r.cfg.Log, &stats, &health, &lazyAdmin{newAdmin: r.cfg.NewAdmin})
		defer res.clear()
		var tm taskRegistry
		tm.clear()
		t0 := tm.addTask(processor.TaskID{Subtopology: 0, Partition: 0}, nil)
		t0.state = taskStarting
		started, _, _, err := res.startRestore(ctx, []*task{t0})
		if err != nil {
			t.Fatal(err)
		}
		tm.restoring(started)
		for res.busy() {
			if _, err := res.step(); err != nil {
				t.Fatal(err)
			}
		}
		return stats.RestoredRecords.Load()
	}
	put(0, 5)
	if n := restore(); n != 5 || len(r.cfg.Resets.Reports()) != 0 {
		t.Fatalf("first restore: %d records, resets %v; want 5, none", n, r.cfg.Resets.Reports())
	}
	put(5, 10)
	if err := cl.NewAdmin().DeleteRecords(ctx, map[kclient.TP]int64{c0: 8}); err != nil {
		t.Fatal(err)
	}
	if n := restore(); n != 2 {
		t.Errorf("after the changelog lost offsets 5..7: %d records restored, want the 2 it holds (read in full)", n)
	}
	want := []OffsetResetReport{{Topic: c0.Topic, Partition: 0, Kind: ResetChangelog, Policy: fullRestore, From: 5, To: 8, Earliest: 8, Resets: 1, Skipped: 3}}
	got := r.cfg.Resets.Reports()
	for i := range got {
		got[i].At = time.Time{}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("resets %+v, want %+v", got, want)
	}
}
