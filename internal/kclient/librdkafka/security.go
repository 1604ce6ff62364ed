//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
)

// authentication turns a librdkafka error that means the client could not
// authenticate into an ErrAuthentication naming the likely cause; other
// errors give nil.
func authentication(err error) error {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return nil
	}
	switch kerr.Code() {
	case kafka.ErrAuthentication, kafka.ErrSaslAuthenticationFailed:
		return kclient.CredentialsErr(kerr)
	case kafka.ErrSsl:
		return kclient.TLSErr(kerr)
	}
	return nil
}

// authorization turns a librdkafka error that means the ACLs denied an
// operation into an ErrAuthorization naming it: op is what was denied, as
// Kafka's ACLs name it ("WRITE on topic \"orders\""). Other errors give nil.
func authorization(err error, op string) error {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return nil
	}
	switch kerr.Code() {
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrGroupAuthorizationFailed,
		kafka.ErrClusterAuthorizationFailed, kafka.ErrTransactionalIDAuthorizationFailed:
		return kclient.DeniedErr(op, kerr)
	}
	return nil
}

// security is authentication, then authorization, else nil.
func security(err error, op string) error {
	if a := authentication(err); a != nil {
		return a
	}
	return authorization(err, op)
}

// deniedTopics returns, quoted and sorted, the topics on which the
// brokers say this principal may not do op (or may not even describe).
func deniedTopics(a *kafka.AdminClient, topics []string, op kafka.ACLOperation) []string {
	if len(topics) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(topics), kafka.SetAdminOptionIncludeAuthorizedOperations(true))
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range res.TopicDescriptions {
		ok := d.Error.Code() == kafka.ErrNoError && (slices.Contains(d.AuthorizedOperations, op) ||
			slices.Contains(d.AuthorizedOperations, kafka.ACLOperationAll))
		if !ok {
			out = append(out, strconv.Quote(d.Name))
		}
	}
	sort.Strings(out)
	return out
}

// watch keeps the first authentication failure a client reported through
// its events, and lets calls in flight give up when it comes: librdkafka
// retries a refused login for ever, so a call would otherwise run out its
// whole timeout and fail as if the brokers were away.
type watch struct {
	once sync.Once
	err  error
	set  chan struct{}
}

func newWatch() *watch { return &watch{set: make(chan struct{})} }

// see records err when it is an authentication failure.
func (w *watch) see(err error) {
	if a := authentication(err); a != nil {
		w.once.Do(func() { w.err = a; close(w.set) })
	}
}

// failed returns the authentication failure seen, or nil.
func (w *watch) failed() error {
	select {
	case <-w.set:
		return w.err
	default:
		return nil
	}
}

// bind returns a context that is cancelled when an authentication failure
// is seen, and a function that ends it and returns that failure, if any,
// in place of err.
func (w *watch) bind(ctx context.Context) (context.Context, func(err error) error) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-w.set:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func(err error) error {
		cancel()
		if a := w.failed(); a != nil && err != nil {
			return a
		}
		return err
	}
}
