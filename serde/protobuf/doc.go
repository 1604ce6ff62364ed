// Package protobuf is a Protobuf serde for eddy in the Confluent wire
// format, backed by a Confluent-compatible schema registry: records written
// by Confluent's Java, Python or Go Protobuf serializers read back, and the
// other way round.
//
//	reg, err := registry.New(registry.Config{URL: "http://localhost:8081"})
//	orders, err := protobuf.New[*orderpb.Order](reg)
//	topology.Stream(b, "orders", topology.Consumed(serde.String(), orders))
//
// Values are generated Go messages (protoc-gen-go, or eddy's tools/protogen
// without protoc); NewDynamic serves code without a generated type with
// dynamicpb messages built from the writer's schema.
//
// Writing registers the message's .proto file as a PROTOBUF schema under
// the subject of its strategy (TopicName, RecordName, TopicRecordName), and
// each file it imports under its import path, as a schema reference
// (Confluent's default reference subject); the well-known types
// (google/protobuf/*.proto) are built into registries and not registered.
// UseLatestSchema and UseSchemaID write with a registered schema instead.
// A schema the registry refuses (an incompatible change under the
// subject's compatibility level) is a *registry.IncompatibleError with the
// registry's message — at New with RegisterFor, else at the first record.
//
// Each record is the magic byte 0, the schema id, the message indexes (the
// path to the record's message in its file: a file may hold many messages)
// and the message. Reading looks the writer schema up once per id, checks
// the record holds the serde's message and decodes it; as always with
// Protobuf, a reader on an older or newer compatible version reads the
// fields it knows.
package protobuf
