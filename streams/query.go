package streams

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/stores"
)

// ErrNotQueryable is wrapped by the errors of interactive queries that
// cannot be answered now: the app is neither Running nor Rebalancing
// (starting, or stopped), or no instance runs the key's task now (it is
// moving, or restoring). Retry after the rebalance.
var ErrNotQueryable = errors.New("streams: store not queryable now")

// KeyMetadata says which instance owns a key of a store, and which follow
// it as standbys.
type KeyMetadata struct {
	// Server is the owner's ApplicationServer ("host:port"), empty when it
	// advertises none.
	Server string `json:"server"`
	// ProcessID is the owner's process id.
	ProcessID string `json:"process_id"`
	// Task and Partition are the key's task and partition.
	Task      string `json:"task"`
	Partition int32  `json:"partition"`
	// Local is true when this instance owns the key.
	Local bool `json:"local"`
	// Standbys are the instances that follow the key's task as a standby
	// (Config.NumStandbyReplicas), in process id order: a query with
	// StaleStores may read the key there, possibly behind the owner.
	Standbys []StandbyHost `json:"standbys,omitempty"`
}

// StandbyHost is an instance following a task as a standby.
type StandbyHost struct {
	Server    string `json:"server"`
	ProcessID string `json:"process_id"`
	// Local is true for this instance.
	Local bool `json:"local"`
}

// QueryOption changes what a store view reads (KeyValueStoreOf,
// WindowStoreOf, SessionStoreOf).
type QueryOption func(*queryOptions)

type queryOptions struct {
	stale bool
}

// StaleStores lets a view read, besides the tasks this instance runs, the
// tasks it follows as standbys and the tasks it is restoring (Kafka
// Streams' StoreQueryParameters.enableStaleStores): answers that may be
// behind the task's owner (by the standby's lag, eddy_standby_lag_records,
// or the restore's remaining records), but answers while the owner is
// gone or moving. Without it, such keys fail with ErrNotQueryable or are
// not found here.
func StaleStores() QueryOption { return func(o *queryOptions) { o.stale = true } }

