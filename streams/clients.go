package streams

// Every client property eddy sets is here: the configurations of each
// client an App creates (stream threads' consumer and producer, restore,
// global tables, admin, the instance directory), in standard Kafka client
// property names, and the properties a user's ClientConfig may not
// override. The stream thread adds only the transactional.id, which is per
// thread (internal/engine/thread.go). Each client backend maps them (and
// adds its own tuning) in internal/kclient.

import (
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// managed are client properties eddy sets and a user may not override.
var managed = map[string]bool{
	"group.id": true, "group.instance.id": true, "transactional.id": true,
	"enable.auto.commit": true, "enable.auto.offset.store": true, "isolation.level": true,
	"partition.assignment.strategy": true, "enable.idempotence": true, "bootstrap.servers": true,
	"go.delivery.reports": true, "go.delivery.report.fields": true, "go.events.channel.enable": true,
	"go.application.rebalance.enable": true, "enable.partition.eof": true,
}

// clientConfig merges the user's pass-through properties over base.
func (a *App) clientConfig(base kclient.Config) kclient.Config {
	for k, v := range a.cfg.ClientConfig {
		base[k] = v
	}
	return base
}

func (a *App) adminConfig() kclient.Config {
	return kclient.Config{"bootstrap.servers": a.cfg.BootstrapServers}
}

func (a *App) consumerConfig() kclient.Config {
	iso := "read_uncommitted"
	if a.cfg.Guarantee == ExactlyOnce {
		iso = "read_committed"
	}
	return kclient.Config{
		"bootstrap.servers":             a.cfg.BootstrapServers,
		"group.id":                      a.cfg.ApplicationID,
		"enable.auto.commit":            false,
		"enable.auto.offset.store":      false,
		"auto.offset.reset":             string(a.cfg.OffsetReset),
		kclient.TopicResets:             a.topicResets(),
		kclient.Subtopologies:           a.subtopologyTopics(),
		"partition.assignment.strategy": "range",
		"isolation.level":               iso,
		"client.id":                     a.cfg.ApplicationID + "-consumer",
	}
}

// subtopologyTopics are the source topics of each sub-topology as named on
// the brokers, for the group's assignor (a task is a sub-topology on one
// partition number).
func (a *App) subtopologyTopics() [][]string {
	out := make([][]string, len(a.prog.Subtopologies))
	for _, st := range a.prog.Subtopologies {
		for _, t := range st.SourceTopics {
			if a.prog.IsInternal(t) {
				t = rt.InternalTopicName(a.cfg.ApplicationID, t)
			}
			out[st.ID] = append(out[st.ID], t)
		}
	}
	return out
}

// topicResets are the sources' own offset reset policies, and earliest for
// every repartition topic: records written to one before the reading
// task's first commit must not be skipped.
func (a *App) topicResets() map[string]kclient.Reset {
	out := map[string]kclient.Reset{}
	for _, n := range a.prog.Nodes {
		if n.Kind != rt.KindSource {
			continue
		}
		for _, t := range n.Topics {
			switch {
			case n.Internal:
				out[rt.InternalTopicName(a.cfg.ApplicationID, t)] = kclient.Reset{Policy: kclient.ResetEarliest}
			case n.OffsetReset != "":
				if r, err := kclient.ParseReset(n.OffsetReset); err == nil { // checked by New
					out[t] = r
				}
			}
		}
	}
	return out
}

func (a *App) restoreConfig() kclient.Config {
	return kclient.Config{
		"bootstrap.servers":  a.cfg.BootstrapServers,
		"group.id":           a.cfg.ApplicationID + "-restore", // assign-only: never joins
		"enable.auto.commit": false,
		"auto.offset.reset":  "earliest",
		"isolation.level":    "read_committed",
		"client.id":          a.cfg.ApplicationID + "-restore-consumer",
	}
}

// globalConfig reads global tables' topics: assign-only, committed data
// only under exactly-once, as the stream threads read.
func (a *App) globalConfig() kclient.Config {
	c := a.restoreConfig()
	c["group.id"] = a.cfg.ApplicationID + "-global"
	c["client.id"] = a.cfg.ApplicationID + "-global-consumer"
	if a.cfg.Guarantee != ExactlyOnce {
		c["isolation.level"] = "read_uncommitted"
	}
	return c
}

func (a *App) producerConfig() kclient.Config {
	c := kclient.Config{
		"bootstrap.servers":  a.cfg.BootstrapServers,
		"enable.idempotence": true,
		"acks":               "all",
		"linger.ms":          10,
		// Keyed records land where Kafka's Java client puts them, so
		// topics written by Java applications stay co-partitioned.
		"partitioner": "murmur2_random",
		"client.id":   a.cfg.ApplicationID + "-producer",
	}
	if a.cfg.Guarantee == ExactlyOnce {
		c["transaction.timeout.ms"] = 10_000
		// A commit's AddOffsetsToTxn (and the next transaction's
		// AddPartitionsToTxn) can meet the previous transaction's markers
		// still being written; the coordinator answers
		// CONCURRENT_TRANSACTIONS and the client retries after
		// retry.backoff.ms. librdkafka's 100 ms default costs a whole
		// commit interval each time; Kafka's Java client retries this case
		// after 20 ms. The backoff still grows (to 1 s) while a broker is
		// really down.
		c["retry.backoff.ms"] = 10
	}
	return c
}

// directoryProducerConfig writes this instance's record to the instance
// directory topic.
func (a *App) directoryProducerConfig() kclient.Config {
	return kclient.Config{
		"bootstrap.servers": a.cfg.BootstrapServers, "acks": "all", "linger.ms": 0,
		"client.id": a.cfg.ApplicationID + "-directory-producer",
	}
}

// directoryConsumerConfig reads the whole instance directory topic
// (assign-only).
func (a *App) directoryConsumerConfig() kclient.Config {
	return kclient.Config{
		"bootstrap.servers": a.cfg.BootstrapServers, "group.id": a.cfg.ApplicationID + "-directory",
		"enable.auto.commit": false, "auto.offset.reset": "earliest", "isolation.level": "read_uncommitted",
		"client.id": a.cfg.ApplicationID + "-directory-consumer",
	}
}

// noticesConfig is the rebalance notices' clients' (kclient.Notices).
func (a *App) noticesConfig() kclient.Config {
	return kclient.Config{"bootstrap.servers": a.cfg.BootstrapServers, "client.id": a.cfg.ApplicationID + "-notices"}
}
