//go:build eddy_librdkafka

package librdkafka

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
)

// member is a member on librdkafka: its consumer keeps every
// partition it is assigned paused, and its Poll runs the rebalance
// callbacks.
type member struct{ *consumer }

func (m member) Subscribe(topics []string, onRebalance func(kclient.Rebalance) error, assigned func([]kclient.TP) error, revoked func([]kclient.TP)) error {
	return m.consumer.subscribe(topics, onRebalance, func(parts []kafka.TopicPartition) error {
		// librdkafka keeps the assignment but reads none of it.
		if err := m.c.Pause(parts); err != nil {
			return err
		}
		tps := make([]kclient.TP, len(parts))
		for i, p := range parts {
			tps[i] = fromKTP(p)
		}
		return assigned(tps)
	}, revoked)
}

// serve polls librdkafka's queue: rebalances and errors. A record there is
// one librdkafka fetched before its partition was paused: not ours to
// return.
func (m member) Serve(timeout time.Duration) error {
	_, err := m.consumer.Poll(timeout)
	return err
}

func (m member) Assign(tps []kclient.TP) error {
	offsets := make(map[kclient.TP]int64, len(tps))
	for _, tp := range tps {
		offsets[tp] = -1
	}
	if err := m.consumer.Assign(offsets); err != nil {
		return err
	}
	return m.consumer.Pause(tps)
}
