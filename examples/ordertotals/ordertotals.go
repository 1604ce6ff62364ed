// Package ordertotals is a small eddy service, here to show the integration
// test a team writes for its own service (ordertotals_test.go): Kafka and
// the schema registry started in containers by kafkatest, the topology run
// exactly once against them, the output asserted record for record.
//
// The service reads Avro orders keyed by order id and keeps each
// customer's running total: how many orders and how many cents, written as
// Avro to an output topic keyed by customer. ProtobufTopology is the same
// service for events defined in Protobuf (shoppb).
package ordertotals

import (
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/avro"
	"github.com/eddy-go/eddy/topology"
)

// Order is an order as the shop writes it.
type Order struct {
	ID       string `avro:"id"`
	Customer string `avro:"customer"`
	Cents    int64  `avro:"cents"`
}

// Total is a customer's running total.
type Total struct {
	Customer string `avro:"customer"`
	Orders   int64  `avro:"orders"`
	Cents    int64  `avro:"cents"`
}

// OrderSchema is the Avro schema of Order.
const OrderSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"id","type":"string"},{"name":"customer","type":"string"},{"name":"cents","type":"long"}]}`

// TotalSchema is the Avro schema of Total.
const TotalSchema = `{"type":"record","name":"Total","namespace":"shop","fields":[
	{"name":"customer","type":"string"},{"name":"orders","type":"long"},{"name":"cents","type":"long"}]}`

// Topology reads orders from in and writes every customer's new total to
// out after each of their orders. Its serdes register their schemas with
// reg under the topics' subjects.
func Topology(reg *avro.Registry, in, out string) (*topology.Topology, error) {
	orders, err := avro.New[Order](reg, OrderSchema)
	if err != nil {
		return nil, err
	}
	totals, err := avro.New[Total](reg, TotalSchema)
	if err != nil {
		return nil, err
	}
	b := topology.NewBuilder()
	byCustomer := topology.GroupBy(topology.Stream(b, in, topology.Consumed(serde.String(), orders)),
		func(_ string, o Order) string { return o.Customer },
		topology.Grouped(serde.String(), orders))
	sums := topology.Aggregate(byCustomer, func() Total { return Total{} },
		func(customer string, o Order, t Total) Total {
			return Total{Customer: customer, Orders: t.Orders + 1, Cents: t.Cents + o.Cents}
		}, topology.Materialized[string, Total]("totals").WithSerdes(serde.String(), totals))
	sums.ToStream().To(out, topology.Produced(serde.String(), totals))
	return b.Build()
}
