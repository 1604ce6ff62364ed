package serde_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/eddy-go/eddy/serde"
)

// The encodings of Kafka's Java serializers, byte for byte.
func TestKafkaEncodings(t *testing.T) {
	cases := []struct {
		name string
		got  func() ([]byte, error)
		want []byte
	}{
		{"string", func() ([]byte, error) { return serde.String().Serialize("t", "héllo") }, []byte("h\xc3\xa9llo")},
		{"int32 -1", func() ([]byte, error) { return serde.Int32().Serialize("t", -1) }, []byte{0xff, 0xff, 0xff, 0xff}},
		{"int32 258", func() ([]byte, error) { return serde.Int32().Serialize("t", 258) }, []byte{0, 0, 1, 2}},
		{"int64 42", func() ([]byte, error) { return serde.Int64().Serialize("t", 42) }, []byte{0, 0, 0, 0, 0, 0, 0, 42}},
		{"int64 min", func() ([]byte, error) { return serde.Int64().Serialize("t", math.MinInt64) }, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
		{"float64 1.5", func() ([]byte, error) { return serde.Float64().Serialize("t", 1.5) }, []byte{0x3f, 0xf8, 0, 0, 0, 0, 0, 0}},
		{"bytes", func() ([]byte, error) { return serde.Bytes().Serialize("t", []byte{1, 2}) }, []byte{1, 2}},
	}
	for _, c := range cases {
		got, err := c.got()
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: % x, %v; want % x", c.name, got, err, c.want)
		}
	}
}

func TestRoundTrips(t *testing.T) {
	i32 := serde.Int32()
	for _, v := range []int32{0, 1, -1, math.MaxInt32, math.MinInt32} {
		b, _ := i32.Serialize("t", v)
		if got, err := i32.Deserialize("t", b); err != nil || got != v {
			t.Errorf("int32 %d -> %d %v", v, got, err)
		}
	}
	f := serde.Float64()
	for _, v := range []float64{0, -0.5, math.Inf(1), math.MaxFloat64} {
		b, _ := f.Serialize("t", v)
		if got, err := f.Deserialize("t", b); err != nil || got != v {
			t.Errorf("float64 %v -> %v %v", v, got, err)
		}
	}
	type order struct {
		ID    string   `json:"id"`
		Items []string `json:"items"`
	}
	j := serde.JSON[order]()
	b, _ := j.Serialize("t", order{"o1", []string{"tea"}})
	if got, err := j.Deserialize("t", b); err != nil || got.ID != "o1" || got.Items[0] != "tea" {
		t.Errorf("json round trip: %+v %v", got, err)
	}
}

func TestWrongSizesAreErrors(t *testing.T) {
	if _, err := serde.Int64().Deserialize("t", []byte{1, 2, 3}); !errors.Is(err, serde.ErrSize) {
		t.Errorf("int64 of 3 bytes: %v", err)
	}
	if _, err := serde.Int32().Deserialize("t", nil); !errors.Is(err, serde.ErrSize) {
		t.Errorf("int32 of nothing: %v", err)
	}
	if _, err := serde.Float64().Deserialize("t", make([]byte, 9)); !errors.Is(err, serde.ErrSize) {
		t.Errorf("float64 of 9 bytes: %v", err)
	}
}

func TestErrorSaysWhere(t *testing.T) {
	inner := errors.New("bad")
	e := &serde.Error{Op: "deserialize", Topic: "orders", Partition: 3, Offset: 17, IsKey: true, Err: inner}
	msg := e.Error()
	for _, w := range []string{"deserialize key", `topic "orders"`, "partition 3", "offset 17", "bad"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q lacks %q", msg, w)
		}
	}
	if !errors.Is(e, inner) {
		t.Error("Unwrap lost the cause")
	}
}

func ExampleInt64() {
	s := serde.Int64()
	b, _ := s.Serialize("counts", 42)
	n, _ := s.Deserialize("counts", b)
	fmt.Printf("% x -> %d\n", b, n)
	// Output: 00 00 00 00 00 00 00 2a -> 42
}

func ExampleJSON() {
	type payment struct {
		Account string  `json:"account"`
		Amount  float64 `json:"amount"`
	}
	s := serde.JSON[payment]()
	b, _ := s.Serialize("payments", payment{"acc-1", 9.5})
	fmt.Println(string(b))
	// Output: {"account":"acc-1","amount":9.5}
}
