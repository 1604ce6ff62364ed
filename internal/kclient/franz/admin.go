package franz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Admin is an Admin on franz-go (kadm, and raw requests where one
// request does what kadm would do in several).
type Admin struct {
	cl  *kgo.Client
	adm *kadm.Client
}

// NewAdmin makes an admin client on conf.
func NewAdmin(conf ClientConfig) (*Admin, error) {
	cl, err := kgo.NewClient(conf.conn...)
	if err != nil {
		return nil, fmt.Errorf("kclient: creating the admin client: %w", err)
	}
	return &Admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Partitions asks the brokers for the topics' metadata itself: a topic the
// ACLs hide is named in the error (kadm's answer names none).
func (a *Admin) Partitions(ctx context.Context, topics []string) (map[string]int32, error) {
	out := map[string]int32{}
	if len(topics) == 0 {
		return out, nil
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, ClassifyErr("reading topic metadata", err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		err := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case err == nil:
			if len(t.Partitions) > 0 {
				out[*t.Topic] = int32(len(t.Partitions))
			}
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		case errors.Is(err, kerr.TopicAuthorizationFailed):
			return nil, kclient.DeniedErr(fmt.Sprintf("DESCRIBE on topic %q", *t.Topic), err)
		default:
			return nil, ClassifyErr("describing topic "+*t.Topic, err)
		}
	}
	return out, nil
}

func (a *Admin) CreateTopics(ctx context.Context, specs []kclient.TopicSpec) error {
	if len(specs) == 0 {
		return nil
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	for _, s := range specs {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = s.Name, s.Partitions, s.ReplicationFactor
		for k, v := range s.Config {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			t.Configs = append(t.Configs, c)
		}
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return ClassifyErr("creating topics", err)
	}
	var errs []error
	for _, t := range resp.Topics {
		err := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			return kclient.DeniedErr(fmt.Sprintf("CREATE on topic %q", t.Topic), err)
		default:
			msg := ""
			if t.ErrorMessage != nil {
				msg = ": " + *t.ErrorMessage
			}
			errs = append(errs, fmt.Errorf("creating topic %s: %w%s", t.Topic, err, msg))
		}
	}
	return errors.Join(errs...)
}

func (a *Admin) Offsets(ctx context.Context, tps []kclient.TP, readCommitted bool) (start, end map[kclient.TP]int64, err error) {
	start, end = map[kclient.TP]int64{}, map[kclient.TP]int64{}
	if len(tps) == 0 {
		return start, end, nil
	}
	topics, _ := ByTopic(tps)
	pick := func(what string, l kadm.ListedOffsets, err error, into map[kclient.TP]int64) error {
		if err != nil {
			return ClassifyErr(what, err)
		}
		for _, tp := range tps {
			o, ok := l.Lookup(tp.Topic, tp.Partition)
			if !ok {
				return fmt.Errorf("%w: %s: no answer for %s", kclient.ErrTransient, what, tp)
			}
			if o.Err != nil {
				if errors.Is(o.Err, kerr.TopicAuthorizationFailed) {
					return kclient.DeniedErr(fmt.Sprintf("DESCRIBE on topic %q", tp.Topic), o.Err)
				}
				return PartitionErr(tp, -1, o.Err)
			}
			into[tp] = o.Offset
		}
		return nil
	}
	l, err := a.adm.ListStartOffsets(ctx, topics...)
	if err := pick("listing start offsets", l, err, start); err != nil {
		return nil, nil, err
	}
	if readCommitted {
		l, err = a.adm.ListCommittedOffsets(ctx, topics...)
	} else {
		l, err = a.adm.ListEndOffsets(ctx, topics...)
	}
	if err := pick("listing end offsets", l, err, end); err != nil {
		return nil, nil, err
	}
	return start, end, nil
}

func (a *Admin) DeleteRecords(ctx context.Context, before map[kclient.TP]int64) error {
	if len(before) == 0 {
		return nil
	}
	os := kadm.Offsets{}
	for tp, off := range before {
		os.AddOffset(tp.Topic, tp.Partition, off, -1)
	}
	res, err := a.adm.DeleteRecords(ctx, os)
	if err != nil {
		return ClassifyErr("deleting records", err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			if errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
				return kclient.DeniedErr(fmt.Sprintf("DELETE on topic %q", r.Topic), r.Err)
			}
			return PartitionErr(kclient.TP{Topic: r.Topic, Partition: r.Partition}, -1, r.Err)
		}
	}
	return nil
}

func (a *Admin) TopicConfigs(ctx context.Context, topics []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	if len(topics) == 0 {
		return out, nil
	}
	rcs, err := a.adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, ClassifyErr("describing topic configs", err)
	}
	for _, rc := range rcs {
		switch {
		case rc.Err == nil:
			cfg := make(map[string]string, len(rc.Configs))
			for _, c := range rc.Configs {
				cfg[c.Key] = c.MaybeValue()
			}
			out[rc.Name] = cfg
		case errors.Is(rc.Err, kerr.UnknownTopicOrPartition):
		case errors.Is(rc.Err, kerr.TopicAuthorizationFailed):
			return nil, kclient.DeniedErr(fmt.Sprintf("DESCRIBE_CONFIGS on topic %q", rc.Name), rc.Err)
		default:
			return nil, ClassifyErr("describing the configs of topic "+rc.Name, rc.Err)
		}
	}
	return out, nil
}

