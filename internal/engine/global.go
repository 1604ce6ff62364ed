package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// GlobalReader keeps an instance's global tables: Bootstrap reads all
// partitions of their topics to the end before any stream thread
// processes, then Run follows the topics until the instance stops. Each
// partition's records are written with the offset after them in one atomic
// write, so a restart resumes where the store stands.
type GlobalReader struct {
	cfg      *Config
	log      *zap.Logger
	consumer kclient.Consumer
	byTopic  map[string]*rt.GlobalStore
	pending  map[kclient.TP][]storage.ChangelogRecord
	next     map[kclient.TP]int64

	// Applied counts records written to global stores; Skipped counts bad
	// records (no key, or rejected by the table's serdes), each logged.
	Applied, Skipped atomic.Int64
	// Health says whether the brokers answer the reader.
	Health Health
}

// NewGlobalReader returns a reader for cfg.Program's global stores.
func NewGlobalReader(cfg *Config) *GlobalReader {
	g := &GlobalReader{cfg: cfg, log: cfg.Log.Named("global"), byTopic: map[string]*rt.GlobalStore{},
		pending: map[kclient.TP][]storage.ChangelogRecord{}, next: map[kclient.TP]int64{}}
	for _, gs := range cfg.Program.GlobalStores {
		g.byTopic[gs.Topic] = gs
	}
	return g
}

func (g *GlobalReader) backend(gs *rt.GlobalStore) storage.Backend {
	return storage.Pick(gs.InMemory, g.cfg.Pebble, g.cfg.Memory)
}

const globalBatch = 10_000

// Bootstrap brings every global store up to its topic's end offsets (the
// last stable offsets under exactly-once) as they are when it starts. A
// store whose offsets fall outside its topic (truncated, or recreated), or
// whose state is older than its compacted topic keeps deletes (staleness),
// is wiped and read in full; so is one that resumed kept state but read
// the rest too late (resumeDeadline), after which Bootstrap starts over.
func (g *GlobalReader) Bootstrap(ctx context.Context) error {
	if len(g.byTopic) == 0 {
		return nil
	}
	adm := &lazyAdmin{newAdmin: g.cfg.NewAdmin}
	defer adm.close()
	for {
		again, err := g.bootstrap(ctx, adm.get, adm.reset)
		if err != nil || !again {
			return err
		}
	}
}

