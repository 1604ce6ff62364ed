package avro_test

import (
	"bytes"
	"errors"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/riferrei/srclient"

	"github.com/eddy-go/eddy/serde/avro"
)

func mockRegistry() (*avro.Registry, *srclient.MockSchemaRegistryClient) {
	m := srclient.CreateMockSchemaRegistryClient("mock://")
	return avro.NewRegistryWithClient(m), m
}

// The bytes eddy writes for a small record equal, field for field, an
// encoding built by hand from the Confluent wire format and the Avro
// binary spec: magic byte 0, the 4-byte big-endian schema id, then each
// field (strings as a zig-zag varint length and the bytes, ints and longs as
// zig-zag varints).
func TestWireFormatMatchesHandEncoding(t *testing.T) {
	reg, mock := mockRegistry()
	const schema = `{"type":"record","name":"Small","namespace":"eddy.test","fields":[
		{"name":"name","type":"string"},{"name":"n","type":"int"},{"name":"big","type":"long"}]}`
	if _, err := mock.SetSchema(258, "t-value", schema, srclient.Avro, 1); err != nil {
		t.Fatal(err)
	}
	type small struct {
		Name string `avro:"name"`
		N    int32  `avro:"n"`
		Big  int64  `avro:"big"`
	}
	s, err := avro.New[small](reg, schema, avro.UseSchemaID(258))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Serialize("t", small{Name: "ab", N: 3, Big: -2})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x00,                   // magic byte
		0x00, 0x00, 0x01, 0x02, // schema id 258, big-endian
		0x04, 'a', 'b', // "ab": length 2 → zig-zag 4
		0x06, // int 3 → zig-zag 6
		0x03, // long -2 → zig-zag 3
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("wire bytes\n got  % x\n want % x", got, want)
	}
	back, err := s.Deserialize("t", want)
	if err != nil || back != (small{"ab", 3, -2}) {
		t.Fatalf("decoding the reference bytes: %+v %v", back, err)
	}
}

const paymentSchema = `{"type":"record","name":"Payment","namespace":"eddy.test","fields":[
	{"name":"id","type":"string","logicalType":"uuid"},
	{"name":"amount","type":"double"},
	{"name":"count","type":"int"},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
	{"name":"note","type":["null","string"],"default":null},
	{"name":"tags","type":{"type":"array","items":"string"}},
	{"name":"attrs","type":{"type":"map","values":"long"}},
	{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","SETTLED"]}},
	{"name":"card","type":["null",{"type":"record","name":"Card","fields":[
		{"name":"last4","type":"string"},{"name":"country","type":"string"}]}],"default":null}
]}`

type card struct {
	Last4   string `avro:"last4"`
	Country string `avro:"country"`
}

type payment struct {
	ID     string           `avro:"id"`
	Amount float64          `avro:"amount"`
	Count  int              `avro:"count"`
	At     time.Time        `avro:"at"`
	Price  *big.Rat         `avro:"price"`
	Note   *string          `avro:"note"`
	Tags   []string         `avro:"tags"`
	Attrs  map[string]int64 `avro:"attrs"`
	Status string           `avro:"status"`
	Card   *card            `avro:"card"`
}

