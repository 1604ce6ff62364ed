//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
)

// transientCodes are the broker and client errors a retry may cure.
var transientCodes = map[kafka.ErrorCode]bool{
	kafka.ErrTransport: true, kafka.ErrAllBrokersDown: true, kafka.ErrResolve: true,
	kafka.ErrTimedOut: true, kafka.ErrMsgTimedOut: true, kafka.ErrTimedOutQueue: true,
	kafka.ErrLeaderNotAvailable: true, kafka.ErrNotLeaderForPartition: true, kafka.ErrRequestTimedOut: true,
	kafka.ErrBrokerNotAvailable: true, kafka.ErrReplicaNotAvailable: true, kafka.ErrNetworkException: true,
	kafka.ErrCoordinatorLoadInProgress: true, kafka.ErrCoordinatorNotAvailable: true, kafka.ErrNotCoordinator: true,
	kafka.ErrNotEnoughReplicas: true, kafka.ErrNotEnoughReplicasAfterAppend: true, kafka.ErrNotController: true,
	kafka.ErrKafkaStorageError: true, kafka.ErrFencedLeaderEpoch: true, kafka.ErrUnknownLeaderEpoch: true,
	kafka.ErrStaleBrokerEpoch: true, kafka.ErrOffsetNotAvailable: true, kafka.ErrPreferredLeaderNotAvailable: true,
	kafka.ErrRebalanceInProgress: true, kafka.ErrConcurrentTransactions: true,
	// Right after a broker restarts, a topic can be briefly unknown to it.
	kafka.ErrUnknownTopicOrPart: true,
}

// classify wraps a client error in ErrFatal or ErrTransient when it is one.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var kerr kafka.Error
	switch {
	case errors.As(err, &kerr) && kerr.IsFatal():
		return fmt.Errorf("%w: %w", kclient.ErrFatal, err)
	case errors.As(err, &kerr) && (transientCodes[kerr.Code()] || kerr.IsRetriable() || kerr.IsTimeout()):
		return fmt.Errorf("%w: %w", kclient.ErrTransient, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", kclient.ErrTransient, err)
	}
	return err
}

// listOffsetsErr classifies a ListOffsets call that failed as a whole:
// while leaders move, librdkafka fails it before asking any broker
// ("Failed to query partition leaders: No leaders found", seen after a
// broker of three was killed), under a code that is no retriable one. Such
// a failure is retried (and the admin client replaced); only a fatal
// client or a security failure is not.
func listOffsetsErr(err error) error {
	if s := security(err, "DESCRIBE on the topics whose offsets were listed"); s != nil {
		return s
	}
	c := classify(err)
	if errors.Is(c, kclient.ErrFatal) || errors.Is(c, kclient.ErrTransient) {
		return c
	}
	return fmt.Errorf("%w: %w", kclient.ErrTransient, err)
}
