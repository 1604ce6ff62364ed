package streams

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/engine"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/topology"
)

// State is an App's lifecycle state, as Kafka Streams'.
type State int

// The app states.
const (
	Created State = iota
	Rebalancing
	Running
	PendingShutdown
	NotRunning
	Error
)

func (s State) String() string {
	return [...]string{"CREATED", "REBALANCING", "RUNNING", "PENDING_SHUTDOWN", "NOT_RUNNING", "ERROR"}[s]
}

// ErrClosed is returned by Run on an App that already ran.
var ErrClosed = errors.New("streams: app already ran; create a new one")

// App runs a topology as one instance of an application: a member of the
// application's consumer group, with its stream threads, tasks and state.
// Start more instances (processes, or Apps with their own StateDir) to
// scale out.
type App struct {
	prog    *rt.Program
	top     *topology.Topology
	cfg     Config
	log     *zap.Logger
	metrics *engine.Metrics
	// asyncLimit bounds the async calls running at once in the instance.
	asyncLimit *rt.AsyncLimit
	registry   *prometheus.Registry

	mu sync.Mutex
	// guarded by mu
	state        State
	threadStates []engine.ThreadState
	cancel       context.CancelFunc
	done         chan struct{}
	ran          bool
	// wasRunning: the app reached Running once (its global tables were
	// restored then).
	wasRunning bool
	err        error
	threads    []*engine.Thread
	globals    *engine.GlobalReader
	pebble     *storage.Pebble // nil unless running
	memory     *storage.Memory
	stateDir   *engine.StateDirectory // nil until Run opens the stores
	procID     string
	// subPartitions: the task count of each sub-topology.
	subPartitions map[int]int32
	directory     *directory // nil without ApplicationServer

	// resets records the instance's offset resets (made by New).
	resets *engine.OffsetResets

	// startup says whether the brokers answered Run's start-up calls.
	startup engine.Health

	// storeMu is held (read) by interactive queries while they read the
	// state store, and (write) while it closes.
	storeMu sync.RWMutex
}

// New checks cfg and returns an App for top. Nothing connects to Kafka
// until Run.
func New(top *topology.Topology, cfg Config) (*App, error) {
	prog, ok := rt.ProgramOf(top)
	if !ok {
		return nil, errors.New("streams: New needs a built topology (topology.Builder.Build)")
	}
	cfg.ensureDefaults()
	if err := errors.Join(cfg.validate(), checkSourceResets(prog), cfg.checkAsyncBudgets(prog)); err != nil {
		return nil, err
	}
	a := &App{prog: prog, top: top, cfg: cfg, log: cfg.Logger.With(zap.String("application_id", cfg.ApplicationID)), done: make(chan struct{}),
		resets: &engine.OffsetResets{}, asyncLimit: rt.NewAsyncLimit(cfg.MaxAsyncCalls)}
	if err := a.registerMetrics(); err != nil {
		return nil, fmt.Errorf("streams: registering metrics: %w", err)
	}
	return a, nil
}

// State returns the app's current state.
func (a *App) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

func (a *App) setState(s State) {
	a.mu.Lock()
	old := a.state
	if old == s || (old == Error && s != NotRunning) {
		a.mu.Unlock()
		return
	}
	a.state = s
	a.wasRunning = a.wasRunning || s == Running
	a.mu.Unlock()
	a.log.Info("state change", zap.Stringer("from", old), zap.Stringer("to", s))
	if a.cfg.StateListener != nil {
		a.cfg.StateListener(old, s)
	}
}

// onThreadState derives the app state from its threads': Running when all
// run, Rebalancing while any rebalances or restores.
func (a *App) onThreadState(idx int, s engine.ThreadState) {
	a.mu.Lock()
	a.threadStates[idx] = s
	running := true
	for _, ts := range a.threadStates {
		if ts != engine.ThreadRunning {
			running = false
		}
	}
	shutting := a.state == PendingShutdown || a.state == NotRunning || a.state == Error
	a.mu.Unlock()
	if shutting {
		return
	}
	if running {
		a.setState(Running)
	} else if s == engine.ThreadRebalancing || s == engine.ThreadStarting {
		a.setState(Rebalancing)
	}
}

