package integration_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// retentionHole is an input topic whose records 10..19 were deleted before
// the application processed them: it processed v0..v9 and stopped, then
// v10..v29 were written and everything before offset 20 deleted (what a
// retention shorter than an outage does).
type retentionHole struct {
	t            *testing.T
	brokers      string
	in, out, app string
	logs         *syncBuffer
}

func newRetentionHole(t *testing.T) *retentionHole {
	h := &retentionHole{t: t, brokers: realBroker(t), in: kafkatest.UniqueName(t, "reset-in"),
		out: kafkatest.UniqueName(t, "reset-out"), app: kafkatest.UniqueName(t, "reset-app"), logs: &syncBuffer{}}
	kafkatest.CreateTopic(t, h.brokers, h.in, 1, nil)
	kafkatest.CreateTopic(t, h.brokers, h.out, 1, nil)
	h.produce(0, 10)
	stop := runApp(t, h.topology(topology.ResetEarliest), h.config(""))
	kafkatest.WaitCaughtUp(t, h.brokers, h.app, 2*time.Minute, h.in)
	stop()
	h.produce(10, 30)
	adm := kadm.NewClient(kafkatest.Client(t, h.brokers))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.DeleteRecords(ctx, kadm.Offsets{h.in: {0: {Topic: h.in, Partition: 0, At: 20}}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *retentionHole) produce(from, to int) {
	var recs []kafkatest.Record
	for i := from; i < to; i++ {
		recs = append(recs, kafkatest.KV("k", fmt.Sprintf("v%d", i)))
	}
	kafkatest.Produce(h.t, h.brokers, h.in, recs...)
}

// topology copies the input to the output, the source with policy
// (""; the application's).
func (h *retentionHole) topology(policy topology.OffsetReset) *topology.Topology {
	b := topology.NewBuilder()
	c := topology.Consumed(serde.String(), serde.String())
	if policy != "" {
		c = c.WithOffsetReset(policy)
	}
	topology.Stream(b, h.in, c).To(h.out, topology.Produced(serde.String(), serde.String()))
	top, err := b.Build()
	if err != nil {
		h.t.Fatal(err)
	}
	return top
}

func (h *retentionHole) config(appDefault topology.OffsetReset) streams.Config {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(h.logs), zapcore.InfoLevel)
	return streams.Config{ApplicationID: h.app, BootstrapServers: h.brokers, Guarantee: streams.ExactlyOnce,
		StateDir: h.t.TempDir(), OffsetReset: appDefault, Logger: zap.New(core)}
}

// output is what the application wrote, in order.
func (h *retentionHole) output() []string {
	var out []string
	for _, r := range kafkatest.ConsumeAll(h.t, h.brokers, h.out) {
		out = append(out, string(r.Value))
	}
	return out
}

// waitReset runs until the app reports a reset, then until it committed
// offset want.
func (h *retentionHole) waitReset(app *streams.App, want int64) streams.OffsetResetReport {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rep := app.Report()
		if len(rep.OffsetResets) > 0 && kafkatest.Committed(h.t, h.brokers, h.app, h.in)[0] >= want {
			return rep.OffsetResets[0]
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no reset reported and offset %d committed within 2 minutes: %+v", want, rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func values(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("v%d", i))
	}
	return out
}

// A source whose committed offset the topic no longer holds goes on as its
// reset policy says, and the reset is counted, logged at Error with the
// skipped offsets and listed in /state; with ResetNone the application
// stops with an error naming the topic, the partition, the missing offset
// and the earliest one available. Proven on the real broker.
func TestOffsetResetPolicies(t *testing.T) {
	t.Run("earliest (the application's default)", func(t *testing.T) {
		t.Parallel()
		h := newRetentionHole(t)
		app, stop := startApp(t, h.topology(""), h.config(""))
		rep := h.waitReset(app, 30)
		stop()
		want := streams.OffsetResetReport{Topic: h.in, Partition: 0, Kind: "source", Policy: "earliest",
			From: 10, To: 20, Earliest: 20, Resets: 1, Skipped: 10, At: rep.At}
		if rep != want {
			t.Errorf("reset reported as %+v, want %+v", rep, want)
		}
		if got, w := h.output(), append(values(0, 10), values(20, 30)...); !slices.Equal(got, w) {
			t.Errorf("output %v, want %v (v10..v19 were deleted)", got, w)
		}
		h.checkLogged(10, 20, 10)
	})
	t.Run("latest (the source's)", func(t *testing.T) {
		t.Parallel()
		h := newRetentionHole(t)
		app, stop := startApp(t, h.topology(topology.ResetLatest), h.config(topology.ResetEarliest))
		in := startInstanceHandler(t, app)
		rep := h.waitReset(app, 30)
		if v, ok := metricValue(t, in, "eddy_offset_resets_total", `topic="`+h.in+`"`); !ok || v != 1 {
			t.Errorf("eddy_offset_resets_total = %v (found %v), want 1", v, ok)
		}
		if v, ok := metricValue(t, in, "eddy_offset_reset_skipped_offsets_total", `topic="`+h.in+`"`); !ok || v != 20 {
			t.Errorf("eddy_offset_reset_skipped_offsets_total = %v (found %v), want 20", v, ok)
		}
		h.produce(30, 35)
		kafkatest.WaitCaughtUp(t, h.brokers, h.app, 2*time.Minute, h.in)
		stop()
		if rep.Policy != "latest" || rep.From != 10 || rep.To != 30 || rep.Earliest != 20 || rep.Skipped != 20 {
			t.Errorf("reset reported as %+v, want from 10 to 30 (latest), earliest 20, 20 skipped", rep)
		}
		if got, w := h.output(), append(values(0, 10), values(30, 35)...); !slices.Equal(got, w) {
			t.Errorf("output %v, want %v", got, w)
		}
		h.checkLogged(10, 30, 20)
	})
	t.Run("none (the source's)", func(t *testing.T) {
		t.Parallel()
		h := newRetentionHole(t)
		app, err := streams.New(h.topology(topology.ResetNone), h.config(topology.ResetEarliest))
		if err != nil {
			t.Fatal(err)
		}
		err, _ = runUntilFailure(t, app, 2*time.Minute)
		want := fmt.Sprintf("topic %s partition 0: offset 10 is not in the partition (earliest available offset 20, end 30), and the offset reset policy is none", h.in)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run: %v\nwant it to say: %s", err, want)
		}
		if got, w := h.output(), values(0, 10); !slices.Equal(got, w) {
			t.Errorf("output %v, want only %v", got, w)
		}
	})
}

// startInstanceHandler serves app's Handler on a loopback port and
// returns its URL.
func startInstanceHandler(t *testing.T, app *streams.App) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: app.Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// checkLogged finds the reset's Error log entry with its facts.
func (h *retentionHole) checkLogged(from, to, skipped int64) {
	h.t.Helper()
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"level":"error"`) && strings.Contains(line, "offset reset") &&
			strings.Contains(line, fmt.Sprintf(`"missing_offset":%d`, from)) && strings.Contains(line, fmt.Sprintf(`"reset_to":%d`, to)) &&
			strings.Contains(line, fmt.Sprintf(`"skipped_offsets":%d`, skipped)) && strings.Contains(line, `"earliest_available":20`) &&
			strings.Contains(line, h.in) {
			return
		}
	}
	h.t.Errorf("no Error log entry of the reset (missing offset %d, reset to %d, %d skipped, earliest 20):\n%s", from, to, skipped, h.logs.String())
}
