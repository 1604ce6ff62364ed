package integration_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/internal/testpb"
	"github.com/eddy-go/eddy/serde/jsonschema"
	"github.com/eddy-go/eddy/serde/protobuf"
)

// confluentPython runs interop/confluent.py (Confluent's own Python
// serializers, from scripts/confluent-python.sh) on req and returns its
// answer.
func confluentPython(t *testing.T, req map[string]any) (decoded []any, encoded [][]byte) {
	t.Helper()
	python := os.Getenv("EDDY_CONFLUENT_PYTHON")
	if python == "" {
		if os.Getenv("EDDY_REQUIRE_REAL_SERVICES") != "" {
			t.Fatal("EDDY_CONFLUENT_PYTHON is not set: make test sets it (scripts/confluent-python.sh)")
		}
		t.Skip("needs Confluent's Python client: eval \"$(scripts/confluent-python.sh up && scripts/confluent-python.sh env)\"")
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "interop/confluent.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("confluent.py: %v\n%s", err, stderr.String())
	}
	var answer struct {
		Decoded []any    `json:"decoded"`
		Encoded []string `json:"encoded"`
	}
	if err := json.Unmarshal(out, &answer); err != nil {
		t.Fatalf("confluent.py answered %q: %v", out, err)
	}
	for _, h := range answer.Encoded {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, b)
	}
	return answer.Decoded, encoded
}

// descriptorSet is md's file and every file it imports, for Python.
func descriptorSet(md protoreflect.MessageDescriptor) string {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(md.ParentFile())
	b, _ := proto.Marshal(set)
	return base64.StdEncoding.EncodeToString(b)
}

// asJSON is v as generic JSON (for comparing two encoders' output).
func asJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// interopProtobuf checks one message type both ways against Confluent's
// Python serializers: eddy's bytes decode with ProtobufDeserializer to the
// same message, and ProtobufSerializer's bytes (the subject's latest
// schema, the one eddy registered, with the message indexes Python
// computes) decode with eddy's serde to the same message.
func interopProtobuf[T proto.Message](t *testing.T, url, topic string, s *protobuf.Serde[T], msgs []T) {
	t.Helper()
	var md protoreflect.MessageDescriptor
	var hexes []string
	var dicts []any
	for _, m := range msgs {
		md = m.ProtoReflect().Descriptor()
		b, err := s.Serialize(topic, m)
		if err != nil {
			t.Fatal(err)
		}
		hexes = append(hexes, hex.EncodeToString(b))
		j, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		dicts = append(dicts, asJSON(t, j))
	}
	decoded, encoded := confluentPython(t, map[string]any{"registry": url, "topic": topic, "format": "protobuf",
		"descriptors": descriptorSet(md), "message": string(md.FullName()), "decode": hexes, "encode": dicts})
	if len(decoded) != len(msgs) || len(encoded) != len(msgs) {
		t.Fatalf("Python decoded %d and encoded %d of %d messages", len(decoded), len(encoded), len(msgs))
	}
	for i, m := range msgs {
		if !reflect.DeepEqual(decoded[i], dicts[i]) {
			t.Fatalf("%s %d: Python's deserializer read eddy's bytes as\n%v\nwant\n%v", md.FullName(), i, decoded[i], dicts[i])
		}
		got, err := s.Deserialize(topic, encoded[i])
		if err != nil {
			t.Fatalf("%s %d: eddy reading Python's bytes % x: %v", md.FullName(), i, encoded[i][:min(12, len(encoded[i]))], err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("%s %d: eddy read Python's bytes as\n%v\nwant\n%v", md.FullName(), i, got, m)
		}
		wantHeader, _ := hex.DecodeString(hexes[i][:12])
		if !bytes.HasPrefix(encoded[i], wantHeader[:5]) {
			t.Fatalf("%s %d: Python wrote schema header % x, eddy % x", md.FullName(), i, encoded[i][:5], wantHeader[:5])
		}
	}
	t.Logf("%s: %d messages each way, identical", md.FullName(), len(msgs))
}

// Byte-level interoperability with Confluent's Protobuf serializers (the
// official Python client): a message with a schema reference and
// well-known types that is not the first in its file (indexes [1]), a
// message nested two levels ([1,2,0]) and a file's first message ([0]).
func TestProtobufInteropWithConfluentPython(t *testing.T) {
	reg, url := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "pb-interop")
	all, err := protobuf.New[*testpb.All](reg)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*testpb.All
	for i := range 6 {
		msgs = append(msgs, allKinds(i))
	}
	interopProtobuf(t, url, topic, all, msgs)

	deep, err := protobuf.New[*testpb.All_Inner_Deep](reg)
	if err != nil {
		t.Fatal(err)
	}
	interopProtobuf(t, url, topic+"-deep", deep, []*testpb.All_Inner_Deep{{Colors: []testpb.Color{testpb.Color_COLOR_GREEN}, Level: -9}, {}})

	first, err := protobuf.New[*testpb.First](reg)
	if err != nil {
		t.Fatal(err)
	}
	interopProtobuf(t, url, topic+"-first", first, []*testpb.First{{Note: "one"}, {Note: "ünïcode"}})
}

