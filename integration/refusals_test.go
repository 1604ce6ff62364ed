package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// Output the brokers would refuse — a record over the output topic's
// max.message.bytes, a record for a topic that does not exist — goes to
// the production error handler under exactly-once like any bad record:
// with Continue it is counted and everything else is written exactly once;
// with DeadLetter its input record is in the dead-letter topic with the
// cause. The output topic takes at most 20 kB a batch while the records
// around the refused ones add up to far more: batches for it are cut to
// its limit. Proven on the real broker.
func TestRefusedOutputGoesToTheProductionHandler(t *testing.T) {
	for _, action := range []streams.ErrorAction{streams.Continue, streams.DeadLetter} {
		name := map[streams.ErrorAction]string{streams.Continue: "continue", streams.DeadLetter: "dead letter"}[action]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			brokers := realBroker(t)
			in, out, dlq := kafkatest.UniqueName(t, "refuse-in"), kafkatest.UniqueName(t, "refuse-out"), kafkatest.UniqueName(t, "refuse-dlq")
			missing := kafkatest.UniqueName(t, "refuse-missing")
			kafkatest.CreateTopic(t, brokers, in, 2, nil)
			kafkatest.CreateTopic(t, brokers, out, 2, map[string]string{"max.message.bytes": "20000"})
			kafkatest.CreateTopic(t, brokers, dlq, 1, nil)
			const n = 2000
			pad := strings.Repeat("p", 400)
			var recs []kafkatest.Record
			refused := map[string]string{} // input value → why
			for i := range n {
				v := fmt.Sprintf("v%04d", i)
				switch {
				case i%500 == 17:
					v = "big-" + v
					refused[v] = "max.message.bytes (20000)"
				case i%700 == 300:
					v = "lost-" + v
					refused[v] = "the topic does not exist"
				}
				recs = append(recs, kafkatest.KV(fmt.Sprintf("k%d", i%13), v))
			}
			kafkatest.Produce(t, brokers, in, recs...)

			var mu sync.Mutex
			var seen []*streams.RecordError
			str := serde.String()
			b := topology.NewBuilder()
			topology.MapValues(topology.Stream(b, in, topology.Consumed(str, str)),
				func(v string) string {
					if strings.HasPrefix(v, "big-") {
						return strings.Repeat("x", 30_000)
					}
					return v + pad
				}).
				ToTopicFunc(func(r processor.Record[string, string]) string {
					if strings.HasPrefix(string(r.Value), "lost-") {
						return missing
					}
					return out
				}, topology.Produced(str, str))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			appID := kafkatest.UniqueName(t, "refuse-app")
			app, stop := startApp(t, top, streams.Config{ApplicationID: appID, BootstrapServers: brokers,
				Guarantee: streams.ExactlyOnce, StateDir: t.TempDir(), DeadLetterTopic: dlq,
				ProductionErrors: func(e *streams.RecordError) streams.ErrorAction {
					mu.Lock()
					seen = append(seen, e)
					mu.Unlock()
					return action
				}})
			kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, in)
			// The counts are refreshed twice a second.
			counts := app.Report().Threads[0].Counts
			for wait := time.Now().Add(30 * time.Second); counts.Skipped+counts.DeadLettered < int64(len(refused)) && time.Now().Before(wait); {
				time.Sleep(50 * time.Millisecond)
				counts = app.Report().Threads[0].Counts
			}
			stop()

			// Everything else exactly once, in order per key.
			var want, got []string
			for _, r := range recs {
				if _, ok := refused[string(r.Value)]; !ok {
					want = append(want, string(r.Key)+"="+string(r.Value)+pad)
				}
			}
			byKey := map[string][]string{}
			for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
				byKey[string(r.Key)] = append(byKey[string(r.Key)], string(r.Key)+"="+string(r.Value))
			}
			wantByKey := map[string][]string{}
			for _, w := range want {
				k, _, _ := strings.Cut(w, "=")
				wantByKey[k] = append(wantByKey[k], w)
			}
			for k, w := range wantByKey {
				got = byKey[k]
				if strings.Join(got, ",") != strings.Join(w, ",") {
					t.Errorf("key %s: %d records out, want %d, exactly once and in order", k, len(got), len(w))
				}
			}

			// The handler saw each refused record, with its input and cause.
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != len(refused) {
				t.Fatalf("the handler saw %d records, want the %d refused", len(seen), len(refused))
			}
			for _, e := range seen {
				why, ok := refused[string(e.Value)]
				if !ok || e.Kind != processor.ProductionError || !errors.Is(e.Err, processor.ErrRecordRefused) || !strings.Contains(e.Err.Error(), why) || e.Topic != in {
					t.Errorf("handler saw %v (input %q), want a refusal saying %q", e, e.Value, why)
				}
			}
			dead := kafkatest.ConsumeAll(t, brokers, dlq)
			switch action {
			case streams.Continue:
				if counts.Skipped != int64(len(refused)) || len(dead) != 0 {
					t.Errorf("%d skipped, %d dead-lettered; want %d skipped, none dead-lettered", counts.Skipped, len(dead), len(refused))
				}
			case streams.DeadLetter:
				if counts.DeadLettered != int64(len(refused)) || len(dead) != len(refused) {
					t.Errorf("%d counted and %d in the dead-letter topic, want %d", counts.DeadLettered, len(dead), len(refused))
				}
				for _, r := range dead {
					why, ok := refused[string(r.Value)]
					msg := ""
					for _, h := range r.Headers {
						if h.Key == "__streams.errors.message" {
							msg = string(h.Value)
						}
					}
					if !ok || !strings.Contains(msg, why) {
						t.Errorf("dead letter %q with cause %q, want a refused input saying %q", r.Value, msg, why)
					}
				}
			}
		})
	}
}

