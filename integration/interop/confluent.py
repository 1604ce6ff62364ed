"""Confluent's own Python serializers, driven by eddy's interop tests.

Reads one JSON request on stdin and writes one JSON answer on stdout:

  {"registry": URL, "topic": T, "format": "protobuf" | "json",
   "descriptors": base64 FileDescriptorSet (protobuf), "message": full name,
   "schema": JSON Schema text (json),
   "references": [{"name": N, "subject": S, "schema": text, "refs": [N, ...]}, ...] (json),
   "schema_refs": [N, ...] (json), "reader_subject": S (json), "errors_ok": bool (json),
   "decode": [hex, ...], "encode": [value as JSON, ...]}

JSON Schema references: each of "references" is registered, in order, under
its subject with references to the earlier ones its "refs" name; the
schema then refers to those "schema_refs" names. With "reader_subject",
records are read with that subject's latest schema (and its references) as
the registry holds it, instead of "schema".

decode: each record is read with the format's Deserializer and answered as
JSON (Protobuf: MessageToDict with the .proto field names). encode: each
value is written with the format's Serializer (Protobuf: with the subject's
latest schema, use.latest.version; JSON: auto-registered) and answered as
hex.
"""
import base64
import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError


def protobuf(req, ctx, registry):
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(req["descriptors"]))
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(req["message"]))
    out = {}
    if req.get("decode"):
        de = ProtobufDeserializer(cls, {"use.deprecated.format": False})
        out["decoded"] = [json_format.MessageToDict(de(bytes.fromhex(h), ctx), preserving_proto_field_name=True)
                          for h in req["decode"]]
    if req.get("encode"):
        ser = ProtobufSerializer(cls, registry, {"use.deprecated.format": False,
                                                 "auto.register.schemas": False, "use.latest.version": True})
        out["encoded"] = [ser(json_format.ParseDict(v, cls()), ctx).hex() for v in req["encode"]]
    return out


def decode_or_error(de, h, ctx, errors_ok):
    """A record read; with errors_ok, a record refused is answered as
    {"error": message}."""
    try:
        return de(bytes.fromhex(h), ctx)
    except SerializationError as e:
        if not errors_ok:
            raise
        return {"error": str(e)}


def json_schema(req, ctx, registry):
    out = {}
    refs = {}  # by name
    for r in req.get("references") or []:
        schema = Schema(r["schema"], "JSON", [refs[n] for n in r.get("refs", [])])
        registry.register_schema(r["subject"], schema)
        version = registry.lookup_schema(r["subject"], schema).version
        refs[r["name"]] = SchemaReference(r["name"], r["subject"], version)
    schema = req.get("schema")
    if req.get("schema_refs"):
        schema = Schema(schema, "JSON", [refs[n] for n in req["schema_refs"]])
    if req.get("decode"):
        if req.get("reader_subject"):
            de = JSONDeserializer(registry.get_latest_version(req["reader_subject"]).schema,
                                  schema_registry_client=registry)
        else:
            de = JSONDeserializer(schema, schema_registry_client=registry)
        out["decoded"] = [decode_or_error(de, h, ctx, req.get("errors_ok")) for h in req["decode"]]
    if req.get("encode"):
        ser = JSONSerializer(schema, registry, conf={"auto.register.schemas": True})
        out["encoded"] = [ser(v, ctx).hex() for v in req["encode"]]
    return out


def main():
    req = json.load(sys.stdin)
    registry = SchemaRegistryClient({"url": req["registry"]})
    ctx = SerializationContext(req["topic"], MessageField.VALUE)
    answer = protobuf(req, ctx, registry) if req["format"] == "protobuf" else json_schema(req, ctx, registry)
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
