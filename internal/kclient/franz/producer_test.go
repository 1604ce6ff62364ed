//go:build !eddy_librdkafka

package franz

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/rt"
)

// While the coordinator still writes the previous transaction's markers it
// answers AddOffsetsToTxn CONCURRENT_TRANSACTIONS: the producer asks again
// on its own, and the commit goes on without the caller's (100 ms) retry;
// a coordinator that keeps answering so is reported, retriable.
func TestAddOffsetsToTxnAsksAgainWhileThePreviousTransactionCompletes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  int32 // answers CONCURRENT_TRANSACTIONS this many times
		wantErr bool
	}{
		{"completes", 3, false},
		{"never completes", 1 << 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			var asked atomic.Int32
			cluster.ControlKey(int16(kmsg.AddOffsetsToTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				req := r.(*kmsg.AddOffsetsToTxnRequest)
				resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
				if asked.Add(1) <= tc.refuse {
					resp.ErrorCode = kerr.ConcurrentTransactions.Code
				}
				return resp, nil, true
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			err = addOffsetsToTxn(context.Background(), cl, "app-p-0", 1, 0, "app")
			switch {
			case tc.wantErr && !errors.Is(err, kerr.ConcurrentTransactions):
				t.Fatalf("a coordinator that never completes: %v, want CONCURRENT_TRANSACTIONS", err)
			case !tc.wantErr && err != nil:
				t.Fatalf("AddOffsetsToTxn: %v", err)
			case !tc.wantErr && asked.Load() != tc.refuse+1:
				t.Fatalf("asked %d times, want %d", asked.Load(), tc.refuse+1)
			}
			if tc.wantErr {
				pe := (&Producer{}).txnError("AddOffsetsToTxn", err)
				var te *kclient.TxnError
				if !errors.As(pe, &te) || !te.Retriable {
					t.Fatalf("reported as %#v, want a retriable transaction error", pe)
				}
			}
		})
	}
}

// Under exactly-once on Kafka 4 (KIP-890) a transaction's first batch to a
// partition whose previous commit marker is still being written is
// answered CONCURRENT_TRANSACTIONS. franz-go retries such a batch only
// after a metadata refresh, and spaces refreshes by its MetadataMinAge:
// 5 s unless set, so a refusal soon after the client learned a topic held
// the commit flushing the batch — and the stream thread — for up to 5 s.
// eddy's clients refresh after MetadataRefreshBackoff, and the commit
// completes long before franz-go's 5 s (the bound below is half of it,
// twenty-five times what the retry needs).
func TestARefusedTransactionalBatchWaitsTheMetadataBackoffNotFiveSeconds(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	conf, err := ParseConfig(kclient.Config{"bootstrap.servers": cluster.ListenAddrs()[0], "transactional.id": "app-p-0"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.cl.OptValue(kgo.MetadataMinAge); got != MetadataRefreshBackoff {
		t.Fatalf("the producer's MetadataMinAge is %v, want %v", got, MetadataRefreshBackoff)
	}
	ctx := context.Background()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	commitOne := func(i int) time.Duration {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.Produce(&rt.OutRecord{Topic: "out", Partition: 1, Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.CommitTransaction(ctx); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		return time.Since(start)
	}
	// The first transaction makes the producer learn the topic: a
	// metadata refresh just now.
	commitOne(0)
	var refused atomic.Int32
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rqt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rqt.Topic
			for _, rp := range rqt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.ConcurrentTransactions.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refused.Add(1)
		return resp, nil, true // once: the control is removed after it answered
	})
	took := commitOne(1)
	if refused.Load() != 1 {
		t.Fatalf("the brokers refused %d produce requests, want 1", refused.Load())
	}
	t.Logf("the commit with a refused batch took %v", took)
	if took > 2500*time.Millisecond {
		t.Fatalf("the commit with a batch refused CONCURRENT_TRANSACTIONS took %v: the retry waited out franz-go's 5 s metadata interval", took)
	}
}
