//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// configMap is c for librdkafka, without eddy's own keys.
func configMap(c kclient.Config) *kafka.ConfigMap {
	m := kafka.ConfigMap{}
	for k, v := range c {
		if k != kclient.TopicResets && k != kclient.Subtopologies { // the fetcher's, and eddy's assignor's
			m[k] = v
		}
	}
	return &m
}

func ktp(tp kclient.TP) kafka.TopicPartition {
	t := tp.Topic
	return kafka.TopicPartition{Topic: &t, Partition: tp.Partition}
}

func fromKTP(k kafka.TopicPartition) kclient.TP {
	tp := kclient.TP{Partition: k.Partition}
	if k.Topic != nil {
		tp.Topic = *k.Topic
	}
	return tp
}

func ktps(tps []kclient.TP) []kafka.TopicPartition {
	out := make([]kafka.TopicPartition, len(tps))
	for i, tp := range tps {
		out[i] = ktp(tp)
	}
	return out
}

type consumer struct {
	c     *kafka.Consumer
	group string // group.id
	// subscribed: a group member (Subscribe was called); else an
	// assign-only reader, which never commits: librdkafka still looks up
	// the coordinator of its (required) group.id, and a refusal of that
	// is no concern of it.
	subscribed bool
}

// NewConsumer returns a librdkafka consumer.
func NewConsumer(cfg kclient.Config) (kclient.Consumer, error) {
	c, err := kafka.NewConsumer(configMap(cfg))
	if err != nil {
		return nil, err
	}
	group, _ := cfg["group.id"].(string)
	return &consumer{c: c, group: group}, nil
}

// denied names, as Kafka's ACLs do, what a consumer error refused about
// topic ("" when the error names none).
func (c *consumer) denied(err error, topic string) error {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return nil
	}
	what := "READ on a topic it reads"
	switch {
	case kerr.Code() == kafka.ErrGroupAuthorizationFailed:
		what = fmt.Sprintf("READ on group %q", c.group)
	case topic != "":
		what = fmt.Sprintf("READ on topic %q", topic)
	case kerr.Code() == kafka.ErrTopicAuthorizationFailed:
		// A failed fetch names no topic: ask which of the assigned ones
		// may not be read.
		if ts := c.unreadable(); len(ts) > 0 {
			what = "READ on topic " + strings.Join(ts, " and on topic ")
		}
	}
	return security(err, what)
}

// unreadable returns, quoted, the assigned topics this principal may not
// read, as the brokers' authorized operations tell.
func (c *consumer) unreadable() []string {
	parts, err := c.c.Assignment()
	if err != nil || len(parts) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var topics []string
	for _, p := range parts {
		if p.Topic != nil && !seen[*p.Topic] {
			seen[*p.Topic] = true
			topics = append(topics, *p.Topic)
		}
	}
	a, err := kafka.NewAdminClientFromConsumer(c.c)
	if err != nil {
		return nil
	}
	defer a.Close()
	return deniedTopics(a, topics, kafka.ACLOperationRead)
}

func (c *consumer) Subscribe(topics []string, onRebalance func(kclient.Rebalance) error) error {
	return c.subscribe(topics, onRebalance, nil, nil)
}

// subscribe joins the group; assigned, when set, runs once librdkafka was
// given an assignment and before onRebalance hears of it, revoked after
// onRebalance heard of a revocation and librdkafka let the partitions go.
func (c *consumer) subscribe(topics []string, onRebalance func(kclient.Rebalance) error, assigned func([]kafka.TopicPartition) error, revoked func([]kclient.TP)) error {
	c.subscribed = true
	return c.c.SubscribeTopics(topics, func(kc *kafka.Consumer, ev kafka.Event) error {
		switch e := ev.(type) {
		case kafka.AssignedPartitions:
			tps := make([]kclient.TP, len(e.Partitions))
			for i, p := range e.Partitions {
				tps[i] = fromKTP(p)
			}
			if err := kc.Assign(e.Partitions); err != nil {
				return err
			}
			if assigned != nil {
				if err := assigned(e.Partitions); err != nil {
					return err
				}
			}
			return onRebalance(kclient.Rebalance{Assigned: tps})
		case kafka.RevokedPartitions:
			tps := make([]kclient.TP, len(e.Partitions))
			for i, p := range e.Partitions {
				tps[i] = fromKTP(p)
			}
			err := onRebalance(kclient.Rebalance{Revoked: tps, Lost: kc.AssignmentLost()})
			if uerr := kc.Unassign(); err == nil {
				err = uerr
			}
			if revoked != nil {
				revoked(tps)
			}
			return err
		}
		return nil
	})
}

