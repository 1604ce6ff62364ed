package franz

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/internal/kclient"
)

// ClassifyErr classifies an error of a franz-go call; what names the call.
// A refused login or TLS handshake and an operation the ACLs deny are
// security errors; an error the brokers say a retry cannot cure, a closed
// client or a cancelled call is returned as it is; anything else
// (connections failing, timeouts, brokers away or moving, coordinators
// loading) is transient.
func ClassifyErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if s := franzSecurity(err, what); s != nil {
		return s
	}
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke) && !ke.Retriable && !errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kgo.ErrClientClosed), errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %w", kclient.ErrTransient, what, err)
}

// franzSecurity turns an error that means the client could not
// authenticate, or that the ACLs denied op, into the security error naming
// the cause; other errors give nil.
func franzSecurity(err error, op string) error {
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState),
		errors.Is(err, kerr.UnsupportedSaslMechanism):
		return kclient.CredentialsErr(err.Error())
	case isTLSVerifyErr(err):
		return kclient.TLSErr("certificate verify failed: " + err.Error())
	case errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.GroupAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return kclient.DeniedErr(op, err)
	}
	return nil
}

// PartitionErr classifies an error the brokers gave for one partition (or,
// with partition -1, a whole topic).
func PartitionErr(tp kclient.TP, offset int64, err error) error {
	where := tp.String()
	if tp.Partition < 0 {
		where = fmt.Sprintf("topic %q", tp.Topic)
	}
	if offset >= 0 {
		where = fmt.Sprintf("%s at offset %d", where, offset)
	}
	var ke *kerr.Error
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return kclient.DeniedErr(fmt.Sprintf("READ on topic %q", tp.Topic), err)
	case errors.Is(err, kerr.OffsetOutOfRange):
		return fmt.Errorf("reading %s: the offset is no longer in the partition (deleted or truncated while reading): %w", where, err)
	case errors.As(err, &ke) && ke.Retriable, errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("%w: reading %s: %w", kclient.ErrTransient, where, err)
	}
	return fmt.Errorf("reading %s: %w", where, err)
}
