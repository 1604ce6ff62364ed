package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eddy-go/eddy/internal/engine"
)

// forwardedHeader marks a query one instance forwarded to another, so the
// receiver answers it or fails, never forwards it again.
const forwardedHeader = "X-Eddy-Forwarded-By"

// Handler returns the app's admin endpoint, for a service to mount on its
// own mux (under a prefix with http.StripPrefix if it likes):
//
//	GET /healthz                   200 while the app has no fatal error, else 503;
//	                               "brokers" says when they are unreachable
//	GET /readyz                    200 while Running (assigned, restored) and the
//	                               brokers answer, else 503 with the reason
//	GET /metrics                   the app's Prometheus metrics
//	GET /topology                  the topology as Describe prints it;
//	                               ?format=mermaid for a Mermaid flowchart
//	GET /state                     state, threads, tasks, lag, stream time (JSON)
//	GET /stores/{store}/keys/{key} a store's value for key (JSON; window and
//	                               session stores: the key's windows), answered
//	                               here or by the instance that owns it;
//	                               ?stale=true lets a standby answer (with
//	                               "stale" and its "lag") when the owner
//	                               cannot; ?asOf=T (milliseconds or RFC 3339)
//	                               asks a versioned store for the value valid
//	                               at T ("timestamp" to "valid_to")
//
// A key in a path is the key as text: strings as they are, numbers in
// decimal, other key types as JSON (path-escaped).
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.serveHealth)
	mux.HandleFunc("GET /readyz", a.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{ErrorLog: zapPrinter{a}}))
	mux.HandleFunc("GET /topology", a.serveTopology)
	mux.HandleFunc("GET /state", a.serveState)
	mux.HandleFunc("GET /stores/{store}/keys/{key}", a.serveKey)
	return mux
}

type zapPrinter struct{ a *App }

func (z zapPrinter) Println(v ...any) { z.a.log.Warn("metrics: " + fmt.Sprint(v...)) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (a *App) serveHealth(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	state, err := a.state, a.err
	a.mu.Unlock()
	if state == Error || err != nil {
		msg := "failed"
		if err != nil {
			msg = err.Error()
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "state": state.String(), "error": msg})
		return
	}
	// Unreachable brokers do not make the app unhealthy: it heals by
	// itself when they are back, and restarting it would not help.
	body := map[string]string{"status": "ok", "state": state.String()}
	if down, since, cause := a.brokersUnreachable(); down {
		body["brokers"] = fmt.Sprintf("unreachable since %s (%s ago): %s; retrying", since.UTC().Format(time.RFC3339), time.Since(since).Round(time.Second), cause)
	}
	writeJSON(w, http.StatusOK, body)
}

func (a *App) serveReady(w http.ResponseWriter, _ *http.Request) {
	state := a.State()
	status := http.StatusOK
	body := map[string]any{"ready": state == Running, "state": state.String()}
	if state != Running {
		status = http.StatusServiceUnavailable
	}
	if down, since, cause := a.brokersUnreachable(); down {
		status = http.StatusServiceUnavailable
		body["ready"] = false
		body["reason"] = fmt.Sprintf("brokers unreachable since %s (%s ago): %s; retrying", since.UTC().Format(time.RFC3339), time.Since(since).Round(time.Second), cause)
	}
	writeJSON(w, status, body)
}

func (a *App) serveTopology(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch f := r.URL.Query().Get("format"); f {
	case "", "text":
		io.WriteString(w, a.top.Describe())
	case "mermaid":
		io.WriteString(w, a.top.Mermaid())
	default:
		http.Error(w, fmt.Sprintf("unknown format %q (text or mermaid)", f), http.StatusBadRequest)
	}
}

// StateReport is what GET /state answers.
type StateReport struct {
	ApplicationID     string         `json:"application_id"`
	ProcessID         string         `json:"process_id"`
	ApplicationServer string         `json:"application_server,omitempty"`
	State             string         `json:"state"`
	Error             string         `json:"error,omitempty"`
	Threads           []ThreadReport `json:"threads"`
	// Instances are the application's instances as the directory knows
	// them (with ApplicationServer set).
	Instances []InstanceReport `json:"instances,omitempty"`
	// GlobalApplied and GlobalSkipped count global-table records.
	GlobalApplied int64 `json:"global_applied"`
	GlobalSkipped int64 `json:"global_skipped"`
	// OffsetResets lists every partition whose offset was reset since the
	// instance started: records it skipped were never processed.
	OffsetResets []OffsetResetReport `json:"offset_resets,omitempty"`
}

