// Command fraud is real-time payment fraud detection with eddy: payments
// and logins keyed by account; a 5-minute sliding event-time window of
// each account's payments (count, total, where from); joined with the
// account's recent logins; scored by a versioned rule read from a rules
// topic; alerts written exactly once, each with the account, the payments
// and logins that triggered it, the rule version and an idempotency key.
// Payments that arrive after their window closed go to a late-records
// topic instead of being dropped.
//
// With no flags it starts an embedded Kafka broker (franz-go's kfake),
// writes two hours of generated traffic for 40 accounts with three
// incidents in it, runs the detector until every event is processed,
// prints the alerts and the late payments, and exits.
//
//	go run ./examples/fraud
//	go run ./examples/fraud -brokers 127.0.0.1:9092 -v
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// Payment is a card payment, keyed by account.
type Payment struct {
	ID          string    `json:"id"`
	Account     string    `json:"account"`
	AmountCents int64     `json:"amount_cents"`
	Country     string    `json:"country"`
	Device      string    `json:"device"`
	At          time.Time `json:"at"`
}

// Login is a sign-in to an account, keyed by account.
type Login struct {
	ID      string    `json:"id"`
	Account string    `json:"account"`
	Device  string    `json:"device"`
	Country string    `json:"country"`
	At      time.Time `json:"at"`
}

// RecentLogins is an account's last few logins, oldest first (by when
// they happened, whatever order they arrive in).
type RecentLogins struct {
	Logins []Login `json:"logins"`
}

const keptLogins = 4

func (r RecentLogins) add(l Login) RecentLogins {
	out := slices.Clone(r.Logins)
	i, _ := slices.BinarySearchFunc(out, l.At, func(x Login, t time.Time) int { return x.At.Compare(t) })
	out = slices.Insert(out, i, l)
	if len(out) > keptLogins {
		out = out[len(out)-keptLogins:]
	}
	return RecentLogins{Logins: out}
}

// asOf is the logins that had happened at t: the join looks at the
// account as it was when the payments were made, not as it is when the
// window happens to be processed.
func (r RecentLogins) asOf(t time.Time) RecentLogins {
	i, _ := slices.BinarySearchFunc(r.Logins, t, func(x Login, t time.Time) int {
		if x.At.After(t) {
			return 1
		}
		return -1
	})
	return RecentLogins{Logins: r.Logins[:i]}
}

