package streamstest_test

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// The cost of a foreign-key join per update, through the test driver (the
// runtime's nodes, Pebble stores and record cache; the two internal topics
// passed in memory, so no broker cost): "order" is an order changing its
// product (a subscription moved, answered, resolved), "product" a product
// changing its price with 10 orders subscribed (10 answers resolved).
func BenchmarkForeignKeyJoin(b *testing.B) {
	const products, orders = 1_000, 10_000
	for _, kind := range []string{"order", "product"} {
		b.Run(kind, func(b *testing.B) {
			bld := topology.NewBuilder()
			i64 := serde.Int64()
			ot := topology.Table(bld, "orders", topology.Consumed(str, str), topology.Materialized[string, string]("orders"))
			pt := topology.Table(bld, "products", topology.Consumed(str, i64), topology.Materialized[string, int64]("prices"))
			topology.ForeignKeyJoin(ot, pt, func(p string) (string, bool) { return p, true },
				func(p string, price int64) int64 { return price },
				topology.Materialized[string, int64]("priced").WithSerdes(str, i64)).ToStream().To("out", topology.Produced(str, i64))
			top, err := bld.Build()
			if err != nil {
				b.Fatal(err)
			}
			d, err := streamstest.Open(top, streamstest.Options{ManualCommit: true})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			pin := streamstest.Input(d, "products", str, i64)
			oin := streamstest.Input(d, "orders", str, str)
			out := streamstest.Output(d, "out", str, i64)
			for p := range products {
				pin.PipeAt(fmt.Sprintf("p%04d", p), int64(p), 1)
			}
			for o := range orders {
				oin.PipeAt(fmt.Sprintf("o%05d", o), fmt.Sprintf("p%04d", o%products), 2)
			}
			if err := d.Commit(); err != nil {
				b.Fatal(err)
			}
			out.ReadRecords()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if kind == "order" {
					oin.PipeAt(fmt.Sprintf("o%05d", i%orders), fmt.Sprintf("p%04d", (i*7)%products), int64(3+i))
				} else {
					pin.PipeAt(fmt.Sprintf("p%04d", i%products), int64(i), int64(3+i))
				}
				if i%1000 == 999 {
					if err := d.Commit(); err != nil {
						b.Fatal(err)
					}
					out.ReadRecords()
				}
			}
		})
	}
}
