//go:build eddy_librdkafka

// Package librdkafka is the Kafka client seam on confluent-kafka-go
// (librdkafka, cgo), built with the eddy_librdkafka tag: a consumer whose
// group uses librdkafka's range assignment, the producer, admin.
package librdkafka

import (
	"maps"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/fetch"
)

// Tuned is cfg with librdkafka's own tuning, by role (restore: a
// changelog reader's). Its consumer otherwise stops fetching
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
func Tuned(cfg kclient.Config, restore bool) kclient.Config {
	c := kclient.Config{"log_level": 3, "fetch.queue.backoff.ms": 5, "queued.min.messages": 50_000,
		"queued.max.messages.kbytes": 8 << 10, "fetch.wait.max.ms": 10}
	if restore {
		c["queued.min.messages"] = 500_000
		c["queued.max.messages.kbytes"] = 64 << 10
	}
	maps.Copy(c, cfg)
	return c
}

// NewMember is the group member of c, a consumer NewConsumer made, for a
// group consumer whose records come from eddy's fetcher: c keeps every
// partition it is assigned paused, and its Poll runs the rebalance
// callbacks.
func NewMember(c kclient.Consumer) fetch.Member { return member{c.(*consumer)} }
