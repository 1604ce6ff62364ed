// Package jsonschema is a JSON Schema serde for eddy in the Confluent wire
// format, backed by a Confluent-compatible schema registry: records written
// by Confluent's Java, Python or Go JSON Schema serializers read back, and
// the other way round.
//
//	reg, err := registry.New(registry.Config{URL: "http://localhost:8081"})
//	orders, err := jsonschema.New[Order](reg, jsonschema.Validate())
//	topology.Stream(b, "orders", topology.Consumed(serde.String(), orders))
//
// Values are Go types encoding/json handles, usually structs. Their schema
// is given (WithSchema) or derived from the type (Derive: properties by
// json tags, required unless omitempty or a pointer).
//
// Writing registers the schema as a JSON schema under the subject of its
// strategy once (or uses the latest registered, or a pinned id); the
// registry's compatibility rules apply, and a schema it refuses is a
// *registry.IncompatibleError with its message. With Validate, each value
// is checked against the schema before it is written and each record
// against its writer schema when read: a record that fails is a
// *ValidationError naming the failing fields, which the app's error
// handlers route like any bad record (a dead-letter topic, for one);
// ValidateReads checks reads against the serde's own schema instead, or as
// well.
//
// A schema may refer ("$ref") to other registered schemas: reading, a
// writer schema's registry references are followed recursively;
// writing, WithReferences names registered ones and WithReferencedSchema
// gives ones for the serde to register first.
package jsonschema
