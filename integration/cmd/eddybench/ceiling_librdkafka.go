//go:build eddy_librdkafka

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ceilingLibrdkafka is a plain confluent-kafka-go loop: consume every input record,
// produce it unchanged, commit as often as the systems do (under
// exactly-once, a transaction with the offsets every commit interval), with
// eddy's client tuning.
func ceilingLibrdkafka(ctx context.Context, brokers, group, in, out string, eos bool, every time.Duration) {
	iso := "read_uncommitted"
	if eos {
		iso = "read_committed"
	}
	c := must(kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": brokers, "group.id": group, "auto.offset.reset": "earliest", "isolation.level": iso,
		"enable.auto.commit": false, "fetch.queue.backoff.ms": 0, "queued.min.messages": 1_000_000, "fetch.wait.max.ms": 10,
	}))
	defer c.Close()
	pcfg := &kafka.ConfigMap{"bootstrap.servers": brokers, "linger.ms": 10, "enable.idempotence": true,
		"go.delivery.reports": false, "partitioner": "murmur2_random"}
	if eos {
		pcfg.SetKey("transactional.id", group+"-ceiling")
	}
	p := must(kafka.NewProducer(pcfg))
	defer p.Close()
	if eos {
		if err := p.InitTransactions(ctx); err != nil {
			fail("init transactions: %v", err)
		}
	}
	running := false
	if err := c.Subscribe(in, func(kc *kafka.Consumer, ev kafka.Event) error {
		if e, ok := ev.(kafka.AssignedPartitions); ok {
			if err := kc.Assign(e.Partitions); err != nil {
				return err
			}
			if !running {
				running = true
				fmt.Println("RUNNING")
			}
		}
		return nil
	}); err != nil {
		fail("subscribe: %v", err)
	}
	inTxn := false
	last := time.Now()
	for ctx.Err() == nil {
		if eos && !inTxn {
			if err := p.BeginTransaction(); err != nil {
				fail("begin: %v", err)
			}
			inTxn = true
		}
		if m, ok := c.Poll(10).(*kafka.Message); ok && m.TopicPartition.Error == nil {
			for {
				err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &out, Partition: kafka.PartitionAny},
					Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}, nil)
				if err == nil {
					break
				}
				p.Flush(10)
			}
		}
		if time.Since(last) < every {
			continue
		}
		last = time.Now()
		pos, err := c.Position(must(c.Assignment()))
		if err != nil {
			fail("positions: %v", err)
		}
		var offs []kafka.TopicPartition
		for _, tp := range pos {
			if tp.Offset >= 0 {
				offs = append(offs, tp)
			}
		}
		if eos {
			if len(offs) > 0 {
				if err := p.SendOffsetsToTransaction(ctx, offs, must(c.GetConsumerGroupMetadata())); err != nil {
					fail("send offsets: %v", err)
				}
			}
			if err := p.CommitTransaction(ctx); err != nil {
				fail("commit: %v", err)
			}
			inTxn = false
		} else {
			p.Flush(60_000)
			if len(offs) > 0 {
				if _, err := c.CommitOffsets(offs); err != nil {
					fail("commit: %v", err)
				}
			}
		}
	}
	if inTxn {
		p.AbortTransaction(context.Background())
	}
}
