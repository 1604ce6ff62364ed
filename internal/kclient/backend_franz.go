//go:build !eddy_librdkafka

package kclient

import "go.uber.org/zap"

// Backend names the Kafka client this build of eddy uses: franz-go (pure
// Go). Build with -tags eddy_librdkafka for librdkafka instead.
const Backend = "franz-go"

// CheckConfig reports every property of cfg eddy's client cannot carry
// out, and any with a value it cannot take, in one error.
func CheckConfig(cfg Config) error {
	c, err := parseClientConfig(cfg)
	if err != nil {
		return err
	}
	return c.unsupportedErr()
}

// franzConfig parses cfg, refusing what franz-go cannot carry out.
func franzConfig(cfg Config) (clientConfig, error) {
	c, err := parseClientConfig(cfg)
	if err == nil {
		err = c.unsupportedErr()
	}
	return c, err
}

// NewConsumer makes a consumer: a reader of what Assign gives it, or a
// group member once subscribed (the global tables' and the instance
// directory's readers are the former).
func NewConsumer(cfg Config) (Consumer, error) { return newFranzConsumer(cfg, false) }

// NewGroupConsumer makes a stream thread's consumer: a group member (its
// own franz-go client, which fetches nothing) whose records come from the
// fetcher, in stream-sized fetches (groupFetchMaxBytes).
func NewGroupConsumer(cfg Config) (Consumer, error) { return newFranzConsumer(cfg, true) }

func newFranzConsumer(cfg Config, stream bool) (Consumer, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	f, err := newFetcher(c)
	if err != nil {
		return nil, err
	}
	f.reset, f.resets, f.own = c.reset, c.resets, true
	if stream {
		f.maxBytes, f.partBytes = groupFetchMaxBytes, groupFetchPartitionBytes
		f.sizes(c)
	}
	return newGroupConsumer(newFranzMember(c), f), nil
}

// NewReader makes a Reader: the fetcher, Kafka fetch requests of its own
// decoded in Go, the next fetch in flight while the caller works through
// the last one. An offset it cannot start from is an error (a changelog
// being restored must not skip anything).
func NewReader(cfg Config) (Reader, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newFetcher(c)
}

// NewProducer makes a producer, transactional when cfg has a
// transactional.id.
func NewProducer(cfg Config) (Producer, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newFranzProducer(c)
}

// NewAdmin makes an admin client.
func NewAdmin(cfg Config) (Admin, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newFranzAdmin(c)
}

// NewNotices makes an instance's rebalance-notice channel on topic (which
// must exist: one partition, short retention), reading it from its end;
// Run delivers what it reads to the members that use it. cfg is a
// client's configuration (bootstrap servers, security).
func NewNotices(cfg Config, topic string, log *zap.Logger) (*Notices, error) {
	c, err := franzConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newNotices(c, topic, log)
}
