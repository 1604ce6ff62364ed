package rt

// Punctuation: stream-time and wall-clock schedules of a task's
// processors.

import (
	"fmt"

	"github.com/eddy-go/eddy/processor"
)

// PunctuateWallClock fires the wall-clock punctuators due at now.
func (t *Task) PunctuateWallClock(now int64) error {
	if t.err != nil {
		return t.err
	}
	return t.punctuate(&t.punctWall, now)
}

// schedule is one punctuator.
type schedule struct {
	node      string
	next      int64
	interval  int64
	fn        processor.Punctuator
	cancelled bool
	setCur    func()
}

func (s *schedule) Cancel() { s.cancelled = true }

// punctuate fires due schedules of one clock, as Kafka Streams: a schedule
// due at or before now fires once with now, then moves to its next multiple
// of the interval after now.
func (t *Task) punctuate(list *[]*schedule, now int64) error {
	for _, s := range *list {
		if s.cancelled || s.next > now {
			continue
		}
		saved, savedIn := t.cur, t.inRecord
		t.cur = recordContext{timestamp: now, meta: processor.RecordMetadata{Offset: -1}}
		t.inRecord = false
		err := safeCall(func() error { return s.fn(now) })
		t.cur, t.inRecord = saved, savedIn
		if err != nil {
			t.HandleError(ErrProcessing, s.node, err)
		}
		next := s.next + s.interval
		if now >= next {
			next = now - (now-s.next)%s.interval + s.interval
		}
		s.next = next
		if t.err != nil {
			return t.err
		}
	}
	kept := (*list)[:0]
	for _, s := range *list {
		if !s.cancelled {
			kept = append(kept, s)
		}
	}
	*list = kept
	return nil
}

// schedule adds a punctuator for a node.
func (t *Task) schedule(node string, interval int64, typ processor.PunctuationType, fn processor.Punctuator) (processor.Cancellable, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("task %s: %s: punctuation interval must be at least 1ms, got %dms", t.id, node, interval)
	}
	s := &schedule{node: node, interval: interval, fn: fn}
	if typ == processor.WallClockTime {
		now := int64(0)
		if t.cfg.WallClock != nil {
			now = t.cfg.WallClock()
		}
		s.next = now + interval
		t.punctWall = append(t.punctWall, s)
	} else {
		s.next = 0 // fires as soon as there is data, aligned to 0
		t.punctStream = append(t.punctStream, s)
	}
	return s, nil
}
