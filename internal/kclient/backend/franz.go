//go:build !eddy_librdkafka

// Package backend picks the Kafka client of a build and composes it:
// franz-go with eddy's fetcher by default, librdkafka with the
// eddy_librdkafka build tag.
package backend

import (
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/fetch"
	"github.com/eddy-go/eddy/internal/kclient/franz"
)

// Name names the Kafka client this build of eddy uses: franz-go (pure
// Go). Build with -tags eddy_librdkafka for librdkafka instead.
const Name = "franz-go"

// CheckConfig reports every property of cfg eddy's client cannot carry
// out, and any with a value it cannot take, in one error.
func CheckConfig(cfg kclient.Config) error {
	c, err := franz.ParseConfig(cfg)
	if err != nil {
		return err
	}
	return c.UnsupportedErr()
}

// franzConfig parses cfg, refusing what franz-go cannot carry out.
func franzConfig(cfg kclient.Config) (franz.ClientConfig, error) {
	c, err := franz.ParseConfig(cfg)
	if err == nil {
		err = c.UnsupportedErr()
	}
	return c, err
}

// NewConsumer makes a consumer: a reader of what Assign gives it, or a
// group member once subscribed (the global tables' and the instance
// directory's readers are the former).
func NewConsumer(cfg kclient.Config) (kclient.Consumer, error) { return newFranzConsumer(cfg, false) }

// NewGroupConsumer makes a stream thread's consumer: a group member (its
// own franz-go client, which fetches nothing) whose records come from the
// fetcher, in stream-sized fetches (groupFetchMaxBytes).
func NewGroupConsumer(cfg kclient.Config) (kclient.Consumer, error) {
	return newFranzConsumer(cfg, true)
}

func newFranzConsumer(cfg kclient.Config, stream bool) (kclient.Consumer, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return fetch.NewGroupConsumer(franz.NewMember(c), c, stream)
}

// NewReader makes a Reader: the fetcher, Kafka fetch requests of its own
// decoded in Go, the next fetch in flight while the caller works through
// the last one. An offset it cannot start from is an error (a changelog
// being restored must not skip anything).
func NewReader(cfg kclient.Config) (kclient.Reader, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return fetch.NewReader(c)
}

// NewProducer makes a producer, transactional when cfg has a
// transactional.id.
func NewProducer(cfg kclient.Config) (kclient.Producer, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return franz.NewProducer(c)
}

// NewAdmin makes an admin client.
func NewAdmin(cfg kclient.Config) (kclient.Admin, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return franz.NewAdmin(c)
}

// NewNotices makes an instance's rebalance-notice channel on topic (which
// must exist: one partition, short retention), reading it from its end;
// Run delivers what it reads to the members that use it. cfg is a
// client's configuration (bootstrap servers, security).
func NewNotices(cfg kclient.Config, topic string, log *zap.Logger) (kclient.Notices, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	n, err := franz.NewNotices(c, topic, log)
	if err != nil {
		return nil, err
	}
	return n, nil
}
