"""Confluent's own Python serializers, driven by eddy's interop tests.

Reads one JSON request on stdin and writes one JSON answer on stdout:

  {"registry": URL, "topic": T, "format": "protobuf" | "json",
   "descriptors": base64 FileDescriptorSet (protobuf), "message": full name,
   "schema": JSON Schema text (json),
   "decode": [hex, ...], "encode": [value as JSON, ...]}

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
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


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


def json_schema(req, ctx, registry):
    out = {}
    if req.get("decode"):
        de = JSONDeserializer(req["schema"])
        out["decoded"] = [de(bytes.fromhex(h), ctx) for h in req["decode"]]
    if req.get("encode"):
        ser = JSONSerializer(req["schema"], registry, conf={"auto.register.schemas": True})
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
