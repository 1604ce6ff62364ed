package franz

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Member is a member on franz-go: a client of its own that joins the
// group with eddy's assignor and fetches nothing (every topic it consumes
// stays paused). franz-go runs the group on its own goroutines; each
// rebalance callback hands its event to serve and waits until the stream
// thread has handled it, as librdkafka's callbacks run inside its Poll.
type Member struct {
	conf ClientConfig
	cl   *kgo.Client

	events chan memberEvent
	errs   chan error

	// The stream thread's, set by subscribe.
	onRebalance func(kclient.Rebalance) error
	assigned    func([]kclient.TP) error
	revoked     func([]kclient.TP)
	// state: what the instance holds, for the assignor (ReportState).
	state   func() kclient.MemberState
	lastErr error // the last group error returned, not to repeat it
	// notices: the instance's rebalance notices (nil: none); noticeID
	// this member's name in them. Set by memberHook: joining, a JoinGroup
	// went out and its SyncGroup was not answered yet; syncing, the
	// SyncGroup went out (the JoinGroup was answered: the group is
	// completing the rebalance) and was not answered yet.
	notices  *Notices
	noticeID string
	joining  atomic.Bool
	syncing  atomic.Bool

	mu      sync.Mutex // guards closing
	closing bool
}

// memberEvent is one rebalance callback waiting for the stream thread.
type memberEvent struct {
	rb   kclient.Rebalance
	done chan struct{}
}

// franzGroupMetadata is what a transaction needs of the group: its
// members' fencing identity (KIP-447).
type franzGroupMetadata struct {
	group, memberID, instanceID string
	generation                  int32
	member                      *Member
}

// NewMember makes a group member on conf; its client is made when it
// subscribes.
func NewMember(conf ClientConfig) *Member {
	return &Member{conf: conf, events: make(chan memberEvent), errs: make(chan error, 16)}
}

// groupErrorHook passes the errors that end a group session to serve.
type groupErrorHook struct{ errs chan error }

func (h groupErrorHook) OnGroupManageError(err error) {
	select {
	case h.errs <- err:
	default: // serve has not taken the earlier ones yet: enough to say
	}
}

func (m *Member) Subscribe(topics []string, onRebalance func(kclient.Rebalance) error, assigned func([]kclient.TP) error, revoked func([]kclient.TP)) error {
	if m.cl != nil {
		return errors.New("kclient: subscribed already")
	}
	if m.conf.group == "" {
		return errors.New("kclient: subscribing needs a group.id")
	}
	m.onRebalance, m.assigned, m.revoked = onRebalance, assigned, revoked
	extras, balancers := taskBalancers(m.conf.subtopologies, m.state)
	opts := append(append([]kgo.Opt{}, m.conf.conn...), m.conf.member...)
	opts = append(opts,
		kgo.ConsumerGroup(m.conf.group),
		kgo.ConsumeTopics(topics...),
		kgo.Balancers(append(balancers, kgo.RangeBalancer())...),
		kgo.DisableAutoCommit(),
		kgo.WithHooks(groupErrorHook{m.errs}),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, a map[string][]int32) {
			got := extras.take()
			m.handOver(ctx, kclient.Rebalance{Assigned: tpsOf(a), Standby: got.standby, Warmup: got.warmup})
			if got.followUp {
				// A task moves in two steps: every member rejoins now,
				// so the follow-up rebalance that gives it to its new
				// owner waits for the old owner's revocation only, not
				// for the members' next heartbeats. (Off this
				// goroutine: the client holds its group lock here.)
				go cl.ForceRebalance()
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, r map[string][]int32) {
			if len(r) > 0 {
				m.handOver(ctx, kclient.Rebalance{Revoked: tpsOf(r)})
			}
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, l map[string][]int32) {
			if len(l) > 0 {
				m.handOver(ctx, kclient.Rebalance{Revoked: tpsOf(l), Lost: true})
			}
		}),
	)
	if m.conf.instanceID != "" {
		opts = append(opts, kgo.InstanceID(m.conf.instanceID))
	}
	opts = append(opts, kgo.WithHooks(memberHook{m}))
	if m.notices != nil {
		m.noticeID = noticeID()
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kclient: creating the group member: %w", err)
	}
	// The member never fetches: the fetcher reads the records.
	cl.PauseFetchTopics(topics...)
	m.cl = cl
	if m.notices != nil {
		m.notices.add(m.noticeID, m) // after m.cl is set: probes read it
	}
	return nil
}

