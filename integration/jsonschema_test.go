package integration_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/jsonschema"
	"github.com/eddy-go/eddy/serde/registry"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

type jsCustomer struct {
	Name    string   `json:"name"`
	Email   *string  `json:"email,omitempty"`
	Address []string `json:"address"`
}

type jsLine struct {
	SKU      string  `json:"sku"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"price"`
}

type jsOrder struct {
	ID       string            `json:"id"`
	Status   string            `json:"status"`
	Customer jsCustomer        `json:"customer"`
	Lines    []jsLine          `json:"lines"`
	Note     *string           `json:"note,omitempty"`
	Tags     map[string]string `json:"tags,omitempty"`
	At       time.Time         `json:"at"`
}

// orderSchema is jsOrder's schema as a team would write it: an enum,
// bounds, required and optional fields, nested objects and arrays.
const orderSchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Order",
  "type": "object",
  "properties": {
    "id": {"type": "string", "minLength": 1},
    "status": {"enum": ["NEW", "PAID", "SHIPPED"]},
    "customer": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "address": {"type": "array", "items": {"type": "string"}}
      },
      "required": ["name"]
    },
    "lines": {
      "type": "array", "minItems": 1,
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string"},
          "quantity": {"type": "integer", "minimum": 1},
          "price": {"type": "number"}
        },
        "required": ["sku", "quantity", "price"]
      }
    },
    "note": {"type": "string"},
    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
    "at": {"type": "string", "format": "date-time"}
  },
  "required": ["id", "status", "customer", "lines", "at"]
}`

func jsOrderN(i int) jsOrder {
	email := fmt.Sprintf("c%d@example.com", i)
	o := jsOrder{ID: fmt.Sprintf("o-%d", i), Status: []string{"NEW", "PAID", "SHIPPED"}[i%3],
		Customer: jsCustomer{Name: "Ada", Address: []string{"1 Main St", "Springfield"}},
		Lines:    []jsLine{{SKU: "a", Quantity: 1 + i%4, Price: 9.5}, {SKU: "b", Quantity: 2, Price: 0.25}},
		At:       time.Date(2026, 12, 7, 5, 0, i, 0, time.UTC)}
	if i%2 == 0 {
		o.Customer.Email = &email
		note := "gift"
		o.Note, o.Tags = &note, map[string]string{"channel": "web"}
	}
	return o
}

// JSON Schema serdes round-trip nested objects, arrays, enums, optional
// and required fields through the real registry, with a given schema and
// a derived one; with Validate, a value that breaks its schema is refused
// at Serialize, naming the field.
func TestJSONSchemaRoundTripsAndValidates(t *testing.T) {
	reg, url := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "js-orders")
	given, err := jsonschema.New[jsOrder](reg, jsonschema.WithSchema(orderSchema), jsonschema.Validate(), jsonschema.RegisterFor(topic))
	if err != nil {
		t.Fatal(err)
	}
	derived, err := jsonschema.New[jsOrder](reg, jsonschema.Validate(), jsonschema.WithSubjectStrategy(registry.RecordName))
	if err != nil {
		t.Fatal(err)
	}
	if got := derived.Subject(topic); got != "jsOrder" {
		t.Fatalf("RecordName subject of a derived schema: %q", got)
	}
	for i := range 6 {
		in := jsOrderN(i)
		for _, s := range []*jsonschema.Serde[jsOrder]{given, derived} {
			b, err := s.Serialize(topic, in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Deserialize(topic, b)
			if err != nil {
				t.Fatal(err)
			}
			same := out.At.Equal(in.At)
			out.At = in.At
			if !same || !reflect.DeepEqual(out, in) {
				t.Fatalf("round trip changed the order:\n in: %+v\nout: %+v", in, out)
			}
		}
	}
	latest, err := rawRegistry(t, url).Latest(topic + "-value")
	if err != nil || latest.Type != registry.JSON || !strings.Contains(latest.Text, `"SHIPPED"`) {
		t.Fatalf("registered: %+v, %v", latest, err)
	}
	bad := jsOrderN(1)
	bad.Status, bad.Lines[1].Quantity = "LOST", 0
	_, err = given.Serialize(topic, bad)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) || len(ve.Failures) != 2 || ve.Failures[0].Path != "/lines/1/quantity" || ve.Failures[1].Path != "/status" {
		t.Fatalf("an order breaking the schema: %v", err)
	}
	t.Logf("refused: %v", err)
}

// A record that breaks its schema, read by a validating serde, goes to the
// dead-letter topic with its cause (the field and why) while the good
// records are processed, on the real broker.
func TestJSONSchemaValidationFailureIsDeadLettered(t *testing.T) {
	brokers := realBroker(t)
	reg, _ := realRegistryClient(t)
	in, out, dlq := kafkatest.UniqueName(t, "js-in"), kafkatest.UniqueName(t, "js-out"), kafkatest.UniqueName(t, "js-dlq")
	for _, tp := range []string{in, out, dlq} {
		kafkatest.CreateTopic(t, brokers, tp, 1, nil)
	}
	// The producer does not validate (as a careless one would not).
	writer, err := jsonschema.New[jsOrder](reg, jsonschema.WithSchema(orderSchema))
	if err != nil {
		t.Fatal(err)
	}
	var recs []kafkatest.Record
	badAt := map[int]string{3: "/status", 7: "/lines/0/quantity", 11: "/customer"}
	for i := range 15 {
		o := jsOrderN(i)
		switch badAt[i] {
		case "/status":
			o.Status = "LOST"
		case "/lines/0/quantity":
			o.Lines[0].Quantity = -1
		}
		b, err := writer.Serialize(in, o)
		if err != nil {
			t.Fatal(err)
		}
		if badAt[i] == "/customer" {
			b = []byte(strings.Replace(string(b), `"name":"Ada",`, ``, 1))
		}
		recs = append(recs, kafkatest.Record{Key: []byte(o.ID), Value: b})
	}
	kafkatest.Produce(t, brokers, in, recs...)

	reader, err := jsonschema.New[jsOrder](reg, jsonschema.WithSchema(orderSchema), jsonschema.Validate())
	if err != nil {
		t.Fatal(err)
	}
	b := topology.NewBuilder()
	topology.MapValues(topology.Stream(b, in, topology.Consumed(serde.String(), reader)),
		func(o jsOrder) string { return o.Status }).To(out, topology.Produced(serde.String(), serde.String()))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	appID := kafkatest.UniqueName(t, "js-app")
	stop := runApp(t, top, streams.Config{ApplicationID: appID, BootstrapServers: brokers, StateDir: t.TempDir(),
		Guarantee: streams.ExactlyOnce, DeserializationErrors: streams.Always(streams.DeadLetter), DeadLetterTopic: dlq})
	kafkatest.WaitCaughtUp(t, brokers, appID, 2*time.Minute, in)
	stop()

	if got := len(kafkatest.ConsumeAll(t, brokers, out)); got != 15-len(badAt) {
		t.Fatalf("%d orders processed, want %d", got, 15-len(badAt))
	}
	letters := kafkatest.ConsumeAll(t, brokers, dlq)
	if len(letters) != len(badAt) {
		t.Fatalf("%d dead letters, want %d", len(letters), len(badAt))
	}
	for _, r := range letters {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		var i int
		fmt.Sscanf(string(r.Key), "o-%d", &i)
		path := badAt[i]
		if path == "" || !strings.Contains(h[streams.HeaderErrorMessage], "at "+path+":") || !strings.Contains(h[streams.HeaderErrorMessage], "does not satisfy schema id") {
			t.Fatalf("dead letter %s: cause %q, want the failure at %s", r.Key, h[streams.HeaderErrorMessage], path)
		}
		t.Logf("dead letter %s: %s", r.Key, h[streams.HeaderErrorMessage])
	}
}

type jsPaymentV1 struct {
	ID     string  `json:"id"`
	Amount float64 `json:"amount"`
}

type jsPaymentV2 struct {
	ID       string  `json:"id"`
	Amount   float64 `json:"amount"`
	Currency *string `json:"currency,omitempty"`
}

type jsPaymentV3 struct {
	ID     string `json:"id"`
	Amount string `json:"amount"`
}

// Evolution with derived schemas: v2 adds an optional field (compatible:
// derived schemas are closed), and readers on either version read the
// other's records with validation on; v3 changes a field's type and the
// registry refuses it when the serde is created.
func TestJSONSchemaEvolutionAndCompatibility(t *testing.T) {
	reg, _ := realRegistryClient(t)
	topic := kafkatest.UniqueName(t, "js-pay")
	s1, err := jsonschema.New[jsPaymentV1](reg, jsonschema.Validate(), jsonschema.RegisterFor(topic))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := jsonschema.New[jsPaymentV2](reg, jsonschema.Validate(), jsonschema.RegisterFor(topic))
	if err != nil {
		t.Fatalf("a compatible v2 was refused: %v", err)
	}
	eur := "EUR"
	b1, err := s1.Serialize(topic, jsPaymentV1{ID: "p1", Amount: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := s2.Serialize(topic, jsPaymentV2{ID: "p2", Amount: 2.5, Currency: &eur})
	if err != nil {
		t.Fatal(err)
	}
	if old, err := s1.Deserialize(topic, b2); err != nil || old != (jsPaymentV1{ID: "p2", Amount: 2.5}) {
		t.Fatalf("v1 reader on a v2 record: %+v, %v", old, err)
	}
	if newer, err := s2.Deserialize(topic, b1); err != nil || newer.ID != "p1" || newer.Currency != nil {
		t.Fatalf("v2 reader on a v1 record: %+v, %v", newer, err)
	}
	_, err = jsonschema.New[jsPaymentV3](reg, jsonschema.RegisterFor(topic))
	var ie *registry.IncompatibleError
	if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "amount") {
		t.Fatalf("an incompatible v3 was not refused at registration: %v", err)
	}
	t.Logf("v3 refused: %v", err)
}
