//go:build !eddy_librdkafka

package kclient

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
				pe := (&franzProducer{}).txnError("AddOffsetsToTxn", err)
				var te *TxnError
				if !errors.As(pe, &te) || !te.Retriable {
					t.Fatalf("reported as %#v, want a retriable transaction error", pe)
				}
			}
		})
	}
}
