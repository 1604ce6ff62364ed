package avro_test

import (
	"encoding/binary"
	"math/big"
	"strings"
	"testing"

	"github.com/riferrei/srclient"

	"github.com/eddy-go/eddy/serde/avro"
)

// paymentV2 is paymentSchema evolved as a reader: count promoted to long,
// the attrs map's values to double, a field added with a default, an enum
// symbol added.
const paymentV2 = `{"type":"record","name":"Payment","namespace":"eddy.test","fields":[
	{"name":"id","type":"string","logicalType":"uuid"},
	{"name":"amount","type":"double"},
	{"name":"count","type":"long"},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
	{"name":"note","type":["null","string"],"default":null},
	{"name":"tags","type":{"type":"array","items":"string"}},
	{"name":"attrs","type":{"type":"map","values":"double"}},
	{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","SETTLED","REFUNDED"]}},
	{"name":"card","type":["null",{"type":"record","name":"Card","fields":[
		{"name":"last4","type":"string"},{"name":"country","type":"string"}]}],"default":null},
	{"name":"region","type":"string","default":"eu"}
]}`

type paymentV2Go struct {
	payment
	Count  int64              `avro:"count"`
	Attrs  map[string]float64 `avro:"attrs"`
	Region string             `avro:"region"`
}

// Avro records come from other producers: whatever follows the wire
// format's header, reading it with the writer's schema (id 1) into the
// writer's type, and resolved to an evolved reader schema and type, gives
// a value or an error — never a panic — and a record that reads in the
// writer's type writes back to bytes that read again (Avro's encoding is
// not canonical: the same record has other encodings).
func FuzzAvroDeserialize(f *testing.F) {
	mock := srclient.CreateMockSchemaRegistryClient("mock://")
	if _, err := mock.SetSchema(1, "payments-value", paymentSchema, srclient.Avro, 1); err != nil {
		f.Fatal(err)
	}
	reg := avro.NewRegistryWithClient(mock)
	writer, err := avro.New[payment](reg, paymentSchema, avro.UseSchemaID(1))
	if err != nil {
		f.Fatal(err)
	}
	reader, err := avro.New[paymentV2Go](reg, paymentV2, avro.UseSchemaID(1))
	if err != nil {
		f.Fatal(err)
	}
	header := binary.BigEndian.AppendUint32([]byte{0}, 1)
	note := "n"
	for _, p := range []payment{{Status: "NEW", Price: big.NewRat(0, 1)}, {ID: "x", Price: big.NewRat(-1999, 100), Amount: 1.5, Count: -3, Note: &note, Tags: []string{"a", ""}, Attrs: map[string]int64{"k": 9},
		Status: "SETTLED", Card: &card{Last4: "4242", Country: "DE"}}} {
		b, err := writer.Serialize("payments", p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[5:])
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}) // a huge length
	f.Fuzz(func(t *testing.T, body []byte) {
		data := append(append([]byte(nil), header...), body...)
		p, err := writer.Deserialize("payments", data)
		if err == nil {
			if p.Price == nil {
				return // a decimal of no bytes reads as nil, which writes nothing
			}
			out, err := writer.Serialize("payments", p)
			if err != nil {
				t.Fatalf("% x read as %+v, which does not write: %v", body, p, err)
			}
			if _, err := writer.Deserialize("payments", out); err != nil {
				t.Fatalf("% x read as %+v, written as % x, which does not read: %v", body, p, out, err)
			}
		}
		_, _ = reader.Deserialize("payments", data)
	})
}

// A block count larger than the bytes left could hold is refused before
// the codec sizes a map or slice by it (a fuzzer's 40-byte record asked
// for hundreds of millions of map entries: seconds and gigabytes).
func TestHugeBlockCountsAreRefused(t *testing.T) {
	mock := srclient.CreateMockSchemaRegistryClient("mock://")
	if _, err := mock.SetSchema(1, "payments-value", paymentSchema, srclient.Avro, 1); err != nil {
		t.Fatal(err)
	}
	writer, err := avro.New[payment](avro.NewRegistryWithClient(mock), paymentSchema, avro.UseSchemaID(1))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("\x000000000000\x00\x00\x00\x9bīp\xe3\xe7/\xe2\x94\x18\xca")
	_, err = writer.Deserialize("payments", append(binary.BigEndian.AppendUint32([]byte{0}, 1), body...))
	if err == nil || !strings.Contains(err.Error(), `field "attrs": a block of`) || !strings.Contains(err.Error(), "bytes left") {
		t.Fatalf("Deserialize = %v, want the attrs map's block count refused", err)
	}
}