// Run starts the app and blocks until ctx is cancelled or Close is called
// (it then commits, closes cleanly and returns nil), or until a fatal error
// (returned). An App runs once.
func (a *App) Run(ctx context.Context) (err error) {
	a.mu.Lock()
	if a.ran {
		a.mu.Unlock()
		return ErrClosed
	}
	a.ran = true
	ctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.mu.Unlock()
	defer close(a.done)
	defer cancel()
	a.setState(Rebalancing)
	defer func() {
		if err != nil {
			a.mu.Lock()
			a.err = err
			a.mu.Unlock()
			a.setState(Error)
			a.log.Error("application failed", zap.Error(err))
		}
		a.setState(NotRunning)
	}()

	dir := filepath.Join(a.cfg.StateDir, a.cfg.ApplicationID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("streams: creating state directory: %w", err)
	}
	processID, err := a.processID(dir)
	if err != nil {
		return err
	}
	pebble, err := storage.OpenPebble(filepath.Join(dir, "pebble"), storage.PebbleOptions{Fsync: a.cfg.FsyncState,
		Memory: a.cfg.StateMemoryBytes - a.cfg.CacheMaxBytes})
	if err != nil {
		return fmt.Errorf("streams: opening the state store in %s (is another instance using this StateDir?): %w", dir, err)
	}
	memory := storage.NewMemory()
	wallClock := func() int64 { return time.Now().UnixMilli() }
	stateDir := engine.NewStateDirectory([]storage.Backend{pebble, memory}, a.cfg.StateCleanupDelay, wallClock, a.log)
	a.mu.Lock()
	a.pebble, a.memory, a.stateDir = pebble, memory, stateDir
	a.mu.Unlock()
	defer func() {
		a.storeMu.Lock()
		a.mu.Lock()
		a.pebble, a.memory = nil, nil
		a.mu.Unlock()
		a.storeMu.Unlock()
		memory.Close()
		if cerr := pebble.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("streams: closing the state store: %w", cerr)
		}
	}()

	admin, err := backend.NewAdmin(a.clientConfig(a.adminConfig()))
	if err != nil {
		return fmt.Errorf("streams: creating admin client: %w", err)
	}
	defer admin.Close()
	// The brokers may not be reachable yet: start-up calls are retried
	// (and reported in /readyz) until they are, or the app is stopped.
	var topics *engine.Topics
	err = engine.Retry(ctx, &a.startup, a.log, "preparing topics", func() (err error) {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		defer tcancel()
		topics, err = engine.PrepareTopics(tctx, admin, a.prog, a.cfg.ApplicationID, a.cfg.ReplicationFactor)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the brokers
		}
		return err
	}
	subParts := map[int]int32{}
	for _, st := range a.prog.Subtopologies {
		if st.Global == nil && len(st.SourceTopics) > 0 {
			t := st.SourceTopics[0]
			if a.prog.IsInternal(t) {
				t = rt.InternalTopicName(a.cfg.ApplicationID, t)
			}
			subParts[st.ID] = topics.Partitions[t]
		}
	}
	var idir *directory
	if a.cfg.ApplicationServer != "" {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		err := admin.CreateTopics(tctx, []kclient.TopicSpec{{Name: directoryTopic(a.cfg.ApplicationID), Partitions: 1,
			ReplicationFactor: a.cfg.ReplicationFactor, Config: map[string]string{"cleanup.policy": "compact"}}})
		tcancel()
		if err != nil {
			return fmt.Errorf("streams: creating the instance directory topic %s: %w", directoryTopic(a.cfg.ApplicationID), err)
		}
		idir = &directory{byID: map[string]instanceInfo{}}
	}
	a.mu.Lock()
	a.procID, a.subPartitions, a.directory = processID, subParts, idir
	a.mu.Unlock()
	notices := a.startNotices(ctx, admin) // nil: none (librdkafka's build, or a failure)
	if notices != nil {
		defer notices.Close() // after the threads: it sends their leave notices
	}
	if dlq := a.cfg.DeadLetterTopic; dlq != "" {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		parts, err := admin.Partitions(tctx, []string{dlq})
		tcancel()
		if err != nil {
			return fmt.Errorf("streams: reading the dead-letter topic's metadata: %w", err)
		}
		if _, ok := parts[dlq]; !ok {
			return fmt.Errorf("streams: the dead-letter topic %q does not exist (create it before starting the application)", dlq)
		}
	}
	a.log.Info("starting", zap.String("guarantee", a.cfg.Guarantee.String()), zap.Int("threads", a.cfg.NumStreamThreads),
		zap.String("process_id", processID), zap.Strings("topics", topics.Subscription))

	ecfg := &engine.Config{
		AppID:                 a.cfg.ApplicationID,
		ProcessID:             processID,
		Program:               a.prog,
		ExactlyOnce:           a.cfg.Guarantee == ExactlyOnce,
		CommitInterval:        a.cfg.CommitInterval,
		MaxTaskIdle:           a.cfg.MaxTaskIdle,
		CacheBytes:            a.cfg.CacheMaxBytes / int64(a.cfg.NumStreamThreads),
		MaxBufferedRecords:    a.cfg.MaxBufferedRecords,
		InstanceID:            a.cfg.InstanceID,
		NumStandbyReplicas:    a.cfg.NumStandbyReplicas,
		AcceptableRecoveryLag: a.cfg.AcceptableRecoveryLag,
		MaxWarmupReplicas:     a.cfg.MaxWarmupReplicas,
		ClientTags:            a.cfg.rackTags(),
		Consumer:              a.clientConfig(a.consumerConfig()),
		Producer:              a.clientConfig(a.producerConfig()),
		Restore:               a.clientConfig(a.restoreConfig()),
		Global:                a.clientConfig(a.globalConfig()),
		Admin:                 admin,
		Log:                   a.log,
		Pebble:                pebble,
		Memory:                memory,
		StateDirectory:        stateDir,
		Resets:                a.resets,
		Partitions:            topics.Partitions,
		Subscription:          topics.Subscription,
		WallClock:             wallClock,
		Handlers:              a.cfg.handlers(),
		Metrics:               a.metrics,
		AsyncLimit:            a.asyncLimit,
		Notices:               notices,
		OnState:               a.onThreadState,
		NewConsumer:           backend.NewConsumer,
		NewGroupConsumer:      backend.NewGroupConsumer,
		NewReader:             backend.NewReader,
		NewProducer:           backend.NewProducer,
		NewAdmin:              func() (kclient.Admin, error) { return backend.NewAdmin(a.clientConfig(a.adminConfig())) },
	}
	// Global tables are read in full before any thread processes.
	globals := engine.NewGlobalReader(ecfg)
	if err := globals.Bootstrap(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // closed while starting
		}
		return fmt.Errorf("streams: reading global tables: %w", err)
	}
	a.mu.Lock()
	a.globals = globals
	a.threadStates = make([]engine.ThreadState, a.cfg.NumStreamThreads)
	for i := range a.cfg.NumStreamThreads {
		a.threads = append(a.threads, engine.NewThread(i, ecfg))
	}
	threads := a.threads
	a.mu.Unlock()

	errc := make(chan error, len(threads)+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := globals.Run(ctx); err != nil {
			errc <- err
			cancel()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		stateDir.Run(ctx) // deletes the state of tasks no thread owns
	}()
	if idir != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.runDirectory(ctx, idir, processID)
		}()
	}
	if notices != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			notices.Run(ctx)
		}()
	}
	for _, th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := th.Run(ctx); err != nil {
				errc <- err
				cancel() // one thread failing stops the instance
			}
		}()
	}
	<-ctx.Done()
	a.setState(PendingShutdown)
	wg.Wait()
	close(errc)
	var errs []error
	for e := range errc {
		errs = append(errs, e)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a.log.Info("stopped cleanly")
	return nil
}

