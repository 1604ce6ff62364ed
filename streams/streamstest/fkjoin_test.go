package streamstest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

type order struct {
	Product string `json:"product"` // "" : no product
	Qty     int    `json:"qty"`
}

type product struct {
	Name  string `json:"name"`
	Price int    `json:"price"`
}

// Foreign-key joins (inner and left): each order joined with the product
// it names, following changes of either side — a product's price change
// reaches every order of it, an order moving to another product retracts
// the old result, deletes on either side retract or (left join) fall back
// to no product, and an order without a product key joins nothing (inner)
// or nil (left). The result is materialized and its store queryable.
func TestForeignKeyJoin(t *testing.T) {
	for _, c := range []struct {
		left, materialized bool
	}{{false, true}, {true, true}, {false, false}, {true, false}} {
		left := c.left
		t.Run(fmt.Sprintf("left=%v,materialized=%v", c.left, c.materialized), func(t *testing.T) {
			b := topology.NewBuilder()
			orders := topology.Table(b, "orders", topology.Consumed(str, serde.JSON[order]()), topology.Materialized[string, order]("orders-store"))
			products := topology.Table(b, "products", topology.Consumed(str, serde.JSON[product]()), topology.Materialized[string, product]("products-store"))
			fk := func(o order) (string, bool) { return o.Product, o.Product != "" }
			describe := func(o order, p *product) string {
				if p == nil {
					return fmt.Sprintf("%d x ?", o.Qty)
				}
				return fmt.Sprintf("%d x %s @%d", o.Qty, p.Name, p.Price)
			}
			var m []topology.MaterializedOptions[string, string]
			if c.materialized {
				m = append(m, topology.Materialized[string, string]("priced").WithSerdes(str, str))
			}
			var res *topology.KTable[string, string]
			if left {
				res = topology.ForeignKeyLeftJoin(orders, products, fk, describe, m...)
			} else {
				res = topology.ForeignKeyJoin(orders, products, fk, func(o order, p product) string { return describe(o, &p) }, m...)
			}
			res.ToStream().To("priced-orders", topology.Produced(str, str))
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: -1})
			oin := streamstest.Input(d, "orders", str, serde.JSON[order]())
			pin := streamstest.Input(d, "products", str, serde.JSON[product]())
			out := streamstest.Output(d, "priced-orders", str, str)
			step := func(what string, want string) {
				t.Helper()
				var got []string
				for _, r := range out.ReadRecords() {
					if r.NullValue {
						got = append(got, r.Key+"=<deleted>")
					} else {
						got = append(got, r.Key+"="+r.Value)
					}
				}
				if g := strings.Join(got, ", "); g != want {
					t.Errorf("%s: got %q, want %q", what, g, want)
				}
			}
			pick := func(inner, leftJoin string) string {
				if left {
					return leftJoin
				}
				return inner
			}
			pin.PipeAt("p1", product{"apple", 2}, 1)
			oin.PipeAt("o1", order{"p1", 3}, 2)
			step("order of an existing product", "o1=3 x apple @2")
			pin.PipeAt("p1", product{"apple", 5}, 3)
			step("price change", "o1=3 x apple @5")
			oin.PipeAt("o1", order{"p2", 3}, 4)
			step("order moves to a missing product", pick("o1=<deleted>", "o1=3 x ?"))
			pin.PipeAt("p2", product{"pear", 7}, 5)
			step("the product arrives", "o1=3 x pear @7")
			oin.PipeAt("o2", order{"p2", 1}, 6)
			step("second order of it", "o2=1 x pear @7")
			pin.PipeAt("p2", product{"pear", 8}, 7)
			step("price change reaches both orders", "o1=3 x pear @8, o2=1 x pear @8")
			oin.PipeTombstone("o1")
			step("order deleted", "o1=<deleted>")
			pin.PipeTombstone("p2")
			step("product deleted", pick("o2=<deleted>", "o2=1 x ?"))
			oin.PipeAt("o3", order{"", 4}, 9)
			step("order without a product", pick("", "o3=4 x ?"))
			oin.PipeAt("o3", order{"p1", 4}, 10)
			step("it gets one", "o3=4 x apple @5")
			oin.PipeAt("o3", order{"", 4}, 11)
			step("and loses it", pick("o3=<deleted>", "o3=4 x ?"))
			pin.PipeAt("p1", product{"apple", 6}, 12)
			step("the old product no longer reaches it", "")
			oin.PipeTombstone("o3")
			step("an order without a product deleted", pick("", "o3=<deleted>"))
			oin.PipeAt("o8", order{"p7", 1}, 13)
			step("a new order of a missing product", pick("", "o8=1 x ?"))
			// An update always hears back, so an inner join retracts (a
			// tombstone) even here: had the product been deleted while the
			// update was in flight, the answer to the old value would be
			// dropped as stale and nothing else would retract the old row.
			// Kafka Streams stays silent in this case.
			oin.PipeAt("o8", order{"p7", 2}, 14)
			step("that order updated", pick("o8=<deleted>", "o8=2 x ?"))

			if !c.materialized {
				return
			}
			kv := streamstest.KeyValueStore[string, string](d, "priced")
			got := map[string]string{}
			for k, v := range kv.All().Seq() {
				got[k] = v
			}
			want := map[string]string{}
			if left {
				want = map[string]string{"o2": "1 x ?", "o8": "2 x ?"}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("result store %v, want %v", got, want)
			}
		})
	}
}

// Aggregating a foreign-key join's result retracts old rows, so the result
// must be materialized: Build says so.
func TestForeignKeyJoinResultAggregatedNeedsMaterializing(t *testing.T) {
	b := topology.NewBuilder()
	orders := topology.Table(b, "orders", topology.Consumed(str, serde.JSON[order]()), topology.Materialized[string, order]("orders-store"))
	products := topology.Table(b, "products", topology.Consumed(str, serde.JSON[product]()), topology.Materialized[string, product]("products-store"))
	res := topology.ForeignKeyJoin(orders, products, func(o order) (string, bool) { return o.Product, true },
		func(o order, p product) int64 { return int64(o.Qty * p.Price) })
	topology.TableCount(topology.TableGroupBy(res, func(k string, v int64) (string, int64) { return "all", v },
		topology.Grouped(str, serde.Int64())))
	_, err := b.Build()
	if err == nil || !strings.Contains(err.Error(), "materialize it") {
		t.Fatalf("Build: %v, want an error asking to materialize the join result", err)
	}
}
