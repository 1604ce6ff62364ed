package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The state workload: a count per key over N records with N distinct keys,
// so the state holds N keys and its changelog N records. Each system, per
// guarantee, on the same topics:
//
//  1. builds the state (records/s from RUNNING to caught up);
//  2. is SIGKILLed, and its state directory measured;
//  3. restarts on that directory, once the killed member left the group:
//     seconds from the process start to the first new output (probe
//     records written before it starts), and RSS once caught up;
//  4. starts on an empty directory (a full restore from the changelog):
//     the same measures.
type stateResult struct {
	ok                  bool
	err                 string
	buildRate           float64 // records/s
	buildCPUPerM        float64 // CPU seconds per million records
	restart, cold       float64 // seconds to first new output
	dirMB               float64 // state directory after the SIGKILL
	rssRestart, rssCold float64 // MiB, caught up after each start
}

func (b *bench) stateWorkload() {
	n := b.o.stateKeys
	in := b.topic("state-in")
	start := time.Now()
	b.load(in, n, func(i int) *kgo.Record {
		return &kgo.Record{Key: fmt.Appendf(nil, "key-%010d", i), Value: []byte("1")}
	})
	fmt.Printf("loaded state (%d records, %d distinct keys) in %v\n", n, n, time.Since(start).Round(time.Millisecond))
	w := workload{name: "statecount", records: n, inputs: []string{in}, unit: fmt.Sprintf("%d distinct keys", n)}
	type line struct {
		g   string
		res map[string]stateResult
	}
	var lines []line
	for _, g := range []string{"at_least_once", "exactly_once"} {
		if !b.o.want(b.o.guarantees, g) {
			continue
		}
		l := line{g: g, res: map[string]stateResult{}}
		for _, sys := range []string{"eddy", "kstreams"} {
			if !b.o.want(b.o.systems, sys) {
				continue
			}
			r := b.stateRun(w, sys, g)
			l.res[sys] = r
			if r.ok {
				fmt.Printf("  state %-13s %-8s build %.0f records/s (%.2f CPU-s per 1M), state dir %.0f MB after SIGKILL, restart → first output %.2f s (RSS %.0f MiB), cold start → first output %.2f s (RSS %.0f MiB)\n",
					g, sys, r.buildRate, r.buildCPUPerM, r.dirMB, r.restart, r.rssRestart, r.cold, r.rssCold)
			} else {
				fmt.Printf("  state %-13s %-8s failed: %s\n", g, sys, r.err)
			}
		}
		lines = append(lines, l)
	}
	fmt.Printf("\n| state, %s | guarantee | eddy build rec/s | KS build rec/s | eddy / KS | eddy restart → output s | KS restart → output s | eddy cold → output s | KS cold → output s | KS / eddy (cold) | eddy dir MB | KS dir MB | eddy RSS MiB restart / cold | KS RSS MiB restart / cold |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", w.unit)
	for _, l := range lines {
		e, k := l.res["eddy"], l.res["kstreams"]
		f := func(r stateResult, v float64, format string) string {
			if !r.ok {
				return "—"
			}
			return fmt.Sprintf(format, v)
		}
		ratio, coldRatio := "—", "—"
		if e.ok && k.ok {
			ratio = fmt.Sprintf("**%.2f**", e.buildRate/k.buildRate)
			coldRatio = fmt.Sprintf("**%.2f**", k.cold/e.cold)
		}
		fmt.Printf("| | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.g,
			f(e, e.buildRate, "%.0f"), f(k, k.buildRate, "%.0f"), ratio, f(e, e.restart, "%.2f"), f(k, k.restart, "%.2f"),
			f(e, e.cold, "%.2f"), f(k, k.cold, "%.2f"), coldRatio, f(e, e.dirMB, "%.0f"), f(k, k.dirMB, "%.0f"),
			f(e, e.rssRestart, "%.0f")+" / "+f(e, e.rssCold, "%.0f"), f(k, k.rssRestart, "%.0f")+" / "+f(k, k.rssCold, "%.0f"))
	}
	fmt.Println()
}

