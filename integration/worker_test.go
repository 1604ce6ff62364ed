package integration_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
)

// workerBin is the word-count worker (internal/wcworker), built once.
var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "eddy-integration-")
	if err != nil {
		panic(err)
	}
	workerBin = filepath.Join(dir, "wcworker")
	build := exec.Command("go", "build", "-tags", buildTags, "-o", workerBin, "./internal/wcworker")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the worker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// realBroker returns the broker of a test that proves a guarantee: only a
// real broker counts (make test always has one; a plain go test run with
// no broker configured skips these).
func realBroker(t *testing.T) string {
	t.Helper()
	b, kind := kafkatest.BrokerKind(t)
	if kind == kafkatest.KindEmbedded {
		t.Skip("proves a guarantee: needs a real broker (make test, or set EDDY_KAFKA_BOOTSTRAP)")
	}
	return b
}

// wordApp is one word-count application under test: its topics and the
// workers running it.
type wordApp struct {
	t             *testing.T
	brokers       string
	app           string
	input, output string
	internal      []string // internal topics the group reads (waitDone waits for them too)
	dir           string
	batch         map[string]int64 // what a batch count over all input gives
	rng           *rand.Rand
	lines         int

	// The current feed (see feed): its first line and its length; fed
	// counts the input records written so far.
	phaseStart, phaseLines, fed int64
	feeds                       []*kafkatest.Feeder
}

