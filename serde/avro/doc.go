// Package avro is an Avro serde for eddy in the Confluent wire format,
// backed by a Confluent-compatible schema registry: records written by
// Java or Python Confluent serializers read back, and the other way round.
//
//	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: "http://localhost:8081"})
//	payments, err := avro.New[Payment](reg, paymentSchemaJSON)
//	topology.Stream(b, "payments", topology.Consumed(serde.String(), payments))
//
// Values are Go structs (fields matched by `avro:"name"` tags), with
// nested records, slices, maps, unions with null as pointers, and logical
// types (timestamp-millis/micros and date as time.Time, decimal as
// *big.Rat, uuid as string); or map[string]any for generic records. Keys
// use ForKeys.
//
// Writing registers the serde's schema under the subject of its strategy
// (TopicName, RecordName, TopicRecordName) once, or uses the latest
// registered schema (UseLatestSchema), or a pinned id (UseSchemaID). A
// schema the registry refuses is an *IncompatibleError naming the subject,
// its compatibility level and the registry's reason — at New with
// RegisterFor, else at the first record of that subject.
//
// Reading looks each writer schema up once by id and resolves it to the
// serde's schema (Avro schema resolution: fields added with defaults,
// fields removed, int→long→float→double promotions, string↔bytes), so one
// topology reads old and new versions of a record. After the first record
// of a schema, no registry call is made: a registry outage does not stop
// known schemas, and an unknown id is an error the deserialization handler
// sees.
package avro
