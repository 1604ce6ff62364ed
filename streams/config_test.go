package streams_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// StateMemoryBytes must leave the Pebble store room beyond the record
// cache; New says which settings clash and how to fix them.
func TestStateMemoryBudgetIsValidated(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Count(topology.Stream(b, "clicks", topology.Consumed(str, str)).GroupByKey(),
		topology.Materialized[string, int64]("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		budget, cache int64
		wantErr       bool
	}{
		{"defaults", 0, 0, false},
		{"a budget of 64 MiB", 64 << 20, 0, false},
		{"a budget smaller than the cache", 16 << 20, 32 << 20, true},
		{"a budget the cache fills but for 16 MiB", 48 << 20, 32 << 20, true},
		{"a cache of 300 MiB under the default budget", 0, 300 << 20, true},
		{"a cache of 300 MiB under a budget of 1 GiB", 1 << 30, 300 << 20, false},
		{"a negative budget", -1, 0, true},
	} {
		_, err := streams.New(top, streams.Config{ApplicationID: "memory-test", BootstrapServers: "127.0.0.1:1",
			StateMemoryBytes: c.budget, CacheMaxBytes: c.cache})
		switch {
		case c.wantErr && (err == nil || !strings.Contains(err.Error(), "StateMemoryBytes") || !strings.Contains(err.Error(), "CacheMaxBytes")):
			t.Errorf("%s: New = %v, want an error naming StateMemoryBytes and CacheMaxBytes", c.name, err)
		case !c.wantErr && err != nil:
			t.Errorf("%s: New = %v", c.name, err)
		}
	}
}

// A client property eddy's client cannot carry out is an error at New
// that names it; a property eddy manages is refused; supported ones pass.
func TestClientConfigIsCheckedAtNew(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(str, str)).To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		client map[string]string
		want   string // in the error; "" no error
	}{
		{"supported properties", map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
			"sasl.username": "u", "sasl.password": "p", "session.timeout.ms": "6000", "linger.ms": "5", "compression.type": "lz4"}, ""},
		{"a managed property", map[string]string{"group.id": "other"}, "group.id"},
		{"a bad value", map[string]string{"session.timeout.ms": "soon"}, "session.timeout.ms"},
	} {
		_, err := streams.New(top, streams.Config{ApplicationID: "client-test", BootstrapServers: "127.0.0.1:1", ClientConfig: c.client})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: New = %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: New = %v, want an error naming %s", c.name, err, c.want)
		}
	}
}

// Offset reset policies are checked at New (the application's and each
// source's); auto.offset.reset is not a client property a user sets, and
// a global table, always read in full, takes none.
func TestOffsetResetsAreCheckedAtNew(t *testing.T) {
	str := serde.String()
	build := func(r topology.OffsetReset) *topology.Topology {
		b := topology.NewBuilder()
		topology.Stream(b, "in", topology.Consumed(str, str).WithOffsetReset(r).WithName("orders")).To("out", topology.Produced(str, str))
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	for _, c := range []struct {
		name   string
		source topology.OffsetReset
		cfg    streams.Config
		want   string // in the error; "" no error
	}{
		{"every policy", topology.ResetByDuration(90 * time.Minute), streams.Config{OffsetReset: topology.ResetNone}, ""},
		{"latest", topology.ResetLatest, streams.Config{OffsetReset: topology.ResetLatest}, ""},
		{"a bad source policy", topology.OffsetReset("begin"), streams.Config{}, `source "orders": offset reset "begin"`},
		{"a bad application policy", "", streams.Config{OffsetReset: "by_duration:1h"}, `OffsetReset: offset reset "by_duration:1h"`},
		{"auto.offset.reset in ClientConfig", "", streams.Config{ClientConfig: map[string]string{"auto.offset.reset": "latest"}}, "set Config.OffsetReset"},
	} {
		c.cfg.ApplicationID, c.cfg.BootstrapServers = "reset-test", "127.0.0.1:1"
		_, err := streams.New(build(c.source), c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: New = %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: New = %v, want an error saying %s", c.name, err, c.want)
		}
	}
	b := topology.NewBuilder()
	topology.GlobalTable(b, "rates", topology.Consumed(str, str).WithOffsetReset(topology.ResetLatest))
	topology.Stream(b, "in", topology.Consumed(str, str)).To("out", topology.Produced(str, str))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "an offset reset policy (latest) does not apply") {
		t.Errorf("a global table with an offset reset policy: Build = %v", err)
	}
	if got := topology.ResetByDuration(90 * time.Minute); got != "by_duration:PT5400S" {
		t.Errorf("ResetByDuration(90m) = %q", got)
	}
}

// Under exactly-once, an async operator whose calls may hold a commit past
// the transaction timeout is refused at New, naming the operator; a raised
// transaction.timeout.ms, or at-least-once, accepts it.
func TestAsyncBudgetWithinTheTransactionTimeout(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	topology.MapValuesAsync(topology.Stream(b, "in", topology.Consumed(str, str)),
		func(_ context.Context, _, v string) (string, error) { return v, nil },
		topology.Async().WithName("slow-call").WithTimeout(4*time.Second).WithRetries(2, time.Second, time.Second)).
		To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	cfg := streams.Config{ApplicationID: "async-budget", BootstrapServers: "127.0.0.1:1", Guarantee: streams.ExactlyOnce}
	_, err = streams.New(top, cfg)
	if err == nil || !strings.Contains(err.Error(), `"slow-call"`) || !strings.Contains(err.Error(), "transaction.timeout.ms") {
		t.Fatalf("New: %v", err)
	}
	cfg.ClientConfig = map[string]string{"transaction.timeout.ms": "60000"}
	if _, err := streams.New(top, cfg); err != nil {
		t.Fatalf("with a 60 s transaction timeout: %v", err)
	}
	cfg.ClientConfig, cfg.Guarantee = nil, streams.AtLeastOnce
	if _, err := streams.New(top, cfg); err != nil {
		t.Fatalf("at least once: %v", err)
	}
}
