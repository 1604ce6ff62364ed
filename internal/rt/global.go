package rt

import (
	"errors"
	"fmt"

	"github.com/eddy-go/eddy/internal/storage"
)

// ErrNullGlobalKey is returned by GlobalRecord for a record without a key:
// a table row needs one.
var ErrNullGlobalKey = errors.New("record has no key")

// GlobalRecord checks a record read from a global table's topic and returns
// it as the store keeps it. A bad record (no key, or bytes the table's
// serdes reject) is an error saying where it is; readers skip it and count
// it.
func GlobalRecord(g *GlobalStore, r *RawRecord) (storage.ChangelogRecord, error) {
	if r.Key == nil {
		return storage.ChangelogRecord{}, fmt.Errorf("global table %s: %s[%d]@%d: %w", g.Name, r.Topic, r.Partition, r.Offset, ErrNullGlobalKey)
	}
	if err := g.Check(r.Key, r.Value); err != nil {
		return storage.ChangelogRecord{}, fmt.Errorf("global table %s: %s[%d]@%d: %w", g.Name, r.Topic, r.Partition, r.Offset, err)
	}
	return storage.ChangelogRecord{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil
}

// GlobalViews returns the read-only views of the program's global stores
// over the two backends, by store name, for TaskConfig.Globals.
func GlobalViews(p *Program, pebble, memory storage.Backend) map[string]any {
	out := map[string]any{}
	for _, g := range p.GlobalStores {
		out[g.Name] = g.View(storage.Pick(g.InMemory, pebble, memory))
	}
	return out
}