// Byte-level interoperability with Confluent's JSON Schema serializers:
// eddy's records decode with JSONDeserializer (which validates them) to
// the same document, and JSONSerializer's records (schema registered by
// Python) decode with eddy's validating serde to the same order.
func TestJSONSchemaInteropWithConfluentPython(t *testing.T) {
	reg, url := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "js-interop")
	s, err := jsonschema.New[jsOrder](reg, jsonschema.WithSchema(orderSchema), jsonschema.Validate())
	if err != nil {
		t.Fatal(err)
	}
	var hexes []string
	var docs []any
	var orders []jsOrder
	for i := range 6 {
		o := jsOrderN(i)
		b, err := s.Serialize(topic, o)
		if err != nil {
			t.Fatal(err)
		}
		hexes = append(hexes, hex.EncodeToString(b))
		j, _ := json.Marshal(o)
		docs = append(docs, asJSON(t, j))
		orders = append(orders, o)
	}
	decoded, encoded := confluentPython(t, map[string]any{"registry": url, "topic": topic + "-py", "format": "json",
		"schema": orderSchema, "decode": hexes, "encode": docs})
	if len(decoded) != len(orders) || len(encoded) != len(orders) {
		t.Fatalf("Python decoded %d and encoded %d of %d orders", len(decoded), len(encoded), len(orders))
	}
	for i, o := range orders {
		if !reflect.DeepEqual(decoded[i], docs[i]) {
			t.Fatalf("order %d: Python read eddy's bytes as %v, want %v", i, decoded[i], docs[i])
		}
		got, err := s.Deserialize(topic+"-py", encoded[i])
		if err != nil {
			t.Fatalf("order %d: eddy reading Python's bytes: %v", i, err)
		}
		same := got.At.Equal(o.At)
		got.At = o.At
		if !same || !reflect.DeepEqual(got, o) {
			t.Fatalf("order %d: eddy read Python's bytes as %+v, want %+v", i, got, o)
		}
	}
	t.Logf("%d orders each way, identical", len(orders))
}

