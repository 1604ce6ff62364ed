package jsonschema_test

import (
	"testing"

	"github.com/eddy-go/eddy/serde/jsonschema"
	"github.com/eddy-go/eddy/serde/registry"
)

// The ten-field record of serde/avro's benchmarks, as a JSON struct.
type ten struct {
	ID      string  `json:"id"`
	Account string  `json:"account"`
	Amount  float64 `json:"amount"`
	Count   int32   `json:"count"`
	TS      int64   `json:"ts"`
	Country string  `json:"country"`
	Device  string  `json:"device"`
	Flagged bool    `json:"flagged"`
	Note    *string `json:"note,omitempty"`
	Score   float32 `json:"score"`
}

var tenValue = ten{ID: "p-123456", Account: "acc-42", Amount: 99.95, Count: 3, TS: 1_700_000_000_000,
	Country: "DE", Device: "ios-17", Flagged: true, Score: 0.75}

func bench(b *testing.B, decode bool, opts ...jsonschema.Option) {
	s, err := jsonschema.New[ten](registry.NewInMemory(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	data, err := s.Serialize("t", tenValue)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if decode {
			_, err = s.Deserialize("t", data)
		} else {
			_, err = s.Serialize("t", tenValue)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B)          { bench(b, false) }
func BenchmarkDecode(b *testing.B)          { bench(b, true) }
func BenchmarkEncodeValidated(b *testing.B) { bench(b, false, jsonschema.Validate()) }
func BenchmarkDecodeValidated(b *testing.B) { bench(b, true, jsonschema.Validate()) }
