package franz

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// Rebalance notices. A member of a classic consumer group hears that the
// group is rebalancing only through its next heartbeat (every 3 s by
// default): when an instance stops cleanly and leaves, its tasks wait up
// to a heartbeat interval (1.5 s on average) before the others rejoin and
// take them, and so does a rebalance a member asks for (a warm-up that
// caught up) or a member joining. So each of eddy's members says on a
// topic of the app's when it has joined (its JoinGroup went out) or left
// (its LeaveGroup was answered), and every instance reads that topic:
// its members that did not send the notice then heartbeat at once,
// and rejoin if the coordinator answers that the group is rebalancing.
// A notice never makes a rebalance: a member probes with a heartbeat and
// rejoins only a rebalance that is already under way.

// noticeProbeTimeout bounds a probe's heartbeat.
const noticeProbeTimeout = 5 * time.Second

// Notices is an instance's rebalance-notice channel: a producer and a
// reader of one topic, shared by the instance's group members (one per
// stream thread). Nil when the client backend's members cannot use it
// (librdkafka's); a nil *Notices does nothing.
type Notices struct {
	topic string
	log   *zap.Logger
	prod  *kgo.Client
	read  *kgo.Client

	mu      sync.Mutex
	members map[string]*Member // by notice id
}

// notice is one record of the topic; the key is the group.
type notice struct {
	From string `json:"from"` // the member's notice id
	Kind string `json:"kind"` // "join" or "leave"
	At   int64  `json:"at"`   // when sent, ms (for people reading the topic)
}

// NewNotices makes an instance's notice channel on topic (which must
// exist: one partition, short retention) and starts reading it from its
// end; Run delivers what it reads. c is a client's configuration
// (bootstrap servers, security).
func NewNotices(c ClientConfig, topic string, log *zap.Logger) (*Notices, error) {
	prod, err := kgo.NewClient(append(append([]kgo.Opt{}, c.conn...),
		kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(10*time.Second))...)
	if err != nil {
		return nil, err
	}
	read, err := kgo.NewClient(append(append([]kgo.Opt{}, c.conn...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(time.Second))...)
	if err != nil {
		prod.Close()
		return nil, err
	}
	return &Notices{topic: topic, log: log, prod: prod, read: read, members: map[string]*Member{}}, nil
}

// Run reads notices until ctx ends, and has the instance's members that
// did not send one probe the group.
func (n *Notices) Run(ctx context.Context) {
	if n == nil {
		return
	}
	for ctx.Err() == nil {
		fs := n.read.PollFetches(ctx)
		fs.EachError(func(t string, p int32, err error) {
			if ctx.Err() == nil {
				n.log.Debug("rebalance notices: reading", zap.String("topic", t), zap.Error(err))
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			var nt notice
			if json.Unmarshal(r.Value, &nt) != nil {
				return // not a notice: nothing to do
			}
			n.deliver(string(r.Key), nt)
		})
	}
}

// deliver has every member of group but the sender probe it.
func (n *Notices) deliver(group string, nt notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, m := range n.members {
		if id != nt.From && m.conf.group == group {
			go m.probe()
		}
	}
}

// Close stops reading and sends what is still to be sent (the leave
// notices of a clean stop), waiting at most a few seconds.
func (n *Notices) Close() {
	if n == nil {
		return
	}
	n.read.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = n.prod.Flush(ctx)
	n.prod.Close()
}

// add registers m, which sends its notices as id.
func (n *Notices) add(id string, m *Member) {
	n.mu.Lock()
	n.members[id] = m
	n.mu.Unlock()
}

// remove forgets the member of id (it closes): it probes no more.
func (n *Notices) remove(id string) {
	n.mu.Lock()
	delete(n.members, id)
	n.mu.Unlock()
}

// send publishes a notice of member id in group (without waiting: it runs
// on the member client's goroutines).
func (n *Notices) send(group, id, kind string) {
	v, _ := json.Marshal(notice{From: id, Kind: kind, At: time.Now().UnixMilli()})
	n.prod.Produce(context.Background(), &kgo.Record{Key: []byte(group), Value: v}, func(_ *kgo.Record, err error) {
		if err != nil {
			n.log.Debug("rebalance notices: sending", zap.String("topic", n.topic), zap.Error(err))
		}
	})
}

// noticeID makes a member's notice id.
func noticeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// probe heartbeats at once and rejoins if the group is rebalancing (what
// the member's next heartbeat would find); it reports whether it asked to
// rejoin.
func (m *Member) probe() bool {
	if m.joining.Load() {
		return false // it is rejoining already
	}
	memberID, generation := m.cl.GroupMetadata()
	if memberID == "" || generation < 0 {
		return false
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = m.conf.group, memberID, generation
	if m.conf.instanceID != "" {
		req.InstanceID = &m.conf.instanceID
	}
	ctx, cancel := context.WithTimeout(context.Background(), noticeProbeTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil || resp.ErrorCode != kerr.RebalanceInProgress.Code {
		return false // nothing under way (or the member's own heartbeat will tell)
	}
	if _, g := m.cl.GroupMetadata(); g != generation || m.joining.Load() {
		return false
	}
	m.cl.ForceRebalance()
	return true
}