// OffsetResetReport is a partition's offset resets: a source partition
// whose committed offset its topic no longer held (the source's reset
// policy chose where reading went on), or a changelog or global topic that
// no longer held a store's offset (the store was wiped and read in full).
type OffsetResetReport struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Kind is "source", "changelog" or "global".
	Kind string `json:"kind"`
	// Policy is the source's offset reset policy (earliest, latest,
	// by_duration:…), or "full restore".
	Policy string `json:"policy"`
	// The last reset: From, the offset the partition no longer held; To,
	// where reading went on; Earliest, the partition's first offset then
	// (-1 when unknown).
	From     int64 `json:"from"`
	To       int64 `json:"to"`
	Earliest int64 `json:"earliest"`
	// Resets counts the partition's resets, Skipped the offsets they
	// jumped over; At is the last one's time.
	Resets  int64     `json:"resets"`
	Skipped int64     `json:"skipped"`
	At      time.Time `json:"at"`
}

// ThreadReport is one stream thread's assignment and progress, refreshed
// about twice a second.
type ThreadReport struct {
	Thread int          `json:"thread"`
	State  string       `json:"state"`
	Tasks  []TaskReport `json:"tasks"`
	// Standbys are the tasks the thread follows as standbys (warm-ups
	// included), in id order.
	Standbys []StandbyReport `json:"standbys,omitempty"`
	Counts   RecordCounts    `json:"counts"`
	// RestoreRate is changelog records restored per second since the
	// previous refresh (0 when not restoring).
	RestoreRate float64   `json:"restore_rate"`
	Taken       time.Time `json:"taken"`
	// Waiting is set while one step of the thread (a poll, a commit's
	// transaction, a restore…) has lasted longer than a second: what it
	// waits for and since when. The thread also logs it at Info.
	Waiting *WaitingReport `json:"waiting,omitempty"`
}

// WaitingReport is what a stream thread has been waiting for, longer than
// a second.
type WaitingReport struct {
	// For says what it waits for, e.g. "the brokers to take the
	// transaction's records and commit it (produce, EndTxn)".
	For   string    `json:"for"`
	Since time.Time `json:"since"`
	// Seconds is how long it has waited so far.
	Seconds float64 `json:"seconds"`
}

// StandbyReport is one standby task of a thread.
type StandbyReport struct {
	ID string `json:"id"`
	// Lag is how many changelog records it had still to read at the
	// thread's last look (every few seconds); -1 before the first.
	Lag int64 `json:"lag"`
}

// TaskReport is one task of a thread.
type TaskReport struct {
	ID         string            `json:"id"`
	Restoring  bool              `json:"restoring"`
	StreamTime int64             `json:"stream_time"`
	Partitions []PartitionReport `json:"partitions"`
}

// PartitionReport is one input partition of a task.
type PartitionReport struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Position is the offset after the last record processed (-1: none
	// yet), Committed the last committed one (-1: none).
	Position  int64 `json:"position"`
	Committed int64 `json:"committed"`
	// Lag is the partition's end offset minus what the task has consumed
	// (processed or committed), -1 when the end is not known yet.
	Lag      int64 `json:"lag"`
	Buffered int   `json:"buffered"`
}

// RecordCounts are records counted since the instance started.
type RecordCounts struct {
	Processed    int64 `json:"processed"`
	Skipped      int64 `json:"skipped"`
	DeadLettered int64 `json:"dead_lettered"`
	Late         int64 `json:"late"`
	Deduplicated int64 `json:"deduplicated"`
	CacheHits    int64 `json:"cache_hits"`
	CacheMisses  int64 `json:"cache_misses"`
}

func threadReport(s engine.ThreadSnapshot) ThreadReport {
	r := ThreadReport{Thread: s.Thread, State: s.State, Tasks: []TaskReport{}, RestoreRate: s.RestoreRate, Taken: s.Taken,
		Counts: RecordCounts(s.Counts)}
	if w := s.Waiting; w != nil {
		r.Waiting = &WaitingReport{For: w.For, Since: w.Since, Seconds: time.Since(w.Since).Seconds()}
	}
	for _, tk := range s.Tasks {
		t := TaskReport{ID: tk.ID, Restoring: tk.Restoring, StreamTime: tk.StreamTime}
		for _, p := range tk.Partitions {
			t.Partitions = append(t.Partitions, PartitionReport(p))
		}
		r.Tasks = append(r.Tasks, t)
	}
	for _, sb := range s.Standbys {
		r.Standbys = append(r.Standbys, StandbyReport(sb))
	}
	return r
}

