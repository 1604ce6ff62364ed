package jsonschema_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde/jsonschema"
	"github.com/eddy-go/eddy/serde/registry"
)

const addressSchema = `{"$id": "https://fi.example/address.schema.json", "type": "object",
  "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{4,5}$"}},
  "required": ["city"]}`

const envelopeSchema = `{"$id": "https://fi.example/envelope.schema.json", "type": "object",
  "properties": {"id": {"type": "string"},
    "to": {"$ref": "https://fi.example/address.schema.json"},
    "cc": {"type": "array", "items": {"$ref": "address.schema.json"}}},
  "required": ["id", "to"]}`

// A record written with a schema that refers to another subject's schema
// (the case, as Confluent's JSONSerializer registers it: the
// reference named by the "$id" URL) is read, validated through the
// reference, by a serde that holds no schema of its own for it.
func TestReadsAWriterSchemaWithRegistryReferences(t *testing.T) {
	reg := registry.NewInMemory()
	addr, err := reg.Register("A", registry.JSON, addressSchema)
	if err != nil {
		t.Fatal(err)
	}
	env, err := reg.Register("orders-value", registry.JSON, envelopeSchema,
		registry.Reference{Name: "https://fi.example/address.schema.json", Subject: "A", Version: addr.Version})
	if err != nil {
		t.Fatal(err)
	}
	s, err := jsonschema.New[map[string]any](reg, jsonschema.WithSchema(`{"type":"object"}`), jsonschema.Validate())
	if err != nil {
		t.Fatal(err)
	}
	rec := func(body string) []byte { return append(registry.AppendHeader(nil, env.ID), body...) }
	got, err := s.Deserialize("orders", rec(`{"id":"e1","to":{"city":"Bern","zip":"30000"},"cc":[{"city":"Basel"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got["to"].(map[string]any)["city"] != "Bern" {
		t.Fatalf("read %v", got)
	}
	_, err = s.Deserialize("orders", rec(`{"id":"e2","to":{"city":"Bern","zip":"3x"},"cc":[{"zip":"4000"}]}`))
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) || len(ve.Failures) != 2 || ve.Failures[0].Path != "/cc/0" || ve.Failures[1].Path != "/to/zip" {
		t.Fatalf("a record breaking the referenced schema: %v, want failures at /cc/0 and /to/zip", err)
	}
	// UseLatestSchema writes with the registered schema, references and all.
	w, err := jsonschema.New[map[string]any](reg, jsonschema.WithSchema(`{"type":"object"}`), jsonschema.UseLatestSchema(), jsonschema.Validate())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Serialize("orders", map[string]any{"id": "e3", "to": map[string]any{"zip": "1"}}); !errors.As(err, &ve) {
		t.Fatalf("writing a value breaking the referenced schema with the latest schema: %v", err)
	}
}

type letter struct {
	ID string    `json:"id"`
	To address   `json:"to"`
	CC []address `json:"cc,omitempty"`
}

type address struct {
	City string `json:"city"`
	Zip  string `json:"zip,omitempty"`
	Geo  *geo   `json:"geo,omitempty"`
}

type geo struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

// A chain of references given by text (A refers to B, B to C, by names
// relative to theirs) is registered by the serde, each schema under its
// name with references to the ones it names, and read back through the
// registry by a second serde; validation follows the chain both ways.
func TestRegistersAReferenceChain(t *testing.T) {
	const (
		geoText     = `{"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}, "lon": {"type": "number"}}, "required": ["lat", "lon"]}`
		addressText = `{"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}, "geo": {"$ref": "geo.json"}}, "required": ["city"]}`
		letterText  = `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
  "properties": {"id": {"type": "string"}, "to": {"$ref": "address.json"}, "cc": {"type": "array", "items": {"$ref": "#/$defs/copy"}}},
  "$defs": {"copy": {"$ref": "address.json"}}, "required": ["id", "to"]}`
	)
	reg := registry.NewInMemory()
	s, err := jsonschema.New[letter](reg, jsonschema.WithSchema(letterText), jsonschema.Validate(),
		jsonschema.WithReferencedSchema("geo.json", "", geoText), jsonschema.WithReferencedSchema("address.json", "", addressText))
	if err != nil {
		t.Fatal(err)
	}
	in := letter{ID: "l1", To: address{City: "Bern", Geo: &geo{Lat: 46.9, Lon: 7.4}}, CC: []address{{City: "Basel"}}}
	b, err := s.Serialize("letters", in)
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string][]string{"geo.json": nil, "address.json": {"geo.json"}, "letters-value": {"address.json"}} {
		got, err := reg.Latest(subject)
		if err != nil {
			t.Fatalf("subject %s: %v", subject, err)
		}
		var names []string
		for _, r := range got.References {
			names = append(names, r.Name)
			if r.Subject != r.Name || r.Version != 1 {
				t.Errorf("subject %s: reference %+v, want the subject named as the reference, version 1", subject, r)
			}
		}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("subject %s refers to %v, want %v", subject, names, want)
		}
	}
	if _, err := s.Serialize("letters", letter{ID: "l2", To: address{City: "Nowhere", Geo: &geo{Lat: 91}}}); err == nil || !strings.Contains(err.Error(), "at /to/geo/lat") {
		t.Fatalf("a latitude of 91 two references down: %v, want a failure at /to/geo/lat", err)
	}

	r, err := jsonschema.New[letter](reg, jsonschema.WithSchema(`{}`), jsonschema.Validate())
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Deserialize("letters", b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("read %+v, want %+v", got, in)
	}
	bad := append(b[:5:5], `{"id":"l3","to":{"city":"X","geo":{"lat":-100,"lon":0}},"cc":[{}]}`...)
	var ve *jsonschema.ValidationError
	if _, err := r.Deserialize("letters", bad); !errors.As(err, &ve) || len(ve.Failures) != 2 || ve.Failures[0].Path != "/cc/0" || ve.Failures[1].Path != "/to/geo/lat" {
		t.Fatalf("reading a record that breaks the chain: %v", err)
	}
}