// bootstrap is one attempt of Bootstrap; again: a store is wiped to be
// read in full by the next.
func (g *GlobalReader) bootstrap(ctx context.Context, admin func() (kclient.Admin, error), reset func(int)) (again bool, err error) {
	began := g.cfg.WallClock()
	var tps []kclient.TP
	for _, gs := range g.cfg.Program.GlobalStores {
		for p := range g.cfg.Partitions[gs.Topic] {
			tps = append(tps, kclient.TP{Topic: gs.Topic, Partition: p})
		}
	}
	var start, end map[kclient.TP]int64
	err = retry(ctx, &g.Health, g.log, "reading global topics' offsets", func() (err error) {
		adm, err := admin()
		if err != nil {
			return err
		}
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start, end, err = adm.Offsets(octx, tps, g.cfg.ExactlyOnce)
		return err
	}, reset)
	if err != nil {
		return false, fmt.Errorf("reading global topics' offsets: %w", err)
	}
	// What each store holds: its stored offsets, whether one is outside
	// its topic, whether it would resume (a partition behind its end).
	type kept struct {
		stored           map[int32]int64
		outside, resumes bool
	}
	keeps := map[string]*kept{}
	var resuming []string
	for _, gs := range g.cfg.Program.GlobalStores {
		k := &kept{stored: map[int32]int64{}}
		keeps[gs.Name] = k
		for p := range g.cfg.Partitions[gs.Topic] {
			tp := kclient.TP{Topic: gs.Topic, Partition: p}
			stored, ok, err := storage.GlobalOffset(g.backend(gs), gs.Name, p)
			if err != nil {
				return false, err
			}
			if !ok {
				continue
			}
			k.stored[p] = stored
			if stored < start[tp] || stored > end[tp] {
				g.log.Warn("global store offset outside its topic; wiping and reading the topic in full",
					zap.String("store", gs.Name), zap.Stringer("partition", tp), zap.Int64("stored", stored),
					zap.Int64("topic_start", start[tp]), zap.Int64("topic_end", end[tp]))
				g.cfg.Resets.add(g.log, ResetGlobal, kclient.OffsetReset{TP: tp, From: stored, To: start[tp], Earliest: start[tp]})
				k.outside = true
			} else if stored < end[tp] {
				k.resumes = true
			}
		}
		if k.resumes && !k.outside && !slices.Contains(resuming, gs.Topic) {
			resuming = append(resuming, gs.Topic)
		}
	}
	var retention map[string]tombstoneRetention
	if len(resuming) > 0 {
		if retention, err = readRetentions(ctx, &g.Health, g.log, admin, reset, resuming); err != nil {
			return false, err
		}
	}
	from := map[kclient.TP]int64{}
	deadlines := map[*rt.GlobalStore]int64{}
	for _, gs := range g.cfg.Program.GlobalStores {
		b, k := g.backend(gs), keeps[gs.Name]
		wipe := k.outside || len(k.stored) == 0
		if k.resumes && !k.outside {
			synced, ok, err := storage.SyncedAt(b, storage.GlobalTask, gs.Name)
			if err != nil {
				return false, err
			}
			r := retention[gs.Topic]
			if why := staleness(began, synced, ok, r); why != "" {
				g.cfg.StateDirectory.Rebuilt.Add(1)
				g.log.Info("wiping a global store's local state and reading its topic in full: "+why,
					zap.String("store", gs.Name), zap.Duration("delete_retention", r.keep), zap.Bool("delete_retention_assumed", r.assumed))
				wipe = true
			} else {
				deadlines[gs] = resumeDeadline(synced, r)
			}
		}
		if wipe {
			if err := storage.DropGlobal(b, gs.Name); err != nil {
				return false, err
			}
			// Read from the start, it is in step as of now (see
			// storage.SyncedAt).
			if err := storage.SetSyncedAt(b, storage.GlobalTask, gs.Name, began); err != nil {
				return false, err
			}
		}
		for p := range g.cfg.Partitions[gs.Topic] {
			tp := kclient.TP{Topic: gs.Topic, Partition: p}
			from[tp] = start[tp]
			if stored, ok := k.stored[p]; ok && !wipe {
				from[tp] = stored
			}
		}
	}
	if err := g.readToEnd(ctx, tps, from, end); err != nil {
		if errors.Is(err, errReadAgain) {
			clear(g.next)
			clear(g.pending)
			return true, nil
		}
		return false, err
	}
	now := g.cfg.WallClock()
	for gs, deadline := range deadlines {
		if deadline > 0 && now >= deadline {
			// Deletes written after the kept state may have been compacted
			// away before they were read.
			g.cfg.StateDirectory.Rebuilt.Add(1)
			g.log.Info("reading a global store's topic again in full: reading it took longer than the topic keeps deletes past the state's last sync",
				zap.String("store", gs.Name), zap.Duration("late_by", time.Duration(now-deadline)*time.Millisecond))
			if err := storage.DropGlobal(g.backend(gs), gs.Name); err != nil {
				return false, err
			}
			again = true
		}
	}
	if again {
		g.consumer.Close()
		g.consumer = nil
		clear(g.next)
		return true, nil
	}
	for _, gs := range g.cfg.Program.GlobalStores {
		if err := storage.SetSyncedAt(g.backend(gs), storage.GlobalTask, gs.Name, began); err != nil {
			return false, err
		}
	}
	return false, nil
}

