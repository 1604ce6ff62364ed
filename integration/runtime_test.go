package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// Exactly once under crashes: three worker processes share 6 input
// partitions while input flows; one is SIGKILLed mid-stream, restarted, and
// killed again later (each fault placed by committed progress). With caching
// off, every word's committed updates go 1, 2, 3, … with no repeat and no
// gap. Then the same with caching on: final counts exact.
func TestExactlyOnceUnderCrashes(t *testing.T) {
	brokers := realBroker(t)
	for _, cache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			a := newWordApp(t, brokers, 6)
			args := []string{"-guarantee", "exactly_once", fmt.Sprintf("-cache=%v", cache)}
			w := []*worker{a.start("p0", args...), a.start("p1", args...), a.start("p2", args...)}
			a.feed(120_000, 6_000)
			a.strike("SIGKILL of p1, restarted", 0.15, 0.45, func() {
				w[1].kill(t)
				w[1] = a.start("p1", args...)
			})
			a.strike("second SIGKILL of p1, restarted", 0.55, 0.85, func() {
				w[1].kill(t)
				w[1] = a.start("p1", args...)
			})
			a.waitDone(5 * time.Minute)
			for _, x := range w {
				x.stop(t)
			}
			if cache {
				a.checkFinal()
			} else {
				a.checkExactSequences()
			}
		})
	}
}

// At least once: the same crashes; no word is missing and no count is
// below its batch count.
func TestAtLeastOnceUnderCrashes(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 6)
	args := []string{"-guarantee", "at_least_once", "-cache=false", "-commit", "500ms"}
	w := []*worker{a.start("p0", args...), a.start("p1", args...), a.start("p2", args...)}
	a.feed(80_000, 6_000)
	a.strike("SIGKILL of p2, restarted", 0.2, 0.6, func() {
		w[2].kill(t)
		w[2] = a.start("p2", args...)
	})
	a.waitDone(5 * time.Minute)
	for _, x := range w {
		x.stop(t)
	}
	seqs := a.outputs()
	for word, want := range a.batch {
		got := seqs[word]
		if len(got) == 0 {
			t.Fatalf("word %s missing from the output", word)
		}
		if last := got[len(got)-1]; last < want {
			t.Fatalf("word %s: final count %d below its batch count %d", word, last, want)
		}
	}
}

// Restore: a clean restart replays no changelog record; a restart after
// SIGKILL replays at most the tail after the stored offset (usually
// nothing: the store is applied right after each transaction commits); a
// store that fell behind replays exactly the changelog records after its
// stored offset; a deleted state directory is restored in full. Results
// stay exact throughout.
func TestRestore(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 4)
	args := []string{"-guarantee", "exactly_once", "-cache=false"}
	stateDir := filepath.Join(a.dir, "state-p0")

	a.produce(40_000)
	w := a.start("p0", args...)
	a.waitDone(3 * time.Minute)
	w.stop(t)
	// Keep a copy of the state as it is now, to bring back later.
	backup := filepath.Join(a.dir, "backup")
	if err := os.CopyFS(backup, os.DirFS(stateDir)); err != nil {
		t.Fatal(err)
	}
	behind := a.changelogRecords()

	// Clean restart: the store is at the changelog's end; nothing replays.
	w = a.start("p0", args...)
	w.waitRunning(t, time.Minute)
	if n := w.restored(); n != 0 {
		t.Fatalf("clean restart replayed %d changelog records, want none", n)
	}
	w.stop(t)

	// SIGKILL mid-stream, then restart: at most a small tail replays.
	w = a.start("p0", args...)
	a.feed(60_000, 4_000)
	a.strike("SIGKILL of p0, restarted", 0.2, 0.6, func() {
		w.kill(t)
		w = a.start("p0", args...)
	})
	a.waitDone(3 * time.Minute)
	w.stop(t)
	total := a.changelogRecords()
	t.Logf("after SIGKILL: replayed %d of %d changelog records", w.restored(), total)
	if w.restored()*5 > int64(total) {
		t.Fatalf("restart after SIGKILL replayed %d of %d changelog records; want only the tail", w.restored(), total)
	}
	a.checkExactSequences()

	// A store that fell behind (the state of before) replays exactly the
	// changelog records written since.
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, stateDir); err != nil {
		t.Fatal(err)
	}
	w = a.start("p0", args...)
	w.waitRunning(t, 2*time.Minute)
	w.stop(t)
	t.Logf("store behind: replayed %d records; %d were written after it", w.restored(), total-behind)
	if w.restored() != int64(total-behind) {
		t.Fatalf("store behind replayed %d changelog records, want the %d written after its offset", w.restored(), total-behind)
	}

	// State directory deleted: full restore, then counting goes on exactly.
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	a.produce(5_000)
	w = a.start("p0", args...)
	w.waitRunning(t, 2*time.Minute)
	a.waitDone(3 * time.Minute)
	w.stop(t)
	full := w.restored()
	t.Logf("after deleting the state directory: replayed %d of %d changelog records", full, total)
	if full != int64(total) {
		t.Fatalf("full restore replayed %d records, the changelog holds %d", full, total)
	}
	a.checkExactSequences()
}

