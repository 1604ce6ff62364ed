//go:build !eddy_librdkafka

package streams_test

import (
	"strings"
	"testing"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// On eddy's own client, a property it cannot carry out (Kerberos, librdkafka
// tuning) is an error at New that names it, never ignored.
func TestUnsupportedClientPropertiesAreNamedAtNew(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(str, str)).To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = streams.New(top, streams.Config{ApplicationID: "client-test", BootstrapServers: "127.0.0.1:1",
		ClientConfig: map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "queued.min.messages": "1000"}})
	if err == nil {
		t.Fatal("New accepted GSSAPI and queued.min.messages")
	}
	for _, want := range []string{"sasl.mechanism", "GSSAPI", "queued.min.messages"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New = %v, want %q named", err, want)
		}
	}
}