// InstanceReport is one instance of the application and its tasks.
type InstanceReport struct {
	ProcessID string   `json:"process_id"`
	Server    string   `json:"server"`
	Tasks     []string `json:"tasks"`
	// Standbys are the tasks it follows as standbys.
	Standbys []string `json:"standbys,omitempty"`
}

// Report returns the app's state, threads, tasks (with per-partition lag
// and stream time) and known instances: what GET /state serves.
func (a *App) Report() StateReport {
	a.mu.Lock()
	rep := StateReport{ApplicationID: a.cfg.ApplicationID, ProcessID: a.procID, ApplicationServer: a.cfg.ApplicationServer, State: a.state.String()}
	if a.err != nil {
		rep.Error = a.err.Error()
	}
	threads, g, dir := a.threads, a.globals, a.directory
	a.mu.Unlock()
	rep.Threads = []ThreadReport{}
	for _, th := range threads {
		rep.Threads = append(rep.Threads, threadReport(th.Snapshot()))
	}
	if g != nil {
		rep.GlobalApplied, rep.GlobalSkipped = g.Applied.Load(), g.Skipped.Load()
	}
	for _, r := range a.resets.Reports() {
		rep.OffsetResets = append(rep.OffsetResets, OffsetResetReport(r))
	}
	if dir != nil {
		for _, in := range dir.all() {
			rep.Instances = append(rep.Instances, InstanceReport{ProcessID: in.ProcessID, Server: in.Server, Tasks: in.Tasks, Standbys: in.Standbys})
		}
	}
	return rep
}

func (a *App) serveState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.Report())
}

// KeyAnswer is what GET /stores/{store}/keys/{key} answers.
type KeyAnswer struct {
	Store string `json:"store"`
	Key   string `json:"key"`
	Found bool   `json:"found"`
	Value any    `json:"value,omitempty"`
	// Timestamp of the record that last wrote the value (DSL stores); for
	// a versioned store, when the version answered became valid.
	Timestamp *int64 `json:"timestamp,omitempty"`
	// AsOf and ValidTo, for ?asOf= queries of a versioned store: the time
	// asked, and when the version answered stopped being valid (absent:
	// it is the latest).
	AsOf      *int64 `json:"as_of,omitempty"`
	ValidTo   *int64 `json:"valid_to,omitempty"`
	Task      string `json:"task"`
	Partition int32  `json:"partition"`
	// ServedBy is the process id of the instance that read the store.
	ServedBy string `json:"served_by"`
	// Stale: a standby answered (the query asked ?stale=true), whose state
	// was Lag changelog records behind at its last look (-1: not looked
	// yet).
	Stale bool   `json:"stale,omitempty"`
	Lag   *int64 `json:"lag,omitempty"`
	Error string `json:"error,omitempty"`
}

