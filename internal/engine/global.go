package engine

import (
	"context"
	"fmt"
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
// store whose offsets fall outside its topic (truncated, or recreated) is
// wiped and read in full.
func (g *GlobalReader) Bootstrap(ctx context.Context) (err error) {
	if len(g.byTopic) == 0 {
		return nil
	}
	began := time.Now()
	var tps []kclient.TP
	for _, gs := range g.cfg.Program.GlobalStores {
		for p := range g.cfg.Partitions[gs.Topic] {
			tps = append(tps, kclient.TP{Topic: gs.Topic, Partition: p})
		}
	}
	var start, end map[kclient.TP]int64
	var adm kclient.Admin
	defer func() {
		if adm != nil {
			adm.Close()
		}
	}()
	err = retry(ctx, &g.Health, g.log, "reading global topics' offsets", func() (err error) {
		if adm == nil {
			if adm, err = g.cfg.NewAdmin(); err != nil {
				return err
			}
		}
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start, end, err = adm.Offsets(octx, tps, g.cfg.ExactlyOnce)
		return err
	}, func(n int) {
		if n%3 == 0 {
			adm.Close()
			adm = nil
		}
	})
	if err != nil {
		return fmt.Errorf("reading global topics' offsets: %w", err)
	}
	from := map[kclient.TP]int64{}
	for _, gs := range g.cfg.Program.GlobalStores {
		b := g.backend(gs)
		wipe := false
		for p := range g.cfg.Partitions[gs.Topic] {
			tp := kclient.TP{Topic: gs.Topic, Partition: p}
			stored, ok, err := storage.GlobalOffset(b, gs.Name, p)
			if err != nil {
				return err
			}
			from[tp] = start[tp]
			if ok {
				from[tp] = stored
				if stored < start[tp] || stored > end[tp] {
					g.log.Warn("global store offset outside its topic; wiping and reading the topic in full",
						zap.String("store", gs.Name), zap.Stringer("partition", tp), zap.Int64("stored", stored),
						zap.Int64("topic_start", start[tp]), zap.Int64("topic_end", end[tp]))
					wipe = true
				}
			}
		}
		if wipe {
			if err := storage.DropGlobal(b, gs.Name); err != nil {
				return err
			}
			for p := range g.cfg.Partitions[gs.Topic] {
				tp := kclient.TP{Topic: gs.Topic, Partition: p}
				from[tp] = start[tp]
			}
		}
	}
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
	var adm kclient.Admin
	defer func() {
		if adm != nil {
			adm.Close()
		}
	}()
	admin := func() (kclient.Admin, error) {
		var err error
		if adm == nil {
			adm, err = g.cfg.NewAdmin()
		}
		return adm, err
	}
	var topics []string
	for t := range g.byTopic {
		topics = append(topics, t)
	}
	var lastProbe time.Time
	last := time.Now()
	buffered := 0
	for ctx.Err() == nil {
		probe(&g.Health, g.log, &lastProbe, admin, topics)
		r, err := g.consumer.Poll(50 * time.Millisecond)
		if err != nil && kclient.IsTransient(err) {
			g.Health.down(g.log, "following global topics", err)
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
