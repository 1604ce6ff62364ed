package storage_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/eddy-go/eddy/internal/storage"
)

// A commit survives the process being killed right after it: a child
// process applies n commits through a write set, each with its offset, and
// SIGKILLs itself the moment the last one returns; reopened, the store
// holds every commit.
func TestCommitsSurviveSIGKILL(t *testing.T) {
	if dir := os.Getenv("EDDY_KILL_CHILD_DIR"); dir != "" {
		n, _ := strconv.Atoi(os.Getenv("EDDY_KILL_CHILD_COMMITS"))
		killChild(dir, n)
		return
	}
	for _, n := range []int{1, 50, 500} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestCommitsSurviveSIGKILL$")
			cmd.Env = append(os.Environ(), "EDDY_KILL_CHILD_DIR="+dir, "EDDY_KILL_CHILD_COMMITS="+strconv.Itoa(n))
			out, err := cmd.CombinedOutput()
			ws, ok := err.(*exec.ExitError)
			if !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die of SIGKILL: %v\n%s", err, out)
			}
			p, err := storage.OpenPebble(dir, storage.PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			off, found, err := storage.StoredOffset(p, "0_0", "kv")
			if err != nil || !found || off != int64(n) {
				t.Fatalf("after SIGKILL: stored offset %d (found %v, %v), want %d: commits were lost", off, found, err, n)
			}
			for i := range n {
				k := []byte(fmt.Sprintf("0_0/kv/key-%06d", i))
				if _, ok, err := p.Get(k); !ok || err != nil {
					t.Fatalf("commit %d of %d lost (%v)", i+1, n, err)
				}
			}
		})
	}
}

// killChild applies n commits of one write and the store's offset, then
// SIGKILLs its own process.
func killChild(dir string, n int) {
	p, err := storage.OpenPebble(dir, storage.PebbleOptions{})
	if err != nil {
		panic(err)
	}
	ws := storage.NewWriteSet(p)
	for i := range n {
		ws.Set([]byte(fmt.Sprintf("0_0/kv/key-%06d", i)), make([]byte, 100))
		ws.SetOffset("0_0", "kv", int64(i+1))
		if err := ws.Commit(); err != nil {
			panic(err)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// The state directory holds what the store holds, not reservations: with
// the default options (no fsync) a few MB of commits take a few MB of disk.
// Pebble alone reserves 70 MiB per write-ahead log (110% of the memtable)
// and keeps up to five old logs: 360 MB for 1M keys that needed 36 MB.
func TestPebbleDiskIsWhatItHolds(t *testing.T) {
	dir := t.TempDir()
	p, err := storage.OpenPebble(dir, storage.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var written int64
	for c := range 200 { // 200 commits of 500 keys, ~6 MB in all
		var b storage.Batch
		for i := range 500 {
			k := fmt.Appendf(nil, "0_0/counts/key-%09d", c*500+i)
			v := make([]byte, 40)
			b.Set(k, v)
			written += int64(len(k) + len(v))
		}
		if err := p.Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	var allocated int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			allocated += st.Blocks * 512
		}
	}
	if allocated > 4*written+(4<<20) {
		t.Fatalf("the state directory takes %.1f MB of disk for %.1f MB written", float64(allocated)/1e6, float64(written)/1e6)
	}
	t.Logf("%.1f MB of disk for %.1f MB written", float64(allocated)/1e6, float64(written)/1e6)
}
