// Command pageviews runs an eddy service the way one runs in production:
// several instances, each serving eddy's admin endpoint (health, readiness,
// metrics, topology, state) and answering interactive queries for any key,
// locally or by asking the instance that owns it.
//
// With no flags it starts an embedded Kafka broker (franz-go's kfake),
// writes a day's worth of synthetic page views, runs two instances until
// every view is processed, then asks instance 0's HTTP endpoint for some
// users' view counts (half of them live on instance 1), checks them against
// a count of its own, prints per-page views per hour (each hour emitted
// once, when it closes), and exits.
//
//	go run ./examples/pageviews
//	go run ./examples/pageviews -instances 3 -serve 5m   # then curl the printed URLs
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
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// View is one page view, keyed by page (so each page's views stay in time
// order in their partition).
type View struct {
	User string    `json:"user"`
	At   time.Time `json:"at"`
}

// Topology counts views per page per hour of event time, each hour emitted
// once when it closes (grace 5 minutes), to hourly; and views per user (the
// queryable store "views-per-user"), re-keyed by user through a
// repartition topic.
func Topology(views, hourly string) (*topology.Topology, error) {
	str := serde.String()
	b := topology.NewBuilder()
	in := topology.Stream(b, views, topology.Consumed(str, serde.JSON[View]()).
		WithTimestampExtractor(topology.EventTime[string](func(v View) time.Time { return v.At })))
	byUser := topology.GroupBy(in, func(_ string, v View) string { return v.User }, topology.Grouped(str, serde.JSON[View]()))
	topology.Count(byUser, topology.Materialized[string, int64]("views-per-user"))
	perHour := topology.WindowedCount(in.GroupByKey().WindowedBy(topology.TumblingWindows(time.Hour, 5*time.Minute)).EmitOnWindowClose(),
		topology.Materialized[string, int64]("views-per-page-hour"))
	topology.Map(perHour.ToStream(), func(k serde.Windowed[string], n int64) (string, string) {
		return fmt.Sprintf("%s %s", time.UnixMilli(k.Window.Start).UTC().Format("15:04"), k.Key), fmt.Sprint(n)
	}).To(hourly, topology.Produced(str, str))
	return b.Build()
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers (default: an embedded broker)")
	instances := flag.Int("instances", 2, "app instances to run in this process (one consumer group)")
	serve := flag.Duration("serve", 0, "keep the instances and their endpoints up this long before exiting")
	verbose := flag.Bool("v", false, "log what the app does to stderr")
	flag.Parse()
	logger := zap.NewNop()
	if *verbose {
		logger, _ = zap.NewDevelopment()
	}
	if err := run(*brokers, *instances, *serve, logger, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(brokers string, instances int, serve time.Duration, logger *zap.Logger, out io.Writer) error {
	if instances < 1 {
		return errors.New("-instances must be at least 1")
	}
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4))
		if err != nil {
			return fmt.Errorf("starting the embedded broker: %w", err)
		}
		defer cluster.Close()
		brokers = strings.Join(cluster.ListenAddrs(), ",")
	}
	appID := fmt.Sprintf("pageviews-%d", time.Now().UnixNano())
	viewsTopic, hourlyTopic := appID+"-views", appID+"-hourly"
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if resp, err := adm.CreateTopics(ctx, 4, -1, nil, viewsTopic, hourlyTopic); err != nil || resp.Error() != nil {
		return fmt.Errorf("creating topics: %v %v", err, resp.Error())
	}
	perUser, err := produceViews(ctx, cl, viewsTopic)
	if err != nil {
		return err
	}
	top, err := Topology(viewsTopic, hourlyTopic)
	if err != nil {
		return err
	}
	stateRoot, err := os.MkdirTemp("", "eddy-pageviews-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateRoot)

	// Each instance serves app.Handler() on its own loopback port, which it
	// advertises as its ApplicationServer.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, instances)
	var urls []string
	for i := range instances {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		app, err := streams.New(top, streams.Config{
			ApplicationID:     appID,
			BootstrapServers:  brokers,
			Guarantee:         streams.ExactlyOnce,
			StateDir:          filepath.Join(stateRoot, fmt.Sprint(i)),
			ApplicationServer: l.Addr().String(),
			Logger:            logger.With(zap.Int("instance", i)),
		})
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: app.Handler()}
		go srv.Serve(l)
		defer srv.Close()
		urls = append(urls, "http://"+l.Addr().String())
		go func() { errc <- app.Run(runCtx) }()
	}
	defer func() {
		stop()
		for range instances {
			<-errc
		}
	}()

	// Ask instance 0 for every user until every answer is exact: it
	// answers its own users and forwards the others to their owner.
	users := make([]string, 0, len(perUser))
	for u := range perUser {
		users = append(users, u)
	}
	sort.Strings(users)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		wrong, err := checkUsers(urls[0], users, perUser)
		if err == nil && wrong == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queries not exact after 2 minutes: %d users wrong (%v)", wrong, err)
		}
		select {
		case err := <-errc:
			return fmt.Errorf("an instance stopped: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "views per user, asked of instance 0 (%s/stores/views-per-user/keys/{user}):\n", urls[0])
	for _, u := range users[:5] {
		fmt.Fprintf(out, "  %s\t%d\n", u, perUser[u])
	}
	fmt.Fprintf(out, "  … all %d users exact\n", len(users))

	hours, err := readHourly(ctx, brokers, hourlyTopic, 24*len(pages))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "views per page per hour (each hour emitted once, when it closed), first hours:")
	for _, h := range hours[:6] {
		fmt.Fprintf(out, "  %s\n", h)
	}
	total := 0
	for _, h := range hours {
		var n int
		fmt.Sscan(h[strings.LastIndexByte(h, '\t')+1:], &n)
		total += n
	}
	if total != dayViews {
		return fmt.Errorf("the hourly counts add up to %d views, want %d", total, dayViews)
	}
	fmt.Fprintf(out, "  … %d hours × %d pages, adding up to all %d views\n", 24, len(pages), total)
	if serve > 0 {
		fmt.Fprintf(out, "serving for %s: try %s/readyz, /metrics, /topology?format=mermaid, /state, /stores/views-per-user/keys/%s\n", serve, urls[0], users[0])
		time.Sleep(serve)
	}
	return nil
}

