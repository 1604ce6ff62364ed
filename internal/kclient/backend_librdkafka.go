//go:build eddy_librdkafka

package kclient

import (
	"fmt"
	"maps"

	"go.uber.org/zap"
)

// Backend names the Kafka client this build of eddy uses: librdkafka
// (confluent-kafka-go, cgo), chosen with the eddy_librdkafka build tag. Its
// group uses librdkafka's range assignment.
const Backend = "librdkafka"

// CheckConfig reports a property with a value eddy cannot take; librdkafka
// itself reports the properties it does not know when a client is made.
func CheckConfig(cfg Config) error {
	_, err := parseClientConfig(cfg)
	return err
}

// librdkafka's own tuning, by role. Its consumer otherwise stops fetching
// for a second whenever its local queue reaches queued.min.messages,
// leaving the consumer idle (measured: ~140k records/s with the defaults,
// ~600k with a short backoff). The backoff is 5 ms, not 0: with a full
// queue, 0 makes librdkafka's fetcher spin (measured: twice the CPU per
// record). The queue is bounded to 50,000 records or 8 MiB: the stream
// threads keep their own bounded buffers, and a deeper prefetch only costs
// memory (measured on the stateless benchmark: peak RSS 395 → 140 MiB,
// same records/s). A restore reads a changelog as fast as the store takes
// it, so its consumer prefetches deeper. librdkafka logs only errors
// (log_level 3) unless the configuration says otherwise.
func librdkafkaTuning(cfg Config, restore bool) Config {
	c := Config{"log_level": 3, "fetch.queue.backoff.ms": 5, "queued.min.messages": 50_000,
		"queued.max.messages.kbytes": 8 << 10, "fetch.wait.max.ms": 10}
	if restore {
		c["queued.min.messages"] = 500_000
		c["queued.max.messages.kbytes"] = 64 << 10
	}
	maps.Copy(c, cfg)
	return c
}

// NewConsumer returns a librdkafka consumer.
func NewConsumer(cfg Config) (Consumer, error) {
	return newLibrdkafkaConsumer(librdkafkaTuning(cfg, true))
}

// NewGroupConsumer makes a stream thread's consumer: a group member. When
// cfg holds only properties the fetcher understands, the records come from
// the fetcher while librdkafka keeps the membership (every partition it is
// assigned stays paused in it): librdkafka's consumer hands over one
// record per cgo call — five crossings and four allocations a record, a
// third of a stream thread's time in a word count — where the fetcher
// decodes whole batches in Go. Otherwise it is librdkafka's consumer
// alone.
func NewGroupConsumer(cfg Config) (Consumer, error) {
	fc, err := parseClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	if fc.reset.Policy == ResetByDuration {
		// librdkafka knows no by_duration: the fetcher resets; librdkafka
		// keeps every partition paused.
		if len(fc.unsupported) > 0 {
			return nil, fmt.Errorf("kclient: auto.offset.reset %s needs eddy's fetcher, which these properties rule out: %w", fc.reset, fc.unsupportedErr())
		}
		cfg = maps.Clone(cfg)
		cfg["auto.offset.reset"] = "latest"
	}
	if len(fc.unsupported) > 0 {
		for topic, r := range fc.resets {
			if r != fc.reset {
				return nil, fmt.Errorf("kclient: topic %s's offset reset policy (%s) differs from auto.offset.reset (%s): per-source policies need eddy's fetcher, which these properties rule out: %w", topic, r, fc.reset, fc.unsupportedErr())
			}
		}
	}
	c, err := newLibrdkafkaConsumer(librdkafkaTuning(cfg, false))
	if err != nil || len(fc.unsupported) > 0 {
		return c, err
	}
	f, err := newFetcher(fc)
	if err != nil {
		c.Close()
		return nil, err
	}
	f.reset, f.resets, f.own = fc.reset, fc.resets, true
	f.maxBytes, f.partBytes = groupFetchMaxBytes, groupFetchPartitionBytes
	f.sizes(fc)
	return newGroupConsumer(librdkafkaMember{c.(*consumer)}, f), nil
}

// NewReader makes a Reader: the fetcher when cfg holds only properties it
// understands, else a librdkafka consumer, which knows them all.
func NewReader(cfg Config) (Reader, error) {
	fc, err := parseClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	if len(fc.unsupported) > 0 {
		return newLibrdkafkaConsumer(librdkafkaTuning(cfg, true))
	}
	return newFetcher(fc)
}

// NewProducer returns a librdkafka producer.
func NewProducer(cfg Config) (Producer, error) {
	return newLibrdkafkaProducer(librdkafkaTuning(cfg, false))
}

// NewAdmin returns a librdkafka admin client.
func NewAdmin(cfg Config) (Admin, error) { return newLibrdkafkaAdmin(cfg) }

// NewNotices returns nil: librdkafka's group members neither send nor hear
// rebalance notices (they hear of rebalances at their heartbeats).
func NewNotices(Config, string, *zap.Logger) (*Notices, error) { return nil, nil }
