package engine

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
)

// A step that lasts longer than a second explains itself: the thread logs
// once, at Info, what it waits for, the snapshot (/state) shows it while it
// lasts, and the thread logs again when it ends. Here the brokers hold a
// transaction's commit until the test has seen both.
func TestALongWaitIsLoggedAndShown(t *testing.T) {
	cl := kclienttest.NewCluster()
	r := newRig(t, cl, countTopology(t, nil), true, "")
	core, logs := observer.New(zapcore.InfoLevel)
	r.cfg.Log = zap.New(zapcore.NewTee(r.cfg.Log.Core(), core))
	want := feed(cl, 0, 100, 5)
	run := r.start()
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })

	release := make(chan struct{})
	var held atomic.Bool
	cl.OnNext("CommitTransaction", func() { held.Store(true); <-release })
	for k, n := range feed(cl, 100, 10, 5) {
		want[k] += n
	}
	waiting := func() []observer.LoggedEntry { return logs.FilterMessage("stream thread waiting").All() }
	wait(t, "the thread to say it waits", func() bool { return len(waiting()) > 0 })
	if !held.Load() {
		t.Fatal("the thread says it waits, but the commit is not held")
	}
	if got := waiting()[0].ContextMap()["for"]; got != doingCommitTransaction.String() {
		t.Errorf("the thread says it waits for %q, want %q", got, doingCommitTransaction.String())
	}
	snap := run.th.Snapshot()
	if snap.Waiting == nil || snap.Waiting.For != doingCommitTransaction.String() {
		t.Errorf("the snapshot's waiting is %+v, want the transaction's commit", snap.Waiting)
	}
	close(release)
	wait(t, "the thread to say it no longer waits", func() bool {
		return logs.FilterMessage("stream thread no longer waiting").Len() > 0
	})
	wait(t, "the group to commit all input", func() bool { return caughtUp(cl) })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := len(waiting()); n != 1 {
		t.Errorf("the wait was logged %d times, want once", n)
	}
	if w := run.th.Snapshot().Waiting; w != nil {
		t.Errorf("after the wait the snapshot still shows %+v", w)
	}
	exactSequences(t, outputs(t, cl, true), want)
}
