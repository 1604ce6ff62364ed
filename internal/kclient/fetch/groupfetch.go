package fetch

import (
	"context"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/franz"
	"github.com/eddy-go/eddy/internal/rt"
)

// Member is a stream thread's group membership without its records: it
// joins, heartbeats, takes part in rebalances, reads and commits the
// group's offsets and gives the group metadata a transaction carries. Its
// rebalance callbacks run on the stream thread's goroutine, inside Serve
// (which a group consumer's Poll calls); the records come from the
// fetcher. A member may also implement kclient.StateReporter,
// kclient.NoticeUser and kclient.RebalanceWatcher; the group consumer
// passes those on.
type Member interface {
	// Subscribe joins the group on topics. assigned runs once the member
	// has partitions added and before onRebalance hears of them; revoked
	// after onRebalance heard of a revocation (of every partition, or under
	// a cooperative assignor of some) and the member let them go.
	Subscribe(topics []string, onRebalance func(kclient.Rebalance) error, assigned func([]kclient.TP) error, revoked func([]kclient.TP)) error
	// Serve runs the rebalance callbacks due, waiting up to timeout for
	// one, and returns an error the group reported (a refused login, a
	// denied group).
	Serve(timeout time.Duration) error
	// Assign readies the member for an assignment of its own choosing
	// (a reader without the group).
	Assign(tps []kclient.TP) error
	Committed(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, map[kclient.TP]string, error)
	Commit(offsets map[kclient.TP]int64, meta map[kclient.TP]string) error
	GroupMetadata() (any, error)
	Close() error
}

// NewGroupConsumer makes the Consumer of a group member m whose records
// come from a fetcher of its own on c: a stream thread's (stream, read in
// the thread's fetch sizes) or a global or changelog reader's.
func NewGroupConsumer(m Member, c franz.ClientConfig, stream bool) (kclient.Consumer, error) {
	f, err := newFetcher(c)
	if err != nil {
		return nil, err
	}
	f.reset, f.resets, f.own = c.Reset(), c.Resets(), true
	if stream {
		f.maxBytes, f.partBytes = groupFetchMaxBytes, groupFetchPartitionBytes
		f.sizes(c)
	}
	return newGroupConsumer(m, f), nil
}

// groupConsumer is a group member whose records come from the fetcher:
// the member (franz-go, or librdkafka with the eddy_librdkafka build tag)
// joins, heartbeats, runs the rebalance callbacks, reads and commits
// offsets and gives the group metadata a transaction needs, and reads none
// of the records; the fetcher sends fetch requests of its own and decodes
// whole batches in Go. Without Subscribe it reads what Assign gives it. All
// its methods run on the stream thread's goroutine (the rebalance
// callbacks inside Poll too).
type groupConsumer struct {
	m Member
	f *fetcher
	// pos holds the next offset of each assigned partition while the
	// fetcher does not read it (paused, sought, or not started yet), or
	// posUnknown for a partition that starts at its committed offset.
	pos    map[kclient.TP]int64
	paused map[kclient.TP]bool
	// committed keeps the committed offsets last read, where partitions
	// new to this member start (the stream thread reads them as it takes
	// the assignment).
	committed map[kclient.TP]int64
	// restart: the fetcher was stopped, to start again from pos at the
	// next Poll (so that several seeks and pauses restart it once).
	restart bool
	// since counts records returned since the member was last served.
	since int
}

func newGroupConsumer(m Member, f *fetcher) *groupConsumer {
	return &groupConsumer{m: m, f: f, pos: map[kclient.TP]int64{}, paused: map[kclient.TP]bool{}, committed: map[kclient.TP]int64{}}
}

// posUnknown marks a partition that starts at its committed offset.
const posUnknown = -1001