// readToEnd makes the global consumer and reads every partition from from
// to end into the stores.
func (g *GlobalReader) readToEnd(ctx context.Context, tps []kclient.TP, from, end map[kclient.TP]int64) (err error) {
	began := time.Now()
	c, err := g.cfg.NewConsumer(cloneCfg(g.cfg.Global))
	if err != nil {
		return fmt.Errorf("creating the global consumer: %w", err)
	}
	g.consumer = c
	defer func() {
		if err != nil {
			c.Close()
			g.consumer = nil
		}
	}()
	if err := c.Assign(from); err != nil {
		return fmt.Errorf("assigning global topics: %w", err)
	}
	remaining := map[kclient.TP]bool{}
	var total int64
	for _, tp := range tps {
		g.next[tp] = from[tp]
		if from[tp] < end[tp] {
			remaining[tp] = true
			total += end[tp] - from[tp]
		}
	}
	g.log.Info("reading global tables", zap.Int("partitions", len(tps)), zap.Int("behind", len(remaining)), zap.Int64("records", total))
	read := int64(0)
	for len(remaining) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := c.Poll(100 * time.Millisecond)
		if err != nil && kclient.IsTransient(err) {
			g.Health.down(g.log, "reading global topics", err)
			continue
		}
		if reset := (*kclient.OffsetReset)(nil); errors.As(err, &reset) {
			// Deletes in what was skipped are lost to the kept state:
			// wipe it, and the next attempt reads the topic in full.
			if err := g.wipe(*reset); err != nil {
				return err
			}
			return errReadAgain
		}
		if err != nil {
			return fmt.Errorf("reading global topics: %w", err)
		}
		if r != nil {
			g.Health.up(g.log)
			read++
			tp := kclient.TP{Topic: r.Topic, Partition: r.Partition}
			g.add(r)
			if r.Offset+1 >= end[tp] {
				delete(remaining, tp)
			}
			if len(g.pending[tp]) >= globalBatch {
				if err := g.flush(); err != nil {
					return err
				}
			}
			continue
		}
		// Transaction markers and aborted records take offsets but are
		// never returned: a partition is done when its position reaches
		// the end.
		var left []kclient.TP
		for tp := range remaining {
			left = append(left, tp)
		}
		pos, err := c.Position(left)
		if err == nil {
			for tp, p := range pos {
				if p >= end[tp] {
					delete(remaining, tp)
					g.next[tp] = max(g.next[tp], p)
				}
			}
		}
	}
	if err := g.flush(); err != nil {
		return err
	}
	g.log.Info("global tables ready", zap.Int64("records", read), zap.Duration("took", time.Since(began)))
	return nil
}

// errReadAgain: a global topic's offset was reset while it was read; its
// store is wiped, and Bootstrap reads it again in full.
var errReadAgain = errors.New("a global topic was reset: reading it again")

// wipe records a reset of a global topic's partition and empties the
// topic's store (its buffered records too): a topic that no longer holds
// what the store had not read may have lost deletes of keys the store
// holds.
func (g *GlobalReader) wipe(e kclient.OffsetReset) error {
	g.cfg.Resets.add(g.log, ResetGlobal, e)
	gs := g.byTopic[e.TP.Topic]
	if gs == nil {
		return nil
	}
	for tp := range g.pending {
		if tp.Topic == e.TP.Topic {
			delete(g.pending, tp)
		}
	}
	if err := storage.DropGlobal(g.backend(gs), gs.Name); err != nil {
		return err
	}
	return storage.SetSyncedAt(g.backend(gs), storage.GlobalTask, gs.Name, g.cfg.WallClock())
}

// readAgain, while Run follows the topics, wipes the store of a topic
// whose offset was reset and reads every partition of the topic again from
// its start.
func (g *GlobalReader) readAgain(e kclient.OffsetReset) error {
	if err := g.flush(); err != nil {
		return err
	}
	if err := g.wipe(e); err != nil {
		return err
	}
	offsets := maps.Clone(g.next)
	for tp := range offsets {
		if tp.Topic == e.TP.Topic {
			offsets[tp] = kclient.OffsetEarliest
			g.next[tp] = 0
		}
	}
	if err := g.consumer.Assign(offsets); err != nil {
		return fmt.Errorf("reading global topic %s again: %w", e.TP.Topic, err)
	}
	return nil
}

// add buffers a record for its store, or skips it when bad.
func (g *GlobalReader) add(r *rt.RawRecord) {
	tp := kclient.TP{Topic: r.Topic, Partition: r.Partition}
	g.next[tp] = r.Offset + 1
	gs := g.byTopic[r.Topic]
	if gs == nil {
		return
	}
	rec, err := rt.GlobalRecord(gs, r)
	if err != nil {
		g.Skipped.Add(1)
		g.log.Warn("skipping a bad global table record", zap.Error(err))
		// The offset still advances: written with the next batch, or
		// alone.
		if _, ok := g.pending[tp]; !ok {
			g.pending[tp] = nil
		}
		return
	}
	// The store owns what it is given; the consumer may reuse its slices.
	rec.Key = append([]byte(nil), rec.Key...)
	if rec.Value != nil {
		rec.Value = append([]byte(nil), rec.Value...)
	}
	g.pending[tp] = append(g.pending[tp], rec)
}

// flush writes the buffered records of every partition with their next
// offsets.
func (g *GlobalReader) flush() error {
	for tp, recs := range g.pending {
		gs := g.byTopic[tp.Topic]
		if err := storage.ApplyGlobal(g.backend(gs), gs.Name, tp.Partition, recs, g.next[tp]); err != nil {
			return fmt.Errorf("writing global store %s: %w", gs.Name, err)
		}
		g.Applied.Add(int64(len(recs)))
		delete(g.pending, tp)
	}
	return nil
}

