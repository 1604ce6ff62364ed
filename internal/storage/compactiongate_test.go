package storage_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
)

// Compactions run once the database is open (the gate that holds them
// during Open opens): writing far more than the memtables hold, with small
// memtables, flushes many tables to L0, and compactions keep L0 below the
// count at which Pebble stops writes — were they never granted, the writes
// would stop for good at 24 L0 files. Reopened, the same holds.
func TestCompactionsRunOnceOpen(t *testing.T) {
	dir := t.TempDir()
	for round := range 2 {
		p, err := storage.OpenPebble(dir, storage.PebbleOptions{Memory: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			value := make([]byte, 100)
			for c := range 400 {
				var b storage.Batch
				for i := range 1000 {
					b.Set([]byte(fmt.Sprintf("key-%d-%09d", round, (c*1000+i)*7919%400_000)), value)
				}
				if err := p.Apply(&b); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("round %d: 40 MB of writes did not finish in 2 minutes (L0 files: %d): compactions do not run",
				round, p.Metrics().Levels[0].TablesCount)
		}
		m := p.Metrics()
		if m.Compact.Count == 0 {
			t.Errorf("round %d: no compaction ran while %d flushes went to L0", round, m.Flush.Count)
		}
		t.Logf("round %d: %d flushes, %d compactions, %d L0 tables", round, m.Flush.Count, m.Compact.Count, m.Levels[0].TablesCount)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