func newWordApp(t *testing.T, brokers string, partitions int32) *wordApp {
	a := &wordApp{t: t, brokers: brokers, app: kafkatest.UniqueName(t, "wc"), dir: t.TempDir(),
		batch: map[string]int64{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}
	a.input, a.output = a.app+"-lines", a.app+"-counts"
	a.internal = []string{a.app + "-counts-repartition"}
	kafkatest.CreateTopic(t, brokers, a.input, partitions, nil)
	kafkatest.CreateTopic(t, brokers, a.output, partitions, nil)
	return a
}

// newLines returns n new lines of three words from a 2,000-word vocabulary,
// counted into the batch result.
func (a *wordApp) newLines(n int) []kafkatest.Record {
	recs := make([]kafkatest.Record, 0, n)
	for range n {
		ws := []string{a.word(), a.word(), a.word()}
		for _, w := range ws {
			a.batch[w]++
		}
		recs = append(recs, kafkatest.KV(fmt.Sprint(a.lines), strings.Join(ws, " ")))
		a.lines++
	}
	return recs
}

// produce writes n new lines and waits for them to be acknowledged.
func (a *wordApp) produce(n int) {
	const chunk = 20_000
	for done := 0; done < n; done += chunk {
		c := min(chunk, n-done)
		kafkatest.Produce(a.t, a.brokers, a.input, a.newLines(c)...)
		a.fed += int64(c)
	}
}

// feed starts writing n new lines in the background at perSecond lines a
// second: the input that keeps flowing while a test places its faults. The
// faults' positions (strike) are fractions of these n lines; waitDone waits
// for the feed to finish first.
func (a *wordApp) feed(n, perSecond int) {
	a.feedRecords(perSecond, a.newLines(n)...)
}

// feedRecords feeds recs as the next phase of the input (see feed); the
// input topic must hold nothing but earlier phases.
func (a *wordApp) feedRecords(perSecond int, recs ...kafkatest.Record) {
	a.phaseStart, a.phaseLines = a.fed, int64(len(recs))
	a.fed += int64(len(recs))
	a.feeds = append(a.feeds, kafkatest.Feed(a.t, a.brokers, a.input, perSecond, recs...))
}

// strike places a fault by observed progress, not by time: it waits until
// the group has committed at least lo (a fraction) of the lines of the
// current feed, then runs fault, and logs where it struck ("killed p1 at 41%
// of input committed"). It fails the test if progress passed hi before it
// could strike (the fault would not be mid-stream: slow the feed), or if lo
// was not reached within five minutes.
func (a *wordApp) strike(what string, lo, hi float64, fault func()) {
	a.t.Helper()
	const timeout = 5 * time.Minute
	deadline := time.Now().Add(timeout)
	frac := func() float64 {
		done := kafkatest.CommittedTotal(a.t, a.brokers, a.app, a.input) - a.phaseStart
		return float64(done) / float64(a.phaseLines)
	}
	prev := frac()
	for {
		f := frac()
		if f >= lo {
			if f > hi {
				a.t.Fatalf("could not place %q mid-stream: committed input went from %.0f%% to %.0f%% between two looks, past the %.0f–%.0f%% window; feed more slowly", what, 100*prev, 100*f, 100*lo, 100*hi)
			}
			fault()
			a.t.Logf("%s at %.0f%% of input committed (%.0f of %d lines of this phase; %d fed)", what, 100*f, f*float64(a.phaseLines), a.phaseLines, a.feeds[len(a.feeds)-1].Produced())
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("could not place %q mid-stream: only %.0f%% of input committed after %v (want %.0f–%.0f%%)", what, 100*f, timeout, 100*lo, 100*hi)
		}
		prev = f
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *wordApp) word() string { return fmt.Sprintf("w%d", a.rng.IntN(2000)) }

// worker is one OS process running an instance of the application.
type worker struct {
	cmd  *exec.Cmd
	log  string
	name string
}

func (a *wordApp) start(name string, args ...string) *worker {
	a.t.Helper()
	return a.startBinary(workerBin, name, args...)
}

// startBinary starts instance name of the application with the worker
// built at bin (another release's, for an upgrade).
func (a *wordApp) startBinary(bin, name string, args ...string) *worker {
	a.t.Helper()
	logPath := filepath.Join(a.dir, name+fmt.Sprintf("-%d.log", time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		a.t.Fatal(err)
	}
	base := []string{"-brokers", a.brokers, "-app", a.app, "-input", a.input, "-output", a.output,
		"-state", filepath.Join(a.dir, "state-"+name), "-process-id", name}
	cmd := exec.Command(bin, append(base, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	f.Close()
	w := &worker{cmd: cmd, log: logPath, name: name}
	a.t.Cleanup(func() {
		if a.t.Failed() {
			a.t.Logf("log of %s (%s):\n%s", name, logPath, tail(logPath))
		}
		// EDDY_TEST_LOG_DIR keeps every worker's log, for reading a run.
		if dir := os.Getenv("EDDY_TEST_LOG_DIR"); dir != "" {
			if b, err := os.ReadFile(logPath); err == nil {
				os.WriteFile(filepath.Join(dir, filepath.Base(logPath)), b, 0o644)
			}
		}
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return w
}

// kill ends the worker with SIGKILL: no commit, no clean close.
func (w *worker) kill(t *testing.T) {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGKILL)
	w.cmd.Wait()
	t.Logf("killed %s (SIGKILL)", w.name)
}

// stop ends the worker with SIGTERM and expects a clean exit. It first
// waits until the worker handles SIGTERM (it logged "worker started"): a
// signal before that would end the process like SIGKILL.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	w.waitFor(t, "worker started", time.Minute)
	w.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s exited with %v; log:\n%s", w.name, err, tail(w.log))
		}
	case <-time.After(60 * time.Second):
		w.cmd.Process.Kill()
		<-done // Wait sets ProcessState, which the cleanup reads
		t.Fatalf("%s did not stop within 60s; log:\n%s", w.name, tail(w.log))
	}
}

// entries returns the worker's JSON log lines with the given message.
func (w *worker) entries(msg string) []map[string]any {
	var out []map[string]any
	for _, e := range w.all() {
		if e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// all returns the worker's JSON log lines.
func (w *worker) all() []map[string]any {
	f, err := os.Open(w.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// restored sums the changelog records the worker replayed into its stores.
func (w *worker) restored() int64 {
	var n int64
	for _, e := range w.entries("store restored") {
		if v, ok := e["records"].(float64); ok {
			n += int64(v)
		}
	}
	return n
}

// waitFor waits until the worker logged msg, or fails.
func (w *worker) waitFor(t *testing.T, msg string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(w.entries(msg)) > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not log %q within %v; log:\n%s", w.name, msg, timeout, tail(w.log))
}

// waitRunning waits until the worker's app reached RUNNING: its tasks
// restored and processing.
func (w *worker) waitRunning(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, e := range w.entries("state change") {
			if e["to"] == "RUNNING" {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not reach RUNNING within %v; log:\n%s", w.name, timeout, tail(w.log))
}

// tail returns the last 40 of the worker's own log lines (JSON), and how
// many lines librdkafka wrote besides.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	var own []string
	client := 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "%") {
			client++
			continue
		}
		own = append(own, l)
	}
	if len(own) > 40 {
		own = own[len(own)-40:]
	}
	return strings.Join(own, "\n") + fmt.Sprintf("\n(and %d lines of librdkafka's own log)", client)
}

// waitDone waits until every input line is fed, processed and committed.
func (a *wordApp) waitDone(timeout time.Duration) {
	a.t.Helper()
	for _, f := range a.feeds {
		f.Wait()
	}
	kafkatest.WaitCaughtUp(a.t, a.brokers, a.app, timeout, append([]string{a.input}, a.internal...)...)
}

// outputs returns each word's committed count updates, in order.
func (a *wordApp) outputs() map[string][]int64 {
	a.t.Helper()
	i64 := serde.Int64()
	seqs := map[string][]int64{}
	for _, r := range kafkatest.ConsumeAll(a.t, a.brokers, a.output) {
		n, err := i64.Deserialize(a.output, r.Value)
		if err != nil {
			a.t.Fatalf("output record %s = % x: %v", r.Key, r.Value, err)
		}
		seqs[string(r.Key)] = append(seqs[string(r.Key)], n)
	}
	return seqs
}

// checkExactSequences: per word, the committed updates go 1, 2, 3, … with
// no repeat and no gap, ending at the batch count.
func (a *wordApp) checkExactSequences() {
	a.t.Helper()
	seqs := a.outputs()
	bad := 0
	for w, want := range a.batch {
		got := seqs[w]
		ok := int64(len(got)) == want
		for i := 0; ok && i < len(got); i++ {
			ok = got[i] == int64(i+1)
		}
		if !ok {
			bad++
			if bad <= 5 {
				a.t.Errorf("word %s: updates %s, want 1..%d", w, summarize(got), want)
			}
		}
	}
	if len(seqs) != len(a.batch) {
		a.t.Errorf("output has %d words, input %d", len(seqs), len(a.batch))
	}
	if bad > 0 {
		a.t.Fatalf("%d of %d words are not exactly 1..N", bad, len(a.batch))
	}
}

// checkFinal: the last update of each word equals the batch count.
func (a *wordApp) checkFinal() {
	a.t.Helper()
	seqs := a.outputs()
	bad := 0
	for w, want := range a.batch {
		got := seqs[w]
		if len(got) == 0 || got[len(got)-1] != want {
			bad++
			if bad <= 5 {
				a.t.Errorf("word %s: final count %s, want %d", w, summarize(got), want)
			}
		}
	}
	if bad > 0 {
		a.t.Fatalf("%d of %d words have a wrong final count", bad, len(a.batch))
	}
}

func summarize(s []int64) string {
	if len(s) <= 12 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v … %v (%d updates)", s[:6], s[len(s)-6:], len(s))
}

// changelogRecords counts the committed records of the count store's
// changelog.
func (a *wordApp) changelogRecords() int {
	return len(kafkatest.ConsumeAll(a.t, a.brokers, a.app+"-counts-changelog"))
}