// Run follows the global topics until ctx ends, writing what arrives
// within about 50ms; it closes the consumer when done.
func (g *GlobalReader) Run(ctx context.Context) error {
	if g.consumer == nil {
		return nil
	}
	defer g.consumer.Close()
	adm := &lazyAdmin{newAdmin: g.cfg.NewAdmin}
	defer adm.close()
	admin := adm.get
	var topics []string
	for t := range g.byTopic {
		topics = append(topics, t)
	}
	var lastProbe time.Time
	last := time.Now()
	buffered := 0
	syncer := globalSync{last: time.Now()}
	for ctx.Err() == nil {
		probe(&g.Health, g.log, &lastProbe, admin, topics)
		if buffered == 0 {
			syncer.step(g, admin)
		}
		r, err := g.consumer.Poll(50 * time.Millisecond)
		if err != nil && kclient.IsTransient(err) {
			g.Health.down(g.log, "following global topics", err)
			continue
		}
		if reset := (*kclient.OffsetReset)(nil); errors.As(err, &reset) {
			if err := g.readAgain(*reset); err != nil {
				return err
			}
			buffered = 0
			continue
		}
		if err != nil {
			return fmt.Errorf("reading global topics: %w", err)
		}
		if r != nil {
			if g.Health.isDown() {
				g.Health.up(g.log)
			}
			g.add(r)
			buffered++
		}
		if buffered > 0 && (r == nil || buffered >= 1000 || time.Since(last) > 50*time.Millisecond) {
			if err := g.flush(); err != nil {
				return err
			}
			buffered, last = 0, time.Now()
		}
	}
	return g.flush()
}

// globalSyncEvery is how often a running global reader moves its stores'
// synced times forward.
const globalSyncEvery = 10 * time.Second

// globalSync moves the global stores' synced times forward while the
// reader follows their topics (storage.SyncedAt): it notes the time and
// asks the brokers for the topics' end offsets, and once the reader has
// written everything before them, that time is a store's synced time.
type globalSync struct {
	last time.Time // when the last round ended
	at   int64     // the round's time (wall-clock ms), 0: no round open
	ends map[kclient.TP]int64
	done map[string]bool // stores whose synced time this round wrote
}

// step opens a round when one is due, or closes what the reader caught up
// with; it is called with nothing buffered (every record Poll returned is
// in the stores).
func (s *globalSync) step(g *GlobalReader, admin func() (kclient.Admin, error)) {
	if s.at == 0 {
		if time.Since(s.last) < globalSyncEvery {
			return
		}
		s.last = time.Now()
		var tps []kclient.TP
		for _, gs := range g.cfg.Program.GlobalStores {
			for p := range g.cfg.Partitions[gs.Topic] {
				tps = append(tps, kclient.TP{Topic: gs.Topic, Partition: p})
			}
		}
		at := g.cfg.WallClock()
		adm, err := admin()
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, ends, err := adm.Offsets(ctx, tps, g.cfg.ExactlyOnce)
		if err != nil {
			return // the next round tries again
		}
		s.at, s.ends, s.done = at, ends, map[string]bool{}
	}
	tps := make([]kclient.TP, 0, len(s.ends))
	for tp := range s.ends {
		tps = append(tps, tp)
	}
	pos, err := g.consumer.Position(tps)
	if err != nil {
		return
	}
	open := 0
	for _, gs := range g.cfg.Program.GlobalStores {
		if s.done[gs.Name] {
			continue
		}
		caughtUp := true
		for p := range g.cfg.Partitions[gs.Topic] {
			tp := kclient.TP{Topic: gs.Topic, Partition: p}
			// g.next: past the last record written (or where reading
			// began); the position also moves past transaction markers.
			if max(g.next[tp], pos[tp]) < s.ends[tp] {
				caughtUp = false
			}
		}
		if !caughtUp {
			open++
			continue
		}
		if err := storage.SetSyncedAt(g.backend(gs), storage.GlobalTask, gs.Name, s.at); err != nil {
			g.log.Warn("writing a global store's synced time", zap.String("store", gs.Name), zap.Error(err))
		}
		s.done[gs.Name] = true
	}
	if open == 0 {
		s.at, s.ends, s.done = 0, nil, nil
		s.last = time.Now()
	}
}
