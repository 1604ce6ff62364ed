package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/eddy-go/eddy/internal/rt"
)

// sinkTopics knows the partition counts of the topics the thread's sinks
// write with a stream partitioner: the topics the program reads are in
// the configuration, others are asked of the brokers once (a topic that
// does not exist is asked again next time).
type sinkTopics struct {
	counts map[string]int32
}

// partitions returns topic's partition count; a missing topic is an
// error wrapping rt.ErrRecordRefused (a bad record, for the production
// handler). The brokers are asked until they answer, or the thread stops.
func (s *sinkTopics) partitions(th *Thread, topic string) (int32, error) {
	if n, ok := th.cfg.Partitions[topic]; ok {
		return n, nil
	}
	if n, ok := s.counts[topic]; ok {
		return n, nil
	}
	var parts map[string]int32
	err := th.retry(th.ctx, "reading the partition count of topic "+topic, func() error {
		adm, err := th.adm.get()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(th.ctx, 10*time.Second)
		defer cancel()
		parts, err = adm.Partitions(ctx, []string{topic})
		return err
	})
	if err != nil {
		return 0, err
	}
	n, ok := parts[topic]
	if !ok {
		return 0, fmt.Errorf("%w: topic %q does not exist", rt.ErrRecordRefused, topic)
	}
	if s.counts == nil {
		s.counts = map[string]int32{}
	}
	s.counts[topic] = n
	return n, nil
}