func (a *App) serveKey(w http.ResponseWriter, r *http.Request) {
	name, text := r.PathValue("store"), r.PathValue("key")
	ans := KeyAnswer{Store: name, Key: text}
	fail := func(status int, err error) {
		ans.Error = err.Error()
		if errors.Is(err, ErrNotQueryable) {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, ans)
	}
	s, ok := a.prog.Stores[name]
	if !ok {
		_, err := a.storeOf(name, storage.KindKeyValue) // the error lists the stores
		fail(http.StatusNotFound, err)
		return
	}
	tq := s.Builder
	topic := a.storeTopic(s)
	var asOf int64
	if q := r.URL.Query().Get("asOf"); q != "" {
		var err error
		if asOf, err = parseAsOf(q); err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		ans.AsOf = &asOf
	}
	kb, err := tq.KeyBytes(text, topic)
	if err != nil {
		fail(http.StatusBadRequest, err)
		return
	}
	// stale=true: a standby may answer, possibly behind the owner.
	stale := r.URL.Query().Get("stale") == "true"
	md, ownerErr := a.metadataForKeyBytes(s, kb)
	ans.Task, ans.Partition = md.Task, md.Partition
	if ownerErr != nil && !(stale && len(md.Standbys) > 0) {
		fail(http.StatusServiceUnavailable, ownerErr)
		return
	}
	if !md.Local {
		if lag, ok := a.localStandby(md.Task); ok && stale {
			ans.Stale, ans.Lag = true, &lag
		} else {
			if by := r.Header.Get(forwardedHeader); by != "" {
				fail(http.StatusServiceUnavailable, fmt.Errorf("%w: forwarded by %s, but task %s is not here (rebalancing?)", ErrNotQueryable, by, md.Task))
				return
			}
			to, err := a.forwardTarget(md, ownerErr, stale)
			if err != nil {
				fail(http.StatusServiceUnavailable, err)
				return
			}
			a.forward(w, r, to)
			return
		}
	}
	bs, release, err := a.view(s, []string{md.Task}, false, ans.Stale)
	if err != nil {
		fail(http.StatusServiceUnavailable, err)
		return
	}
	var v any
	var ts int64
	var found bool
	if ans.AsOf != nil {
		var to int64
		aq, _ := tq.(storage.AsOfQuerier)
		if aq == nil {
			err = storage.ErrNotVersioned
		} else if v, ts, to, found, err = aq.QueryAsOf(bs, topic, text, asOf); found && to != math.MaxInt64 {
			ans.ValidTo = &to
		}
	} else {
		v, ts, found, err = tq.QueryText(bs, topic, text)
	}
	release()
	ans.ServedBy = a.procID
	if errors.Is(err, storage.ErrNotVersioned) {
		fail(http.StatusBadRequest, fmt.Errorf("store %q: %w", name, err))
		return
	}
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	ans.Found, ans.Value = found, v
	if found && ts >= 0 {
		ans.Timestamp = &ts
	}
	status := http.StatusOK
	if !found {
		status = http.StatusNotFound
	}
	writeJSON(w, status, ans)
}

// parseAsOf reads an asOf parameter: milliseconds since the epoch, or an
// RFC 3339 time.
func parseAsOf(q string) (int64, error) {
	if ms, err := strconv.ParseInt(q, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, q)
	if err != nil {
		return 0, fmt.Errorf("asOf=%q is neither milliseconds since the epoch nor an RFC 3339 time", q)
	}
	return t.UnixMilli(), nil
}

var forwardClient = &http.Client{Timeout: 10 * time.Second}

// forward passes a store query to the instance that owns the key and
// relays its answer.
// forwardTarget picks the instance a key query goes to: the key's owner,
// or (stale, with no owner now: ownerErr) a standby that advertises a
// server.
func (a *App) forwardTarget(md KeyMetadata, ownerErr error, stale bool) (KeyMetadata, error) {
	if ownerErr == nil {
		if md.Server == "" {
			return md, fmt.Errorf("%w: task %s is owned by %s, which advertises no ApplicationServer", ErrNotQueryable, md.Task, md.ProcessID)
		}
		return md, nil
	}
	for _, sb := range md.Standbys {
		if stale && !sb.Local && sb.Server != "" {
			md.Server, md.ProcessID = sb.Server, sb.ProcessID
			return md, nil
		}
	}
	return md, ownerErr
}

func (a *App) forward(w http.ResponseWriter, r *http.Request, md KeyMetadata) {
	base := md.Server
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	target := strings.TrimSuffix(base, "/") + "/stores/" + url.PathEscape(r.PathValue("store")) + "/keys/" + url.PathEscape(r.PathValue("key"))
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err == nil {
		req.Header.Set(forwardedHeader, a.procID)
		var resp *http.Response
		client := a.cfg.QueryClient
		if client == nil {
			client = forwardClient
		}
		if resp, err = client.Do(req); err == nil {
			defer resp.Body.Close()
			for _, h := range []string{"Content-Type", "Retry-After"} {
				if v := resp.Header.Get(h); v != "" {
					w.Header().Set(h, v)
				}
			}
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
			return
		}
	}
	writeJSON(w, http.StatusBadGateway, KeyAnswer{Store: r.PathValue("store"), Key: r.PathValue("key"), Task: md.Task, Partition: md.Partition,
		Error: fmt.Sprintf("forwarding to %s (%s), the owner of task %s: %v", md.Server, md.ProcessID, md.Task, err)})
}
