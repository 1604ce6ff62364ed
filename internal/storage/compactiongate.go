package storage

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactionGate is Pebble's compaction scheduler for one database: it
// lets no compaction start until the database is open, then as many at a
// time as Pebble asks for (Pebble's own default scheduler does the same,
// without the gate).
//
// Why the gate: after a process was killed, Pebble's Open replays the
// write-ahead log into memtables and flushes them; the flush schedules a
// compaction, and Open then waits for every running compaction to end
// before it returns (it scans for obsolete files). At 10M keys that
// compaction rewrote hundreds of MB: Open took 4–8 s after a 0.3 s replay
// and flush. Gated, the compaction starts once Open has returned, while
// the application is already processing.
type compactionGate struct {
	mu       sync.Mutex
	db       pebble.DBForCompaction
	open     bool
	closed   bool
	granting bool
	idle     *sync.Cond // signalled when granting ends
	running  int
	poke     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
}

func newCompactionGate() *compactionGate {
	g := &compactionGate{poke: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	g.idle = sync.NewCond(&g.mu)
	return g
}

// Register is called by Open once the database can compact.
func (g *compactionGate) Register(_ int, db pebble.DBForCompaction) {
	g.mu.Lock()
	g.db = db
	g.mu.Unlock()
	go g.granter()
}

// openUp lets compactions run, and starts those waiting.
func (g *compactionGate) openUp() {
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
	g.wake()
}

// Unregister is called by Close: no grant happens after it returns.
func (g *compactionGate) Unregister() {
	g.mu.Lock()
	registered := g.db != nil
	g.closed = true
	for g.granting {
		g.idle.Wait()
	}
	g.mu.Unlock()
	if registered {
		close(g.stop)
		<-g.stopped
	}
}

// TrySchedule is Pebble asking to start a compaction now.
func (g *compactionGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open || g.closed || g.running >= g.db.GetAllowedWithoutPermission() {
		return false, nil // Pebble waits; the granter starts it later
	}
	g.running++
	return true, grant{g}
}

// UpdateGetAllowedWithoutPermission is Pebble saying more compactions may
// be allowed now (after a flush).
func (g *compactionGate) UpdateGetAllowedWithoutPermission() { g.wake() }

func (g *compactionGate) wake() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// granter starts waiting compactions when woken, and every 100ms in case
// what Pebble allows grew without a word.
func (g *compactionGate) granter() {
	defer close(g.stopped)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-g.poke:
		case <-t.C:
		}
		g.grantWaiting()
	}
}

// grantWaiting starts waiting compactions up to what Pebble allows. It
// never holds g.mu while calling into the database (which takes its own
// mutex, and calls TrySchedule under it).
func (g *compactionGate) grantWaiting() {
	g.mu.Lock()
	for g.granting {
		g.idle.Wait()
	}
	if !g.open || g.closed {
		g.mu.Unlock()
		return
	}
	db := g.db
	g.granting = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.granting = false
		g.idle.Broadcast()
		g.mu.Unlock()
	}()
	for {
		allowed := db.GetAllowedWithoutPermission()
		g.mu.Lock()
		room := allowed - g.running
		g.mu.Unlock()
		if room <= 0 {
			return
		}
		if waiting, _ := db.GetWaitingCompaction(); !waiting {
			return
		}
		g.mu.Lock()
		g.running++ // before Schedule: the compaction may end (Done) at once
		g.mu.Unlock()
		if !db.Schedule(grant{g}) {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
			return
		}
	}
}

// grant is the handle of one running compaction.
type grant struct{ g *compactionGate }

func (grant) Started()                                          {}
func (grant) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (grant) CumulativeStats(pebble.CompactionGrantHandleStats) {}
func (h grant) Done() {
	h.g.mu.Lock()
	h.g.running--
	h.g.mu.Unlock()
	h.g.wake()
}
