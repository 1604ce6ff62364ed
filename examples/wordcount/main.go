// Command wordcount counts words with eddy, exactly once.
//
// With no flags it starts an embedded Kafka broker (franz-go's kfake) in
// the process, writes its built-in text to an input topic, runs the word
// count until every line is processed, prints the counts as
// "word<TAB>count" lines sorted by word, and exits.
//
//	go run ./examples/wordcount
//	go run ./examples/wordcount -brokers localhost:9092 -input book.txt -instances 3
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// builtinText is what the example counts when no -input is given.
const builtinText = `The river does not hurry, yet the river arrives.
An eddy is where the river turns back on itself and keeps what it carries.
Streams of events, like streams of water, are counted one record at a time;
counted once, and only once, even when the stream is interrupted.
Turn, count, and carry on.`

// Words lower-cases a line and splits it on every run of characters that
// are neither letters nor digits.
func Words(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// Topology is the word count: lines in, running counts per word out.
func Topology(input, output string) (*topology.Topology, error) {
	b := topology.NewBuilder()
	lines := topology.Stream(b, input, topology.Consumed(serde.String(), serde.String()))
	words := topology.FlatMapValues(lines, Words)
	byWord := topology.GroupBy(words, func(_, w string) string { return w },
		topology.Grouped(serde.String(), serde.String()))
	counts := topology.Count(byWord, topology.Materialized[string, int64]("counts"))
	counts.ToStream().To(output, topology.Produced(serde.String(), serde.Int64()))
	return b.Build()
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers (default: an embedded broker)")
	input := flag.String("input", "", "file of text lines to count (default: built-in text)")
	guarantee := flag.String("guarantee", "exactly_once", "exactly_once or at_least_once")
	instances := flag.Int("instances", 1, "app instances to run in this process (one consumer group)")
	partitions := flag.Int("partitions", 4, "partitions of the input topic")
	verbose := flag.Bool("v", false, "log what the app does to stderr")
	flag.Parse()
	logger := zap.NewNop()
	if *verbose {
		logger, _ = zap.NewDevelopment()
	}
	if err := run(*brokers, *input, *guarantee, *instances, int32(*partitions), logger, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(brokers, inputFile, guarantee string, instances int, partitions int32, logger *zap.Logger, out io.Writer) error {
	g, err := streams.ParseGuarantee(guarantee)
	if err != nil {
		return err
	}
	if instances < 1 {
		return fmt.Errorf("-instances must be at least 1")
	}
	lines := strings.Split(builtinText, "\n")
	if inputFile != "" {
		if lines, err = readLines(inputFile); err != nil {
			return err
		}
	}
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(partitions)))
		if err != nil {
			return fmt.Errorf("starting the embedded broker: %w", err)
		}
		defer cluster.Close()
		brokers = strings.Join(cluster.ListenAddrs(), ",")
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	appID := "wordcount-" + run
	inTopic, outTopic := appID+"-lines", appID+"-counts"

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if err := createTopics(ctx, adm, partitions, inTopic, outTopic); err != nil {
		return err
	}
	if err := produceLines(ctx, cl, inTopic, lines); err != nil {
		return err
	}

	top, err := Topology(inTopic, outTopic)
	if err != nil {
		return err
	}
	stateRoot, err := os.MkdirTemp("", "eddy-wordcount-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateRoot)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errc := make(chan error, instances)
	for i := range instances {
		app, err := streams.New(top, streams.Config{
			ApplicationID:    appID,
			BootstrapServers: brokers,
			Guarantee:        g,
			StateDir:         filepath.Join(stateRoot, fmt.Sprint(i)),
			CommitInterval:   100 * time.Millisecond,
			Logger:           logger.With(zap.Int("instance", i)),
		})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := app.Run(runCtx); err != nil {
				errc <- err
				stop()
			}
		}()
	}
	waitErr := waitProcessed(runCtx, adm, appID, inTopic)
	stop()
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	if waitErr != nil {
		return waitErr
	}
	counts, err := readCounts(ctx, brokers, outTopic)
	if err != nil {
		return err
	}
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	sort.Strings(words)
	for _, w := range words {
		fmt.Fprintf(out, "%s\t%d\n", w, counts[w])
	}
	return nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) error {
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return err
	}
	return resp.Error()
}

func produceLines(ctx context.Context, cl *kgo.Client, topic string, lines []string) error {
	recs := make([]*kgo.Record, 0, len(lines))
	for i, l := range lines {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(l)})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// waitProcessed waits until the application's group has committed every
// input record and every record of its repartition topic.
func waitProcessed(ctx context.Context, adm *kadm.Client, group, input string) error {
	for {
		if done, err := processed(ctx, adm, group, input); err == nil && done {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("stopped before every line was processed")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// processed reports whether the group has committed every record of the
// input and of the application's repartition topic (the topology's
// GroupBy makes one, <application id>-…-repartition, which the group
// consumes). Both are needed: a task of the first sub-topology commits its
// input as soon as it has written the words to the repartition topic,
// before the counting tasks have read them.
func processed(ctx context.Context, adm *kadm.Client, group, input string) (bool, error) {
	lags, err := adm.Lag(ctx, group)
	if err != nil {
		return false, err
	}
	l, ok := lags[group]
	if !ok || l.Error() != nil {
		return false, l.Error()
	}
	topics := []string{input}
	for topic := range l.Lag {
		if strings.HasPrefix(topic, group+"-") && strings.HasSuffix(topic, "-repartition") {
			topics = append(topics, topic)
		}
	}
	if len(topics) < 2 {
		return false, nil // the group does not consume its repartition topic yet
	}
	// Every partition that holds records, committed to its end (a group
	// rebalancing may leave a partition out of its lag).
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil {
		return false, errors.Join(err, ends.Error())
	}
	done := true
	ends.Each(func(end kadm.ListedOffset) {
		c, ok := l.Lag.Lookup(end.Topic, end.Partition)
		if end.Offset > 0 && (!ok || c.Commit.At < end.Offset) {
			done = false
		}
	})
	return done, nil
}

// readCounts reads the output topic to its end (read_committed): the last
// count of each word.
func readCounts(ctx context.Context, brokers, topic string) (map[string]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	counts := map[string]int64{}
	i64 := serde.Int64()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			// Transaction markers are kept only to see a partition's end:
			// they take offsets, and the end often sits just past one.
			if !r.Attrs.IsControl() {
				n, err := i64.Deserialize(topic, r.Value)
				if err == nil {
					counts[string(r.Key)] = n
				}
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return counts, nil
}