// A "$ref" the serde was not given is an error naming it when the serde is
// made; nothing is fetched from the URL.
func TestAnUnknownReferenceIsNamed(t *testing.T) {
	_, err := jsonschema.New[map[string]any](registry.NewInMemory(), jsonschema.WithSchema(envelopeSchema))
	if err == nil || !strings.Contains(err.Error(), "https://fi.example/address.schema.json is not among the schema's references") {
		t.Fatalf("got %v", err)
	}
}

type account struct {
	ID      string    `json:"id"`
	Status  string    `json:"status"`
	Created time.Time `json:"created_at"`
}

// ValidateReads(AgainstReader) refuses a record the application's schema
// refuses though its laxer writer schema accepts it; AgainstWriter (what
// Validate does) decodes it with zero values for what it lacks.
func TestValidateReadsAgainstTheReadersSchema(t *testing.T) {
	reg := registry.NewInMemory()
	lax, err := jsonschema.New[map[string]any](reg, jsonschema.WithSchema(`{"type":"object","properties":{"id":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := lax.Serialize("accounts", map[string]any{"id": "a1"})
	if err != nil {
		t.Fatal(err)
	}
	const strict = `{"type":"object","properties":{"id":{"type":"string"},"status":{"enum":["open","closed"]},"created_at":{"type":"string","format":"date-time"}},"required":["id","status","created_at"]}`
	for check, refused := range map[jsonschema.ReadCheck]bool{jsonschema.AgainstWriter: false, jsonschema.AgainstReader: true, jsonschema.AgainstBoth: true} {
		s, err := jsonschema.New[account](reg, jsonschema.WithSchema(strict), jsonschema.ValidateReads(check))
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Deserialize("accounts", b)
		var ve *jsonschema.ValidationError
		switch {
		case refused && (!errors.As(err, &ve) || ve.SchemaID != 0 || !strings.Contains(err.Error(), "does not satisfy the serde's schema")):
			t.Errorf("check %d: %v, want a ValidationError against the serde's schema", check, err)
		case !refused && (err != nil || got.ID != "a1" || got.Status != ""):
			t.Errorf("check %d: %+v, %v; want the record with zero values", check, got, err)
		}
	}
	if _, err := jsonschema.New[account](reg, jsonschema.ValidateReads(7)); err == nil {
		t.Error("ValidateReads(7): no error")
	}
}

type order struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created_at"`
	Lines   []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"lines"`
	Tags map[string]int `json:"tags"`
}

// A record encoding/json cannot decode into the serde's type is an error
// naming the field, with the schema id.
func TestDecodeErrorsNameTheField(t *testing.T) {
	reg := registry.NewInMemory()
	s, err := jsonschema.New[order](reg, jsonschema.WithSchema(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	ok, err := s.Serialize("orders", order{ID: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		`{"id":"o2","created_at":"2024-13-45T25:61:00Z"}`:         `(schema id 1) at /created_at: parsing time "2024-13-45T25:61:00Z": month out of range`,
		`{"id":"o3","lines":[{"sku":"a","qty":1},{"qty":"two"}]}`: "at /lines/1/qty: json: cannot unmarshal string",
		`{"id":"o4","tags":{"a/b":1,"c":"x"}}`:                    "at /tags/c:",
		`{"id":5}`:                                                "at /id:",
	} {
		_, err := s.Deserialize("orders", append(ok[:5:5], body...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q in it", body, err, want)
		}
	}
}

// Any bytes read by a validating serde whose writer schemas have
// references (a chain, and a schema referring to itself through another)
// are a value or an error, never a panic; what it reads satisfies the chain.
func FuzzDeserializeWithReferences(f *testing.F) {
	reg := registry.NewInMemory()
	addr, err := reg.Register("A", registry.JSON, addressSchema)
	if err != nil {
		f.Fatal(err)
	}
	env, err := reg.Register("orders-value", registry.JSON, envelopeSchema,
		registry.Reference{Name: "https://fi.example/address.schema.json", Subject: "A", Version: addr.Version})
	if err != nil {
		f.Fatal(err)
	}
	node, err := reg.Register("node.json", registry.JSON, `{"type":"object","properties":{"next":{"$ref":"list.json"}}}`)
	if err != nil {
		f.Fatal(err)
	}
	list, err := reg.Register("lists-value", registry.JSON, `{"anyOf":[{"type":"null"},{"$ref":"node.json"}]}`,
		registry.Reference{Name: "node.json", Subject: "node.json", Version: node.Version})
	if err != nil {
		f.Fatal(err)
	}
	s, err := jsonschema.New[map[string]any](reg, jsonschema.WithSchema(`{}`), jsonschema.Validate())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		id   int
		body string
	}{
		{env.ID, `{"id":"e1","to":{"city":"Bern","zip":"30000"},"cc":[{"city":"Basel"}]}`},
		{env.ID, `{"id":"e2","to":{"zip":"x"}}`},
		{list.ID, `{"next":{"next":null}}`},
		{addr.ID, `{"city":"Zug"}`},
		{99, `{}`},
	} {
		f.Add(append(registry.AppendHeader(nil, seed.id), seed.body...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := s.Deserialize("orders", b)
		if err == nil && len(b) >= 5 && b[4] == byte(env.ID) && b[1]|b[2]|b[3] == 0 {
			if _, ok := v["to"].(map[string]any); !ok {
				t.Fatalf("read %v, which lacks the required address", v)
			}
		}
	})
}
