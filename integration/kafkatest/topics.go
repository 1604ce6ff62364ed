package kafkatest

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Timeout bounds every helper in this package that talks to the broker.
var Timeout = 60 * time.Second

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is a Kafka record as the helpers produce and consume it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil: no key
	Value     []byte // nil: a tombstone
	Headers   []Header
	Timestamp time.Time // zero: the producer's clock
}

// KV returns a record with a string key and value.
func KV(key, value string) Record { return Record{Key: []byte(key), Value: []byte(value)} }

var topicSeq atomic.Int64

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// UniqueName returns a topic or group name unique to this test and process,
// so tests can share one broker: "<base>-<test name>-<pid-based suffix>".
func UniqueName(t testing.TB, base string) string {
	name := unsafeChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 80 {
		name = name[:80]
	}
	return fmt.Sprintf("%s-%s-%d-%d", base, name, time.Now().UnixNano()%1_000_000_000, topicSeq.Add(1))
}

// Client returns a franz-go client for brokers, closed by t.Cleanup. Options
// are appended to kafkatest's defaults.
func Client(t testing.TB, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, opts...)
	c, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kafkatest: client for %s: %v", brokers, err)
	}
	t.Cleanup(c.Close)
	return c
}

func admin(t testing.TB, brokers string) *kadm.Client {
	return kadm.NewClient(Client(t, brokers))
}

// CreateTopic creates topic with the given partition count, the broker's
// default replication factor and topic configs (nil for the broker's
// defaults), and waits until its metadata is visible.
func CreateTopic(t testing.TB, brokers, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	adm := admin(t, brokers)
	cfg := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfg[k] = &v
	}
	resp, err := adm.CreateTopic(ctx, partitions, -1, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: creating topic %q (%d partitions, configs %v): %v", topic, partitions, configs, err)
	}
	for {
		md, err := adm.ListTopics(ctx, topic)
		if err == nil && md.Has(topic) && md[topic].Err == nil && len(md[topic].Partitions) == int(partitions) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: topic %q did not become visible: %v", topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TopicConfigs returns the configs of topic as the broker describes them
// (explicitly set ones and defaults).
func TopicConfigs(t testing.TB, brokers, topic string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	rcs, err := admin(t, brokers).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("kafkatest: describing configs of %q: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: describing configs of %q: %v", topic, err)
	}
	out := make(map[string]string, len(rc.Configs))
	for _, c := range rc.Configs {
		out[c.Key] = c.MaybeValue()
	}
	return out
}

// Partitions returns the partition count of topic.
func Partitions(t testing.TB, brokers, topic string) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	md, err := admin(t, brokers).ListTopics(ctx, topic)
	if err != nil || !md.Has(topic) || md[topic].Err != nil {
		t.Fatalf("kafkatest: metadata of %q: %v %v", topic, err, md[topic].Err)
	}
	return int32(len(md[topic].Partitions))
}

func toKgo(topic string, r Record) *kgo.Record {
	kr := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Partition: r.Partition}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return kr
}

func produce(t testing.TB, brokers, topic string, partitioner kgo.Partitioner, recs []Record) {
	t.Helper()
	cl := Client(t, brokers, kgo.RecordPartitioner(partitioner), kgo.ProducerLinger(5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = toKgo(topic, r)
	}
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("kafkatest: producing %d records to %q: %v", len(recs), topic, err)
	}
}

// Produce writes recs to topic and waits for every acknowledgement. Records
// go to the partition Kafka's Java client would choose: murmur2 of the key,
// and for records without a key, spread over the partitions.
func Produce(t testing.TB, brokers, topic string, recs ...Record) {
	t.Helper()
	produce(t, brokers, topic, kgo.StickyKeyPartitioner(nil), recs)
}

// ProduceToPartitions writes recs to topic, each to its Record.Partition.
func ProduceToPartitions(t testing.TB, brokers, topic string, recs ...Record) {
	t.Helper()
	produce(t, brokers, topic, kgo.ManualPartitioner(), recs)
}

// ConsumeAll reads every partition of topic from its start to its end under
// read_committed — the end being the last stable offset, so records of open
// or aborted transactions are never returned and the call does not wait for
// new records. Records come back ordered by partition, then offset.
func ConsumeAll(t testing.TB, brokers, topic string) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	adm := admin(t, brokers)
	ends, err := adm.ListEndOffsets(ctx, topic) // read_committed: the last stable offset
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: end offsets of %q: %v", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: start offsets of %q: %v", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > s.Offset {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl := Client(t, brokers,
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
	)
	var out []Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kafkatest: consuming %q timed out with partitions %v not read to their end", topic, want)
		}
		fs.EachError(func(_ string, p int32, err error) {
			t.Fatalf("kafkatest: consuming %q partition %d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			end, open := want[r.Partition]
			if !open {
				return
			}
			// Control records (transaction markers) are kept only to see that
			// a partition's end was reached: they take offsets, and a
			// partition's last stable offset often sits just past one.
			if r.Offset < end && !r.Attrs.IsControl() {
				rec := Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
				for _, h := range r.Headers {
					rec.Headers = append(rec.Headers, Header{Key: h.Key, Value: h.Value})
				}
				out = append(out, rec)
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out
}

// EndOffsets returns the end offset (high watermark) of each partition of
// topic.
func EndOffsets(t testing.TB, brokers, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	ends, err := admin(t, brokers).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: end offsets of %q: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// StartOffsets returns the log start offset of each partition of topic
// (where retention or deleted records moved it; compaction never does).
func StartOffsets(t testing.TB, brokers, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	starts, err := admin(t, brokers).ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: start offsets of %q: %v", topic, err)
	}
	out := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}
