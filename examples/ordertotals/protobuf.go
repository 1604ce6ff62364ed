package ordertotals

import (
	"github.com/eddy-go/eddy/examples/ordertotals/shoppb"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
	"github.com/eddy-go/eddy/topology"
)

// ProtobufTopology is Topology for a team whose events are Protobuf
// messages (shoppb, generated from shoppb/proto/shop/shop.proto): it reads
// shop.Order records and writes each customer's new shop.Total after each
// of their orders, both registered with reg as PROTOBUF schemas under the
// topics' subjects, in the wire format Confluent's serializers read.
func ProtobufTopology(reg *registry.Client, in, out string) (*topology.Topology, error) {
	orders, err := protobuf.New[*shoppb.Order](reg)
	if err != nil {
		return nil, err
	}
	totals, err := protobuf.New[*shoppb.Total](reg)
	if err != nil {
		return nil, err
	}
	b := topology.NewBuilder()
	byCustomer := topology.GroupBy(topology.Stream(b, in, topology.Consumed(serde.String(), orders)),
		func(_ string, o *shoppb.Order) string { return o.GetCustomer() },
		topology.Grouped(serde.String(), orders))
	sums := topology.Aggregate(byCustomer, func() *shoppb.Total { return &shoppb.Total{} },
		func(customer string, o *shoppb.Order, t *shoppb.Total) *shoppb.Total {
			last := t.GetLastOrderAt()
			if last == nil || o.GetPlacedAt().AsTime().After(last.AsTime()) {
				last = o.GetPlacedAt()
			}
			return &shoppb.Total{Customer: customer, Orders: t.GetOrders() + 1, Cents: t.GetCents() + o.GetCents(), LastOrderAt: last}
		}, topology.Materialized[string, *shoppb.Total]("totals").WithSerdes(serde.String(), totals))
	sums.ToStream().To(out, topology.Produced(serde.String(), totals))
	return b.Build()
}
