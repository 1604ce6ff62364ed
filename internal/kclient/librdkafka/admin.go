//go:build eddy_librdkafka

package librdkafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eddy-go/eddy/internal/kclient"
)

type admin struct {
	p *kafka.Producer // the handle the admin client runs on: its events tell of failed logins
	a *kafka.AdminClient
	w *watch
}

// NewAdmin returns a librdkafka admin client. It runs on a producer handle
// of its own, whose error events are read so that a refused login ends
// the calls waiting on it at once (with ErrAuthentication) instead of at
// their timeouts.
func NewAdmin(cfg kclient.Config) (kclient.Admin, error) {
	cfg = maps.Clone(cfg)
	cfg["go.delivery.reports"] = false
	cfg["go.produce.channel.size"] = 1
	cfg["go.events.channel.size"] = 1000
	p, err := kafka.NewProducer(configMap(cfg))
	if err != nil {
		return nil, err
	}
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		p.Close()
		return nil, err
	}
	ad := &admin{p: p, a: a, w: newWatch()}
	go func() {
		for ev := range p.Events() {
			if e, ok := ev.(kafka.Error); ok {
				ad.w.see(e)
			}
		}
	}()
	return ad, nil
}

func (a *admin) Partitions(ctx context.Context, topics []string) (_ map[string]int32, err error) {
	out := map[string]int32{}
	if len(topics) == 0 {
		return out, nil
	}
	ctx, end := a.w.bind(ctx)
	defer func() { err = end(err) }()
	res, err := a.a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(topics))
	if err != nil {
		return nil, classify(err)
	}
	for _, d := range res.TopicDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
			if len(d.Partitions) > 0 {
				out[d.Name] = int32(len(d.Partitions))
			}
		case kafka.ErrUnknownTopicOrPart:
		default:
			if s := authorization(d.Error, fmt.Sprintf("DESCRIBE on topic %q", d.Name)); s != nil {
				return nil, s
			}
			return nil, fmt.Errorf("describing topic %s: %w", d.Name, classify(d.Error))
		}
	}
	return out, nil
}

func (a *admin) CreateTopics(ctx context.Context, specs []kclient.TopicSpec) (err error) {
	if len(specs) == 0 {
		return nil
	}
	ctx, end := a.w.bind(ctx)
	defer func() { err = end(err) }()
	ks := make([]kafka.TopicSpecification, len(specs))
	for i, s := range specs {
		ks[i] = kafka.TopicSpecification{Topic: s.Name, NumPartitions: int(s.Partitions), ReplicationFactor: int(s.ReplicationFactor), Config: s.Config}
	}
	res, err := a.a.CreateTopics(ctx, ks, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return classify(err)
	}
	var errs []error
	for _, r := range res {
		if c := r.Error.Code(); c != kafka.ErrNoError && c != kafka.ErrTopicAlreadyExists {
			if s := authorization(r.Error, fmt.Sprintf("CREATE on topic %q", r.Topic)); s != nil {
				return s
			}
			errs = append(errs, fmt.Errorf("creating topic %s: %v", r.Topic, r.Error))
		}
	}
	return errors.Join(errs...)
}

func (a *admin) Offsets(ctx context.Context, tps []kclient.TP, readCommitted bool) (_, _ map[kclient.TP]int64, err error) {
	if len(tps) == 0 {
		return map[kclient.TP]int64{}, map[kclient.TP]int64{}, nil
	}
	ctx, done := a.w.bind(ctx)
	defer func() { err = done(err) }()
	iso := kafka.IsolationLevelReadUncommitted
	if readCommitted {
		iso = kafka.IsolationLevelReadCommitted
	}
	list := func(spec kafka.OffsetSpec) (map[kclient.TP]int64, error) {
		req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(tps))
		for _, tp := range tps {
			req[ktp(tp)] = spec
		}
		res, err := a.a.ListOffsets(ctx, req, kafka.SetAdminIsolationLevel(iso))
		if err != nil {
			return nil, listOffsetsErr(err)
		}
		out := make(map[kclient.TP]int64, len(res.ResultInfos))
		for k, info := range res.ResultInfos {
			if info.Error.Code() != kafka.ErrNoError {
				if s := authorization(info.Error, fmt.Sprintf("DESCRIBE on topic %q", fromKTP(k).Topic)); s != nil {
					return nil, s
				}
				return nil, fmt.Errorf("listing offsets of %s: %w", fromKTP(k), classify(info.Error))
			}
			out[fromKTP(k)] = int64(info.Offset)
		}
		return out, nil
	}
	start, err := list(kafka.EarliestOffsetSpec)
	if err != nil {
		return nil, nil, err
	}
	end, err := list(kafka.LatestOffsetSpec)
	return start, end, err
}

func (a *admin) DeleteRecords(ctx context.Context, before map[kclient.TP]int64) (err error) {
	if len(before) == 0 {
		return nil
	}
	ctx, end := a.w.bind(ctx)
	defer func() { err = end(err) }()
	tps := make([]kafka.TopicPartition, 0, len(before))
	for tp, off := range before {
		k := ktp(tp)
		k.Offset = kafka.Offset(off)
		tps = append(tps, k)
	}
	res, err := a.a.DeleteRecords(ctx, tps)
	if err != nil {
		return classify(err)
	}
	for _, r := range res.DeleteRecordsResults {
		if s := authorization(r.TopicPartition.Error, fmt.Sprintf("DELETE on topic %q", fromKTP(r.TopicPartition).Topic)); s != nil {
			return s
		}
	}
	return nil
}

func (a *admin) TopicConfigs(ctx context.Context, topics []string) (_ map[string]map[string]string, err error) {
	out := map[string]map[string]string{}
	if len(topics) == 0 {
		return out, nil
	}
	ctx, end := a.w.bind(ctx)
	defer func() { err = end(err) }()
	rs := make([]kafka.ConfigResource, len(topics))
	for i, t := range topics {
		rs[i] = kafka.ConfigResource{Type: kafka.ResourceTopic, Name: t}
	}
	res, err := a.a.DescribeConfigs(ctx, rs)
	if err != nil {
		return nil, classify(err)
	}
	for _, r := range res {
		switch r.Error.Code() {
		case kafka.ErrNoError:
			cfg := make(map[string]string, len(r.Config))
			for name, e := range r.Config {
				cfg[name] = e.Value
			}
			out[r.Name] = cfg
		case kafka.ErrUnknownTopicOrPart:
		default:
			if s := authorization(r.Error, fmt.Sprintf("DESCRIBE_CONFIGS on topic %q", r.Name)); s != nil {
				return nil, s
			}
			return nil, fmt.Errorf("describing the configs of topic %s: %w", r.Name, classify(r.Error))
		}
	}
	return out, nil
}

func (a *admin) Close() {
	a.a.Close()
	a.p.Close()
}
