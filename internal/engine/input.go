package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// The input side of a thread: each assigned partition's records wait in a
// buffer until their task takes them in timestamp order.

type partition struct {
	tp       kclient.TP
	consumed prometheus.Counter // nil without metrics
	task     *task
	buf      []*rt.RawRecord
	head     int
	paused   bool
	// held: paused because its buffer is full while its task takes no
	// record (its async calls are full): holdBack.
	held bool
	next int64 // offset after the last processed record, -1 none yet
}

func (p *partition) size() int { return len(p.buf) - p.head }

// reset empties the buffer: the partition is read again from a new
// position.
func (p *partition) reset() {
	clear(p.buf)
	p.buf, p.head, p.next, p.held = p.buf[:0], 0, -1, false
}

func (p *partition) pop() *rt.RawRecord {
	r := p.buf[p.head]
	p.buf[p.head] = nil
	p.head++
	if p.head == len(p.buf) {
		p.buf, p.head = p.buf[:0], 0
	}
	return r
}

// poll moves records from the consumer into the partition buffers. The
// buffers are bounded as a whole (MaxBufferedRecords per partition): while
// they are full the thread does not poll, and the consumer, whose own queue
// is bounded (the fetcher's few partition shares, or librdkafka's
// queued.max.messages.kbytes), stops fetching. Pausing single
// partitions would make librdkafka drop what it prefetched for them and
// fetch it again on resume — measured: it cut throughput by an order of
// magnitude — so partitions are paused only while their task restores.
func (th *Thread) poll() error {
	if err := th.holdBack(); err != nil {
		return err
	}
	buffered := 0
	for _, p := range th.tm.reg.parts {
		if p.task.state == taskRunning {
			buffered += p.size()
		}
	}
	limit := th.cfg.MaxBufferedRecords * max(len(th.tm.reg.parts), 1)
	if th.behind {
		// A task waits for a partition whose records are on their way:
		// they come after what the consumer holds, so take it even past
		// the limit (waiting for them with full buffers would be for
		// ever), and wait for it rather than spin.
		limit = buffered + th.cfg.MaxBufferedRecords
	}
	if buffered >= limit {
		return nil
	}
	timeout := 50 * time.Millisecond
	if (buffered > 0 && !th.behind) || th.tm.restoring() || th.tm.reg.asyncHeld() {
		timeout = 0 // (waiting for async calls: waitForCalls)
	}
	for ; buffered < limit; buffered++ {
		r, err := th.consumer.Poll(timeout)
		timeout = 0
		if err != nil {
			var reset *kclient.OffsetReset
			var refused *kclient.OffsetOutOfRange
			switch {
			case errors.As(err, &refused):
				return err // the source's policy is none: nothing may be skipped
			case errors.As(err, &reset):
				th.cfg.Resets.add(th.log, ResetSource, *reset)
				continue
			case kclient.IsSecurity(err):
				return err
			case errors.Is(err, kclient.ErrFatal):
				return fmt.Errorf("%w: %w", errRejoin, err)
			case kclient.IsTransient(err):
				th.Health.down(th.log, "consuming", err)
			default:
				th.log.Warn("consumer error", zap.Error(err))
			}
			return nil
		}
		if r == nil || th.cbErr != nil {
			return nil
		}
		if th.Health.isDown() {
			th.Health.up(th.log)
		}
		p := th.tm.reg.parts[kclient.TP{Topic: r.Topic, Partition: r.Partition}]
		if p == nil {
			continue // a partition no longer ours
		}
		p.task.t.Prepare(r) // timestamps from extractors, for ordering
		p.buf = append(p.buf, r)
		if p.size() >= th.cfg.MaxBufferedRecords {
			if err := th.hold(p); err != nil {
				return err
			}
		}
		th.Stats.Consumed.Add(1)
		if p.consumed != nil {
			p.consumed.Inc()
		}
	}
	return nil
}

// holdBack resumes held-back partitions (see hold) once half of their
// buffer is processed, reading on where the buffer ends.
func (th *Thread) holdBack() error {
	var free []kclient.TP
	for tp, p := range th.tm.reg.parts {
		if p.held && p.size() <= th.cfg.MaxBufferedRecords/2 {
			p.held = false
			free = append(free, tp)
		}
	}
	if len(free) == 0 {
		return nil
	}
	if err := th.consumer.Resume(free); err != nil {
		return fmt.Errorf("resuming partitions held back: %w", err)
	}
	for _, tp := range free {
		// Read on after what the buffer holds (librdkafka would skip what
		// it had prefetched).
		p := th.tm.reg.parts[tp]
		at := p.next
		if p.size() > 0 {
			at = p.buf[len(p.buf)-1].Offset + 1
		}
		if at >= 0 {
			if err := th.consumer.Seek(tp, at); err != nil {
				return fmt.Errorf("resuming %s at %d: %w", tp, at, err)
			}
		}
	}
	return nil
}

// hold pauses a partition of a task with async operators once its buffer
// holds MaxBufferedRecords: such a task may take no record for a while
// (its operators full, waiting for a slow service), and a partition's
// records come a fetch response's share at a time, so without this one
// partition could fill the thread's whole buffer budget and hold back its
// other tasks. (A task without async operators takes records as fast as
// the thread runs; pausing would only make the fetcher start over.)
func (th *Thread) hold(p *partition) error {
	if p.held || p.paused || p.size() < th.cfg.MaxBufferedRecords || !p.task.t.HasAsync() {
		return nil
	}
	if err := th.consumer.Pause([]kclient.TP{p.tp}); err != nil {
		return fmt.Errorf("pausing %s, held back: %w", p.tp, err)
	}
	p.held = true
	return nil
}

// latencySample: the latency histograms observe one record in 16 (two
// clock reads a record were a twentieth of a stateless topology's CPU).
const latencySample = 15

// process runs buffered records through their tasks, round-robin, up to a
// budget so the loop keeps polling and committing on time; each task first
// forwards the results of its async calls that completed, and takes no
// record while its async operators are full. It reports whether it
// processed a record.
func (th *Thread) process() (bool, error) {
	th.behind = false
	now := time.Now()
	deadline := now.Add(100 * time.Millisecond)
	n := 0
	for n < 20_000 {
		progressed := false
		for _, tk := range th.tm.reg.order {
			if tk.state != taskRunning {
				continue
			}
			if err := tk.t.Pump(); err != nil {
				return n > 0, err
			}
			async := tk.t.HasAsync()
			for i := 0; i < 100 && (!async || tk.t.Accepting()); i++ {
				p, behind := tk.next(now, th.cfg.MaxTaskIdle, th.consumer)
				th.behind = th.behind || behind
				if p == nil {
					break
				}
				r := p.pop()
				var err error
				if m := th.cfg.Metrics; m != nil && n&latencySample == 0 {
					t0 := time.Now()
					err = tk.t.Process(r)
					m.ProcessLatency.Observe(time.Since(t0).Seconds())
					m.EndToEnd.Observe(float64(t0.UnixMilli()-r.Timestamp) / 1000)
				} else {
					err = tk.t.Process(r)
				}
				p.next = r.Offset + 1
				th.dirty = true
				progressed = true
				n++
				if err != nil {
					return true, err
				}
			}
		}
		if !progressed || time.Now().After(deadline) {
			break
		}
	}
	return n > 0, nil
}

func (th *Thread) punctuateWallClock() error {
	now := th.cfg.WallClock()
	for _, tk := range th.tm.reg.order {
		if tk.state != taskRunning {
			continue
		}
		if err := tk.t.PunctuateWallClock(now); err != nil {
			return err
		}
	}
	return nil
}
