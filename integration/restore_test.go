package integration_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// A SIGKILL in the middle of a cold restore leaves nothing half-restored:
// each batch of changelog records is written with the offset it reaches in
// one atomic write, so the restarted instance goes on from there, and every
// key ends with its changelog's last value. The changelog is written
// directly (2,000,000 distinct keys, some written twice, the second value
// winning), the kill is placed by the restore progress the worker's
// /metrics reports (30–70% restored), and the restored store is read
// through interactive queries.
func TestCrashDuringRestoreRestoresExactly(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 1)
	changelog := a.app + "-counts-changelog"
	kafkatest.CreateTopic(t, brokers, changelog, 1, map[string]string{"cleanup.policy": "compact"})
	const keys = 2_000_000
	want := map[string]int64{} // the sampled keys' last values
	sample := func(i int) bool { return i%997 == 0 || i < 50 || i >= keys-50 }
	value := func(i, round int) int64 { return int64(i%1000 + 1 + 1000*round) }
	key := func(i int) string { return fmt.Sprintf("w-%08d", i) }
	var chunk []kafkatest.Record
	flush := func() {
		kafkatest.Produce(t, brokers, changelog, chunk...)
		chunk = chunk[:0]
	}
	put := func(i, round int) {
		chunk = append(chunk, kafkatest.Record{Key: []byte(key(i)), Value: binary.BigEndian.AppendUint64(nil, uint64(value(i, round)))})
		if sample(i) {
			want[key(i)] = value(i, round)
		}
		if len(chunk) == 100_000 {
			flush()
		}
	}
	for i := range keys {
		put(i, 0)
	}
	for i := 0; i < keys; i += 7 { // a second value for every seventh key
		put(i, 1)
	}
	flush()
	total := int64(keys + (keys+6)/7)
	t.Logf("changelog %s: %d records, %d keys", changelog, total, keys)

	addr := freeAddr(t)
	w := a.start("p0", "-guarantee", "exactly_once", "-http", addr)
	// Kill by observed progress: once 30% of the changelog is restored.
	deadline := time.Now().Add(5 * time.Minute)
	var before int64 // restored (and so written) before the kill
	for {
		n, ok := restoredMetric(addr)
		if ok && n >= total*3/10 {
			if n > total*7/10 {
				t.Fatalf("restore went from below 30%% to %d of %d records between two looks: cannot place the kill mid-restore", n, total)
			}
			w.kill(t)
			before = n
			t.Logf("SIGKILL of p0 with %d of %d changelog records restored (%.0f%%)", n, total, 100*float64(n)/float64(total))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restore did not reach 30%% within 5 minutes (last: %d of %d)", n, total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Restart on the same state directory: it goes on from the last batch
	// it wrote, not from the beginning.
	w = a.start("p0", "-guarantee", "exactly_once", "-http", addr)
	w.waitRunning(t, 5*time.Minute)
	if got := w.restored(); got <= 0 || got > total-before {
		t.Errorf("the restarted instance restored %d records; want some, at most the %d the first one had not written", got, total-before)
	} else {
		t.Logf("the restarted instance restored the remaining %d records", got)
	}
	bad := 0
	for k, v := range want {
		got, err := queryCount(addr, k)
		if err != nil || got != v {
			bad++
			if bad <= 5 {
				t.Errorf("key %s: got %d (%v), want %d", k, got, err, v)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d sampled keys wrong after a crash during restore", bad, len(want))
	}
	t.Logf("all %d sampled keys (first, last and every 997th) hold their changelog's last value", len(want))
	w.stop(t)
}

// freeAddr is a free loopback address for a worker's handler.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// restoredMetric reads eddy_restore_records_total from a worker's /metrics.
func restoredMetric(addr string) (int64, bool) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "eddy_restore_records_total") {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return int64(v), err == nil
		}
	}
	return 0, false
}

// queryCount asks a worker's counts store for key.
func queryCount(addr, key string) (int64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/stores/counts/keys/" + key)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ans struct {
		Found bool  `json:"found"`
		Value int64 `json:"value"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || !ans.Found {
		return 0, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	return ans.Value, nil
}