func (c *consumer) Poll(timeout time.Duration) (*rt.RawRecord, error) {
	ev := c.c.Poll(int(timeout.Milliseconds()))
	switch e := ev.(type) {
	case *kafka.Message:
		if e.TopicPartition.Error != nil {
			if s := c.denied(e.TopicPartition.Error, fromKTP(e.TopicPartition).Topic); s != nil {
				return nil, s
			}
			return nil, e.TopicPartition.Error
		}
		r := &rt.RawRecord{
			Topic: *e.TopicPartition.Topic, Partition: e.TopicPartition.Partition, Offset: int64(e.TopicPartition.Offset),
			Key: e.Key, Value: e.Value, Timestamp: -1,
		}
		if e.TimestampType != kafka.TimestampNotAvailable {
			r.Timestamp = e.Timestamp.UnixMilli()
		}
		if len(e.Headers) > 0 {
			r.Headers = make(processor.Headers, len(e.Headers))
			for i, h := range e.Headers {
				r.Headers[i] = processor.Header{Key: h.Key, Value: h.Value}
			}
		}
		return r, nil
	case kafka.Error:
		if e.Code() == kafka.ErrGroupAuthorizationFailed && !c.subscribed {
			return nil, nil
		}
		if s := c.denied(e, ""); s != nil {
			return nil, s
		}
		if e.IsFatal() {
			return nil, fmt.Errorf("%w: %v", kclient.ErrFatal, e)
		}
		if e.Code() == kafka.ErrAllBrokersDown {
			return nil, kclient.ErrBrokersDown
		}
		return nil, nil // other client errors: librdkafka retries on its own
	}
	return nil, nil
}

func (c *consumer) Assign(offsets map[kclient.TP]int64) error {
	tps := make([]kafka.TopicPartition, 0, len(offsets))
	for tp, off := range offsets {
		k := ktp(tp)
		k.Offset = kafka.OffsetStored
		switch {
		case off >= 0:
			k.Offset = kafka.Offset(off)
		case off == kclient.OffsetEarliest:
			k.Offset = kafka.OffsetBeginning
		}
		tps = append(tps, k)
	}
	return c.c.Assign(tps)
}

func (c *consumer) Pause(tps []kclient.TP) error  { return c.c.Pause(ktps(tps)) }
func (c *consumer) Resume(tps []kclient.TP) error { return c.c.Resume(ktps(tps)) }

func (c *consumer) Seek(tp kclient.TP, offset int64) error {
	k := ktp(tp)
	k.Offset = kafka.Offset(offset)
	_, err := c.c.SeekPartitions([]kafka.TopicPartition{k})
	return err
}

func (c *consumer) Committed(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, map[kclient.TP]string, error) {
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := c.c.Committed(ktps(tps), int(timeout.Milliseconds()))
	if err != nil {
		if s := c.denied(err, ""); s != nil {
			return nil, nil, s
		}
		return nil, nil, classify(err)
	}
	out := make(map[kclient.TP]int64, len(res))
	meta := map[kclient.TP]string{}
	for _, k := range res {
		if k.Error != nil {
			if s := c.denied(k.Error, fromKTP(k).Topic); s != nil {
				return nil, nil, s
			}
			return nil, nil, classify(k.Error)
		}
		off := int64(k.Offset)
		if k.Offset < 0 {
			off = -1
		}
		out[fromKTP(k)] = off
		if k.Metadata != nil && *k.Metadata != "" {
			meta[fromKTP(k)] = *k.Metadata
		}
	}
	return out, meta, nil
}

// withOffsets returns offsets as librdkafka partitions, with metadata.
func withOffsets(offsets map[kclient.TP]int64, meta map[kclient.TP]string) []kafka.TopicPartition {
	tps := make([]kafka.TopicPartition, 0, len(offsets))
	for tp, off := range offsets {
		k := ktp(tp)
		k.Offset = kafka.Offset(off)
		if m, ok := meta[tp]; ok {
			k.Metadata = &m
		}
		tps = append(tps, k)
	}
	return tps
}

func (c *consumer) HighWatermark(tp kclient.TP) int64 {
	_, hi, err := c.c.GetWatermarkOffsets(tp.Topic, tp.Partition)
	if err != nil || hi < 0 {
		return -1
	}
	return hi
}

// CaughtUp implements Consumer: librdkafka's consumer (used only when the
// client properties ask for what eddy's fetcher cannot do) does not say
// when a partition it returned nothing of is caught up, so it answers
// true: its tasks do not wait for empty partitions (MaxTaskIdle still
// applies).
func (c *consumer) CaughtUp(kclient.TP) bool { return true }

func (c *consumer) Position(tps []kclient.TP) (map[kclient.TP]int64, error) {
	res, err := c.c.Position(ktps(tps))
	if err != nil {
		return nil, err
	}
	out := make(map[kclient.TP]int64, len(res))
	for _, k := range res {
		out[fromKTP(k)] = int64(k.Offset)
	}
	return out, nil
}

func (c *consumer) Commit(offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	if len(offsets) == 0 {
		return nil
	}
	res, err := c.c.CommitOffsets(withOffsets(offsets, meta))
	if err != nil {
		if s := c.denied(err, ""); s != nil {
			return s
		}
		return err
	}
	for _, k := range res {
		if k.Error != nil {
			if s := c.denied(k.Error, fromKTP(k).Topic); s != nil {
				return s
			}
			return k.Error
		}
	}
	return nil
}

func (c *consumer) GroupMetadata() (any, error) { return c.c.GetConsumerGroupMetadata() }

func (c *consumer) Close() error { return c.c.Close() }
