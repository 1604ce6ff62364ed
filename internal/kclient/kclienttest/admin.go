package kclienttest

import (
	"context"
	"maps"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Admin is a fake kclient.Admin.
type Admin struct{ c *Cluster }

// NewAdmin returns an admin client of the cluster.
func (c *Cluster) NewAdmin() *Admin { return &Admin{c} }

// Partitions implements kclient.Admin.
func (a *Admin) Partitions(ctx context.Context, topics []string) (map[string]int32, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("Partitions"); err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, t := range topics {
		if ps, ok := a.c.topics[t]; ok {
			out[t] = int32(len(ps))
		}
	}
	return out, nil
}

// CreateTopics implements kclient.Admin.
func (a *Admin) CreateTopics(ctx context.Context, specs []kclient.TopicSpec) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("CreateTopics"); err != nil {
		return err
	}
	for _, s := range specs {
		if _, ok := a.c.topics[s.Name]; !ok {
			a.c.createLocked(s.Name, s.Partitions)
			a.c.configs[s.Name] = maps.Clone(s.Config)
		}
	}
	return nil
}

// TopicConfigs implements kclient.Admin: the configs a topic was created
// with or SetTopicConfig set (the fake has no defaults).
func (a *Admin) TopicConfigs(ctx context.Context, topics []string) (map[string]map[string]string, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("TopicConfigs"); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, t := range topics {
		if _, ok := a.c.topics[t]; ok {
			out[t] = maps.Clone(a.c.configs[t])
			if out[t] == nil {
				out[t] = map[string]string{}
			}
		}
	}
	return out, nil
}

// Offsets implements kclient.Admin.
func (a *Admin) Offsets(ctx context.Context, tps []kclient.TP, readCommitted bool) (map[kclient.TP]int64, map[kclient.TP]int64, error) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("Offsets"); err != nil {
		return nil, nil, err
	}
	if err := ctxErr(ctx, "Offsets"); err != nil {
		return nil, nil, err
	}
	start, end := map[kclient.TP]int64{}, map[kclient.TP]int64{}
	for _, tp := range tps {
		ps, ok := a.c.topics[tp.Topic]
		if !ok || int(tp.Partition) >= len(ps) {
			return nil, nil, errorf("Offsets", "unknown partition %s", tp)
		}
		p := ps[tp.Partition]
		start[tp], end[tp] = p.start, p.end()
		if readCommitted {
			end[tp] = p.stable()
		}
	}
	return start, end, nil
}

// DeleteRecords implements kclient.Admin.
func (a *Admin) DeleteRecords(ctx context.Context, before map[kclient.TP]int64) error {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if err := a.c.call("DeleteRecords"); err != nil {
		return err
	}
	for tp, off := range before {
		p := a.c.topics[tp.Topic][tp.Partition]
		p.start = max(p.start, min(off, p.end()))
	}
	return nil
}

// Close implements kclient.Admin.
func (a *Admin) Close() {}
