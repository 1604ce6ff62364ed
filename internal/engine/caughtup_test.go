package engine

import (
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/kclienttest"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/topology"
)

// joinTopology enriches "in" with the table "t" (a stream–table left
// join): "out" gets "<order>+<price>", or "<order>+none" when the table has
// no row for the key.
func joinTopology(t *testing.T) *rt.Program {
	t.Helper()
	str := serde.String()
	b := topology.NewBuilder()
	prices := topology.Table(b, "t", topology.Consumed(str, str), topology.Materialized[string, string]("prices"))
	orders := topology.Stream(b, testIn, topology.Consumed(str, str))
	topology.LeftJoinTable(orders, prices, func(order string, price *string) string {
		if price == nil {
			return order + "+none"
		}
		return order + "+" + *price
	}).To(testOut, topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	prog, _ := rt.ProgramOf(top)
	return prog
}

// A task does not process a partition's records while another of its
// partitions is known to have records not fetched yet (KIP-695): the
// table row older than a stream record is joined, however the fetches
// interleave. The fake holds the table partition back (not caught up)
// until the stream record has been read; the join still sees the price.
// With MaxTaskIdle negative (never wait) the order goes out unenriched.
func TestTaskWaitsForPartitionsNotCaughtUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
		want string
	}{
		{"waits (the default)", 0, "order-1+9.99"},
		{"never waits", -1, "order-1+none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := kclienttest.NewCluster()
			cl.CreateTopic("t", testParts)
			r := newRig(t, cl, joinTopology(t), true, "")
			r.cfg.MaxTaskIdle = tc.idle
			p := kclient.KeyPartition([]byte("k"), testParts)
			cl.Produce("t", p, kclienttest.Record{Key: []byte("k"), Value: []byte("9.99"), Timestamp: 1000})
			cl.Produce(testIn, p, kclienttest.Record{Key: []byte("k"), Value: []byte("order-1"), Timestamp: 2000})
			cl.Hold("t", p)
			run := r.start()
			if tc.idle < 0 {
				// Never waiting, the order is joined while the table's
				// record is still held back.
				wait(t, "the joined order", func() bool { return len(cl.Records(testOut, p, true)) > 0 })
				cl.Release("t", p)
			} else {
				// Release the table once the stream record was read.
				wait(t, "the order to be read", func() bool { return run.th.Stats.Consumed.Load() >= 1 })
				cl.Release("t", p)
				wait(t, "the joined order", func() bool { return len(cl.Records(testOut, p, true)) > 0 })
			}
			got := string(cl.Records(testOut, p, true)[0].Value)
			if got != tc.want {
				t.Errorf("joined %q, want %q", got, tc.want)
			}
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}
