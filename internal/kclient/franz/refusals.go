package franz

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// Records the brokers would refuse are refused before they are produced:
// a refusal after the fact fails the batch (and, under exactly-once, the
// transaction) with the records around it, where one refused up front is
// a bad record like any other, for the production error handler, and the
// transaction goes on without it.

// topicFacts are what a topic's records are checked against.
type topicFacts struct {
	missing, denied bool
	maxBytes        int // max.message.bytes; 0: not known
	compacted       bool
	// until: when the facts are looked up again (missing topics, and
	// lookups that failed, are retried after refusalRecheck).
	until time.Time
}

// refusalRecheck is how long a lookup that found a topic missing, or could
// not ask, holds.
const refusalRecheck = time.Second

// topicGuard checks records against the facts of their topics, looked up
// at a topic's first record (the metadata with the client's authorized
// operations, and the topic's configs when the ACLs allow describing them;
// what is not known is not checked).
type topicGuard struct {
	cl        *kgo.Client
	maxRecord int // the largest batch the producer makes
	mu        sync.Mutex
	facts     map[string]*topicFacts // each entry is replaced, never changed
	// known are the final facts (of topics found), for check without the
	// lock, the last few topics first: owned by the goroutine that
	// produces (a task writes a few topics: outputs, changelogs).
	known  map[string]*topicFacts
	recent [4]knownTopic
	next   int
}

type knownTopic struct {
	topic string
	facts *topicFacts
}

// final returns topic's final facts, if known.
func (g *topicGuard) final(topic string) *topicFacts {
	for i := range g.recent {
		if g.recent[i].topic == topic && g.recent[i].facts != nil {
			return g.recent[i].facts
		}
	}
	f := g.known[topic]
	if f != nil {
		g.recent[g.next] = knownTopic{topic, f}
		g.next = (g.next + 1) % len(g.recent)
	}
	return f
}

func newTopicGuard(cl *kgo.Client, maxRecord int) *topicGuard {
	return &topicGuard{cl: cl, maxRecord: maxRecord, facts: map[string]*topicFacts{}, known: map[string]*topicFacts{}}
}

// check returns a *RecordRefused for a record the brokers would refuse.
func (g *topicGuard) check(rec *rt.OutRecord) error {
	f := g.final(rec.Topic)
	if f == nil {
		f = g.lookup(rec.Topic)
		if f.until.IsZero() {
			g.known[rec.Topic] = f
		}
	}
	refuse := func(err error, format string, args ...any) error {
		return &kclient.RecordRefused{Topic: rec.Topic, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	switch size := recordSize(rec); {
	case f.missing:
		return refuse(kerr.UnknownTopicOrPartition, "the topic does not exist")
	case f.denied:
		// No bad record: a missing ACL refuses every record alike, and
		// is a configuration to fix (as Kafka Streams, fatal).
		return kclient.DeniedErr(fmt.Sprintf("WRITE on topic %q", rec.Topic), kerr.TopicAuthorizationFailed)
	case f.maxBytes > 0 && size > f.maxBytes:
		return refuse(kerr.MessageTooLarge, "%d bytes, more than the topic's max.message.bytes (%d)", size, f.maxBytes)
	case size > g.maxRecord:
		return refuse(kerr.MessageTooLarge, "%d bytes, more than a batch holds (%d; batch.size)", size, g.maxRecord)
	case f.compacted && rec.Key == nil:
		return refuse(kerr.InvalidRecord, "no key, and the topic is compacted")
	}
	return nil
}

// batchMax is the largest batch to make for topic: a batch the topic does
// not take would be refused whole.
func (g *topicGuard) batchMax(topic string) int32 {
	g.mu.Lock()
	f := g.facts[topic]
	g.mu.Unlock()
	n := g.maxRecord
	if f != nil && f.maxBytes > 0 {
		n = min(n, f.maxBytes)
	}
	return int32(max(n, 512))
}

// lookup returns topic's facts, asking the brokers when they are not known
// or due again.
func (g *topicGuard) lookup(topic string) *topicFacts {
	g.mu.Lock()
	f := g.facts[topic]
	g.mu.Unlock()
	if f != nil && (f.until.IsZero() || time.Now().Before(f.until)) {
		return f
	}
	nf := g.ask(topic)
	g.mu.Lock()
	g.facts[topic] = &nf
	g.mu.Unlock()
	return &nf
}

// ask looks topic up; what it cannot learn stays unchecked, to be asked
// again after refusalRecheck.
func (g *topicGuard) ask(topic string) topicFacts {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f := topicFacts{}
	meta := kmsg.NewPtrMetadataRequest()
	meta.IncludeTopicAuthorizedOperations = true
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	resp, err := meta.RequestWith(ctx, g.cl)
	if err != nil || len(resp.Topics) != 1 {
		f.until = time.Now().Add(refusalRecheck)
		return f
	}
	t := resp.Topics[0]
	switch err := kerr.ErrorForCode(t.ErrorCode); {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		f.missing, f.until = true, time.Now().Add(refusalRecheck)
		return f
	case err != nil:
		// Not allowed to describe it (the produce itself will say), or
		// a transient error: unchecked for now.
		f.until = time.Now().Add(refusalRecheck)
		return f
	}
	// Authorized operations are a bit field (bit 4: WRITE); a broker that
	// does not say sends math.MinInt32.
	const write = 1 << 4
	if ops := t.AuthorizedOperations; ops != -2147483648 && ops&write == 0 {
		f.denied = true
	}
	cfgs := kmsg.NewPtrDescribeConfigsRequest()
	rc := kmsg.NewDescribeConfigsRequestResource()
	rc.ResourceType = kmsg.ConfigResourceTypeTopic
	rc.ResourceName = topic
	rc.ConfigNames = []string{"max.message.bytes", "cleanup.policy"}
	cfgs.Resources = append(cfgs.Resources, rc)
	cresp, err := cfgs.RequestWith(ctx, g.cl)
	if err != nil || len(cresp.Resources) != 1 || cresp.Resources[0].ErrorCode != 0 {
		return f // no DescribeConfigs ACL: size and keys unchecked
	}
	for _, c := range cresp.Resources[0].Configs {
		if c.Value == nil {
			continue
		}
		switch c.Name {
		case "max.message.bytes":
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
				f.maxBytes = n
			}
		case "cleanup.policy":
			f.compacted = strings.Contains(*c.Value, "compact")
		}
	}
	return f
}

// refusedAfter tells whether a delivery failure is one the guard checks
// for: the facts it checked against were out of date.
func refusedAfter(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.UnknownTopicOrPartition} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
