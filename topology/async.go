package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/stores"
)

// Async operators call other services (a database, an HTTP or gRPC
// service, a model server) from inside a topology without holding the
// stream thread: the call runs on a goroutine of its own while the task
// goes on with the next records.
//
//   - Records of one key are called one at a time, in the order they
//     arrived; records of different keys overlap, up to the operator's
//     concurrency per task (and streams.Config.MaxAsyncCalls per instance).
//     Results are forwarded as calls complete, so every key's results keep
//     their order while different keys' may interleave.
//   - A result is forwarded with its input record's timestamp and headers,
//     and a call's error goes to the processing error handler with its input
//     record (fail, continue, or dead-letter it), as any processing error.
//   - Every commit waits for the calls of the records it covers: under
//     exactly-once, a call's results are in the same transaction as its
//     input offset. Calls still running when a task is revoked or its
//     transaction aborted are abandoned; their records are processed again
//     (by the task's next owner) and called again. Calls are therefore at
//     least once, like any side effect of a stream processor: give a call
//     with side effects an idempotency key (the record's topic, partition
//     and offset, from processor.RecordMetadataFrom(ctx)), so that a repeated
//     call changes nothing.
//   - A call gets a context with the operator's timeout; with retries it is
//     tried again after a backoff. A call that never returns is abandoned
//     once its budget (timeout × attempts plus backoffs) has passed: it
//     fails with an error for the handler, and no commit or rebalance waits
//     on it longer. Under exactly-once keep that budget below the
//     producer's transaction.timeout.ms (10 s by default): streams.New
//     refuses a topology whose budget reaches it.
//   - Memory is bounded: an operator holds at most its MaxPending records
//     per task; a task whose operator is full takes no record, its input
//     buffers fill and consumption slows down to what the service answers.

// ErrAsyncTimeout is in the error of a call abandoned because it did not
// return within its budget (AsyncOptions.Budget): the processing error
// handler gets it with the call's input record.
var ErrAsyncTimeout = rt.ErrAsyncTimeout

// AsyncOptions configure an async operator: start from Async().
type AsyncOptions struct {
	name string
	cfg  rt.AsyncConfig
}

// Async returns the defaults of an async operator: 16 calls at once per
// task, at most four times as many records held per task, a 5-second
// timeout per call, no retries (WithRetries: backoff 100 ms, doubled up to
// 5 s).
func Async() AsyncOptions {
	return AsyncOptions{cfg: rt.AsyncConfig{Concurrency: 16, Timeout: 5 * time.Second,
		Backoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}}
}

// WithName names the operator's node.
func (o AsyncOptions) WithName(name string) AsyncOptions { o.name = name; return o }

// WithConcurrency sets how many calls run at once per task (default 16).
func (o AsyncOptions) WithConcurrency(n int) AsyncOptions { o.cfg.Concurrency = n; return o }

// WithMaxPending sets how many records the operator holds per task,
// running or waiting for their key's earlier records or for a free slot
// (default four times the concurrency; at least the concurrency). Every
// commit waits for the records held: more makes commits longer, fewer
// leaves slots idle when keys repeat.
func (o AsyncOptions) WithMaxPending(n int) AsyncOptions { o.cfg.MaxPending = n; return o }

// WithTimeout sets the deadline of one call attempt (default 5 s).
func (o AsyncOptions) WithTimeout(d time.Duration) AsyncOptions { o.cfg.Timeout = d; return o }

// WithRetries tries a failed call up to n more times, waiting backoff
// before the first retry and twice as long before each next one (at most
// max). A call is not retried once its task gives it up (revoked, closed).
func (o AsyncOptions) WithRetries(n int, backoff, max time.Duration) AsyncOptions {
	o.cfg.Retries, o.cfg.Backoff, o.cfg.MaxBackoff = n, backoff, max
	return o
}

// Budget is the longest one record's call may take with its retries,
// after which it is abandoned with an error.
func (o AsyncOptions) Budget() time.Duration { return o.cfg.Budget() }

func asyncOptions(b *Builder, op string, opts []AsyncOptions) AsyncOptions {
	o := Async()
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.cfg.MaxPending == 0 {
		o.cfg.MaxPending = 4 * o.cfg.Concurrency
	}
	c := o.cfg
	switch {
	case c.Concurrency < 1:
		b.errorf("%s: concurrency %d: must be at least 1", op, c.Concurrency)
	case c.MaxPending < c.Concurrency:
		b.errorf("%s: max pending %d below the concurrency %d", op, c.MaxPending, c.Concurrency)
	case c.Timeout <= 0:
		b.errorf("%s: timeout %v: must be positive", op, c.Timeout)
	case c.Retries < 0 || c.Backoff < 0 || c.MaxBackoff < 0:
		b.errorf("%s: retries %d, backoff %v, max %v: none may be negative", op, c.Retries, c.Backoff, c.MaxBackoff)
	}
	return o
}

