package jsonschema_test

import (
	"fmt"
	"reflect"

	"github.com/eddy-go/eddy/serde/jsonschema"
	"github.com/eddy-go/eddy/serde/registry"
)

type Payment struct {
	ID     string  `json:"id"`
	Amount float64 `json:"amount"`
	Note   *string `json:"note,omitempty"`
}

const paymentSchema = `{"title": "Payment", "type": "object",
  "properties": {"id": {"type": "string", "minLength": 1}, "amount": {"type": "number", "minimum": 0},
                 "note": {"type": "string"}},
  "required": ["id", "amount"]}`

// A serde with validation on: a value that breaks the schema is refused,
// naming the field. A real app passes registry.New(registry.Config{URL:
// …}); the in-memory registry keeps the example self-contained.
func Example() {
	reg := registry.NewInMemory()
	payments, err := jsonschema.New[Payment](reg, jsonschema.WithSchema(paymentSchema), jsonschema.Validate())
	if err != nil {
		panic(err)
	}
	b, err := payments.Serialize("payments", Payment{ID: "p1", Amount: 9.5})
	if err != nil {
		panic(err)
	}
	fmt.Printf("magic %d, then %s\n", b[0], b[5:])
	back, err := payments.Deserialize("payments", b)
	if err != nil {
		panic(err)
	}
	fmt.Println(back.ID, back.Amount)

	_, err = payments.Serialize("payments", Payment{ID: "p2", Amount: -1})
	fmt.Println(err)
	// Output:
	// magic 0, then {"id":"p1","amount":9.5}
	// p1 9.5
	// jsonschema: the record does not satisfy schema id 1: at /amount: must be >= 0 but found -1
}

// Derive writes the schema a struct is registered with when no schema is
// given.
func ExampleDerive() {
	schema, err := jsonschema.Derive(reflect.TypeFor[Payment]())
	if err != nil {
		panic(err)
	}
	fmt.Println(schema)
	// Output:
	// {"$schema":"http://json-schema.org/draft-07/schema#","additionalProperties":false,"properties":{"amount":{"type":"number"},"id":{"type":"string"},"note":{"oneOf":[{"type":"null"},{"type":"string"}]}},"required":["id","amount"],"title":"Payment","type":"object"}
}

// A schema that refers to another by its "$id": the serde registers the
// address schema first, then the customer schema with a reference to it,
// and validates through the reference.
func ExampleWithReferencedSchema() {
	const address = `{"$id": "https://acme.example/address.json", "type": "object",
  "properties": {"city": {"type": "string", "minLength": 1}}, "required": ["city"]}`
	const customer = `{"type": "object", "properties": {"name": {"type": "string"},
  "home": {"$ref": "https://acme.example/address.json"}}, "required": ["name", "home"]}`
	reg := registry.NewInMemory()
	customers, err := jsonschema.New[map[string]any](reg, jsonschema.WithSchema(customer), jsonschema.Validate(),
		jsonschema.WithReferencedSchema("https://acme.example/address.json", "address", address))
	if err != nil {
		panic(err)
	}
	if _, err := customers.Serialize("customers", map[string]any{"name": "Ada", "home": map[string]any{"city": "Zug"}}); err != nil {
		panic(err)
	}
	registered, err := reg.Latest("customers-value")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", registered.References)
	_, err = customers.Serialize("customers", map[string]any{"name": "Bob", "home": map[string]any{"city": ""}})
	fmt.Println(err)
	// Output:
	// [{Name:https://acme.example/address.json Subject:address Version:1}]
	// jsonschema: the record does not satisfy schema id 2: at /home/city: length must be >= 1, but got 0
}