// The output topic's max.message.bytes lowered while the app runs: the
// producer learned the old limit at the topic's first record, so the
// brokers refuse a record its checks let through; the thread starts over
// with new clients (exactly-once: the transaction is aborted), which learn
// the new limit and give the record to the handler; everything else is
// written exactly once. Proven on the real broker.
func TestRefusalAfterATopicConfigChange(t *testing.T) {
	brokers := realBroker(t)
	in, out := kafkatest.UniqueName(t, "relimit-in"), kafkatest.UniqueName(t, "relimit-out")
	appID := kafkatest.UniqueName(t, "relimit-app")
	kafkatest.CreateTopic(t, brokers, in, 1, nil)
	kafkatest.CreateTopic(t, brokers, out, 1, nil)
	str := serde.String()
	b := topology.NewBuilder()
	topology.MapValues(topology.Stream(b, in, topology.Consumed(str, str)), func(v string) string {
		if strings.HasPrefix(v, "big") {
			return strings.Repeat("x", 30_000)
		}
		return v
	}).To(out, topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*streams.RecordError
	logs := &syncBuffer{}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.InfoLevel)
	app, stop := startApp(t, top, streams.Config{ApplicationID: appID, BootstrapServers: brokers,
		Guarantee: streams.ExactlyOnce, StateDir: t.TempDir(), Logger: zap.New(core),
		ProductionErrors: func(e *streams.RecordError) streams.ErrorAction {
			mu.Lock()
			seen = append(seen, e)
			mu.Unlock()
			return streams.Continue
		}})
	var first, second []kafkatest.Record
	for i := range 100 {
		first = append(first, kafkatest.KV("k", fmt.Sprintf("a%03d", i)))
		v := fmt.Sprintf("b%03d", i)
		if i == 50 {
			v = "big"
		}
		second = append(second, kafkatest.KV("k", v))
	}
	kafkatest.Produce(t, brokers, in, first...)
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, in)

	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit := "20000"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &limit}}, out); err != nil {
		t.Fatal(err)
	}
	for kafkatest.TopicConfigs(t, brokers, out)["max.message.bytes"] != limit {
		if ctx.Err() != nil {
			t.Fatal("the new max.message.bytes not in effect within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	kafkatest.Produce(t, brokers, in, second...)
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, in)
	if app.State() != streams.Running && app.State() != streams.Rebalancing {
		t.Fatalf("app state %v", app.State())
	}
	stop()

	var got []string
	for _, r := range kafkatest.ConsumeAll(t, brokers, out) {
		got = append(got, string(r.Value))
	}
	var want []string
	for _, r := range append(first, second...) {
		if string(r.Value) != "big" {
			want = append(want, string(r.Value))
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("output (%d records) is not every record but the big one, once and in order (%d)", len(got), len(want))
	}
	if !strings.Contains(logs.String(), "starting over with new clients, which learn the topic afresh") || !strings.Contains(logs.String(), "MESSAGE_TOO_LARGE") {
		t.Errorf("no log of the brokers' refusal and the start over:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !errors.Is(seen[0].Err, processor.ErrRecordRefused) || !strings.Contains(seen[0].Err.Error(), "max.message.bytes (20000)") {
		t.Errorf("handler saw %v, want the big record refused for max.message.bytes (20000)", seen)
	}
}
