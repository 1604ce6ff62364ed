package protobuf_test

import (
	"testing"

	"github.com/eddy-go/eddy/internal/testpb"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
)

// The ten-field record of serde/avro's benchmarks, as a generated message.
var tenValue = &testpb.Ten{Id: "p-123456", Account: "acc-42", Amount: 99.95, Count: 3, Ts: 1_700_000_000_000,
	Country: "DE", Device: "ios-17", Flagged: true, Score: 0.75}

func BenchmarkEncodeTyped(b *testing.B) {
	s, err := protobuf.New[*testpb.Ten](registry.NewInMemory())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Serialize("t", tenValue); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTyped(b *testing.B) {
	s, err := protobuf.New[*testpb.Ten](registry.NewInMemory())
	if err != nil {
		b.Fatal(err)
	}
	data, _ := s.Serialize("t", tenValue)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Deserialize("t", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDynamic(b *testing.B) {
	reg := registry.NewInMemory()
	s, _ := protobuf.New[*testpb.Ten](reg)
	data, _ := s.Serialize("t", tenValue)
	d, err := protobuf.NewDynamic(reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Deserialize("t", data); err != nil {
			b.Fatal(err)
		}
	}
}