// memberHook is a member client's hook: it tracks whether the member is
// between a JoinGroup and its SyncGroup's answer (joining: a probe must
// not ask the member to rejoin then, since the request would outlive the
// join under way and make the next generation rejoin at once) and
// whether its SyncGroup is under way (syncing: every member has joined
// the new generation and the coordinator waits for the leader's
// assignment, refusing offset commits meanwhile), and sends its notices
// when the instance has a notice channel.
type memberHook struct {
	m *Member
}

func (h memberHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch key {
	case int16(kmsg.JoinGroup):
		h.m.joining.Store(true)
		if n := h.m.notices; n != nil {
			n.send(h.m.conf.group, h.m.noticeID, "join")
		}
	case int16(kmsg.SyncGroup):
		h.m.syncing.Store(true)
	}
}

func (h memberHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch key {
	case int16(kmsg.SyncGroup):
		h.m.syncing.Store(false)
		h.m.joining.Store(false)
	case int16(kmsg.LeaveGroup):
		if n := h.m.notices; n != nil && (&e2e).Err() == nil {
			n.send(h.m.conf.group, h.m.noticeID, "leave")
		}
	}
}

func (m *Member) ReportState(state func() kclient.MemberState) { m.state = state }

func (m *Member) UseNotices(n kclient.Notices) {
	if n, ok := n.(*Notices); ok {
		m.notices = n
	}
}

// rebalancing reports whether the member's SyncGroup is under way: the
// group is completing a rebalance, and the coordinator refuses offset
// commits until the leader's assignment arrives. Before that, while the
// members join (the coordinator's PreparingRebalance), commits for the
// generation they have are accepted.
func (m *Member) Rebalancing() bool { return m.syncing.Load() }

// rejoin asks the group for a rebalance (kgo's ForceRebalance: the member
// joins again with its new state; a no-op before it subscribed).
func (m *Member) Rejoin() {
	if m.cl != nil {
		m.cl.ForceRebalance()
	}
}

func (m *Member) Assign([]kclient.TP) error { return nil } // nothing to do: the fetcher reads

// handOver gives a rebalance to the stream thread and waits until it was
// handled, or the client closes.
func (m *Member) handOver(ctx context.Context, rb kclient.Rebalance) {
	ev := memberEvent{rb: rb, done: make(chan struct{})}
	select {
	case m.events <- ev:
	case <-ctx.Done():
		return
	}
	select {
	case <-ev.done:
	case <-ctx.Done():
	}
}

// handle runs one rebalance on the calling goroutine (the stream
// thread's).
func (m *Member) handle(ev memberEvent) error {
	defer close(ev.done)
	if len(ev.rb.Assigned) > 0 && m.assigned != nil {
		if err := m.assigned(ev.rb.Assigned); err != nil {
			return err
		}
	}
	err := m.onRebalance(ev.rb)
	if len(ev.rb.Revoked) > 0 && m.revoked != nil {
		m.revoked(ev.rb.Revoked)
	}
	return err
}

func (m *Member) Serve(timeout time.Duration) error {
	if m.cl == nil {
		if timeout > 0 {
			time.Sleep(timeout)
		}
		return nil
	}
	wait := closed
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		wait = t.C
	}
	for {
		select {
		case ev := <-m.events:
			return m.handle(ev)
		case err := <-m.errs:
			if err := m.groupErr(err); err != nil {
				return err
			}
		case <-wait:
			return nil
		}
	}
}