func queryOpts(opts []QueryOption) queryOptions {
	var o queryOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// storeOf finds a store of the topology, of the given kind.
func (a *App) storeOf(name string, kind storage.Kind) (*rt.StoreSpec, error) {
	s, ok := a.prog.Stores[name]
	if !ok {
		var names []string
		for n := range a.prog.Stores {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("streams: no store %q in the topology (stores: %s)", name, strings.Join(names, ", "))
	}
	if k := s.Builder.Spec().Kind; k != kind {
		return nil, fmt.Errorf("streams: store %q is a %s store, not a %s store", name, k, kind)
	}
	return s, nil
}

// storeTopic is the topic a store's serdes are called with.
func (a *App) storeTopic(s *rt.StoreSpec) string {
	if s.Builder.Spec().Logged {
		return rt.ChangelogTopic(a.cfg.ApplicationID, s.Name())
	}
	return s.Name()
}

// view returns a read-only view of the committed state of store s in
// tasks (nil: every task of s this instance owns and has restored; with
// stale, also those restoring and those it follows as standbys), and a
// release to call when done. It fails unless the app is Running or
// Rebalancing, and, for a read over all of the instance's tasks (whole: a
// scan, which would silently miss their keys), while any of them does not
// run yet (unless stale).
func (a *App) view(s *rt.StoreSpec, tasks []string, whole, stale bool) (storage.BytesStore, func(), error) {
	a.storeMu.RLock()
	a.mu.Lock()
	state, threads := a.state, a.threads
	backend := a.backend(s.Builder.Spec().InMemory)
	a.mu.Unlock()
	// While a rebalance moves some tasks (cooperatively), the others keep
	// running, and their keys stay queryable; a task restoring or gone
	// is left out of the view below.
	if (state != Running && state != Rebalancing) || backend == nil {
		a.storeMu.RUnlock()
		return nil, nil, fmt.Errorf("%w: store %q: the app is %s (queries are answered while it is RUNNING or REBALANCING)", ErrNotQueryable, s.Name(), state)
	}
	if tasks == nil {
		tasks = []string{} // none owned: an empty view
		for _, th := range threads {
			snap := th.Snapshot()
			for _, tk := range snap.Tasks {
				if taskSubtopology(tk.ID) != s.Subtopology {
					continue
				}
				if !tk.Restoring || stale {
					tasks = append(tasks, tk.ID)
				} else if whole {
					a.storeMu.RUnlock()
					return nil, nil, fmt.Errorf("%w: store %q: task %s is restoring or starting on this instance (a read over every key would miss its keys)", ErrNotQueryable, s.Name(), tk.ID)
				}
			}
			for _, sb := range snap.Standbys {
				if stale && taskSubtopology(sb.ID) == s.Subtopology {
					tasks = append(tasks, sb.ID)
				}
			}
		}
	}
	v, err := storage.QueryViews(backend, tasks, s.Builder.Spec())
	if err != nil {
		a.storeMu.RUnlock()
		return nil, nil, err
	}
	return v, a.storeMu.RUnlock, nil
}

// localStandby returns the lag of task's standby on this instance (-1
// before its first look), and whether it follows task as a standby.
func (a *App) localStandby(task string) (int64, bool) {
	a.mu.Lock()
	threads := a.threads
	a.mu.Unlock()
	for _, th := range threads {
		for _, sb := range th.Snapshot().Standbys {
			if sb.ID == task {
				return sb.Lag, true
			}
		}
	}
	return 0, false
}

// ownedTask reports whether this instance has task (restored) now.
func (a *App) ownedTask(task string) bool {
	a.mu.Lock()
	threads := a.threads
	a.mu.Unlock()
	for _, th := range threads {
		for _, tk := range th.Snapshot().Tasks {
			if tk.ID == task {
				return !tk.Restoring
			}
		}
	}
	return false
}

func taskSubtopology(task string) int {
	id, err := processor.ParseTaskID(task)
	if err != nil {
		return -1
	}
	return id.Subtopology
}

// KeyValueStoreOf returns a read-only view of the key-value store name
// over the tasks this instance owns, reading committed data only. For the
// DSL's stores (which keep each value's timestamp) V is the value type:
// KeyValueStoreOf[string, int64](app, "counts"). Every read fails with
// ErrNotQueryable while the app is neither Running nor Rebalancing (a
// rebalance moves only some tasks: the others stay readable), and a read
// of a key whose task is restoring here, or a scan while any is; a key
// owned by another instance is not found here (see MetadataForKey). With
// StaleStores it also reads the tasks this instance follows as standbys
// or is restoring. name may also be a global table's store, which every
// instance holds whole.
func KeyValueStoreOf[K, V any](a *App, name string, opts ...QueryOption) (stores.ReadOnlyKeyValueStore[K, V], error) {
	o := queryOpts(opts)
	if g := a.globalStore(name); g != nil {
		return globalKeyValueStore[K, V](a, g)
	}
	s, err := a.storeOf(name, storage.KindKeyValue)
	if err != nil {
		return nil, err
	}
	var open func(storage.BytesStore, string) stores.ReadOnlyKeyValueStore[K, V]
	switch s.Builder.Public().(type) {
	case *stores.KeyValueBuilder[K, V]:
		open = opener[stores.ReadOnlyKeyValueStore[K, V]](s.Builder)
	case *stores.KeyValueBuilder[K, stores.ValueAndTimestamp[V]]:
		ts := opener[stores.ReadOnlyKeyValueStore[K, stores.ValueAndTimestamp[V]]](s.Builder)
		open = func(bs storage.BytesStore, topic string) stores.ReadOnlyKeyValueStore[K, V] {
			return stores.ValuesView(ts(bs, topic))
		}
	default:
		var k K
		var v V
		return nil, fmt.Errorf("streams: store %q does not hold %T keys and %T values (its builder is %T)", name, k, v, s.Builder.Public())
	}
	q := &kvQuery[K, V]{acquire: func(whole bool) (stores.ReadOnlyKeyValueStore[K, V], func(), error) {
		bs, release, err := a.view(s, nil, whole, o.stale)
		if err != nil {
			return nil, nil, err
		}
		return open(bs, a.storeTopic(s)), release, nil
	}}
	q.check = func(key K) error { return a.checkKeyTask(s, key, o) }
	return q, nil
}

// checkKeyTask fails with ErrNotQueryable when key's task is this
// instance's but does not run yet (it is moving in, or restoring): the
// view leaves such tasks out (unless o.stale), and their keys must not
// read as missing.
func (a *App) checkKeyTask(s *rt.StoreSpec, key any, o queryOptions) error {
	if o.stale {
		return nil
	}
	kb, err := s.Builder.SerializeKey(key, a.storeTopic(s))
	if err != nil {
		return fmt.Errorf("streams: store %q: %w", s.Name(), err)
	}
	a.mu.Lock()
	n, threads := a.subPartitions[s.Subtopology], a.threads
	a.mu.Unlock()
	if n <= 0 {
		return nil // not started: the view refuses
	}
	p, err := a.keyPartition(s, kb, n)
	if err != nil {
		return err
	}
	task := fmt.Sprintf("%d_%d", s.Subtopology, p)
	for _, th := range threads {
		for _, tk := range th.Snapshot().Tasks {
			if tk.ID == task && tk.Restoring {
				return fmt.Errorf("%w: store %q: task %s of the key is restoring or starting on this instance", ErrNotQueryable, s.Name(), task)
			}
		}
	}
	return nil
}

// backend is the running app's backend for stores kept in memory or not;
// nil while it is not running. The caller holds a.mu.
func (a *App) backend(inMemory bool) storage.Backend {
	if inMemory {
		if a.memory == nil {
			return nil
		}
		return a.memory
	}
	if a.pebble == nil {
		return nil
	}
	return a.pebble
}

// opener returns a function opening rb's typed read-only view, a T, over
// a view of committed bytes (the caller checked rb's public builder type).
func opener[T any](rb storage.Builder) func(storage.BytesStore, string) T {
	return func(bs storage.BytesStore, topic string) T { return rb.ReadOnly(bs, topic).(T) }
}

func (a *App) globalStore(name string) *rt.GlobalStore {
	for _, g := range a.prog.GlobalStores {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// globalKeyValueStore queries a global table's store: every instance has
// all of it, so any instance answers every key.
func globalKeyValueStore[K, V any](a *App, g *rt.GlobalStore) (stores.ReadOnlyKeyValueStore[K, V], error) {
	if _, ok := g.View(nil).(stores.ReadOnlyKeyValueStore[K, stores.ValueAndTimestamp[V]]); !ok {
		var k K
		var v V
		return nil, fmt.Errorf("streams: global store %q does not hold %T keys and %T values", g.Name, k, v)
	}
	return &kvQuery[K, V]{acquire: func(bool) (stores.ReadOnlyKeyValueStore[K, V], func(), error) {
		a.storeMu.RLock()
		a.mu.Lock()
		state, ready := a.state, a.wasRunning
		backend := a.backend(g.InMemory)
		a.mu.Unlock()
		if !ready || (state != Running && state != Rebalancing) || backend == nil {
			a.storeMu.RUnlock()
			return nil, nil, fmt.Errorf("%w: global store %q: the app is %s (queries are answered while it is RUNNING or REBALANCING)", ErrNotQueryable, g.Name, state)
		}
		kv := g.View(backend).(stores.ReadOnlyKeyValueStore[K, stores.ValueAndTimestamp[V]])
		return stores.ValuesView(kv), a.storeMu.RUnlock, nil
	}}, nil
}

// kvQuery answers each read from the store acquire returns (whole: for a
// read over every key), releasing it after the read (iterators: once
// made); check (optional) vets a key before it is read.
type kvQuery[K, V any] struct {
	acquire func(whole bool) (stores.ReadOnlyKeyValueStore[K, V], func(), error)
	check   func(key K) error
}

func (q *kvQuery[K, V]) Get(key K) (V, bool, error) {
	if q.check != nil {
		if err := q.check(key); err != nil {
			var zero V
			return zero, false, err
		}
	}
	s, release, err := q.acquire(false)
	if err != nil {
		var zero V
		return zero, false, err
	}
	defer release()
	return s.Get(key)
}

func (q *kvQuery[K, V]) iter(f func(stores.ReadOnlyKeyValueStore[K, V]) *stores.Iterator[K, V]) *stores.Iterator[K, V] {
	s, release, err := q.acquire(true)
	if err != nil {
		return stores.ErrorIterator[K, V](err)
	}
	defer release()
	return f(s)
}

func (q *kvQuery[K, V]) Range(from, to K) *stores.Iterator[K, V] {
	return q.iter(func(s stores.ReadOnlyKeyValueStore[K, V]) *stores.Iterator[K, V] { return s.Range(from, to) })
}

func (q *kvQuery[K, V]) ReverseRange(from, to K) *stores.Iterator[K, V] {
	return q.iter(func(s stores.ReadOnlyKeyValueStore[K, V]) *stores.Iterator[K, V] { return s.ReverseRange(from, to) })
}

func (q *kvQuery[K, V]) All() *stores.Iterator[K, V] {
	return q.iter(func(s stores.ReadOnlyKeyValueStore[K, V]) *stores.Iterator[K, V] { return s.All() })
}

func (q *kvQuery[K, V]) ReverseAll() *stores.Iterator[K, V] {
	return q.iter(func(s stores.ReadOnlyKeyValueStore[K, V]) *stores.Iterator[K, V] { return s.ReverseAll() })
}

func (q *kvQuery[K, V]) ApproximateNumEntries() (int64, error) {
	s, release, err := q.acquire(true)
	if err != nil {
		return 0, err
	}
	defer release()
	return s.ApproximateNumEntries()
}

// WindowStoreOf returns a read-only view of the window store name over the
// tasks this instance owns (committed data; as KeyValueStoreOf). For the
// DSL's windowed aggregations V is the aggregate's type:
// WindowStoreOf[string, int64](app, "clicks-per-minute").
func WindowStoreOf[K, V any](a *App, name string, opts ...QueryOption) (stores.ReadOnlyWindowStore[K, V], error) {
	o := queryOpts(opts)
	s, err := a.storeOf(name, storage.KindWindow)
	if err != nil {
		return nil, err
	}
	switch s.Builder.Public().(type) {
	case *stores.WindowBuilder[K, V]:
		return &windowQuery[K, V, V]{a: a, s: s, o: o, open: opener[stores.ReadOnlyWindowStore[K, V]](s.Builder), conv: func(v V) V { return v }}, nil
	case *stores.WindowBuilder[K, stores.ValueAndTimestamp[V]]:
		return &windowQuery[K, stores.ValueAndTimestamp[V], V]{a: a, s: s, o: o, open: opener[stores.ReadOnlyWindowStore[K, stores.ValueAndTimestamp[V]]](s.Builder),
			conv: func(v stores.ValueAndTimestamp[V]) V { return v.Value }}, nil
	}
	var k K
	var v V
	return nil, fmt.Errorf("streams: window store %q does not hold %T keys and %T values (its builder is %T)", name, k, v, s.Builder.Public())
}

type windowQuery[K, VS, V any] struct {
	a    *App
	s    *rt.StoreSpec
	o    queryOptions
	open func(storage.BytesStore, string) stores.ReadOnlyWindowStore[K, VS]
	conv func(VS) V
}

// store returns the view (whole: for a read over every key) and its
// release.
func (q *windowQuery[K, VS, V]) store(whole bool) (stores.ReadOnlyWindowStore[K, VS], func(), error) {
	bs, release, err := q.a.view(q.s, nil, whole, q.o.stale)
	if err != nil {
		return nil, nil, err
	}
	return q.open(bs, q.a.storeTopic(q.s)), release, nil
}

func (q *windowQuery[K, VS, V]) Fetch(key K, start int64) (V, bool, error) {
	var zero V
	if err := q.a.checkKeyTask(q.s, key, q.o); err != nil {
		return zero, false, err
	}
	s, release, err := q.store(false)
	if err != nil {
		return zero, false, err
	}
	defer release()
	v, ok, err := s.Fetch(key, start)
	if err != nil || !ok {
		return zero, false, err
	}
	return q.conv(v), true, nil
}

func (q *windowQuery[K, VS, V]) FetchRange(key K, from, to int64) ([]stores.WindowEntry[V], error) {
	if err := q.a.checkKeyTask(q.s, key, q.o); err != nil {
		return nil, err
	}
	s, release, err := q.store(false)
	if err != nil {
		return nil, err
	}
	defer release()
	es, err := s.FetchRange(key, from, to)
	out := make([]stores.WindowEntry[V], len(es))
	for i, e := range es {
		out[i] = stores.WindowEntry[V]{Start: e.Start, Value: q.conv(e.Value)}
	}
	return out, err
}

func (q *windowQuery[K, VS, V]) FetchAll(from, to int64) ([]stores.KeyWindowEntry[K, V], error) {
	s, release, err := q.store(true)
	if err != nil {
		return nil, err
	}
	defer release()
	es, err := s.FetchAll(from, to)
	return convEntries(es, q.conv), err
}

func convEntries[K, VS, V any](es []stores.KeyWindowEntry[K, VS], conv func(VS) V) []stores.KeyWindowEntry[K, V] {
	out := make([]stores.KeyWindowEntry[K, V], len(es))
	for i, e := range es {
		out[i] = stores.KeyWindowEntry[K, V]{Key: e.Key, Start: e.Start, End: e.End, Value: conv(e.Value)}
	}
	return out
}

// SessionStoreOf returns a read-only view of the session store name over
// the tasks this instance owns (committed data; as KeyValueStoreOf).
func SessionStoreOf[K, V any](a *App, name string, opts ...QueryOption) (stores.ReadOnlySessionStore[K, V], error) {
	o := queryOpts(opts)
	s, err := a.storeOf(name, storage.KindSession)
	if err != nil {
		return nil, err
	}
	switch s.Builder.Public().(type) {
	case *stores.SessionBuilder[K, V]:
		return &sessionQuery[K, V, V]{a: a, s: s, o: o, open: opener[stores.ReadOnlySessionStore[K, V]](s.Builder), conv: func(v V) V { return v }}, nil
	case *stores.SessionBuilder[K, stores.ValueAndTimestamp[V]]:
		return &sessionQuery[K, stores.ValueAndTimestamp[V], V]{a: a, s: s, o: o, open: opener[stores.ReadOnlySessionStore[K, stores.ValueAndTimestamp[V]]](s.Builder),
			conv: func(v stores.ValueAndTimestamp[V]) V { return v.Value }}, nil
	}
	var k K
	var v V
	return nil, fmt.Errorf("streams: session store %q does not hold %T keys and %T values (its builder is %T)", name, k, v, s.Builder.Public())
}

type sessionQuery[K, VS, V any] struct {
	a    *App
	s    *rt.StoreSpec
	o    queryOptions
	open func(storage.BytesStore, string) stores.ReadOnlySessionStore[K, VS]
	conv func(VS) V
}

func (q *sessionQuery[K, VS, V]) FetchSessions(key K) ([]stores.KeyWindowEntry[K, V], error) {
	if err := q.a.checkKeyTask(q.s, key, q.o); err != nil {
		return nil, err
	}
	bs, release, err := q.a.view(q.s, nil, false, q.o.stale)
	if err != nil {
		return nil, err
	}
	defer release()
	es, err := q.open(bs, q.a.storeTopic(q.s)).FetchSessions(key)
	return convEntries(es, q.conv), err
}

func (q *sessionQuery[K, VS, V]) FetchAll(from, to int64) ([]stores.KeyWindowEntry[K, V], error) {
	bs, release, err := q.a.view(q.s, nil, true, q.o.stale)
	if err != nil {
		return nil, err
	}
	defer release()
	es, err := q.open(bs, q.a.storeTopic(q.s)).FetchAll(from, to)
	return convEntries(es, q.conv), err
}

// MetadataForKey says which instance owns key in store: the task and
// partition the key belongs to (by Kafka's default partitioner, murmur2 of
// the key as the store's serde writes it, or by the stream partitioner
// that placed the store's input: Repartitioned or Produced
// WithStreamPartitioner), the instance that has that
// task now and the instances that follow it as standbys, as the instances
// advertise them (Config.ApplicationServer). key must have the store's key
// type. It fails with ErrNotQueryable while no instance has the task
// (during a rebalance); the metadata it returns then still names the
// task, the partition and the standbys (a query with StaleStores may read
// there).
func (a *App) MetadataForKey(store string, key any) (KeyMetadata, error) {
	s, ok := a.prog.Stores[store]
	if !ok {
		_, err := a.storeOf(store, storage.KindKeyValue)
		return KeyMetadata{}, err
	}
	kb, err := s.Builder.SerializeKey(key, a.storeTopic(s))
	if err != nil {
		return KeyMetadata{}, fmt.Errorf("streams: MetadataForKey: %w", err)
	}
	return a.metadataForKeyBytes(s, kb)
}

// keyPartition is the partition, among n, of store s's key kb: where the
// stream partitioner of the sink writing the store's input puts it
// (topology's WithStreamPartitioner), else Kafka's default partitioner's
// (murmur2). A partitioner that drops the key, or puts it in several
// partitions, leaves no partition to ask.
func (a *App) keyPartition(s *rt.StoreSpec, kb []byte, n int32) (int32, error) {
	place := a.prog.KeyPartitions(s.Subtopology)
	if place == nil {
		return kclient.KeyPartition(kb, n), nil
	}
	parts, ok, err := place(kb, n)
	switch {
	case err != nil:
		return 0, fmt.Errorf("streams: store %q: placing the key: %w", s.Name(), err)
	case !ok:
		return kclient.KeyPartition(kb, n), nil
	case len(parts) == 1:
		return parts[0], nil
	case len(parts) == 0:
		return 0, fmt.Errorf("streams: store %q: the stream partitioner drops the key: no partition holds it", s.Name())
	}
	return 0, fmt.Errorf("streams: store %q: the stream partitioner puts the key in partitions %v (multicast): query each with the partition's task, not by key", s.Name(), parts)
}

func (a *App) metadataForKeyBytes(s *rt.StoreSpec, kb []byte) (KeyMetadata, error) {
	a.mu.Lock()
	n, processID, dir := a.subPartitions[s.Subtopology], a.procID, a.directory
	a.mu.Unlock()
	if n <= 0 {
		return KeyMetadata{}, fmt.Errorf("%w: store %q: the app has not started", ErrNotQueryable, s.Name())
	}
	p, err := a.keyPartition(s, kb, n)
	if err != nil {
		return KeyMetadata{}, err
	}
	task := fmt.Sprintf("%d_%d", s.Subtopology, p)
	md := KeyMetadata{Task: task, Partition: p}
	if _, ok := a.localStandby(task); ok {
		md.Standbys = append(md.Standbys, StandbyHost{Server: a.cfg.ApplicationServer, ProcessID: processID, Local: true})
	}
	if dir != nil {
		for _, in := range dir.standbys(task, processID) {
			md.Standbys = append(md.Standbys, StandbyHost{Server: in.Server, ProcessID: in.ProcessID})
		}
		slices.SortFunc(md.Standbys, func(a, b StandbyHost) int { return strings.Compare(a.ProcessID, b.ProcessID) })
	}
	if a.ownedTask(task) {
		md.Server, md.ProcessID, md.Local = a.cfg.ApplicationServer, processID, true
		return md, nil
	}
	if dir != nil {
		if inst, ok := dir.owner(task); ok && inst.ProcessID != processID {
			md.Server, md.ProcessID = inst.Server, inst.ProcessID
			return md, nil
		}
	}
	return md, fmt.Errorf("%w: store %q: no instance has task %s now (rebalancing?)", ErrNotQueryable, s.Name(), task)
}
