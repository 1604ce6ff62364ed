package integration_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// valueService is the service the asyncsum workers send each value
// through: GET /value?key=K&v=N answers N after 5–20 ms. While stalled,
// calls wait (until released or their caller gives up).
type valueService struct {
	*httptest.Server
	calls   atomic.Int64
	waiting atomic.Int64 // calls held by a stall now
	mu      sync.Mutex
	stall   chan struct{} // closed when the stall ends; nil: not stalled
}

func newValueService(t *testing.T) *valueService {
	s := &valueService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		s.mu.Lock()
		stall := s.stall
		s.mu.Unlock()
		if stall != nil {
			s.waiting.Add(1)
			select {
			case <-stall:
			case <-r.Context().Done():
			}
			s.waiting.Add(-1)
		}
		time.Sleep(time.Duration(5+rand.IntN(16)) * time.Millisecond)
		v, err := strconv.ParseInt(r.URL.Query().Get("v"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, v)
	}))
	t.Cleanup(s.Close)
	return s
}

// startStall makes every call wait until endStall.
func (s *valueService) startStall() {
	s.mu.Lock()
	s.stall = make(chan struct{})
	s.mu.Unlock()
}

func (s *valueService) endStall() {
	s.mu.Lock()
	close(s.stall)
	s.stall = nil
	s.mu.Unlock()
}

// Async calls under exactly-once, with workers SIGKILLed mid-stream: every
// record's value, sent through a service taking 5–20 ms a call by an async
// operator (16 calls at once per task), is summed exactly once and in its
// key's order — each key's updates are exactly 1:v1, 2:v1+v2, …, which
// reordered or repeated calls would break.
func TestAsyncExactlyOnceUnderCrashes(t *testing.T) {
	brokers := realBroker(t)
	svc := newValueService(t)
	a := newSumApp(t, brokers, 4)
	args := []string{"-topology", "asyncsum", "-service", svc.URL, "-cache=false", "-guarantee", "exactly_once"}
	w := []*worker{a.start("p0", args...), a.start("p1", args...), a.start("p2", args...)}
	a.feedRecords(400, a.records(12_000)...)
	a.strike("SIGKILL of p1, restarted", 0.2, 0.5, func() {
		w[1].kill(t)
		w[1] = a.start("p1", args...)
	})
	a.strike("SIGKILL of p2, restarted", 0.6, 0.85, func() {
		w[2].kill(t)
		w[2] = a.start("p2", args...)
	})
	a.waitDone(5 * time.Minute)
	for _, x := range w {
		x.stop(t)
	}
	a.checkExact()
	t.Logf("%d records, %d service calls (calls cut short by a kill ran again)", 12_000, svc.calls.Load())
}

// A service that stalls for 30 s while input keeps flowing: the records
// the app holds stay bounded (its async operator's MaxPending per task, its
// input buffers), its memory does not grow with the input held back in
// Kafka, and processing resumes when the service answers again, every
// record summed exactly once.
func TestAsyncStallKeepsMemoryBounded(t *testing.T) {
	brokers := realBroker(t)
	t.Parallel() // one worker, mostly waiting out the stall
	svc := newValueService(t)
	a := newSumApp(t, brokers, 4)
	addr := freeAddr(t)
	// Calls may wait out the whole stall (a 60 s timeout); under
	// exactly-once a commit waits for them, so the transaction may stay
	// open that long too.
	args := []string{"-topology", "asyncsum", "-service", svc.URL, "-cache=false", "-guarantee", "exactly_once",
		"-async-timeout", "60s", "-transaction-timeout", "90s", "-http", addr}
	w := a.start("p0", args...)
	const records = 24_000
	a.feedRecords(400, a.records(records)...)
	var rss0 int64
	a.strike("the service stalls", 0.15, 0.5, func() {
		rss0 = rssOf(t, w)
		svc.startStall()
	})
	stallStart := time.Now()
	var peakHeld, peakRSS int64
	var lagAtEnd int64
	// The stall itself: its length is the fault, not a wait for progress.
	for time.Since(stallStart) < 30*time.Second {
		time.Sleep(time.Second)
		held := int64(metricSum(t, "http://"+addr, "eddy_async_records_held"))
		peakHeld = max(peakHeld, held)
		peakRSS = max(peakRSS, rssOf(t, w))
		lagAtEnd = int64(a.feeds[0].Produced()) - kafkatest.CommittedTotal(t, a.brokers, a.app, a.input)
	}
	fedDuring := a.feeds[0].Produced()
	waiting := svc.waiting.Load()
	svc.endStall()
	t.Logf("during the 30 s stall: at most %d records held by the async operator (4 tasks × 64 allowed), %d calls waiting at the service, RSS %d → at most %d MiB, input lag %d records with %d fed so far",
		peakHeld, waiting, rss0>>20, peakRSS>>20, lagAtEnd, fedDuring)
	if peakHeld > 4*64 {
		t.Errorf("the async operator held %d records, above its bound of 4 tasks × 64", peakHeld)
	}
	if waiting == 0 {
		t.Errorf("no call reached the service during the stall")
	}
	if lagAtEnd < 4000 {
		t.Errorf("input lag %d at the end of the stall: the input fed meanwhile (400/s) should wait in Kafka", lagAtEnd)
	}
	if grew := peakRSS - rss0; grew > 64<<20 {
		t.Errorf("the worker's memory grew by %d MiB during the stall", grew>>20)
	}
	a.waitDone(5 * time.Minute)
	w.stop(t)
	a.checkExact()
}

// rssOf reads a worker's resident memory from /proc.
func rssOf(t *testing.T, w *worker) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading the worker's memory: %v", err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", w.cmd.Process.Pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// metricSum adds up every series of a metric on an app's /metrics.
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	_, body, err := httpGet(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