// Scaling: 1 → 3 → 1 instances while input flows (each step placed by
// committed progress). With caching off every word's updates go 1, 2, 3, …
// exactly; with caching on the final counts are exact.
func TestScaling(t *testing.T) {
	brokers := realBroker(t)
	for _, cache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			a := newWordApp(t, brokers, 6)
			args := []string{"-guarantee", "exactly_once", fmt.Sprintf("-cache=%v", cache)}
			w0 := a.start("p0", args...)
			a.feed(80_000, 5_000)
			var w1, w2 *worker
			a.strike("scaled out to 3 instances", 0.15, 0.45, func() {
				w1, w2 = a.start("p1", args...), a.start("p2", args...)
			})
			// Scale in only once the two new instances run their tasks.
			w1.waitRunning(t, time.Minute)
			w2.waitRunning(t, time.Minute)
			a.strike("scaled in to 1 instance", 0.55, 0.85, func() {
				w1.stop(t)
				w2.stop(t)
			})
			a.waitDone(5 * time.Minute)
			w0.stop(t)
			if cache {
				a.checkFinal()
			} else {
				a.checkExactSequences()
			}
		})
	}
}

// Fencing: a second producer with the app's transactional id fences the
// app's producer mid-stream; the app rejoins with a new producer and the
// results stay exact.
func TestFencing(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 4)
	w := a.start("p0", "-guarantee", "exactly_once", "-cache=false")
	a.feed(60_000, 4_000)
	a.strike("fenced p0's producer", 0.2, 0.6, func() {
		// A new producer with the id: its InitProducerID bumps the epoch.
		p := kafkatest.Client(t, brokers, kgo.TransactionalID(a.app+"-p0-0"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, _, err := p.ProducerID(ctx); err != nil {
			t.Fatalf("fencing producer: %v", err)
		}
	})
	a.waitDone(2 * time.Minute)
	if len(w.entries("rejoining the group with a new consumer and producer")) == 0 {
		t.Fatalf("the app was never fenced; log:\n%s", tail(w.log))
	}
	// The fencing producer's InitTransactions retries every 500 ms while
	// the fenced transaction is aborted; the app waits (1 s, then doubling)
	// before claiming the id again, so that retry lands on no open
	// transaction of the app's. Fenced round after round means it did not.
	if n := len(w.entries("producer fenced by another with the same transactional id; waiting before claiming it again")); n == 0 || n > 4 {
		t.Fatalf("the app's producer was fenced %d times by one fencing producer, want 1 (at most 4); log:\n%s", n, tail(w.log))
	} else {
		t.Logf("fenced %d time(s) by one fencing producer", n)
	}
	w.stop(t)
	a.checkExactSequences()
}
