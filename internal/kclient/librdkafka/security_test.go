//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Security failures are classified apart from outages: never transient,
// never a fatal client (new clients would fail alike), named.
func TestSecurityErrorsAreNamedAndNotRetried(t *testing.T) {
	login := kafka.NewError(kafka.ErrAuthentication, "SASL authentication error: invalid credentials", false)
	handshake := kafka.NewError(kafka.ErrSsl, "SSL handshake failed: certificate verify failed", false)
	denied := kafka.NewError(kafka.ErrTopicAuthorizationFailed, "Broker: Topic authorization failed", false)
	for _, c := range []struct {
		err   error
		is    error
		wants []string
	}{
		{security(login, "x"), kclient.ErrAuthentication, []string{"sasl.password", "invalid credentials"}},
		{security(handshake, "x"), kclient.ErrAuthentication, []string{"ssl.ca.location", "certificate verify failed"}},
		{security(denied, `WRITE on topic "totals"`), kclient.ErrAuthorization, []string{`WRITE on topic "totals" is denied`, "README"}},
	} {
		if !errors.Is(c.err, c.is) || !kclient.IsSecurity(c.err) || kclient.IsTransient(c.err) {
			t.Errorf("%v: want %v, security, not transient", c.err, c.is)
		}
		for _, w := range c.wants {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%v does not say %q", c.err, w)
			}
		}
	}
	if security(kafka.NewError(kafka.ErrTransport, "down", false), "x") != nil {
		t.Error("a transport error classified as a security failure")
	}
}

// A refused login ends a call waiting on the brokers at once, with the
// login's error instead of the call's.
func TestWatchEndsCallsOnRefusedLogin(t *testing.T) {
	w := newWatch()
	ctx, end := w.bind(context.Background())
	go w.see(kafka.NewError(kafka.ErrAuthentication, "invalid credentials", false))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call's context was not cancelled")
	}
	if err := end(ctx.Err()); !errors.Is(err, kclient.ErrAuthentication) {
		t.Fatalf("got %v, want the authentication failure", err)
	}
	// A call that succeeded stays a success; other errors are ignored.
	_, end = w.bind(context.Background())
	if err := end(nil); err != nil {
		t.Fatalf("a success became %v", err)
	}
	w2 := newWatch()
	w2.see(kafka.NewError(kafka.ErrTransport, "down", false))
	if w2.failed() != nil {
		t.Fatal("a transport error recorded as a refused login")
	}
}

// A ListOffsets that fails as a whole while leaders move is retried; a
// denied or fatal one is not.
func TestListOffsetsFailuresWhileLeadersMoveAreTransient(t *testing.T) {
	if err := listOffsetsErr(kafka.NewError(kafka.ErrNoent, "Failed to query partition leaders: No leaders found", false)); !kclient.IsTransient(err) {
		t.Errorf("%v: not transient", err)
	}
	if err := listOffsetsErr(kafka.NewError(kafka.ErrTopicAuthorizationFailed, "denied", false)); kclient.IsTransient(err) || !kclient.IsSecurity(err) {
		t.Errorf("%v: want a security failure", err)
	}
	if err := listOffsetsErr(kafka.NewError(kafka.ErrFatal, "fatal", true)); kclient.IsTransient(err) {
		t.Errorf("%v: a fatal error retried", err)
	}
}