// closed is always ready: serve's wait when it must not block.
var closed = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// groupErr classifies an error that ended a group session: a refused login
// or a denied group stops the app; franz-go rejoins after anything else,
// which is reported as transient once.
func (m *Member) groupErr(err error) error {
	if s := franzSecurity(err, fmt.Sprintf("READ on group %q", m.conf.group)); s != nil {
		return s
	}
	if m.lastErr != nil && m.lastErr.Error() == err.Error() {
		return nil
	}
	m.lastErr = err
	return nil // franz-go rejoins by itself; the engine sees the outcome as a rebalance
}

// Committed reads the group's committed offsets and metadata, waiting for
// pending transactional commits (KIP-447: an unstable offset is retried).
func (m *Member) Committed(ctx context.Context, tps []kclient.TP) (map[kclient.TP]int64, map[kclient.TP]string, error) {
	cl, err := m.client()
	if err != nil {
		return nil, nil, err
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = m.conf.group
	req.RequireStable = true
	topics, parts := ByTopic(tps)
	for _, t := range topics {
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic = t
		for _, tp := range parts[t] {
			ft.Partitions = append(ft.Partitions, tp.Partition)
		}
		req.Topics = append(req.Topics, ft)
	}
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, nil, ClassifyErr(fmt.Sprintf("reading the committed offsets of group %q", m.conf.group), err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, nil, m.offsetErr(err, "")
		}
		out := make(map[kclient.TP]int64, len(tps))
		meta := map[kclient.TP]string{}
		unstable := false
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				tp := kclient.TP{Topic: t.Topic, Partition: p.Partition}
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					if errors.Is(err, kerr.UnstableOffsetCommit) {
						unstable = true
						continue
					}
					return nil, nil, m.offsetErr(err, t.Topic)
				}
				off := p.Offset
				if off < 0 {
					off = -1
				}
				out[tp] = off
				if p.Metadata != nil && *p.Metadata != "" {
					meta[tp] = *p.Metadata
				}
			}
		}
		if !unstable {
			return out, meta, nil
		}
		// A transaction holds offsets of these partitions: once it ends,
		// they are stable.
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: offsets of group %q stay unstable (a transaction is pending): %w", kclient.ErrTransient, m.conf.group, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// offsetErr classifies an error of an offset fetch or commit.
func (m *Member) offsetErr(err error, topic string) error {
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return kclient.DeniedErr(fmt.Sprintf("READ on group %q", m.conf.group), err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return kclient.DeniedErr(fmt.Sprintf("READ on topic %q", topic), err)
	}
	return ClassifyErr("group "+m.conf.group, err)
}

// Commit commits offsets with their metadata for the member's current
// generation: a member the group has moved on from is refused
// (ILLEGAL_GENERATION), so a zombie never commits.
func (m *Member) Commit(offsets map[kclient.TP]int64, meta map[kclient.TP]string) error {
	if len(offsets) == 0 {
		return nil
	}
	cl, err := m.client()
	if err != nil {
		return err
	}
	memberID, generation := cl.GroupMetadata()
	topics, parts := offsetsByTopic(offsets)
	send := func(memberID string, generation int32) error {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = m.conf.group, memberID, generation
		if m.conf.instanceID != "" {
			req.InstanceID = &m.conf.instanceID
		}
		for _, t := range topics {
			ct := kmsg.NewOffsetCommitRequestTopic()
			ct.Topic = t
			for _, tp := range parts[t] {
				p := kmsg.NewOffsetCommitRequestTopicPartition()
				p.Partition, p.Offset, p.LeaderEpoch = tp.Partition, offsets[tp], -1
				if md, ok := meta[tp]; ok {
					p.Metadata = &md
				}
				ct.Partitions = append(ct.Partitions, p)
			}
			req.Topics = append(req.Topics, ct)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return ClassifyErr(fmt.Sprintf("committing offsets of group %q", m.conf.group), err)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return &topicErr{topic: t.Topic, err: err}
				}
			}
		}
		return nil
	}
	err = m.commitThroughRebalance(context.Background(), memberID, generation, send)
	var te *topicErr
	if errors.As(err, &te) {
		return m.offsetErr(te.err, te.topic)
	}
	return err
}

