//go:build eddy_librdkafka

// Package backend picks the Kafka client of a build and composes it:
// franz-go with eddy's fetcher by default, librdkafka with the
// eddy_librdkafka build tag.
package backend

import (
	"fmt"
	"maps"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/fetch"
	"github.com/eddy-go/eddy/internal/kclient/franz"
	"github.com/eddy-go/eddy/internal/kclient/librdkafka"
)

// Name names the Kafka client this build of eddy uses: librdkafka
// (confluent-kafka-go, cgo), chosen with the eddy_librdkafka build tag. Its
// group uses librdkafka's range assignment.
const Name = "librdkafka"

// CheckConfig reports a property with a value eddy cannot take; librdkafka
// itself reports the properties it does not know when a client is made.
func CheckConfig(cfg kclient.Config) error {
	_, err := franz.ParseConfig(cfg)
	return err
}

// NewConsumer returns a librdkafka consumer.
func NewConsumer(cfg kclient.Config) (kclient.Consumer, error) {
	return librdkafka.NewConsumer(librdkafka.Tuned(cfg, true))
}

// NewGroupConsumer makes a stream thread's consumer: a group member. When
// cfg holds only properties the fetcher understands, the records come from
// the fetcher while librdkafka keeps the membership (every partition it is
// assigned stays paused in it): librdkafka's consumer hands over one
// record per cgo call — five crossings and four allocations a record, a
// third of a stream thread's time in a word count — where the fetcher
// decodes whole batches in Go. Otherwise it is librdkafka's consumer
// alone.
func NewGroupConsumer(cfg kclient.Config) (kclient.Consumer, error) {
	fc, err := franz.ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if fc.Reset().Policy == kclient.ResetByDuration {
		// librdkafka knows no by_duration: the fetcher resets; librdkafka
		// keeps every partition paused.
		if fc.Unsupported() {
			return nil, fmt.Errorf("kclient: auto.offset.reset %s needs eddy's fetcher, which these properties rule out: %w", fc.Reset(), fc.UnsupportedErr())
		}
		cfg = maps.Clone(cfg)
		cfg["auto.offset.reset"] = "latest"
	}
	if fc.Unsupported() {
		for topic, r := range fc.Resets() {
			if r != fc.Reset() {
				return nil, fmt.Errorf("kclient: topic %s's offset reset policy (%s) differs from auto.offset.reset (%s): per-source policies need eddy's fetcher, which these properties rule out: %w", topic, r, fc.Reset(), fc.UnsupportedErr())
			}
		}
	}
	c, err := librdkafka.NewConsumer(librdkafka.Tuned(cfg, false))
	if err != nil || fc.Unsupported() {
		return c, err
	}
	g, err := fetch.NewGroupConsumer(librdkafka.NewMember(c), fc, true)
	if err != nil {
		c.Close()
		return nil, err
	}
	return g, nil
}

// NewReader makes a Reader: the fetcher when cfg holds only properties it
// understands, else a librdkafka consumer, which knows them all.
func NewReader(cfg kclient.Config) (kclient.Reader, error) {
	fc, err := franz.ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if fc.Unsupported() {
		return librdkafka.NewConsumer(librdkafka.Tuned(cfg, true))
	}
	return fetch.NewReader(fc)
}

// NewProducer returns a librdkafka producer.
func NewProducer(cfg kclient.Config) (kclient.Producer, error) {
	return librdkafka.NewProducer(librdkafka.Tuned(cfg, false))
}

// NewAdmin returns a librdkafka admin client.
func NewAdmin(cfg kclient.Config) (kclient.Admin, error) { return librdkafka.NewAdmin(cfg) }

// NewNotices returns nil: librdkafka's group members neither send nor hear
// rebalance notices (they hear of rebalances at their heartbeats).
func NewNotices(kclient.Config, string, *zap.Logger) (kclient.Notices, error) { return nil, nil }
