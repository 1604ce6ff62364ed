package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/internal/testpb"
	"github.com/eddy-go/eddy/internal/testpb/money"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
)

func realRegistryClient(t *testing.T) (*registry.Client, string) {
	t.Helper()
	url := kafkatest.SchemaRegistry(t)
	reg, err := registry.New(registry.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return reg, url
}

// allKinds is a testpb.All with every field set: each scalar kind (with
// values at their edges), an enum, nested and repeated messages, maps, a
// oneof, well-known types, an imported message and a proto3 optional.
func allKinds(i int) *testpb.All {
	deep := &testpb.All_Inner_Deep{Colors: []testpb.Color{testpb.Color_COLOR_RED, testpb.Color_COLOR_GREEN}, Level: -int64(i) - 1}
	m := &testpb.All{
		FDouble: math.Pi * float64(i), FFloat: -1.5, FInt32: math.MinInt32, FInt64: math.MaxInt64,
		FUint32: math.MaxUint32, FUint64: math.MaxUint64, FSint32: -7, FSint64: math.MinInt64,
		FFixed32: 42, FFixed64: 1 << 40, FSfixed32: -42, FSfixed64: -(1 << 40),
		FBool: true, FString: fmt.Sprintf("grüße %d", i), FBytes: []byte{0, 1, 2, 0xff},
		Color:   testpb.Color_COLOR_GREEN,
		Inner:   &testpb.All_Inner{Name: "inner", Deep: deep},
		Inners:  []*testpb.All_Inner{{Name: "a"}, {Name: "b", Deep: deep}},
		Numbers: []int64{1, -1, math.MaxInt64}, Tags: []string{"x", "", "z"},
		Counts: map[string]int64{"a": 1, "b": -2},
		ById:   map[int32]*testpb.All_Inner{7: {Name: "seven"}, -1: {Name: "minus one"}},
		At:     timestamppb.New(time.Date(2026, 12, 7, 4, 30, 0, 123456789, time.UTC)),
		Took:   durationpb.New(1500 * time.Millisecond),
		Maybe:  wrapperspb.String("present"),
		Price:  &money.Money{Currency: "EUR", Units: 12, Nanos: 500_000_000},
		Opt:    proto.Int32(0),
	}
	switch i % 3 {
	case 0:
		m.Choice = &testpb.All_ChoiceText{ChoiceText: "text"}
	case 1:
		m.Choice = &testpb.All_ChoiceNumber{ChoiceNumber: int64(i)}
	default:
		m.Choice = &testpb.All_ChoiceInner{ChoiceInner: &testpb.All_Inner{Name: "chosen"}}
	}
	return m
}

// Every Protobuf field kind round-trips through the real registry: the
// message's file registers under "<topic>-value" with its import
// (eddytest/money.proto) as a reference, well-known types unregistered; the
// record's message indexes say where the message is in its file (All is
// the second message: [1]; Inner.Deep is nested: [1,2,0]; First: the single
// byte 0); a dynamic serde reads the same records from the writer schema.
func TestProtobufRoundTripsEveryKind(t *testing.T) {
	reg, url := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "pb-all")
	all, err := protobuf.New[*testpb.All](reg, protobuf.RegisterFor(topic))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := protobuf.NewDynamic(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		in := allKinds(i)
		b, err := all.Serialize(topic, in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[5:7], []byte{2, 2}) {
			t.Fatalf("message indexes of All: % x, want 02 02 (one index, 1)", b[5:7])
		}
		out, err := all.Deserialize(topic, b)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(in, out) {
			t.Fatalf("round trip changed the message:\n in: %v\nout: %v", in, out)
		}
		d, err := dyn.Deserialize(topic, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := d.(*dynamicpb.Message); !ok {
			t.Fatalf("dynamic serde returned a %T", d)
		}
		same, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(in)
		if !bytes.Equal(same, want) {
			t.Fatalf("the dynamic serde read a different message: %v", d)
		}
		// Written back by the dynamic serde under its own descriptor (the
		// writer schema's), it reads as the same All.
		again, err := dyn.Serialize(topic+"-dyn", d)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := all.Deserialize(topic+"-dyn", again); err != nil || !proto.Equal(back, in) {
			t.Fatalf("dynamic write read back as %v, %v", back, err)
		}
	}

	// The registry holds the file and its reference.
	sr := rawRegistry(t, url)
	latest, err := sr.Latest(topic + "-value")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Type != registry.Protobuf || !strings.Contains(latest.Text, "message All") ||
		len(latest.References) != 1 || latest.References[0].Name != "eddytest/money.proto" || !strings.Contains(latest.References[0].Subject, "money.proto") {
		t.Fatalf("registered schema: type %s, references %+v, text:\n%s", latest.Type, latest.References, latest.Text)
	}

	// A nested message as the record: indexes [1,0,0], subject by record
	// name; the file's first message: the single byte 0.
	deep, err := protobuf.New[*testpb.All_Inner_Deep](reg, protobuf.WithSubjectStrategy(registry.TopicRecordName))
	if err != nil {
		t.Fatal(err)
	}
	if got := deep.Subject(topic, (&testpb.All_Inner_Deep{}).ProtoReflect().Descriptor()); got != topic+"-eddytest.All.Inner.Deep" {
		t.Fatalf("TopicRecordName subject %q", got)
	}
	in := &testpb.All_Inner_Deep{Colors: []testpb.Color{testpb.Color_COLOR_RED}, Level: -3}
	b, err := deep.Serialize(topic, in)
	if err != nil {
		t.Fatal(err)
	}
	// Inner is All's third nested message: the map entries CountsEntry
	// and ByIdEntry come first, as in the descriptor.
	if !bytes.Equal(b[5:9], []byte{6, 2, 4, 0}) {
		t.Fatalf("message indexes of All.Inner.Deep: % x, want 06 02 04 00 ([1,2,0])", b[5:9])
	}
	if out, err := deep.Deserialize(topic, b); err != nil || !proto.Equal(in, out) {
		t.Fatalf("nested round trip: %v, %v", out, err)
	}
	first, err := protobuf.New[*testpb.First](reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err = first.Serialize(topic+"-first", &testpb.First{Note: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if b[5] != 0 || b[6] != 0x0a {
		t.Fatalf("first message: % x, want the single index byte 0 then the message", b)
	}
	// A record of another message is refused by a typed serde, by name.
	if _, err := all.Deserialize(topic, b); err == nil || !strings.Contains(err.Error(), "holds a eddytest.First") {
		t.Fatalf("reading a First as an All: %v", err)
	}
}

// rawRegistry is a registry client of its own, for looking at what the
// serdes registered.
func rawRegistry(t *testing.T, url string) *registry.Client {
	t.Helper()
	c, err := registry.New(registry.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// compileProto compiles .proto source into its message name.
func compileProto(t *testing.T, src, message string) protoreflect.MessageDescriptor {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"reading.proto": src})})}
	files, err := c.Compile(context.Background(), "reading.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].Messages().ByName(protoreflect.Name(message))
	if md == nil {
		t.Fatalf("no message %s", message)
	}
	return md
}

const readingV1 = `syntax = "proto3"; package evo; message Reading { string id = 1; double value = 2; }`
const readingV2 = `syntax = "proto3"; package evo; message Reading { string id = 1; double value = 2; string unit = 3; }`

// v3 changes field 2's type: incompatible.
const readingV3 = `syntax = "proto3"; package evo; message Reading { string id = 1; string value = 2; string unit = 3; }`

// Evolution: a consumer on v1 reads v2's records (the new field is kept
// as unknown) and a consumer on v2 reads v1's (the new field is empty);
// the registry refuses an incompatible v3 when the serde is created, with
// its own message.
func TestProtobufEvolutionAndCompatibility(t *testing.T) {
	reg, _ := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "pb-evo")
	v1, v2, v3 := compileProto(t, readingV1, "Reading"), compileProto(t, readingV2, "Reading"), compileProto(t, readingV3, "Reading")
	s1, err := protobuf.NewDynamic(reg, v1, protobuf.RegisterFor(topic))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := protobuf.NewDynamic(reg, v2, protobuf.RegisterFor(topic))
	if err != nil {
		t.Fatalf("a compatible v2 was refused: %v", err)
	}
	r1 := dynamicpb.NewMessage(v1)
	r1.Set(v1.Fields().ByName("id"), protoreflect.ValueOfString("r1"))
	r1.Set(v1.Fields().ByName("value"), protoreflect.ValueOfFloat64(1.5))
	r2 := dynamicpb.NewMessage(v2)
	r2.Set(v2.Fields().ByName("id"), protoreflect.ValueOfString("r2"))
	r2.Set(v2.Fields().ByName("value"), protoreflect.ValueOfFloat64(2.5))
	r2.Set(v2.Fields().ByName("unit"), protoreflect.ValueOfString("kWh"))
	b1, err := s1.Serialize(topic, r1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := s2.Serialize(topic, r2)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(b1[1:5], b2[1:5]) {
		t.Fatal("v1 and v2 records carry the same schema id")
	}
	old, err := s1.Deserialize(topic, b2) // old reader, new record
	if err != nil {
		t.Fatal(err)
	}
	om := old.ProtoReflect()
	if om.Get(v1.Fields().ByName("value")).Float() != 2.5 || len(om.GetUnknown()) == 0 {
		t.Fatalf("v1 reader on a v2 record: %v (unknown %d bytes)", old, len(om.GetUnknown()))
	}
	newer, err := s2.Deserialize(topic, b1) // new reader, old record
	if err != nil {
		t.Fatal(err)
	}
	nm := newer.ProtoReflect()
	if nm.Get(v2.Fields().ByName("id")).String() != "r1" || nm.Get(v2.Fields().ByName("unit")).String() != "" {
		t.Fatalf("v2 reader on a v1 record: %v", newer)
	}
	_, err = protobuf.NewDynamic(reg, v3, protobuf.RegisterFor(topic))
	var ie *registry.IncompatibleError
	if !errors.As(err, &ie) || ie.Subject != topic+"-value" || ie.Reason == "" {
		t.Fatalf("an incompatible v3 was not refused at registration: %v", err)
	}
	t.Logf("v3 refused: %v", err)
}
