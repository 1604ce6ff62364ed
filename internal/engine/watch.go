package engine

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// doing is what a stream thread is doing or waiting for, one of a fixed
// set: the thread marks each step of its loop and of its commit, and a
// watcher says when one lasts longer than longWait.
type doing uint32

const (
	doingNothing doing = iota
	doingStarting
	doingInitTransactions
	doingPoll
	doingRebalance
	doingStartTasks
	doingStartStandbys
	doingRestore
	doingLookAtStandbys
	doingProcess
	doingPunctuate
	doingAsyncCalls
	doingCommitOffsets
	doingDrainCalls
	doingFlushCaches
	doingSendOffsets
	doingCommitTransaction
	doingChangelogEnds
	doingAcknowledgements
	doingOffsetCommit
	doingApplyStores
	doingPurge
	doingAbort
	doingShutdown
)

// what the thread is waiting for, in the words of its log line.
var doingWhat = [...]string{
	doingNothing:           "nothing",
	doingStarting:          "its clients to start",
	doingInitTransactions:  "the transaction coordinator to initialize its transactional id (InitProducerId)",
	doingPoll:              "records from the brokers (poll)",
	doingRebalance:         "a rebalance's callback (committing, closing or opening tasks)",
	doingStartTasks:        "new tasks to start (opening stores, reading where their changelogs end)",
	doingStartStandbys:     "standby tasks to start",
	doingRestore:           "changelog records to restore",
	doingLookAtStandbys:    "the standby tasks' lag (ListOffsets)",
	doingProcess:           "its tasks to process records",
	doingPunctuate:         "wall-clock punctuators",
	doingAsyncCalls:        "async operators' calls",
	doingCommitOffsets:     "the input positions to commit",
	doingDrainCalls:        "async operators' calls to complete before the commit",
	doingFlushCaches:       "the stores' caches to flush",
	doingSendOffsets:       "the brokers to add the input offsets to the transaction (AddOffsetsToTxn, TxnOffsetCommit)",
	doingCommitTransaction: "the brokers to take the transaction's records and commit it (produce, EndTxn)",
	doingChangelogEnds:     "where the changelogs written end (ListOffsets)",
	doingAcknowledgements:  "the brokers to acknowledge the records sent (produce)",
	doingOffsetCommit:      "the group coordinator to commit the offsets (OffsetCommit)",
	doingApplyStores:       "the stores' writes to apply (Pebble)",
	doingPurge:             "repartition records to be purged (DeleteRecords)",
	doingAbort:             "the transaction to abort (EndTxn)",
	doingShutdown:          "its tasks to close",
}

func (d doing) String() string { return doingWhat[d] }

// longWait is how long one step may last before the thread's watcher
// says what it waits for.
const longWait = time.Second

// watch is what a stream thread does now, since when: written by the
// thread (two atomic stores per step, no allocation), read by the watcher
// and by Snapshot from other goroutines. seq changes with every mark, so
// a reader that sees it unchanged around its reads saw one mark.
type watch struct {
	seq   atomic.Uint64
	what  atomic.Uint32
	since atomic.Int64 // unix nanoseconds
}

// mark records that the thread now does d, and returns what it did
// before, for a nested step to put back (watch.mark(prev)).
func (w *watch) mark(d doing) doing {
	prev := doing(w.what.Load())
	w.seq.Add(1)
	w.what.Store(uint32(d))
	w.since.Store(time.Now().UnixNano())
	w.seq.Add(1)
	return prev
}

// read returns the current mark and its sequence number; ok is false
// when a mark was being written meanwhile.
func (w *watch) read() (d doing, since time.Time, seq uint64, ok bool) {
	s := w.seq.Load()
	d, ns := doing(w.what.Load()), w.since.Load()
	return d, time.Unix(0, ns), s, s%2 == 0 && w.seq.Load() == s
}

// Waiting is a step of a stream thread that has lasted longer than a
// second: what it waits for and since when.
type Waiting struct {
	For   string    `json:"for"`
	Since time.Time `json:"since"`
}

// long returns the current step when it has lasted at least longWait.
func (w *watch) long(now time.Time) *Waiting {
	d, since, _, ok := w.read()
	if !ok || d == doingNothing || now.Sub(since) < longWait {
		return nil
	}
	return &Waiting{For: d.String(), Since: since}
}

// run watches until ctx ends: a step that lasts longer than longWait is
// logged once at Info, with what the thread waits for, and again when it
// ends, with how long it took.
func (w *watch) run(ctx context.Context, log *zap.Logger) {
	t := time.NewTicker(longWait / 4)
	defer t.Stop()
	var logged uint64 // the sequence number of the step logged, 0 none
	var loggedWhat doing
	var loggedSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d, since, seq, ok := w.read()
			if !ok {
				continue
			}
			if logged != 0 && seq != logged {
				// The step after it began when it ended.
				log.Info("stream thread no longer waiting", zap.Stringer("for", loggedWhat),
					zap.Duration("waited", since.Sub(loggedSince).Round(time.Millisecond)))
				logged = 0
			}
			if logged == 0 && d != doingNothing && now.Sub(since) >= longWait {
				log.Info("stream thread waiting", zap.Stringer("for", d), zap.Time("since", since),
					zap.Duration("so_far", now.Sub(since).Round(time.Millisecond)))
				logged, loggedWhat, loggedSince = seq, d, since
			}
		}
	}
}