var pages = []string{"/", "/cart", "/checkout", "/help", "/search"}

// dayViews is how many views the day has (one every 18 seconds).
const dayViews = 4800

// produceViews writes a day of views by 40 users (a fixed seed: the same
// every run), then a view of each page two hours later that closes the
// last hour; it returns each user's count.
func produceViews(ctx context.Context, cl *kgo.Client, topic string) (map[string]int64, error) {
	rng := rand.New(rand.NewPCG(7, 11))
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	perUser := map[string]int64{}
	var recs []*kgo.Record
	add := func(page string, v View) {
		b, _ := json.Marshal(v)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(page), Value: b})
		perUser[v.User]++
	}
	for i := range dayViews {
		at := day.Add(time.Duration(i) * 18 * time.Second)
		add(pages[rng.IntN(len(pages))], View{User: fmt.Sprintf("user-%02d", rng.IntN(40)), At: at})
	}
	// Stream time is kept per task (per partition), so every page gets a
	// view that closes its last hour.
	for _, p := range pages {
		add(p, View{User: "user-00", At: day.Add(26 * time.Hour)})
	}
	return perUser, cl.ProduceSync(ctx, recs...).FirstErr()
}

// checkUsers asks base for every user's count and returns how many differ.
func checkUsers(base string, users []string, want map[string]int64) (int, error) {
	wrong := 0
	var firstErr error
	for _, u := range users {
		resp, err := http.Get(base + "/stores/views-per-user/keys/" + u)
		if err != nil {
			return len(users), err
		}
		var ans streams.KeyAnswer
		err = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || ans.Value != float64(want[u]) {
			wrong++
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: status %d, %+v, %v", u, resp.StatusCode, ans, err)
			}
		}
	}
	return wrong, firstErr
}

// readHourly reads the hourly topic (read_committed) until it holds n
// results, sorted by hour then page.
func readHourly(ctx context.Context, brokers, topic string, n int) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %d of %d hourly results: %w", topic, len(out), n, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Key)+"\t"+string(r.Value)) })
	}
	sort.Strings(out)
	return out, nil
}
