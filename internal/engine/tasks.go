package engine

import (
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// task is one task of the thread: its runtime task and input partitions.
type task struct {
	t         *rt.Task
	id        processor.TaskID
	parts     []*partition
	restoring int // changelog partitions still restoring
	idleSince time.Time
}

func (th *Thread) writeSet(store string) *storage.WriteSet {
	return storage.Pick(th.cfg.Program.Stores[store].Builder.Spec().InMemory, th.wsP, th.wsM)
}

func (th *Thread) backend(store string) storage.Backend {
	return storage.Pick(th.cfg.Program.Stores[store].Builder.Spec().InMemory, th.cfg.Pebble, th.cfg.Memory)
}

func (th *Thread) newRTTask(id processor.TaskID) (*rt.Task, error) {
	return rt.NewTask(rt.TaskConfig{
		ID:          id,
		AppID:       th.cfg.AppID,
		Program:     th.cfg.Program,
		Subtopology: th.cfg.Program.Subtopologies[id.Subtopology],
		WriteSet: func(inMemory bool) *storage.WriteSet {
			if inMemory {
				return th.wsM
			}
			return th.wsP
		},
		Cache:        th.cache,
		Collector:    th,
		WallClock:    th.cfg.WallClock,
		Handlers:     th.cfg.Handlers,
		Log:          th.log.With(zap.Stringer("task", id)),
		EmitInterval: 1000,
		Globals:      rt.GlobalViews(th.cfg.Program, th.cfg.Pebble, th.cfg.Memory),
	})
}

// Stream time survives restarts and hand-overs: each committed offset
// carries its task's stream time as metadata, in Kafka Streams' encoding
// (base64 of a version byte, 1, and the 8-byte big-endian timestamp), so
// records that were late stay late after a restart.

func encodeStreamTime(ts int64) string {
	b := binary.BigEndian.AppendUint64([]byte{1}, uint64(ts))
	return base64.StdEncoding.EncodeToString(b)
}

// decodeStreamTime reads the stream time from offset metadata written by
// eddy or by Kafka Streams (versions 1 and 2 start alike).
func decodeStreamTime(meta string) (int64, bool) {
	b, err := base64.StdEncoding.DecodeString(meta)
	if err != nil || len(b) < 9 || (b[0] != 1 && b[0] != 2) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[1:9])), true
}

// restoreStreamTime starts a (re)built task at the stream time committed
// for its partitions.
func (th *Thread) restoreStreamTime(tk *task) {
	for _, p := range tk.parts {
		if ts, ok := th.committedTime[p.tp]; ok {
			tk.t.AdvanceStreamTime(ts)
		}
	}
}