// asyncNode adds an async node of fn after s and returns its spec.
func asyncNode[K, V, S, R, KOut, VOut any](s *KStream[K, V], o AsyncOptions, prefix string,
	fn func(bc *rt.BuildCtx, ch []rt.Receiver[KOut, VOut]) (rt.AsyncFuncs[K, V, S, R], error)) *rt.NodeSpec {
	key := rt.AsyncKey(s.keySerde)
	spec := processorSpec[K, V, KOut, VOut](s.b.nameOr(o.name, prefix), func(bc *rt.BuildCtx) (rt.Node, error) {
		ch, err := rt.Children[KOut, VOut](bc)
		if err != nil {
			return nil, err
		}
		f, err := fn(bc, ch)
		if err != nil {
			return nil, err
		}
		f.Key = key
		return rt.NewAsyncNode(bc, o.cfg, f), nil
	})
	spec.AsyncBudget = o.cfg.Budget()
	return s.b.add(spec, s.node)
}

func forward[K, V any](ch []rt.Receiver[K, V], rec processor.Record[K, V]) {
	for _, c := range ch {
		c.Process(rec)
	}
}

func isTombstone[K, V any](rec processor.Record[K, V]) bool { return rec.NullValue }

// MapValuesAsync turns each record's value into a new value through f,
// called on a goroutine (see Async operators above): the key stays, so no
// repartition follows. f gets a context with the operator's timeout, the
// key and the value; its error goes to the processing error handler.
// Tombstones pass through in their key's order without calling f.
func MapValuesAsync[K, V, V2 any](s *KStream[K, V], f func(ctx context.Context, key K, value V) (V2, error), opts ...AsyncOptions) *KStream[K, V2] {
	o := asyncOptions(s.b, "MapValuesAsync", opts)
	n := asyncNode[K, V, struct{}, V2, K, V2](s, o, "KSTREAM-MAPVALUES-ASYNC-", func(_ *rt.BuildCtx, ch []rt.Receiver[K, V2]) (rt.AsyncFuncs[K, V, struct{}, V2], error) {
		return rt.AsyncFuncs[K, V, struct{}, V2]{
			Pass: isTombstone[K, V],
			Call: func(ctx context.Context, rec processor.Record[K, V], _ struct{}) (V2, error) {
				return f(ctx, rec.Key, rec.Value)
			},
			Emit: func(rec processor.Record[K, V], v V2, passed bool) {
				forward(ch, processor.Record[K, V2]{Key: rec.Key, Value: v, NullValue: passed, Timestamp: rec.Timestamp, Headers: rec.Headers})
			},
		}, nil
	})
	return newStream[K, V2](s.b, n, s.keySerde, nil, s.repartitionRequired)
}

// FlatMapValuesAsync turns each record's value into zero or more values
// through f, called on a goroutine (see Async operators above), forwarded
// in f's order under the record's key. A tombstone passes through once, in
// its key's order, without calling f.
func FlatMapValuesAsync[K, V, V2 any](s *KStream[K, V], f func(ctx context.Context, key K, value V) ([]V2, error), opts ...AsyncOptions) *KStream[K, V2] {
	o := asyncOptions(s.b, "FlatMapValuesAsync", opts)
	n := asyncNode[K, V, struct{}, []V2, K, V2](s, o, "KSTREAM-FLATMAPVALUES-ASYNC-", func(_ *rt.BuildCtx, ch []rt.Receiver[K, V2]) (rt.AsyncFuncs[K, V, struct{}, []V2], error) {
		return rt.AsyncFuncs[K, V, struct{}, []V2]{
			Pass: isTombstone[K, V],
			Call: func(ctx context.Context, rec processor.Record[K, V], _ struct{}) ([]V2, error) {
				return f(ctx, rec.Key, rec.Value)
			},
			Emit: func(rec processor.Record[K, V], vs []V2, passed bool) {
				if passed {
					forward(ch, processor.Record[K, V2]{Key: rec.Key, NullValue: true, Timestamp: rec.Timestamp, Headers: rec.Headers})
					return
				}
				for _, v := range vs {
					forward(ch, processor.Record[K, V2]{Key: rec.Key, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers})
				}
			},
		}, nil
	})
	return newStream[K, V2](s.b, n, s.keySerde, nil, s.repartitionRequired)
}

