package protobuf_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eddy-go/eddy/internal/testpb"
	"github.com/eddy-go/eddy/internal/testpb/money"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
)

func sample() *testpb.All {
	return &testpb.All{FString: "s", FSint64: -5, Color: testpb.Color_COLOR_RED,
		Inner:  &testpb.All_Inner{Name: "n", Deep: &testpb.All_Inner_Deep{Level: 3}},
		Counts: map[string]int64{"a": 1}, Choice: &testpb.All_ChoiceNumber{ChoiceNumber: 7},
		At: timestamppb.New(timestamppb.Now().AsTime()), Price: &money.Money{Currency: "EUR", Units: 1}}
}

// Typed, dynamic, latest-schema and pinned-id serdes agree on the same
// bytes; the import is registered as a reference under its path.
func TestWriteModesAndReaders(t *testing.T) {
	reg := registry.NewInMemory()
	s, err := protobuf.New[*testpb.All](reg, protobuf.RegisterFor("t"))
	if err != nil {
		t.Fatal(err)
	}
	in := sample()
	b, err := s.Serialize("t", in)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := protobuf.New[*testpb.All](reg, protobuf.UseLatestSchema())
	if err != nil {
		t.Fatal(err)
	}
	bl, err := latest.Serialize("t", in)
	if err != nil || string(bl) != string(b) {
		t.Fatalf("latest-schema serde wrote % x, %v; want % x", bl, err, b)
	}
	pinned, _ := protobuf.New[*testpb.All](reg, protobuf.UseSchemaID(int(b[4])))
	if bp, err := pinned.Serialize("other-topic", in); err != nil || string(bp) != string(b) {
		t.Fatalf("pinned-id serde wrote % x, %v; want % x", bp, err, b)
	}
	if _, err := protobuf.New[*testpb.All](reg, protobuf.UseLatestSchema(), protobuf.RegisterFor("nothing-there")); err == nil {
		t.Fatal("UseLatestSchema on a subject with no schema: no error")
	}
	out, err := s.Deserialize("t", b)
	if err != nil || !proto.Equal(in, out) {
		t.Fatalf("typed read %v, %v", out, err)
	}
	d, _ := protobuf.NewDynamic(reg, nil)
	dm, err := d.Deserialize("t", b)
	if err != nil {
		t.Fatal(err)
	}
	if got := dm.ProtoReflect().Descriptor().FullName(); got != "eddytest.All" {
		t.Fatalf("dynamic read a %s", got)
	}
	ref, err := reg.Latest("eddytest/money.proto")
	if err != nil || !strings.Contains(ref.Text, "message Money") {
		t.Fatalf("reference subject: %+v, %v", ref, err)
	}
	if _, err := protobuf.New[*testpb.First](reg, protobuf.ForKeys(), protobuf.RegisterFor("t")); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Latest("t-key"); err != nil {
		t.Fatalf("ForKeys did not register t-key: %v", err)
	}
}

// Bytes that are not a record of the serde's message are errors that say
// so, never panics.
func TestBadBytes(t *testing.T) {
	reg := registry.NewInMemory()
	s, _ := protobuf.New[*testpb.All](reg)
	good, _ := s.Serialize("t", sample())
	for name, b := range map[string][]byte{
		"empty":           nil,
		"wrong magic":     append([]byte{1}, good[1:]...),
		"unknown id":      append([]byte{0, 0, 0, 0, 99}, good[5:]...),
		"index past end":  append(append([]byte{}, good[:5]...), 2, 40, 0),
		"no indexes":      good[:5],
		"broken message":  append(append([]byte{}, good[:7]...), 0x0a, 0xff),
		"other message":   nil, // filled below
		"a JSON document": []byte(`{"f_string":"s"}`),
	} {
		if name == "other message" {
			f, _ := protobuf.New[*testpb.First](reg)
			b, _ = f.Serialize("t", &testpb.First{Note: "x"})
		}
		if _, err := s.Deserialize("t", b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := s.Deserialize("t", []byte{2}); !errors.Is(err, registry.ErrWireFormat) {
		t.Fatalf("short: %v", err)
	}
}

func FuzzDeserialize(f *testing.F) {
	reg := registry.NewInMemory()
	s, _ := protobuf.New[*testpb.All](reg)
	d, _ := protobuf.NewDynamic(reg, nil)
	good, _ := s.Serialize("t", sample())
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		s.Deserialize("t", b)
		d.Deserialize("t", b)
	})
}