func (a *Admin) Close() { a.cl.Close() }

// OpenTransactions implements TxnFencer: the producers with a transaction
// open on tps (DescribeProducers, KIP-664), and of those the ones whose
// transaction is still ongoing (ListTransactions; one the coordinator is
// committing or aborting is ending by itself).
func (a *Admin) OpenTransactions(ctx context.Context, tps []kclient.TP) ([]string, error) {
	set := kadm.TopicsSet{}
	for _, tp := range tps {
		set.Add(tp.Topic, tp.Partition)
	}
	described, err := a.adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, ClassifyErr("describing the producers of changelog partitions", err)
	}
	var pids []int64
	described.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			pids = append(pids, p.ProducerID)
		}
	})
	if len(pids) == 0 {
		return nil, nil
	}
	listed, err := a.adm.ListTransactions(ctx, pids, []string{"Ongoing"})
	if err != nil {
		return nil, ClassifyErr("listing the transactions of changelog producers", err)
	}
	var ids []string
	listed.Each(func(t kadm.ListedTransaction) {
		if t.State == "Ongoing" && slices.Contains(pids, t.ProducerID) {
			ids = append(ids, t.TxnID)
		}
	})
	slices.Sort(ids)
	return ids, nil
}

// GroupProcesses implements TxnFencer: the processes in the user data of
// the group's members' joins (MemberState.Process), as DescribeGroups
// gives them for a stable group.
func (a *Admin) GroupProcesses(ctx context.Context, group string) (map[string]bool, bool, error) {
	described, err := a.adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, false, ClassifyErr("describing group "+group, err)
	}
	g, ok := described[group]
	if !ok {
		return nil, false, nil
	}
	if g.Err != nil {
		return nil, false, ClassifyErr("describing group "+group, g.Err)
	}
	if g.State != "Stable" {
		return nil, false, nil // members' joins are described in a stable group only
	}
	procs := map[string]bool{}
	for _, m := range g.Members {
		c, ok := m.Join.AsConsumer()
		if !ok {
			return nil, false, nil
		}
		s, err := decodeMemberState(c.UserData)
		if err != nil {
			return nil, false, nil // a member eddy cannot read: its process is unknown
		}
		procs[s.Process] = true
	}
	return procs, true, nil
}

// Fence implements TxnFencer: an InitProducerId for the transactional id
// bumps its producer epoch, and the coordinator aborts the transaction
// open under the old one first (answering CONCURRENT_TRANSACTIONS until it
// has: asked again every 20 ms).
func (a *Admin) Fence(ctx context.Context, transactionalID string) error {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &transactionalID
	req.TransactionTimeoutMillis = 60_000
	for {
		resp, err := req.RequestWith(ctx, a.cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if !errors.Is(err, kerr.ConcurrentTransactions) {
			return ClassifyErr("fencing transactional id "+transactionalID, err)
		}
		select {
		case <-ctx.Done():
			return ClassifyErr("fencing transactional id "+transactionalID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