// ForeachAsync calls f for each record on a goroutine (see Async operators
// above): a side effect such as a write to a system outside Kafka's
// transactions, at least once per record (use an idempotency key).
// Tombstones are not passed to f.
func ForeachAsync[K, V any](s *KStream[K, V], f func(ctx context.Context, key K, value V) error, opts ...AsyncOptions) {
	o := asyncOptions(s.b, "ForeachAsync", opts)
	asyncNode[K, V, struct{}, struct{}, K, V](s, o, "KSTREAM-FOREACH-ASYNC-", func(*rt.BuildCtx, []rt.Receiver[K, V]) (rt.AsyncFuncs[K, V, struct{}, struct{}], error) {
		return rt.AsyncFuncs[K, V, struct{}, struct{}]{
			Pass: isTombstone[K, V],
			Call: func(ctx context.Context, rec processor.Record[K, V], _ struct{}) (struct{}, error) {
				return struct{}{}, f(ctx, rec.Key, rec.Value)
			},
			Emit: func(processor.Record[K, V], struct{}, bool) {},
		}, nil
	})
}

// KeyState is an async call's view of its record's key in a key-value
// store (MapValuesAsyncWithState): Get returns the key's value as of the
// call's start, with every earlier record of the key applied; Put and
// Delete take effect in the store when the call succeeds, before its result
// is forwarded (a failed call changes nothing). Only the call's goroutine
// may use it, and only during the call.
type KeyState[S any] struct {
	value S
	found bool
	write int8 // 0 none, 1 put, 2 delete
}

// Get returns the key's value and whether it has one, writes of this call
// included.
func (s *KeyState[S]) Get() (S, bool) { return s.value, s.found }

// Put sets the key's value.
func (s *KeyState[S]) Put(v S) { s.value, s.found, s.write = v, true, 1 }

// Delete removes the key's value.
func (s *KeyState[S]) Delete() {
	var zero S
	s.value, s.found, s.write = zero, false, 2
}

// MapValuesAsyncWithState is MapValuesAsync with the state of the record's
// key in the key-value store named store (added with AddStateStore, or
// by stores.KeyValue): f reads and writes it through a KeyState.
// Because a key's records are called one at a time, each seeing the
// writes of the ones before, per-key state stays as consistent as in a
// synchronous processor; other keys of the store are out of the call's
// reach (they may change while it runs).
func MapValuesAsyncWithState[K, V, S, V2 any](s *KStream[K, V], store string,
	f func(ctx context.Context, key K, value V, state *KeyState[S]) (V2, error), opts ...AsyncOptions) *KStream[K, V2] {
	o := asyncOptions(s.b, "MapValuesAsyncWithState", opts)
	n := asyncNode[K, V, *KeyState[S], V2, K, V2](s, o, "KSTREAM-MAPVALUES-ASYNC-", func(bc *rt.BuildCtx, ch []rt.Receiver[K, V2]) (rt.AsyncFuncs[K, V, *KeyState[S], V2], error) {
		kv, err := rt.Store[stores.KeyValueStore[K, S]](bc.Task, store)
		if err != nil {
			return rt.AsyncFuncs[K, V, *KeyState[S], V2]{}, fmt.Errorf("%s: %w", bc.Spec.Name, err)
		}
		return rt.AsyncFuncs[K, V, *KeyState[S], V2]{
			Pass: isTombstone[K, V],
			Begin: func(rec processor.Record[K, V]) (*KeyState[S], error) {
				v, ok, err := kv.Get(rec.Key)
				if err != nil {
					return nil, fmt.Errorf("reading store %s: %w", store, err)
				}
				return &KeyState[S]{value: v, found: ok}, nil
			},
			Call: func(ctx context.Context, rec processor.Record[K, V], st *KeyState[S]) (V2, error) {
				return f(ctx, rec.Key, rec.Value, st)
			},
			End: func(rec processor.Record[K, V], st *KeyState[S]) error {
				var err error
				switch st.write {
				case 1:
					err = kv.Put(rec.Key, st.value)
				case 2:
					_, _, err = kv.Delete(rec.Key)
				}
				if err != nil {
					return fmt.Errorf("writing store %s: %w", store, err)
				}
				return nil
			},
			Emit: func(rec processor.Record[K, V], v V2, passed bool) {
				forward(ch, processor.Record[K, V2]{Key: rec.Key, Value: v, NullValue: passed, Timestamp: rec.Timestamp, Headers: rec.Headers})
			},
		}, nil
	})
	s.b.connect(n, store)
	return newStream[K, V2](s.b, n, s.keySerde, nil, s.repartitionRequired)
}
