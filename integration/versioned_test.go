package integration_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
)

// versionModel is what a versioned store with 10 s of history must answer
// for one task (partition): the puts it accepted, and its stream time.
type versionModel struct {
	st   int64
	puts map[string]map[int64]*string
}

const versionedHistory = int64(10_000)

func (m *versionModel) put(k string, v *string, ts int64) {
	if m.st != math.MinInt64 && ts < m.st-versionedHistory {
		return // older than the history: refused
	}
	if m.puts[k] == nil {
		m.puts[k] = map[int64]*string{}
	}
	m.puts[k][ts] = v
	m.st = max(m.st, ts)
}

func (m *versionModel) asOf(k string, at int64) (string, bool) {
	var ts []int64
	for t := range m.puts[k] {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	if at < m.st-versionedHistory {
		// Older than the history: only the latest version (a value), which
		// never expires, can answer.
		if len(ts) == 0 || ts[len(ts)-1] > at || m.puts[k][ts[len(ts)-1]] == nil {
			return "", false
		}
		return *m.puts[k][ts[len(ts)-1]], true
	}
	var v *string
	for _, t := range ts {
		if t <= at {
			v = m.puts[k][t]
		}
	}
	if v == nil {
		return "", false
	}
	return *v, true
}

// A versioned table on the real broker under exactly-once, its worker
// SIGKILLed mid-stream and restarted on its state, then the whole instance
// replaced by one with an empty state directory (restored cold from the
// changelog): every as-of query of a sample of keys and times answers, on
// each, what the input says — the versions accepted, out-of-order ones in
// their place, the ones older than the history dropped.
func TestVersionedTableRestoredAfterSIGKILL(t *testing.T) {
	brokers := realBroker(t)
	a := newWordApp(t, brokers, 3)
	const keys = 150
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	rng := rand.New(rand.NewPCG(3, uint64(base)))
	var recs []kafkatest.Record
	now := base
	for i := range 24_000 {
		now += 2
		ts := now - rng.Int64N(40) // disorder
		if rng.IntN(100) == 0 {
			ts = now - 10_000 - rng.Int64N(5_000) // often older than the history
		}
		var v []byte
		if rng.IntN(10) != 0 {
			v = []byte("v" + strconv.Itoa(i))
		}
		recs = append(recs, kafkatest.Record{Key: []byte(fmt.Sprintf("k%03d", rng.IntN(keys))), Value: v, Timestamp: time.UnixMilli(ts)})
	}

	args := []string{"-topology", "versioned", "-commit", "200ms"}
	addr := freeAddr(t)
	w := a.start("v1", append(args, "-http", addr)...)
	a.feedRecords(3_000, recs...)
	a.strike("SIGKILL of v1, restarted on its state", 0.2, 0.6, func() {
		w.kill(t)
		w = a.start("v1", append(args, "-http", addr)...)
	})
	for _, f := range a.feeds {
		f.Wait()
	}
	kafkatest.WaitCaughtUp(t, brokers, a.app, 3*time.Minute, a.input)

	// The model, from the input as each task read it (partition order).
	perPartition := map[int32]*versionModel{}
	keyModel := map[string]*versionModel{}
	for _, r := range kafkatest.ConsumeAll(t, brokers, a.input) {
		m := perPartition[r.Partition]
		if m == nil {
			m = &versionModel{st: math.MinInt64, puts: map[string]map[int64]*string{}}
			perPartition[r.Partition] = m
		}
		var v *string
		if r.Value != nil {
			s := string(r.Value)
			v = &s
		}
		m.put(string(r.Key), v, r.Timestamp.UnixMilli())
		keyModel[string(r.Key)] = m
	}

	// Queries: every tenth key, at times across the last 12 s of its
	// partition's stream time (the history, and before it).
	type query struct {
		key string
		at  int64
	}
	var qs []query
	for k := 0; k < keys; k += 10 {
		key := fmt.Sprintf("k%03d", k)
		m := keyModel[key]
		if m == nil {
			continue
		}
		for d := int64(0); d <= 12_000; d += 97 {
			qs = append(qs, query{key, m.st - d})
		}
	}
	ask := func(addr string) map[query]string {
		out := map[query]string{}
		for _, q := range qs {
			u := fmt.Sprintf("http://%s/stores/versioned/keys/%s?asOf=%d", addr, url.PathEscape(q.key), q.at)
			var ans struct {
				Found bool   `json:"found"`
				Value string `json:"value"`
				Error string `json:"error"`
			}
			for try := 0; ; try++ {
				resp, err := http.Get(u)
				if err == nil {
					err = json.NewDecoder(resp.Body).Decode(&ans)
					resp.Body.Close()
					if err == nil && (resp.StatusCode == 200 || resp.StatusCode == 404) {
						break
					}
					err = fmt.Errorf("%s: %s", resp.Status, ans.Error)
				}
				if try == 600 {
					t.Fatalf("query %s: %v", u, err)
				}
				time.Sleep(100 * time.Millisecond) // restoring or rebalancing: 503 until it is not
			}
			if ans.Found {
				out[q] = ans.Value
			}
		}
		return out
	}
	check := func(what string, got map[query]string) {
		t.Helper()
		bad := 0
		for _, q := range qs {
			want, ok := keyModel[q.key].asOf(q.key, q.at)
			g, gok := got[q]
			if ok != gok || want != g {
				if bad++; bad <= 5 {
					t.Errorf("%s: %s as of %d = %q (found %v), want %q (found %v)", what, q.key, q.at, g, gok, want, ok)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d as-of answers wrong", what, bad, len(qs))
		}
	}
	before := ask(addr)
	check("after the SIGKILL and restart", before)

	// A cold instance: the old one killed, a new one with an empty state
	// directory restores the versioned store from its changelog.
	w.kill(t)
	cold := freeAddr(t)
	w = a.start("v2", append(args, "-http", cold)...)
	after := ask(cold)
	check("restored cold", after)
	if !maps.Equal(before, after) {
		t.Fatal("the cold instance answers differently from the one before it")
	}
	w.stop(t)
	t.Logf("%d as-of queries over %d keys answered identically before and after a cold restore (%d found)", len(qs), keys/10, len(after))
}