// Fetch sizes of a stream thread's reads: an eighth of a restore's. The
// limits count compressed batches, and a stream's records are often
// compressed well (the benchmarks' ~10:1), so a restore-sized share
// decoded into tens of megabytes of records the thread holds at most
// 1,000 a partition of; the fetcher keeps a share being read, two queued
// and a response being decoded. Measured, eddy alone, interleaved runs on
// one broker (max RSS MiB; 2 MiB / 512 KiB -> 512 KiB / 128 KiB): join
// 159-213 -> 106-116, stateless 122-124 -> 91-102, word count 138-151 ->
// 102-109, windowed 123-141 -> 85-94; records/s within the runs' spread
// (word count, windowed), the join's exactly-once 230-260k against
// 280-330k. (An earlier step, 4 MiB / 1 MiB -> 2 MiB / 512 KiB: word count
// 172-189 -> 111-120, join 153-193 -> 120-142.)
const (
	groupFetchMaxBytes       = 512 << 10
	groupFetchPartitionBytes = 128 << 10
)

// eventsEvery is how many records may be returned between two times the
// member is served (rebalances, errors; librdkafka's max.poll.interval.ms
// counts from the last), eventsWait how long an idle Poll waits on the
// fetcher before serving the member again.
const (
	eventsEvery = 500
	eventsWait  = 10 * time.Millisecond
)

// ReportState implements StateReporter: a member whose assignor places
// tasks by their state (franz-go's, eddy's assignor) tells it what state
// the instance holds; librdkafka's range assignor has no use for it.
func (g *groupConsumer) ReportState(state func() kclient.MemberState) {
	if r, ok := g.m.(kclient.StateReporter); ok {
		r.ReportState(state)
	}
}

// UseNotices implements NoticeUser: the member sends its joins and
// leaves to n and probes the group on the others' (a no-op for a member
// that cannot: librdkafka's). Called before Subscribe.
func (g *groupConsumer) UseNotices(n kclient.Notices) {
	if u, ok := g.m.(kclient.NoticeUser); ok && n != nil {
		u.UseNotices(n)
	}
}

// Rebalancing implements RebalanceWatcher: the member's SyncGroup is under
// way, when the group coordinator refuses offset commits (false for a
// member that cannot tell: librdkafka's).
func (g *groupConsumer) Rebalancing() bool {
	r, ok := g.m.(kclient.RebalanceWatcher)
	return ok && r.Rebalancing()
}

// Rejoin implements StateReporter: the member joins the group again (a
// no-op for a member whose assignor does not weigh state).
func (g *groupConsumer) Rejoin() {
	if r, ok := g.m.(kclient.StateReporter); ok {
		r.Rejoin()
	}
}

func (g *groupConsumer) Subscribe(topics []string, onRebalance func(kclient.Rebalance) error) error {
	return g.m.Subscribe(topics, onRebalance, func(tps []kclient.TP) error {
		g.halt()
		for _, tp := range tps {
			g.pos[tp] = posUnknown
			delete(g.paused, tp)
		}
		return nil
	}, func(tps []kclient.TP) {
		g.halt()
		for _, tp := range tps {
			delete(g.pos, tp)
			delete(g.paused, tp)
			delete(g.committed, tp)
		}
		// A cooperative rebalance took some: the rest read on.
		g.restart = len(g.pos) > 0
	})
}

// halt stops the fetcher, keeping the position of every partition it read,
// and marks it for a restart.
func (g *groupConsumer) halt() {
	if g.restart {
		return
	}
	for tp := range g.f.pos {
		if off, ok := g.f.position(tp); ok {
			g.pos[tp] = off
		}
	}
	g.f.stop()
	g.f.pos = map[kclient.TP]int64{}
	g.f.cur, g.f.at = chunk{}, 0
	g.restart = true
}

// start starts the fetcher on every assigned partition not paused.
func (g *groupConsumer) start() error {
	offsets := map[kclient.TP]int64{}
	var unknown []kclient.TP
	for tp, off := range g.pos {
		if g.paused[tp] {
			continue
		}
		if off == posUnknown {
			c, ok := g.committed[tp]
			if !ok {
				unknown = append(unknown, tp)
				continue
			}
			off = c // -1 (none): as auto.offset.reset says
		}
		offsets[tp] = off
	}
	if len(unknown) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, _, err := g.Committed(ctx, unknown)
		cancel()
		if err != nil {
			return fmt.Errorf("reading committed offsets to start from: %w", err)
		}
		for _, tp := range unknown {
			offsets[tp] = c[tp]
		}
	}
	g.restart = false
	return g.f.Assign(offsets)
}