func TestTypedRoundTrip(t *testing.T) {
	reg, _ := mockRegistry()
	s, err := avro.New[payment](reg, paymentSchema)
	if err != nil {
		t.Fatal(err)
	}
	note := "first"
	in := payment{
		ID: "0b5e6c3a-4f1e-4c2b-9a57-3d9f0c2b7e11", Amount: 12.5, Count: 3,
		At: time.UnixMilli(1_700_000_000_123).UTC(), Price: big.NewRat(1999, 100), Note: &note,
		Tags: []string{"a", "b"}, Attrs: map[string]int64{"x": 1}, Status: "SETTLED",
		Card: &card{Last4: "4242", Country: "DE"},
	}
	b, err := s.Serialize("payments", in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Deserialize("payments", b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Price.Cmp(in.Price) != 0 {
		t.Fatalf("price %v, want %v", out.Price, in.Price)
	}
	out.Price = in.Price
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip\n in  %+v\n out %+v", in, out)
	}
	// Nulls in unions are nil pointers.
	in.Note, in.Card = nil, nil
	b, _ = s.Serialize("payments", in)
	out, err = s.Deserialize("payments", b)
	if err != nil || out.Note != nil || out.Card != nil {
		t.Fatalf("null unions: %+v %v", out, err)
	}
}

func TestGenericRoundTrip(t *testing.T) {
	reg, _ := mockRegistry()
	s, err := avro.New[map[string]any](reg, `{"type":"record","name":"G","fields":[
		{"name":"a","type":"long"},{"name":"b","type":["null","string"],"default":null},
		{"name":"c","type":{"type":"array","items":"int"}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Serialize("g", map[string]any{"a": int64(7), "b": "x", "c": []any{int32(1), int32(2)}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Deserialize("g", b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": int64(7), "b": "x", "c": []any{int32(1), int32(2)}}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("generic round trip: %#v, want %#v", out, want)
	}
}

const v1 = `{"type":"record","name":"Order","namespace":"eddy.test","fields":[
	{"name":"id","type":"string"},{"name":"qty","type":"int"},{"name":"price","type":"float"},
	{"name":"legacy","type":"string","default":"-"}]}`

const v2 = `{"type":"record","name":"Order","namespace":"eddy.test","fields":[
	{"name":"id","type":"string"},{"name":"qty","type":"long"},{"name":"price","type":"double"},
	{"name":"currency","type":"string","default":"EUR"},
	{"name":"coupon","type":["null","string"],"default":null}]}`

type orderV1 struct {
	ID     string  `avro:"id"`
	Qty    int32   `avro:"qty"`
	Price  float32 `avro:"price"`
	Legacy string  `avro:"legacy"`
}

type orderV2 struct {
	ID       string  `avro:"id"`
	Qty      int64   `avro:"qty"`
	Price    float64 `avro:"price"`
	Currency string  `avro:"currency"`
	Coupon   *string `avro:"coupon"`
}

// One reader reads old and new versions of a record in one topic: fields
// added with defaults are filled, removed fields dropped, int promoted to
// long and float to double — and back, the old reader reads new data.
func TestSchemaResolution(t *testing.T) {
	reg, _ := mockRegistry()
	w1, err := avro.New[orderV1](reg, v1)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := avro.New[orderV2](reg, v2)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := w1.Serialize("orders", orderV1{ID: "o1", Qty: 2, Price: 1.5, Legacy: "old"})
	coupon := "SAVE"
	neu, _ := w2.Serialize("orders", orderV2{ID: "o2", Qty: 5_000_000_000, Price: 2.25, Currency: "USD", Coupon: &coupon})

	got, err := w2.Deserialize("orders", old)
	if err != nil {
		t.Fatal(err)
	}
	if got != (orderV2{ID: "o1", Qty: 2, Price: 1.5, Currency: "EUR"}) {
		t.Fatalf("v1 record read as v2: %+v", got)
	}
	got, err = w2.Deserialize("orders", neu)
	if err != nil || got.Currency != "USD" || *got.Coupon != "SAVE" || got.Qty != 5_000_000_000 {
		t.Fatalf("v2 record read as v2: %+v %v", got, err)
	}
	// A v2 record read as v1: qty long → int is not a promotion Avro allows.
	if _, err := w1.Deserialize("orders", neu); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("v2 read as v1 should fail (long cannot become int): %v", err)
	}
}

func TestSubjects(t *testing.T) {
	reg, _ := mockRegistry()
	cases := []struct {
		opts []avro.Option
		want string
	}{
		{nil, "orders-value"},
		{[]avro.Option{avro.ForKeys()}, "orders-key"},
		{[]avro.Option{avro.WithSubjectStrategy(avro.RecordName)}, "eddy.test.Order"},
		{[]avro.Option{avro.WithSubjectStrategy(avro.TopicRecordName)}, "orders-eddy.test.Order"},
	}
	for _, c := range cases {
		s, err := avro.New[orderV1](reg, v1, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Subject("orders"); got != c.want {
			t.Errorf("subject %q, want %q", got, c.want)
		}
	}
}

func TestBadInputIsAClearError(t *testing.T) {
	reg, _ := mockRegistry()
	s, err := avro.New[orderV1](reg, v1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deserialize("orders", []byte{1, 0, 0, 0, 1, 2}); !errors.Is(err, avro.ErrWireFormat) || !strings.Contains(err.Error(), "magic byte 1") {
		t.Fatalf("wrong magic byte: %v", err)
	}
	if _, err := s.Deserialize("orders", []byte{0, 0}); !errors.Is(err, avro.ErrWireFormat) {
		t.Fatalf("short input: %v", err)
	}
	if _, err := s.Deserialize("orders", []byte{0, 0, 0, 0x30, 0x39, 2}); err == nil || !strings.Contains(err.Error(), "schema id 12345") {
		t.Fatalf("unknown schema id: %v", err)
	}
	type wrong struct {
		ID int `avro:"id"`
	}
	if _, err := avro.New[wrong](reg, v1); err == nil || !strings.Contains(err.Error(), "cannot hold Avro string") {
		t.Fatalf("mismatched Go type: %v", err)
	}
}

// flaky fails every registry call while down is set.
type flaky struct {
	srclient.ISchemaRegistryClient
	down bool
	gets int
}

func (f *flaky) GetSchema(id int) (*srclient.Schema, error) {
	f.gets++
	if f.down {
		return nil, errors.New("registry unreachable")
	}
	return f.ISchemaRegistryClient.GetSchema(id)
}

func (f *flaky) CreateSchema(subject, schema string, st srclient.SchemaType, refs ...srclient.Reference) (*srclient.Schema, error) {
	if f.down {
		return nil, errors.New("registry unreachable")
	}
	return f.ISchemaRegistryClient.CreateSchema(subject, schema, st, refs...)
}

// After the first record of a schema no registry call is made: an outage
// does not stop known schemas; an unknown one is a clear error.
func TestRegistryOutageAfterWarmUp(t *testing.T) {
	f := &flaky{ISchemaRegistryClient: srclient.CreateMockSchemaRegistryClient("mock://")}
	reg := avro.NewRegistryWithClient(f)
	w, _ := avro.New[orderV1](reg, v1)
	r, _ := avro.New[orderV2](reg, v2)
	b, err := w.Serialize("orders", orderV1{ID: "o1", Qty: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Deserialize("orders", b); err != nil {
		t.Fatal(err)
	}
	f.down = true
	gets := f.gets
	for range 100 {
		if _, err := w.Serialize("orders", orderV1{ID: "o2", Qty: 2}); err != nil {
			t.Fatalf("writing a known subject during an outage: %v", err)
		}
		if _, err := r.Deserialize("orders", b); err != nil {
			t.Fatalf("reading a known schema during an outage: %v", err)
		}
	}
	if f.gets != gets {
		t.Fatalf("%d registry lookups after warm-up", f.gets-gets)
	}
	if _, err := w.Serialize("other-topic", orderV1{}); err == nil || !strings.Contains(err.Error(), "registry unreachable") {
		t.Fatalf("a cold subject during an outage: %v", err)
	}
}