// Close stops a running app, waiting until it has committed and closed or
// ctx ends. It returns the error Run returned.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	cancel, ran := a.cancel, a.ran
	a.mu.Unlock()
	if !ran {
		a.setState(NotRunning)
		return nil
	}
	if cancel != nil {
		cancel()
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// processID returns Config.ProcessID, or the id kept in the state
// directory (made on first start).
func (a *App) processID(dir string) (string, error) {
	if a.cfg.ProcessID != "" {
		return a.cfg.ProcessID, nil
	}
	path := filepath.Join(dir, "process-id")
	if b, err := os.ReadFile(path); err == nil && validID.Match(b) {
		return string(b), nil
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(id), 0o644); err != nil {
		return "", fmt.Errorf("streams: writing %s: %w", path, err)
	}
	return id, nil
}

// String describes the app: id, guarantee, state.
func (a *App) String() string {
	return fmt.Sprintf("streams.App{%s, %s, %s}", a.cfg.ApplicationID, a.cfg.Guarantee, strings.ToLower(a.State().String()))
}

// checkSourceResets checks every source's offset reset policy.
func checkSourceResets(prog *rt.Program) error {
	var errs []error
	for _, n := range prog.Nodes {
		if n.Kind == rt.KindSource && n.OffsetReset != "" {
			if _, err := kclient.ParseReset(n.OffsetReset); err != nil {
				errs = append(errs, fmt.Errorf("streams: source %q: %w", n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkAsyncBudgets refuses, under exactly-once, an async operator whose
// calls may hold a commit longer than the transaction may stay open: the
// broker would abort it while the commit waits.
func (c *Config) checkAsyncBudgets(prog *rt.Program) error {
	if c.Guarantee != ExactlyOnce {
		return nil
	}
	limit := 10 * time.Second // producerConfig's
	if v, ok := c.ClientConfig["transaction.timeout.ms"]; ok {
		ms, err := strconv.Atoi(v)
		if err != nil {
			return nil // validate says what is wrong with it
		}
		limit = time.Duration(ms) * time.Millisecond
	}
	var errs []error
	for _, n := range prog.Nodes {
		if n.AsyncBudget > 0 && n.AsyncBudget+c.CommitInterval >= limit {
			errs = append(errs, fmt.Errorf("streams: async operator %q may hold a commit for %v (its timeout × attempts and backoffs), and the commit interval is %v: under exactly-once both must stay within the producer's transaction.timeout.ms (%v): lower the timeout or retries, or raise transaction.timeout.ms in ClientConfig",
				n.Name, n.AsyncBudget.Round(time.Millisecond), c.CommitInterval, limit))
		}
	}
	return errors.Join(errs...)
}
