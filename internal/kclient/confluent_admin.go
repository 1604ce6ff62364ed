package kclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

type admin struct {
	a *kafka.AdminClient
}

// NewAdmin returns a librdkafka admin client.
func NewAdmin(cfg Config) (Admin, error) {
	a, err := kafka.NewAdminClient(cfg.cm())
	if err != nil {
		return nil, err
	}
	return &admin{a: a}, nil
}

func (a *admin) Partitions(ctx context.Context, topics []string) (map[string]int32, error) {
	md, err := a.a.GetMetadata(nil, true, deadlineMs(ctx))
	if err != nil {
		return nil, classify(err)
	}
	out := map[string]int32{}
	for _, t := range topics {
		if tm, ok := md.Topics[t]; ok && tm.Error.Code() == kafka.ErrNoError && len(tm.Partitions) > 0 {
			out[t] = int32(len(tm.Partitions))
		}
	}
	return out, nil
}

func deadlineMs(ctx context.Context) int {
	if dl, ok := ctx.Deadline(); ok {
		return int(max(time.Until(dl).Milliseconds(), 1))
	}
	return 30_000
}

func (a *admin) CreateTopics(ctx context.Context, specs []TopicSpec) error {
	if len(specs) == 0 {
		return nil
	}
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
			errs = append(errs, fmt.Errorf("creating topic %s: %v", r.Topic, r.Error))
		}
	}
	return errors.Join(errs...)
}

func (a *admin) Offsets(ctx context.Context, tps []TP, readCommitted bool) (map[TP]int64, map[TP]int64, error) {
	if len(tps) == 0 {
		return map[TP]int64{}, map[TP]int64{}, nil
	}
	iso := kafka.IsolationLevelReadUncommitted
	if readCommitted {
		iso = kafka.IsolationLevelReadCommitted
	}
	list := func(spec kafka.OffsetSpec) (map[TP]int64, error) {
		req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(tps))
		for _, tp := range tps {
			req[ktp(tp)] = spec
		}
		res, err := a.a.ListOffsets(ctx, req, kafka.SetAdminIsolationLevel(iso))
		if err != nil {
			return nil, classify(err)
		}
		out := make(map[TP]int64, len(res.ResultInfos))
		for k, info := range res.ResultInfos {
			if info.Error.Code() != kafka.ErrNoError {
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

func (a *admin) DeleteRecords(ctx context.Context, before map[TP]int64) error {
	if len(before) == 0 {
		return nil
	}
	tps := make([]kafka.TopicPartition, 0, len(before))
	for tp, off := range before {
		k := ktp(tp)
		k.Offset = kafka.Offset(off)
		tps = append(tps, k)
	}
	_, err := a.a.DeleteRecords(ctx, tps)
	return classify(err)
}

func (a *admin) Close() { a.a.Close() }