// topicErr is a topic's error in an offset commit's answer.
type topicErr struct {
	topic string
	err   error
}

func (e *topicErr) Error() string { return e.topic + ": " + e.err.Error() }
func (e *topicErr) Unwrap() error { return e.err }

// rebalanceCommitWait bounds how long an offset commit the group refused
// because it rebalanced waits for the member to sync the rebalance.
const rebalanceCommitWait = 2 * time.Second

// commitThroughRebalance sends offsets for the member's generation
// (send), and when the coordinator refuses them because the group
// completed a rebalance meanwhile (ILLEGAL_GENERATION: it is past the
// generation sent; REBALANCE_IN_PROGRESS: it waits for the leader's
// SyncGroup), waits until the member has the new generation and its
// SyncGroup was answered, and sends them again for that generation,
// within rebalanceCommitWait. A member the group
// moved on from without it is refused for good (UNKNOWN_MEMBER_ID, or a
// generation that never moves): that error is returned. Safe because a
// rebalance takes partitions from a member only through its revocation
// callback, which runs on the stream thread after the commit under way.
func (m *Member) commitThroughRebalance(ctx context.Context, memberID string, generation int32, send func(string, int32) error) error {
	err := send(memberID, generation)
	deadline := time.Now().Add(rebalanceCommitWait)
	for (errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress)) && time.Now().Before(deadline) {
		wait := 2 * time.Millisecond
		if !m.joining.Load() {
			wait = 20 * time.Millisecond // the member has not heard of it yet, or it synced
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		if m.syncing.Load() {
			continue
		}
		id, g := m.cl.GroupMetadata()
		if errors.Is(err, kerr.IllegalGeneration) && g == generation {
			continue // not synced into the new generation yet
		}
		memberID, generation = id, g
		err = send(memberID, generation)
	}
	return err
}

func (m *Member) GroupMetadata() (any, error) {
	cl, err := m.client()
	if err != nil {
		return nil, err
	}
	memberID, generation := cl.GroupMetadata()
	return &franzGroupMetadata{group: m.conf.group, memberID: memberID, instanceID: m.conf.instanceID,
		generation: generation, member: m}, nil
}

func (m *Member) client() (*kgo.Client, error) {
	if m.cl == nil {
		return nil, errors.New("kclient: not a group member (Subscribe was not called)")
	}
	return m.cl, nil
}

// Close leaves the group. franz-go revokes the assignment as it leaves;
// that callback runs here, on the caller's goroutine, as serve would run
// it.
func (m *Member) Close() error {
	if m.cl == nil {
		return nil
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil
	}
	m.closing = true
	m.mu.Unlock()
	if m.notices != nil {
		m.notices.remove(m.noticeID) // it sends its leave notice, probes no more
	}
	closed := make(chan struct{})
	go func() {
		m.cl.Close()
		close(closed)
	}()
	var err error
	for {
		select {
		case ev := <-m.events:
			if herr := m.handle(ev); err == nil {
				err = herr
			}
		case <-closed:
			return err
		}
	}
}

// offsetsByTopic lists the topics of offsets, in order, and each one's
// partitions.
func offsetsByTopic(offsets map[kclient.TP]int64) ([]string, map[string][]kclient.TP) {
	tps := make([]kclient.TP, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	return ByTopic(tps)
}

// tpsOf lists a franz-go partition map in order.
func tpsOf(m map[string][]int32) []kclient.TP {
	var out []kclient.TP
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, kclient.TP{Topic: t, Partition: p})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// ByTopic groups tps by topic, the topics in the order they first appear.
func ByTopic(tps []kclient.TP) (topics []string, parts map[string][]kclient.TP) {
	parts = map[string][]kclient.TP{}
	for _, tp := range tps {
		if _, ok := parts[tp.Topic]; !ok {
			topics = append(topics, tp.Topic)
		}
		parts[tp.Topic] = append(parts[tp.Topic], tp)
	}
	return topics, parts
}
