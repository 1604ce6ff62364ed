package avro_test

import (
	"testing"

	"github.com/eddy-go/eddy/serde/avro"
)

const tenFields = `{"type":"record","name":"Ten","namespace":"eddy.bench","fields":[
	{"name":"id","type":"string"},{"name":"account","type":"string"},{"name":"amount","type":"double"},
	{"name":"count","type":"int"},{"name":"ts","type":"long"},{"name":"country","type":"string"},
	{"name":"device","type":"string"},{"name":"flagged","type":"boolean"},
	{"name":"note","type":["null","string"],"default":null},{"name":"score","type":"float"}]}`

type ten struct {
	ID      string  `avro:"id"`
	Account string  `avro:"account"`
	Amount  float64 `avro:"amount"`
	Count   int32   `avro:"count"`
	TS      int64   `avro:"ts"`
	Country string  `avro:"country"`
	Device  string  `avro:"device"`
	Flagged bool    `avro:"flagged"`
	Note    *string `avro:"note"`
	Score   float32 `avro:"score"`
}

var tenValue = ten{ID: "p-123456", Account: "acc-42", Amount: 99.95, Count: 3, TS: 1_700_000_000_000,
	Country: "DE", Device: "ios-17", Flagged: true, Score: 0.75}

var tenGeneric = map[string]any{"id": "p-123456", "account": "acc-42", "amount": 99.95, "count": int32(3),
	"ts": int64(1_700_000_000_000), "country": "DE", "device": "ios-17", "flagged": true, "note": nil, "score": float32(0.75)}

func BenchmarkEncodeTyped(b *testing.B) {
	reg, _ := mockRegistry()
	s, _ := avro.New[ten](reg, tenFields)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Serialize("t", tenValue); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTyped(b *testing.B) {
	reg, _ := mockRegistry()
	s, _ := avro.New[ten](reg, tenFields)
	data, _ := s.Serialize("t", tenValue)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Deserialize("t", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeGeneric(b *testing.B) {
	reg, _ := mockRegistry()
	s, _ := avro.New[map[string]any](reg, tenFields)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Serialize("t", tenGeneric); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeGeneric(b *testing.B) {
	reg, _ := mockRegistry()
	s, _ := avro.New[map[string]any](reg, tenFields)
	data, _ := s.Serialize("t", tenGeneric)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Deserialize("t", data); err != nil {
			b.Fatal(err)
		}
	}
}