func (g *groupConsumer) Poll(timeout time.Duration) (*rt.RawRecord, error) {
	var deadline time.Time
	for {
		if g.since >= eventsEvery {
			g.since = 0
			if err := g.m.Serve(0); err != nil {
				return nil, err
			}
		}
		if g.restart {
			if err := g.start(); err != nil {
				return nil, err
			}
		}
		if deadline.IsZero() {
			if r, err := g.f.Poll(0); r != nil || err != nil {
				g.since++
				return r, err
			}
			deadline = time.Now().Add(timeout)
			g.since = eventsEvery
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		wait := min(left, eventsWait)
		if g.f.chunks == nil {
			// Nothing to fetch: wait on the member instead.
			g.since = 0
			if err := g.m.Serve(wait); err != nil {
				return nil, err
			}
			continue
		}
		r, err := g.f.Poll(wait)
		g.since = eventsEvery
		if r != nil || err != nil {
			return r, err
		}
	}
}

// Assign reads offsets (-1: the committed offset) without the group.
func (g *groupConsumer) Assign(offsets map[kclient.TP]int64) error {
	tps := make([]kclient.TP, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	if err := g.m.Assign(tps); err != nil {
		return err
	}
	g.halt()
	clear(g.pos)
	clear(g.paused)
	for tp, off := range offsets {
		if off < 0 {
			off = posUnknown
		}
		g.pos[tp] = off
	}
	return nil
}

func (g *groupConsumer) Pause(tps []kclient.TP) error {
	g.halt()
	for _, tp := range tps {
		g.paused[tp] = true
	}
	return nil
}

func (g *groupConsumer) Resume(tps []kclient.TP) error {
	g.halt()
	for _, tp := range tps {
		delete(g.paused, tp)
	}
	return nil
}

// Seek moves tp to offset (-2: the partition's start).
func (g *groupConsumer) Seek(tp kclient.TP, offset int64) error {
	if _, ok := g.pos[tp]; !ok {
		if _, ok := g.f.pos[tp]; !ok {
			return fmt.Errorf("seeking %s: not assigned", tp)
		}
	}
	g.halt()
	if offset < 0 {
		offset = kclient.OffsetEarliest
	}
	g.pos[tp] = offset
	return nil
}

func (g *groupConsumer) Committed(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, map[kclient.TP]string, error) {
	c, meta, err := g.m.Committed(ctx, tps)
	if err == nil {
		for tp, off := range c {
			g.committed[tp] = off
		}
	}
	return c, meta, err
}

// Position returns the next offsets to read; -1001 for a partition that
// has not started (as librdkafka's consumer does).
func (g *groupConsumer) Position(tps []kclient.TP) (map[kclient.TP]int64, error) {
	out := make(map[kclient.TP]int64, len(tps))
	for _, tp := range tps {
		off, ok := g.f.position(tp)
		if !ok {
			if off, ok = g.pos[tp]; !ok {
				return nil, fmt.Errorf("position of %s: not assigned", tp)
			}
		}
		if off < 0 {
			off = posUnknown
		}
		out[tp] = off
	}
	return out, nil
}

func (g *groupConsumer) HighWatermark(tp kclient.TP) int64 { return g.f.highWatermark(tp) }

// CaughtUp implements Consumer.
func (g *groupConsumer) CaughtUp(tp kclient.TP) bool { return g.f.caughtUp(tp) }

func (g *groupConsumer) Commit(offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	return g.m.Commit(offsets, meta)
}

func (g *groupConsumer) GroupMetadata() (any, error) { return g.m.GroupMetadata() }

// Close leaves the group (its revocation callback runs) and then stops
// the fetcher.
func (g *groupConsumer) Close() error {
	err := g.m.Close()
	g.f.Close()
	return err
}
