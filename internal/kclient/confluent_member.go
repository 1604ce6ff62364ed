//go:build eddy_librdkafka

package kclient

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// librdkafkaMember is a member on librdkafka: its consumer keeps every
// partition it is assigned paused, and its Poll runs the rebalance
// callbacks.
type librdkafkaMember struct{ *consumer }

func (m librdkafkaMember) subscribe(topics []string, onRebalance func(Rebalance) error, assigned func([]TP) error, revoked func([]TP)) error {
	return m.consumer.subscribe(topics, onRebalance, func(parts []kafka.TopicPartition) error {
		// librdkafka keeps the assignment but reads none of it.
		if err := m.c.Pause(parts); err != nil {
			return err
		}
		tps := make([]TP, len(parts))
		for i, p := range parts {
			tps[i] = fromKTP(p)
		}
		return assigned(tps)
	}, revoked)
}

// serve polls librdkafka's queue: rebalances and errors. A record there is
// one librdkafka fetched before its partition was paused: not ours to
// return.
func (m librdkafkaMember) serve(timeout time.Duration) error {
	_, err := m.consumer.Poll(timeout)
	return err
}

func (m librdkafkaMember) assign(tps []TP) error {
	offsets := make(map[TP]int64, len(tps))
	for _, tp := range tps {
		offsets[tp] = -1
	}
	if err := m.consumer.Assign(offsets); err != nil {
		return err
	}
	return m.consumer.Pause(tps)
}
