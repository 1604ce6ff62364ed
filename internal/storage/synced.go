package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// Local state must never outlive its truth. A compacted changelog drops a
// tombstone delete.retention.ms after compaction first reached it, and its
// log start offset stays where it was: a store's stored offset can look
// valid while the changelog no longer holds the deletes that followed it.
// So each store of a task also keeps when it was last in step with its
// changelog (its synced time, in wall-clock milliseconds), with this
// meaning: restoring the store from its stored offset is exact if the
// restore reads the changelog to its end before the synced time plus the
// changelog's delete.retention.ms. A record written to the changelog after
// the synced time is after the stored offset and stays until then (a
// tombstone outlives the values it replaced by delete.retention.ms);
// records written before it are already in the store.
//
// Who writes it, and with which time:
//
//   - a stream thread's commit (WriteSet.SetSynced, stored with the
//     offsets): the time the commit began; a task the thread owns and
//     revokes or closes cleanly: the time it was closed;
//   - a restore that read a changelog to its end: the time it began
//     reading the ends;
//   - a restore from the changelog's start (a store wiped, or new): the
//     time it began, before any record is written, since whatever a
//     partial restore holds it read from the changelog no earlier, and a
//     delete it has not reached yet outlives the value it replaced by
//     delete.retention.ms;
//   - the global reader, for a global store (task GlobalTask): the time it
//     last found the topic's end offsets, once it has read up to them.

func syncedKey(task, store string) []byte { return storeKey(nsSynced, task, store) }

// SyncedAt returns the synced time of one store of one task (wall-clock
// milliseconds), and false when none was stored (a store written by an
// eddy older than synced times, or never restored or committed).
func SyncedAt(b Backend, task, store string) (int64, bool, error) {
	v, ok, err := b.Get(syncedKey(task, store))
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("stores: corrupt synced time for task %s store %s (%d bytes)", task, store, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// SetSyncedAt stores the synced time of one store of one task.
func SetSyncedAt(b Backend, task, store string, ms int64) error {
	var batch Batch
	batch.Set(syncedKey(task, store), encodeOffset(ms))
	return b.Apply(&batch)
}

// LastSynced returns the newest synced time of any store of a task, and
// false when none of its stores has one.
func LastSynced(b Backend, task string) (int64, bool, error) {
	p := append(append([]byte{nsSynced}, task...), 0)
	it := b.Iter(p, PrefixEnd(p), false)
	defer it.Close()
	var last int64
	found := false
	for it.Next() {
		if v := it.Value(); len(v) == 8 {
			ms := int64(binary.BigEndian.Uint64(v))
			if !found || ms > last {
				last, found = ms, true
			}
		}
	}
	return last, found, it.Err()
}

// Tasks returns the ids of the tasks that have anything stored in b (data,
// offsets or synced times), global stores excepted, in byte order. It
// reads one key per task and namespace.
func Tasks(b Backend) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, ns := range namespaces {
		lower, upper := []byte{ns}, []byte{ns + 1}
		for {
			it := b.Iter(lower, upper, false)
			var task []byte
			if it.Next() {
				k := it.Key()
				if i := bytes.IndexByte(k[1:], 0); i >= 0 {
					task = bytes.Clone(k[1 : 1+i])
				}
			}
			err := it.Err()
			it.Close()
			if err != nil {
				return nil, err
			}
			if task == nil {
				break
			}
			if t := string(task); t != GlobalTask && !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
			lower = PrefixEnd(append(append([]byte{ns}, task...), 0))
		}
	}
	slices.Sort(out)
	return out, nil
}
