package streamstest_test

import (
	"strconv"
	"testing"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

type price struct {
	Cents int `json:"cents"`
}

// A global table's bad records (no key, a value its serde rejects) are
// skipped and counted; good ones are visible to joins at once; a tombstone
// deletes.
func TestGlobalTableBadRecordsAndDeletes(t *testing.T) {
	b := topology.NewBuilder()
	prices := topology.GlobalTable(b, "prices", topology.Consumed(str, serde.JSON[price]()), topology.Materialized[string, price]("price-store"))
	topology.LeftJoinGlobal(topology.Stream(b, "orders", consumed()), prices,
		func(_, product string) string { return product },
		func(product string, p *price) string {
			if p == nil {
				return product + "=?"
			}
			return product + "=" + strconv.Itoa(p.Cents)
		}).To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top)
	pin := streamstest.Input(d, "prices", str, serde.JSON[price]())
	oin := streamstest.Input(d, "orders", str, str)
	out := streamstest.Output(d, "out", str, str)

	pin.PipeAt("apple", price{120}, 1)
	if err := pin.PipeBytes([]byte("pear"), []byte("{not json"), 2); err != nil {
		t.Fatalf("a bad global record must not fail the app: %v", err)
	}
	if err := pin.PipeBytes(nil, []byte(`{"cents":1}`), 3); err != nil {
		t.Fatalf("a keyless global record must not fail the app: %v", err)
	}
	oin.PipeAt("o1", "apple", 4)
	oin.PipeAt("o2", "pear", 5)
	pin.PipeTombstone("apple")
	oin.PipeAt("o3", "apple", 7)

	got := map[string]string{}
	for _, r := range out.ReadRecords() {
		got[r.Key] = r.Value
	}
	want := map[string]string{"o1": "apple=120", "o2": "pear=?", "o3": "apple=?"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if _, skipped, _ := d.Counters(); skipped != 2 {
		t.Errorf("skipped = %d, want the 2 bad global records", skipped)
	}
	if n, _ := streamstest.KeyValueStore[string, price](d, "price-store").ApproximateNumEntries(); n != 0 {
		t.Errorf("the global store holds %d rows after the delete, want 0", n)
	}
}