// stateRun is the four steps for one system and guarantee.
func (b *bench) stateRun(w workload, sys, g string) stateResult {
	app := b.topic(fmt.Sprintf("state-%s-%s-%d", sys, g, time.Now().UnixNano()%1e6))
	out := app + "-out"
	b.create(out, int32(b.o.partitions))
	state, remove := stateDir("eddybench-state-")
	defer remove()

	// 1. Build.
	p := startChild(b.command(w, sys, g, app, out, state))
	defer func() { p.stop() }()
	if err := p.waitRunning(3 * time.Minute); err != nil {
		return stateResult{err: err.Error()}
	}
	t0, cpu0 := time.Now(), p.cpu()
	if err := b.waitCaughtUp(app, w, p, 60*time.Minute); err != nil {
		return stateResult{err: "build: " + err.Error()}
	}
	res := stateResult{ok: true}
	res.buildRate = float64(w.records) / time.Since(t0).Seconds()
	res.buildCPUPerM = (p.cpu() - cpu0) / float64(w.records) * 1e6

	// 2. SIGKILL, then the state directory's size.
	p.stop()
	res.dirMB = float64(dirSize(state)) / 1e6

	// 3. Restart on the same directory.
	var err error
	if res.restart, res.rssRestart, err = b.timeToOutput(w, sys, g, app, out, state); err != nil {
		return stateResult{err: "restart: " + err.Error()}
	}
	// 4. A cold start: an empty state directory.
	cold, removeCold := stateDir("eddybench-state-")
	defer removeCold()
	if res.cold, res.rssCold, err = b.timeToOutput(w, sys, g, app, out, cold); err != nil {
		return stateResult{err: "cold start: " + err.Error()}
	}
	return res
}

// timeToOutput writes probe records (keys the state holds), starts the
// system on state, and returns the seconds from its start to the first
// output committed after them, and its RSS once caught up; it then kills
// it.
//
// It first waits until the group has no member left: a SIGKILLed member
// stays in its group until its session times out (45 s by default for
// both systems), which is not what the restart measures.
func (b *bench) timeToOutput(w workload, sys, g, app, out, state string) (float64, float64, error) {
	ctx := context.Background()
	if err := b.waitGroupEmpty(app, 5*time.Minute); err != nil {
		return 0, 0, err
	}
	before := must(b.adm.ListCommittedOffsets(ctx, out))
	probes := make([]*kgo.Record, 100)
	for i := range probes {
		probes[i] = &kgo.Record{Topic: w.inputs[0], Key: fmt.Appendf(nil, "key-%010d", i*(w.records/len(probes))), Value: []byte("1")}
	}
	if err := b.cl.ProduceSync(ctx, probes...).FirstErr(); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	p := startChild(b.command(w, sys, g, app, out, state))
	defer p.stop()
	deadline := start.Add(30 * time.Minute)
	for {
		now := must(b.adm.ListCommittedOffsets(ctx, out))
		grew := false
		now.Each(func(o kadm.ListedOffset) {
			if prev, ok := before.Lookup(o.Topic, o.Partition); ok && o.Offset > prev.Offset {
				grew = true
			}
		})
		if grew {
			break
		}
		if p.exited() {
			return 0, 0, fmt.Errorf("the process exited: %s", p.tail())
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no new output within 30 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start).Seconds()
	if err := b.waitCaughtUp(app, w, p, 30*time.Minute); err != nil {
		return 0, 0, err
	}
	return took, p.maxRSS(), nil
}

// waitGroupEmpty waits until group has no member.
func (b *bench) waitGroupEmpty(group string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		gs, err := b.adm.DescribeGroups(context.Background(), group)
		if err == nil {
			if g, ok := gs[group]; ok && g.Err == nil && len(g.Members) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s still has members after %v", group, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dirSize is the disk space the files under dir take (allocated blocks,
// as du counts: a log file preallocated beyond its length counts in full).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				} else {
					n += fi.Size()
				}
			}
		}
		return nil
	})
	return n
}
