//go:build eddy_librdkafka

package integration_test

import (
	"errors"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// buildTags are the tags this test binary was built with; the worker
// processes are built with them too.
const buildTags = "eddy_librdkafka"

// isTooLargeLibrdkafka: librdkafka's refusal of a record over
// message.max.bytes.
func isTooLargeLibrdkafka(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && kerr.Code() == kafka.ErrMsgSizeTooLarge
}