// Window is what one account did in one 5-minute window.
type Window struct {
	Account     string    `json:"account"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Count       int       `json:"count"`
	TotalCents  int64     `json:"total_cents"`
	PaymentIDs  []string  `json:"payment_ids"`
	Countries   []string  `json:"countries"`
	LastPayment time.Time `json:"last_payment"`
}

func addPayment(p Payment, w Window) Window {
	w.Account = p.Account
	w.Count++
	w.TotalCents += p.AmountCents
	w.PaymentIDs = append(slices.Clone(w.PaymentIDs), p.ID)
	if !slices.Contains(w.Countries, p.Country) {
		w.Countries = append(slices.Clone(w.Countries), p.Country)
	}
	if p.At.After(w.LastPayment) {
		w.LastPayment = p.At
	}
	return w
}

// Rule scores a window. Rules are data, versioned, and read from the rules
// topic: a new version takes effect without a redeploy, and every alert
// says which version raised it.
type Rule struct {
	Version string `json:"version"`
	// Velocity: at least VelocityCount payments in the window.
	VelocityCount  int `json:"velocity_count"`
	VelocityPoints int `json:"velocity_points"`
	// Amount: at least AmountCents paid in the window.
	AmountCents  int64 `json:"amount_cents"`
	AmountPoints int   `json:"amount_points"`
	// A payment from a country other than the last login's.
	ForeignCountryPoints int `json:"foreign_country_points"`
	// The last login came from a device and country the account's earlier
	// logins never used.
	NewDevicePoints int `json:"new_device_points"`
	// AlertAt is the score that raises an alert.
	AlertAt int `json:"alert_at"`
}

// Candidate is a window with the account's recent logins and the rule.
type Candidate struct {
	Window Window       `json:"window"`
	Logins RecentLogins `json:"logins"`
}

// Scored is a candidate with its score under a rule.
type Scored struct {
	Candidate
	Rule    string   `json:"rule"`
	Score   int      `json:"score"`
	AlertAt int      `json:"alert_at"`
	Reasons []string `json:"reasons"`
}

// Score applies the rule.
func (r Rule) Score(c Candidate) Scored {
	s := Scored{Candidate: c, Rule: r.Version, AlertAt: r.AlertAt}
	hit := func(points int, why string) {
		s.Score += points
		s.Reasons = append(s.Reasons, why)
	}
	w := c.Window
	if w.Count >= r.VelocityCount {
		hit(r.VelocityPoints, fmt.Sprintf("%d payments in 5 minutes", w.Count))
	}
	if w.TotalCents >= r.AmountCents {
		hit(r.AmountPoints, fmt.Sprintf("%s paid in 5 minutes", euros(w.TotalCents)))
	}
	if n := len(c.Logins.Logins); n > 0 {
		last := c.Logins.Logins[n-1]
		for _, country := range w.Countries {
			if country != last.Country {
				hit(r.ForeignCountryPoints, fmt.Sprintf("paid from %s, last login from %s", country, last.Country))
				break
			}
		}
		if n > 1 && !slices.ContainsFunc(c.Logins.Logins[:n-1], func(l Login) bool { return l.Device == last.Device || l.Country == last.Country }) {
			hit(r.NewDevicePoints, fmt.Sprintf("last login from a new device (%s) and country (%s)", last.Device, last.Country))
		}
	}
	return s
}

// Alert is what the detector writes: exactly once per incident.
type Alert struct {
	// IdempotencyKey is account, rule version and window: the same alert
	// always has the same key, so whoever acts on alerts can drop repeats
	// of their own (a case re-opened, a message redelivered).
	IdempotencyKey string    `json:"idempotency_key"`
	Account        string    `json:"account"`
	Rule           string    `json:"rule"`
	Score          int       `json:"score"`
	Reasons        []string  `json:"reasons"`
	WindowStart    time.Time `json:"window_start"`
	WindowEnd      time.Time `json:"window_end"`
	PaymentIDs     []string  `json:"payment_ids"`
	LoginIDs       []string  `json:"login_ids"`
}

// lastAlert is the dedup store's value: the window of an account's last
// alert under a rule version.
type lastAlert struct {
	Rule string `json:"rule"`
	End  int64  `json:"end"`
}

// Topics names the example's topics.
type Topics struct {
	Payments, Logins, Rules, Alerts, Late string
}

// currentRule is the rules topic's key of the rule in force.
const currentRule = "payments"

// Topology builds the detector.
func Topology(t Topics) (*topology.Topology, error) {
	str := serde.String()
	b := topology.NewBuilder()
	payments := topology.Stream(b, t.Payments, topology.Consumed(str, serde.JSON[Payment]()).
		WithTimestampExtractor(topology.EventTime[string](func(p Payment) time.Time { return p.At })))
	logins := topology.Stream(b, t.Logins, topology.Consumed(str, serde.JSON[Login]()).
		WithTimestampExtractor(topology.EventTime[string](func(l Login) time.Time { return l.At })))
	rules := topology.GlobalTable(b, t.Rules, topology.Consumed(str, serde.JSON[Rule]()), topology.Materialized[string, Rule]("rules"))

	recent := topology.Aggregate(logins.GroupByKey(), func() RecentLogins { return RecentLogins{} },
		func(_ string, l Login, r RecentLogins) RecentLogins { return r.add(l) },
		topology.Materialized[string, RecentLogins]("recent-logins").WithSerdes(str, serde.JSON[RecentLogins]()))

	// Every payment updates the sliding windows around it; caching off, so
	// each update reaches the scorer at once.
	windows := topology.WindowedAggregate(
		payments.GroupByKey().WindowedBy(topology.SlidingWindows(5*time.Minute, time.Minute)).LateRecords(t.Late),
		func() Window { return Window{} },
		func(_ string, p Payment, w Window) Window { return addPayment(p, w) },
		topology.Materialized[string, Window]("payments-5m").WithSerdes(str, serde.JSON[Window]()).WithCaching(false))
	byAccount := topology.Map(windows.ToStream(), func(k serde.Windowed[string], w Window) (string, Window) {
		w.Start, w.End = time.UnixMilli(k.Window.Start).UTC(), time.UnixMilli(k.Window.End).UTC()
		return k.Key, w
	}).Repartition(topology.Repartitioned(str, serde.JSON[Window]()).WithName("windows-by-account"))

	candidates := topology.LeftJoinTable(byAccount, recent, func(w Window, r *RecentLogins) Candidate {
		c := Candidate{Window: w}
		if r != nil {
			c.Logins = r.asOf(w.LastPayment)
		}
		return c
	})
	scored := topology.JoinGlobal(candidates, rules, func(string, Candidate) string { return currentRule },
		func(c Candidate, r Rule) Scored { return r.Score(c) })
	suspicious := scored.Filter(func(_ string, s Scored) bool { return s.Score >= s.AlertAt })

	// An account's last alert matters while a window overlapping it can
	// still come: windows are 5 minutes, records up to 1 minute late, so 10
	// minutes of stream time after the alert it is forgotten and the store
	// holds only accounts alerted recently, not every account ever alerted.
	b.AddStateStore(stores.KeyValue("alerted", str, serde.JSON[lastAlert]()).WithTTL(10 * time.Minute))
	alerts := topology.ProcessValues(suspicious, func() processor.Processor[string, Scored, string, Alert] { return &oncePerIncident{} },
		[]string{"alerted"}, topology.Named("once-per-incident"))
	alerts.To(t.Alerts, topology.Produced(str, serde.JSON[Alert]()))
	return b.Build()
}

// oncePerIncident turns suspicious windows into alerts, one per incident:
// sliding windows overlap, so one burst of payments makes several
// suspicious windows; an alert is raised for the first, and windows that
// overlap the last alerted one under the same rule version are the same
// incident. The store and the alert are committed together (exactly once),
// so a crash can neither lose the alert nor raise it twice.
type oncePerIncident struct {
	ctx   processor.Context[string, Alert]
	store stores.KeyValueStore[string, lastAlert]
}

func (p *oncePerIncident) Init(ctx processor.Context[string, Alert]) (err error) {
	p.ctx = ctx
	p.store, err = processor.GetKeyValueStore[string, lastAlert](ctx, "alerted")
	return err
}

func (p *oncePerIncident) Process(r processor.Record[string, Scored]) error {
	s := r.Value
	w := s.Window
	last, ok, err := p.store.Get(r.Key)
	if err != nil {
		return err
	}
	if ok && last.Rule == s.Rule && w.Start.UnixMilli() <= last.End {
		return nil // the incident already alerted
	}
	if err := p.store.Put(r.Key, lastAlert{Rule: s.Rule, End: w.End.UnixMilli()}); err != nil {
		return err
	}
	a := Alert{
		IdempotencyKey: fmt.Sprintf("%s|%s|%d-%d", r.Key, s.Rule, w.Start.UnixMilli(), w.End.UnixMilli()),
		Account:        r.Key, Rule: s.Rule, Score: s.Score, Reasons: s.Reasons,
		WindowStart: w.Start, WindowEnd: w.End, PaymentIDs: w.PaymentIDs,
	}
	for _, l := range s.Logins.Logins {
		a.LoginIDs = append(a.LoginIDs, l.ID)
	}
	p.ctx.Forward(processor.Record[string, Alert]{Key: r.Key, Value: a, Timestamp: r.Timestamp})
	return nil
}

func (p *oncePerIncident) Close() error { return nil }

// RuleV1 is the rule the example starts with.
var RuleV1 = Rule{
	Version:       "2026-11.1",
	VelocityCount: 5, VelocityPoints: 50,
	AmountCents: 100_000, AmountPoints: 50,
	ForeignCountryPoints: 30, NewDevicePoints: 30,
	AlertAt: 60,
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers (default: an embedded broker)")
	verbose := flag.Bool("v", false, "log what the app does to stderr")
	flag.Parse()
	logger := zap.NewNop()
	if *verbose {
		logger, _ = zap.NewDevelopment()
	}
	if err := run(*brokers, logger, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(brokers string, logger *zap.Logger, out io.Writer) error {
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4))
		if err != nil {
			return fmt.Errorf("starting the embedded broker: %w", err)
		}
		defer cluster.Close()
		brokers = strings.Join(cluster.ListenAddrs(), ",")
	}
	appID := fmt.Sprintf("fraud-%d", time.Now().UnixNano())
	topics := Topics{Payments: appID + "-payments", Logins: appID + "-logins", Rules: appID + "-rules",
		Alerts: appID + "-alerts", Late: appID + "-late-payments"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if resp, err := adm.CreateTopics(ctx, 4, -1, nil, topics.Payments, topics.Logins, topics.Alerts, topics.Late); err != nil || resp.Error() != nil {
		return fmt.Errorf("creating topics: %v %v", err, resp.Error())
	}
	if resp, err := adm.CreateTopics(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topics.Rules); err != nil || resp.Error() != nil {
		return fmt.Errorf("creating the rules topic: %v %v", err, resp.Error())
	}
	rule, _ := json.Marshal(RuleV1)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Rules, Key: []byte(currentRule), Value: rule}).FirstErr(); err != nil {
		return err
	}
	events, err := produceTraffic(ctx, cl, topics)
	if err != nil {
		return err
	}
	top, err := Topology(topics)
	if err != nil {
		return err
	}
	stateDir, err := os.MkdirTemp("", "eddy-fraud-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	app, err := streams.New(top, streams.Config{
		ApplicationID:    appID,
		BootstrapServers: brokers,
		Guarantee:        streams.ExactlyOnce,
		StateDir:         stateDir,
		// A task reads an account's windows and its logins from two
		// partitions, in event-time order; besides waiting for a partition
		// with records not fetched yet, it waits this long for a caught-up
		// one with nothing buffered (logins are written live), so a
		// payment's windows meet the logins that came before them.
		MaxTaskIdle: time.Second,
		Logger:      logger,
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- app.Run(runCtx) }()
	waitErr := waitProcessed(ctx, adm, appID, topics, errc)
	stop()
	if err := <-errc; err != nil {
		return fmt.Errorf("the app failed: %w", err)
	}
	if waitErr != nil {
		return waitErr
	}

	alerts, err := readAll(ctx, brokers, topics.Alerts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d payments and %d logins of %d accounts, rule %s; alerts:\n", events.payments, events.logins, accounts, RuleV1.Version)
	keys := map[string]bool{}
	for _, r := range alerts {
		var a Alert
		if err := json.Unmarshal(r.Value, &a); err != nil {
			return fmt.Errorf("alert %s: %w", r.Key, err)
		}
		keys[a.IdempotencyKey] = true
		fmt.Fprintf(out, "  %s score %d (%s–%s): %s\n      payments %s; logins %s\n      key %s\n", a.Account, a.Score,
			a.WindowStart.Format("15:04:05"), a.WindowEnd.Format("15:04:05"), strings.Join(a.Reasons, "; "),
			strings.Join(a.PaymentIDs, " "), strings.Join(a.LoginIDs, " "), a.IdempotencyKey)
	}
	fmt.Fprintf(out, "%d alerts, %d distinct idempotency keys\n", len(alerts), len(keys))
	late, err := readAll(ctx, brokers, topics.Late)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "late payments (in %s, not dropped):\n", topics.Late)
	for _, r := range late {
		var p Payment
		_ = json.Unmarshal(r.Value, &p)
		reason, _ := header(r, topology.HeaderLateReason)
		streamTime, _ := header(r, topology.HeaderLateStreamTime)
		var ms int64
		fmt.Sscan(streamTime, &ms)
		fmt.Fprintf(out, "  %s of %s at %s, stream time %s: %s\n", p.ID, p.Account, p.At.Format("15:04:05"),
			time.UnixMilli(ms).UTC().Format("15:04:05"), reason)
	}
	return nil
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// accounts is how many accounts the generated traffic has.
const accounts = 40

type produced struct{ payments, logins int }

// produceTraffic writes two hours of payments and logins (a fixed seed:
// the same every run): every account logs in from its home device and
// country and pays a few times an hour at home; in it, three incidents —
//   - acct-07: a stolen card tested abroad, six small payments in two
//     minutes from another country (velocity + foreign country: alert);
//   - acct-21: a big shopping spree at home, €1,550 in four minutes
//     (amount only: below the alert score, no alert);
//   - acct-33: an account takeover, a login from a new device abroad, then
//     €1,200 in three payments from it (amount + new device: alert); the
//     owner logs in from home again ten minutes later;
//
// and, at the end, three payments that arrive long after their windows
// closed (late).
func produceTraffic(ctx context.Context, cl *kgo.Client, t Topics) (produced, error) {
	rng := rand.New(rand.NewPCG(30, 11))
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	homes := []string{"DE", "FR", "NL", "ES", "IT"}
	var recs []*kgo.Record
	var n produced
	seq := 0
	pay := func(acct string, at time.Time, cents int64, country, device string) {
		seq++
		p := Payment{ID: fmt.Sprintf("pay-%04d", seq), Account: acct, AmountCents: cents, Country: country, Device: device, At: at}
		v, _ := json.Marshal(p)
		recs = append(recs, &kgo.Record{Topic: t.Payments, Key: []byte(acct), Value: v, Timestamp: at})
		n.payments++
	}
	login := func(acct string, at time.Time, device, country string) {
		seq++
		l := Login{ID: fmt.Sprintf("login-%04d", seq), Account: acct, Device: device, Country: country, At: at}
		v, _ := json.Marshal(l)
		recs = append(recs, &kgo.Record{Topic: t.Logins, Key: []byte(acct), Value: v, Timestamp: at})
		n.logins++
	}
	type event struct {
		at time.Time
		do func()
	}
	var evs []event
	for i := range accounts {
		acct := fmt.Sprintf("acct-%02d", i)
		home, device := homes[i%len(homes)], fmt.Sprintf("phone-%02d", i)
		for _, m := range []int{rng.IntN(5), 40 + rng.IntN(30)} {
			at := start.Add(time.Duration(m)*time.Minute + time.Duration(rng.IntN(60))*time.Second)
			evs = append(evs, event{at, func() { login(acct, at, device, home) }})
		}
		// Payments at home, at least six minutes apart.
		for at := start.Add(time.Duration(6+rng.IntN(10)) * time.Minute); at.Before(start.Add(2 * time.Hour)); at = at.Add(time.Duration(6+rng.IntN(20)) * time.Minute) {
			cents := int64(500 + rng.IntN(11_500))
			evs = append(evs, event{at, func() { pay(acct, at, cents, home, device) }})
		}
	}
	incident := start.Add(50 * time.Minute)
	for i := range 6 { // acct-07: card testing abroad
		at := incident.Add(time.Duration(i*20) * time.Second)
		evs = append(evs, event{at, func() { pay("acct-07", at, int64(100+i*37), "BR", "web-unknown") }})
	}
	for i, c := range []int64{60_000, 50_000, 45_000} { // acct-21: a spree at home
		at := incident.Add(time.Duration(10+i*2) * time.Minute)
		evs = append(evs, event{at, func() { pay("acct-21", at, c, homes[21%len(homes)], "phone-21") }})
	}
	takeover := start.Add(80 * time.Minute) // acct-33: a new device abroad
	evs = append(evs, event{takeover, func() { login("acct-33", takeover, "laptop-x", "BR") }})
	for i := range 3 {
		at := takeover.Add(time.Duration(3+i) * time.Minute)
		evs = append(evs, event{at, func() { pay("acct-33", at, 40_000, "BR", "laptop-x") }})
	}
	recovered := takeover.Add(10 * time.Minute)
	evs = append(evs, event{recovered, func() { login("acct-33", recovered, "phone-33", homes[33%len(homes)]) }})
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	for _, e := range evs {
		e.do()
	}
	for _, acct := range []string{"acct-02", "acct-15", "acct-28"} { // late: 1h40 after the fact
		pay(acct, start.Add(12*time.Minute), 2_500, homes[0], "phone-late")
	}
	return n, cl.ProduceSync(ctx, recs...).FirstErr()
}

// waitProcessed waits until the app's group has committed every input
// partition (and every partition of its internal topics) to its end.
func waitProcessed(ctx context.Context, adm *kadm.Client, group string, t Topics, errc <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for quiet := 0; quiet < 3; {
		select {
		case err := <-errc:
			return fmt.Errorf("the app stopped: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("events not processed after 2 minutes")
		}
		lags, err := adm.Lag(ctx, group)
		if err != nil {
			return err
		}
		l := lags[group]
		if l.Error() != nil || l.Lag == nil {
			quiet = 0
			continue
		}
		done := true
		for _, topic := range []string{t.Payments, t.Logins} {
			if _, ok := l.Lag[topic]; !ok {
				done = false
			}
		}
		if done && l.Lag.Total() == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return nil
}

// readAll reads a topic from its start to its end under read_committed,
// ordered by partition then offset.
func readAll(ctx context.Context, brokers, topic string) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords()) // transaction markers take offsets: see them to know the end is reached
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok {
				if !r.Attrs.IsControl() {
					out = append(out, r)
				}
				if r.Offset+1 >= end {
					delete(want, r.Partition)
				}
			}
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp.Before(out[j].Timestamp) })
	return out, nil
}

func euros(cents int64) string { return fmt.Sprintf("€%d.%02d", cents/100, cents%100) }
