// Package serde holds Serde, the typed conversion between Go values and the
// bytes of Kafka record keys and values, and the serdes every topology needs.
//
// String, Bytes, Int32, Int64 and Float64 use the encodings of Kafka's own
// Java serializers, so data written by Java clients reads back and the other
// way round. JSON[T] uses encoding/json. serde/avro adds Avro with a
// Confluent-compatible schema registry.
//
//	s := serde.Int64()
//	b, _ := s.Serialize("counts", 42) // 00 00 00 00 00 00 00 2a
//	n, _ := s.Deserialize("counts", b)
//
// A Kafka null (a tombstone on a compacted topic) is not a value of T: eddy
// passes it on as a record without a value, so a table can tell "deleted"
// from a zero value.
package serde
