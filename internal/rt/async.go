package rt

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
)

// Async nodes run a user call per record on goroutines while the task goes
// on with the next records. Their rules:
//
//   - records of one key (as Key identifies it) run one at a time, in the
//     order they reached the node; records of different keys overlap, up to
//     Concurrency calls at once per task (and AsyncEnv.Limit per instance);
//   - a call's result is applied on the task's goroutine, with the record
//     context of its input record (timestamp, headers, where it was read:
//     what sinks, stores and the error handlers see), before the next
//     record of its key starts: state read when a call starts sees every
//     write of the key's earlier records;
//   - the task's Flush — every commit — waits until every record accepted
//     so far has completed, so a commit covers the results of the records
//     whose offsets it commits; Discard and Close abandon what runs (an
//     aborted transaction: the records are processed again);
//   - a call that does not return within its budget (Timeout per attempt,
//     with retries and their backoff) is abandoned and completes with an
//     error for the processing error handler: nothing waits on it longer.

// AsyncConfig bounds one async node's calls, per task.
type AsyncConfig struct {
	// Concurrency is how many calls run at once.
	Concurrency int
	// MaxPending bounds the records the node holds (running or waiting for
	// their key's earlier records or for a free slot); the task takes no
	// new record while it is reached (Task.Accepting).
	MaxPending int
	// Timeout bounds one attempt of a call (its context's deadline).
	Timeout time.Duration
	// Retries is how many times a failed call is tried again, after
	// Backoff, doubled each time up to MaxBackoff.
	Retries    int
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Budget is the longest a call may take, with its retries: after it, the
// call is abandoned (a commit waits no longer).
func (c AsyncConfig) Budget() time.Duration {
	d := time.Duration(c.Retries+1) * c.Timeout
	for i := range c.Retries {
		d += c.backoff(i)
	}
	return d + abandonGrace
}

func (c AsyncConfig) backoff(attempt int) time.Duration {
	b := c.Backoff << min(attempt, 20)
	if c.MaxBackoff > 0 && b > c.MaxBackoff {
		b = c.MaxBackoff
	}
	return b
}

// abandonGrace: how long past its budget a call still gets to deliver its
// result before the task gives up on it.
const abandonGrace = 100 * time.Millisecond

// AsyncEnv is what a runtime gives its tasks' async nodes.
type AsyncEnv struct {
	// Limit bounds the calls running at once across the instance; nil:
	// only each node's Concurrency.
	Limit *AsyncLimit
	// Wake is called, from the call's goroutine, when a call completes:
	// a runtime waiting for completions looks again. Nil: none.
	Wake func()
	// Observe is told of each completed call, on the task's goroutine: the
	// node, how long the record waited (for its key, a slot) before its
	// call began, how long the call took, and its error. Nil: none.
	Observe func(node string, waited, took time.Duration, err error)
}

// AsyncLimit is a bound on calls running at once, shared by tasks.
type AsyncLimit struct{ sem chan struct{} }

// NewAsyncLimit returns a bound of n calls (n ≥ 1).
func NewAsyncLimit(n int) *AsyncLimit { return &AsyncLimit{sem: make(chan struct{}, max(n, 1))} }

// Running is how many calls hold a slot now.
func (l *AsyncLimit) Running() int { return len(l.sem) }

func (l *AsyncLimit) acquire(ctx context.Context) bool {
	select {
	case l.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *AsyncLimit) release() { <-l.sem }

// ErrAsyncTimeout is in the error of a call abandoned past its budget.
var ErrAsyncTimeout = errors.New("topology: async call did not return in time")

// AsyncFuncs are what an async node does with a record.
type AsyncFuncs[K, V, S, R any] struct {
	// Key identifies a record's key: records whose Key values are equal
	// run one at a time, in order (unequal keys mapping to one value only
	// lose concurrency).
	Key func(K) any
	// Pass, when it holds for a record, forwards it in its key's order
	// without a call (a tombstone through MapValuesAsync).
	Pass func(rec processor.Record[K, V]) bool
	// Begin runs on the task's goroutine when the record's call is about
	// to start (its key's earlier records done): what it returns goes to
	// Call and End. Nil: the zero S.
	Begin func(rec processor.Record[K, V]) (S, error)
	// Call runs on a goroutine of its own.
	Call func(ctx context.Context, rec processor.Record[K, V], st S) (R, error)
	// End runs on the task's goroutine after Call succeeded, before Emit
	// (writing the state Call changed). Nil: none.
	End func(rec processor.Record[K, V], st S) error
	// Emit forwards a record's result (passed: Pass held, res is zero).
	Emit func(rec processor.Record[K, V], res R, passed bool)
}

// AsyncNode runs AsyncFuncs on each record it receives.
type AsyncNode[K, V, S, R any] struct {
	Base
	cfg AsyncConfig
	fn  AsyncFuncs[K, V, S, R]
	env *AsyncEnv

	keys    map[any]*asyncKey[K, V, S, R]
	ready   []*asyncKey[K, V, S, R] // keys whose first record may start, in the order they became ready
	running []*asyncCall[K, V, S, R]
	pending int // records held: running, or waiting
	done    chan *asyncCall[K, V, S, R]
	ctx     context.Context
	cancel  context.CancelFunc
}

type asyncKey[K, V, S, R any] struct {
	id    any
	calls []*asyncCall[K, V, S, R] // in arrival order; the first may be running
}

type asyncCall[K, V, S, R any] struct {
	key      *asyncKey[K, V, S, R]
	done     chan<- *asyncCall[K, V, S, R] // the node's, when the call arrived
	ctx      context.Context               // the node's, when the call started: cancelled by abandon
	rec      processor.Record[K, V]
	rc       recordContext
	raw      *RawRecord
	inRecord bool
	passed   bool
	st       S
	arrived  time.Time
	// state: 0 running, 1 delivered by its goroutine, 2 abandoned by the
	// task; whoever moves it from 0 owns the outcome.
	state atomic.Int32
	// began: when the call got its slot (unix ns; 0: waiting for one);
	// holds: it holds a slot of the instance's limit (released once).
	began atomic.Int64
	holds atomic.Bool
	res   R
	err   error
	took  time.Duration
}

// NewAsyncNode builds an async node of task b.Task.
func NewAsyncNode[K, V, S, R any](b *BuildCtx, cfg AsyncConfig, fn AsyncFuncs[K, V, S, R]) *AsyncNode[K, V, S, R] {
	cfg.Concurrency = max(cfg.Concurrency, 1)
	cfg.MaxPending = max(cfg.MaxPending, cfg.Concurrency)
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	env := b.Task.cfg.Async
	if env == nil {
		env = &AsyncEnv{}
	}
	n := &AsyncNode[K, V, S, R]{
		Base: Base{NodeName: b.Spec.Name, T: b.Task}, cfg: cfg, fn: fn, env: env,
		keys: map[any]*asyncKey[K, V, S, R]{},
		done: make(chan *asyncCall[K, V, S, R], cfg.Concurrency),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	b.Task.async = append(b.Task.async, n)
	return n
}

// Process implements Receiver: the record joins its key's queue; the
// task's goroutine waits only while the node holds MaxPending records.
func (n *AsyncNode[K, V, S, R]) Process(rec processor.Record[K, V]) {
	n.pump()
	for n.pending >= n.cfg.MaxPending && n.T.err == nil {
		n.waitOne()
	}
	if n.T.err != nil {
		return
	}
	t := n.T
	c := &asyncCall[K, V, S, R]{done: n.done, rec: rec, rc: t.cur, raw: t.curRaw, inRecord: t.inRecord, arrived: time.Now()}
	c.passed = n.fn.Pass != nil && n.fn.Pass(rec)
	id := n.fn.Key(rec.Key)
	q := n.keys[id]
	if q == nil {
		q = &asyncKey[K, V, S, R]{id: id}
		n.keys[id] = q
	}
	c.key = q
	q.calls = append(q.calls, c)
	if len(q.calls) == 1 {
		n.ready = append(n.ready, q)
	}
	n.pending++
	n.schedule()
}

// schedule starts the first record of ready keys while slots are free.
func (n *AsyncNode[K, V, S, R]) schedule() {
	for len(n.ready) > 0 && len(n.running) < n.cfg.Concurrency {
		q := n.ready[0]
		n.ready[0] = nil
		n.ready = n.ready[1:]
		c := q.calls[0]
		if c.passed {
			n.finish(c, *new(R), nil)
			continue
		}
		if n.fn.Begin != nil {
			st, err := n.begin(c)
			if err != nil {
				n.finish(c, *new(R), err)
				continue
			}
			c.st = st
		}
		n.running = append(n.running, c)
		c.ctx = n.ctx
		go n.run(c)
	}
}

func (n *AsyncNode[K, V, S, R]) begin(c *asyncCall[K, V, S, R]) (st S, err error) {
	err = safeCall(func() error {
		var e error
		st, e = n.fn.Begin(c.rec)
		return e
	})
	return st, err
}

// run is a call's goroutine.
func (n *AsyncNode[K, V, S, R]) run(c *asyncCall[K, V, S, R]) {
	if l := n.env.Limit; l != nil {
		if !l.acquire(c.ctx) {
			n.deliver(c, *new(R), c.ctx.Err())
			return
		}
		c.holds.Store(true)
	}
	start := time.Now()
	c.began.Store(start.UnixNano())
	var res R
	var err error
	for attempt := 0; ; attempt++ {
		res, err = n.attempt(c)
		if err == nil || attempt >= n.cfg.Retries || c.ctx.Err() != nil {
			break
		}
		select {
		case <-c.ctx.Done():
		case <-time.After(n.cfg.backoff(attempt)):
		}
	}
	n.releaseSlot(c)
	c.took = time.Since(start)
	n.deliver(c, res, err)
}

func (n *AsyncNode[K, V, S, R]) attempt(c *asyncCall[K, V, S, R]) (res R, err error) {
	ctx, cancel := context.WithTimeout(c.ctx, n.cfg.Timeout)
	defer cancel()
	if c.inRecord {
		ctx = processor.ContextWithRecordMetadata(ctx, c.rc.meta)
	}
	err = safeCall(func() error {
		var e error
		res, e = n.fn.Call(ctx, c.rec, c.st)
		return e
	})
	if err != nil && ctx.Err() == context.DeadlineExceeded && c.ctx.Err() == nil {
		err = fmt.Errorf("%s: the call did not return within its timeout (%v): %w", n.NodeName, n.cfg.Timeout, err)
	}
	return res, err
}

func (n *AsyncNode[K, V, S, R]) releaseSlot(c *asyncCall[K, V, S, R]) {
	if c.holds.CompareAndSwap(true, false) {
		n.env.Limit.release()
	}
}

// deliver hands a call's outcome to the task, unless the task abandoned it.
func (n *AsyncNode[K, V, S, R]) deliver(c *asyncCall[K, V, S, R], res R, err error) {
	if !c.state.CompareAndSwap(0, 1) {
		return
	}
	c.res, c.err = res, err
	// Never blocks: at most Concurrency calls run on one channel (abandon
	// gives the node a new one; abandoned calls never send).
	c.done <- c
	if n.env.Wake != nil {
		n.env.Wake()
	}
}

// pump applies the calls that completed and abandons the overdue ones,
// without waiting.
func (n *AsyncNode[K, V, S, R]) pump() {
	if len(n.running) == 0 {
		return
	}
	for {
		select {
		case c := <-n.done:
			n.completed(c)
			continue
		default:
		}
		break
	}
	n.abandonOverdue(time.Now())
}

// waitOne waits for a call to complete (or to become overdue), then pumps.
func (n *AsyncNode[K, V, S, R]) waitOne() {
	if len(n.running) == 0 {
		n.schedule()
		if len(n.running) == 0 {
			return
		}
	}
	wait := time.Second
	now := time.Now()
	for _, c := range n.running {
		if b := c.began.Load(); b != 0 {
			wait = min(wait, time.Unix(0, b).Add(n.cfg.Budget()).Sub(now))
		}
	}
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	select {
	case c := <-n.done:
		n.completed(c)
	case <-timer.C:
	}
	n.pump()
}

// drain waits until every record the node holds has completed (or the
// task failed).
func (n *AsyncNode[K, V, S, R]) drain() {
	for n.pending > 0 && n.T.err == nil {
		n.pump()
		if n.pending > 0 {
			n.waitOne()
		}
	}
}

func (n *AsyncNode[K, V, S, R]) completed(c *asyncCall[K, V, S, R]) {
	n.removeRunning(c)
	if n.env.Observe != nil {
		n.env.Observe(n.NodeName, time.Unix(0, c.began.Load()).Sub(c.arrived), c.took, c.err)
	}
	n.finish(c, c.res, c.err)
	n.schedule()
}

func (n *AsyncNode[K, V, S, R]) removeRunning(c *asyncCall[K, V, S, R]) {
	for i, r := range n.running {
		if r == c {
			n.running[i] = n.running[len(n.running)-1]
			n.running[len(n.running)-1] = nil
			n.running = n.running[:len(n.running)-1]
			return
		}
	}
}

// abandonOverdue gives up on calls past their budget: each completes with
// an ErrAsyncTimeout error (its goroutine's late result is dropped).
func (n *AsyncNode[K, V, S, R]) abandonOverdue(now time.Time) {
	budget := n.cfg.Budget()
	for i := 0; i < len(n.running); {
		c := n.running[i]
		b := c.began.Load()
		if b == 0 || now.Sub(time.Unix(0, b)) < budget || !c.state.CompareAndSwap(0, 2) {
			i++
			continue
		}
		n.releaseSlot(c)
		n.removeRunning(c)
		err := fmt.Errorf("%s: %w (its budget: %v, timeout %v and %d retries; the call ignored its context)", n.NodeName, ErrAsyncTimeout, budget-abandonGrace, n.cfg.Timeout, n.cfg.Retries)
		if n.env.Observe != nil {
			n.env.Observe(n.NodeName, time.Unix(0, b).Sub(c.arrived), now.Sub(time.Unix(0, b)), err)
		}
		n.finish(c, *new(R), err)
	}
	n.schedule()
}

// finish applies the outcome of its key's first record, in the record's
// context, and readies the key's next record.
func (n *AsyncNode[K, V, S, R]) finish(c *asyncCall[K, V, S, R], res R, err error) {
	q := c.key
	q.calls[0] = nil
	q.calls = q.calls[1:]
	if len(q.calls) == 0 {
		delete(n.keys, q.id)
	} else {
		n.ready = append(n.ready, q)
	}
	n.pending--
	t := n.T
	saved, savedRaw, savedIn := t.cur, t.curRaw, t.inRecord
	t.cur, t.curRaw, t.inRecord = c.rc, c.raw, c.inRecord
	defer func() { t.cur, t.curRaw, t.inRecord = saved, savedRaw, savedIn }()
	if err == nil && !c.passed && n.fn.End != nil {
		err = safeCall(func() error { return n.fn.End(c.rec, c.st) })
	}
	if err != nil {
		n.Fail(err)
		return
	}
	if perr := safeCall(func() error { n.fn.Emit(c.rec, res, c.passed); return nil }); perr != nil {
		n.Fail(perr)
	}
}

// abandon drops every record the node holds: running calls are cancelled
// and their results dropped.
func (n *AsyncNode[K, V, S, R]) abandon() {
	n.cancel()
	for _, c := range n.running {
		if c.state.CompareAndSwap(0, 2) {
			n.releaseSlot(c)
		}
	}
	n.done = make(chan *asyncCall[K, V, S, R], n.cfg.Concurrency)
	clear(n.running)
	n.running = n.running[:0]
	n.ready = nil
	n.keys = map[any]*asyncKey[K, V, S, R]{}
	n.pending = 0
	n.ctx, n.cancel = context.WithCancel(context.Background())
}

func (n *AsyncNode[K, V, S, R]) held() int  { return n.pending }
func (n *AsyncNode[K, V, S, R]) full() bool { return n.pending >= n.cfg.MaxPending }

// Close implements Node: what still runs is abandoned.
func (n *AsyncNode[K, V, S, R]) Close() error {
	n.abandon()
	n.cancel()
	return nil
}

// asyncNode is what a task does with its async nodes.
type asyncNode interface {
	pump()
	drain()
	abandon()
	held() int
	full() bool
}

// AsyncKey returns how an async node tells keys of type K apart: by value
// when K is comparable, by their bytes through ks otherwise (nil ks: by
// their printed form; unequal keys printed alike only lose concurrency).
func AsyncKey[K any](ks serde.Serde[K]) func(K) any {
	typ := TypeOf[K]()
	switch {
	case typ.Kind() == reflect.Interface:
		return func(k K) any {
			if v := reflect.ValueOf(k); !v.IsValid() || v.Comparable() {
				return any(k)
			}
			return fmt.Sprintf("%#v", k)
		}
	case typ.Comparable():
		return func(k K) any { return k }
	case typ == reflect.TypeFor[[]byte]():
		return func(k K) any { return string(any(k).([]byte)) }
	case ks != nil:
		return func(k K) any {
			b, err := ks.Serialize("", k)
			if err != nil {
				return fmt.Sprintf("%#v", k)
			}
			return string(b)
		}
	default:
		return func(k K) any { return fmt.Sprintf("%#v", k) }
	}
}