// JSON schemas with registry references, a chain (the envelope refers to
// the address, the address to the position, each by its "$id" URL, as
// Confluent's serializers name references), on the real registry, both
// ways with validation on: the chain eddy registers (WithReferencedSchema)
// is what Confluent's JSONDeserializer validates eddy's records with, read
// back from the registry; the chain Python registers (its own
// registrations, then JSONSerializer) is what eddy's validating serde reads
// Python's records with. Records equal both ways, and a record breaking
// the last link is refused by both.
func TestJSONSchemaReferenceChainInteropWithConfluentPython(t *testing.T) {
	reg, url := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "js-refs")
	base := "https://eddy.example/" + topic + "/"
	pos := `{"$id": "` + base + `position.json", "type": "object",
  "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}, "lon": {"type": "number"}}, "required": ["lat", "lon"]}`
	addr := `{"$id": "` + base + `address.json", "type": "object",
  "properties": {"city": {"type": "string"}, "at": {"$ref": "` + base + `position.json"}}, "required": ["city"]}`
	env := `{"$id": "` + base + `envelope.json", "title": "Envelope", "type": "object",
  "properties": {"id": {"type": "string"}, "to": {"$ref": "` + base + `address.json"},
    "cc": {"type": "array", "items": {"$ref": "` + base + `address.json"}}}, "required": ["id", "to"]}`

	s, err := jsonschema.New[map[string]any](reg, jsonschema.WithSchema(env), jsonschema.Validate(),
		jsonschema.WithReferencedSchema(base+"position.json", topic+"-position", pos),
		jsonschema.WithReferencedSchema(base+"address.json", topic+"-address", addr))
	if err != nil {
		t.Fatal(err)
	}
	var docs []any
	var hexes []string
	for i := range 4 {
		doc := map[string]any{"id": fmt.Sprint("e", i), "to": map[string]any{"city": "Bern", "at": map[string]any{"lat": 46.9 + float64(i), "lon": 7.4}},
			"cc": []any{map[string]any{"city": "Basel"}}}
		b, err := s.Serialize(topic, doc)
		if err != nil {
			t.Fatal(err)
		}
		hexes = append(hexes, hex.EncodeToString(b))
		j, _ := json.Marshal(doc)
		docs = append(docs, asJSON(t, j))
	}
	bad := map[string]any{"id": "x", "to": map[string]any{"city": "Nowhere", "at": map[string]any{"lat": 91.0, "lon": 0}}}
	if _, err := s.Serialize(topic, bad); err == nil || !strings.Contains(err.Error(), "at /to/at/lat") {
		t.Fatalf("eddy writing a latitude of 91: %v, want a failure at /to/at/lat", err)
	}
	// The last record: eddy's header, a latitude of 91 (written by hand).
	broken, _ := json.Marshal(bad)
	first, _ := hex.DecodeString(hexes[0])
	decoded, _ := confluentPython(t, map[string]any{"registry": url, "topic": topic, "format": "json",
		"reader_subject": topic + "-value", "errors_ok": true, "decode": append(hexes, hex.EncodeToString(append(first[:5:5], broken...)))})
	if len(decoded) != len(docs)+1 || !reflect.DeepEqual(decoded[:len(docs)], docs) {
		t.Fatalf("Python read eddy's records as %v, want %v", decoded, docs)
	}
	if e, _ := decoded[len(docs)].(map[string]any)["error"].(string); !strings.Contains(e, "91") {
		t.Fatalf("Python read a latitude of 91 through eddy's chain as %v, want it refused", decoded[len(docs)])
	}

	pyTopic := topic + "-py"
	pyBase := "https://eddy.example/" + pyTopic + "/"
	rebase := func(s string) string { return strings.ReplaceAll(s, base, pyBase) }
	_, encoded := confluentPython(t, map[string]any{"registry": url, "topic": pyTopic, "format": "json",
		"references": []any{
			map[string]any{"name": pyBase + "position.json", "subject": pyTopic + "-position", "schema": rebase(pos)},
			map[string]any{"name": pyBase + "address.json", "subject": pyTopic + "-address", "schema": rebase(addr), "refs": []string{pyBase + "position.json"}},
		},
		"schema": rebase(env), "schema_refs": []string{pyBase + "address.json"}, "encode": docs})
	if len(encoded) != len(docs) {
		t.Fatalf("Python encoded %d of %d records", len(encoded), len(docs))
	}
	for i, b := range encoded {
		got, err := s.Deserialize(pyTopic, b)
		if err != nil {
			t.Fatalf("record %d: eddy reading Python's bytes: %v", i, err)
		}
		j, _ := json.Marshal(got)
		if !reflect.DeepEqual(asJSON(t, j), docs[i]) {
			t.Fatalf("record %d: eddy read %v, want %v", i, got, docs[i])
		}
	}
	// Python's record with its last link broken, by hand: eddy refuses it
	// against the writer's chain.
	if _, err := s.Deserialize(pyTopic, append(encoded[0][:5:5], broken...)); err == nil || !strings.Contains(err.Error(), "at /to/at/lat") {
		t.Fatalf("eddy reading a latitude of 91 written with Python's chain: %v", err)
	}
	t.Logf("%d records each way through a chain of 3 schemas, identical", len(docs))
}
