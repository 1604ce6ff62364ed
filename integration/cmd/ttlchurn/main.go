// Command ttlchurn measures a key-value store with a time to live under
// churn: updates over a rolling window of live keys, so the distinct keys
// ever written grow with the run while the live ones stay about constant.
// It runs the same updates with and without the TTL, on Pebble on disk
// through eddy's store layers (write set, record cache, changelog), and
// prints, every so many updates, the state directory's size, the process's
// RSS and the rate; then the ratio of the two runs' rates.
//
//	go run ./cmd/ttlchurn -updates 20000000 -window 1000000
//
// Stream time advances 1 ms per update. Update i writes a key drawn from
// [i/step, i/step+window), so a key is written every window updates on
// average while in the window, and leaves it after step×window updates; with
// -ttl (default 2×window ms) a key not written for that long expires, so
// about window + ttl/step keys are live however many were ever written.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

func main() {
	updates := flag.Int("updates", 20_000_000, "updates in each run")
	window := flag.Int("window", 1_000_000, "keys in the rolling window")
	step := flag.Int("step", 4, "updates per advance of the window by one key")
	ttlMs := flag.Int64("ttl", 0, "time to live in ms of stream time (0: 2×window, twice the mean time between writes of a key in the window)")
	commit := flag.Int("commit", 10_000, "updates per commit")
	report := flag.Int("report", 2_000_000, "updates between reports")
	runs := flag.String("runs", "ttl,no-ttl", "which runs, in order")
	profile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	if *ttlMs == 0 {
		*ttlMs = 2 * int64(*window)
	}
	rates := map[string]float64{}
	for _, run := range strings.Split(*runs, ",") {
		ttl := time.Duration(0)
		if run == "ttl" {
			ttl = time.Duration(*ttlMs) * time.Millisecond
		}
		rates[run] = churn(run, *updates, *window, *step, *commit, *report, ttl)
	}
	if rates["ttl"] > 0 && rates["no-ttl"] > 0 {
		fmt.Printf("throughput with TTL / without: %.2f\n", rates["ttl"]/rates["no-ttl"])
	}
}

type discard struct{}

func (discard) Log(key, value []byte, ts int64) {}

func churn(name string, updates, window, step, commit, report int, ttl time.Duration) float64 {
	dir, err := os.MkdirTemp("", "ttlchurn-")
	check(err)
	defer os.RemoveAll(dir)
	db, err := storage.OpenPebble(filepath.Join(dir, "db"), storage.PebbleOptions{})
	check(err)
	defer db.Close()
	ws := storage.NewWriteSet(db)
	defer ws.ReleaseReads() // before db.Close
	var ts int64
	env := storage.Env{Task: "0_0", WriteSet: ws, Cache: storage.NewCache(10 << 20), Changelog: discard{},
		Topic: "churn-changelog", Timestamp: func() int64 { return ts }, StreamTime: func() int64 { return ts }}
	b := stores.KeyValue("counts", serde.String(), serde.Int64()).WithCaching(true)
	if ttl > 0 {
		b = b.WithTTL(ttl)
	}
	rb, _ := storage.FromPublic(b)
	s, err := rb.Build(env)
	check(err)
	kv := s.(stores.KeyValueStore[string, int64])
	rng := rand.New(rand.NewPCG(1, 2))
	fmt.Printf("%s: %d updates over a window of %d keys advancing one key every %d updates, TTL %v\n", name, updates, window, step, ttl)
	fmt.Printf("%12s %14s %12s %10s %12s\n", "updates", "distinct keys", "state MB", "RSS MB", "updates/s")
	start, last := time.Now(), time.Now()
	var key []byte
	for i := range updates {
		ts = int64(i)
		key = fmt.Appendf(key[:0], "key-%09d", i/step+rng.IntN(window))
		n, _, err := kv.Get(string(key))
		check(err)
		check(kv.Put(string(key), n+1))
		if (i+1)%commit == 0 {
			check(s.Flush())
			check(ws.Commit())
		}
		if (i+1)%report == 0 {
			fmt.Printf("%12d %14d %12.1f %10.1f %12.0f\n", i+1, (i+1)/step+window, float64(dirSize(dir))/1e6, float64(rss())/1e6,
				float64(report)/time.Since(last).Seconds())
			last = time.Now()
		}
	}
	rate := float64(updates) / time.Since(start).Seconds()
	live, expired, _, _ := storage.TTLStats(db, "0_0", "counts")
	fmt.Printf("%s: %.0f updates/s overall; live entries %d, expired %d (TTL bookkeeping)\n\n", name, rate, live, expired)
	return rate
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// rss is the process's resident set size, from /proc (0 elsewhere).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
