"""Reading ``application/vnd.kubernetes.protobuf`` request bodies as the JSON objects they stand for.

client-go's typed clients (kubectl's generator commands: ``create token``, ``create job --from``,
``create namespace``, ``auth can-i``, ``auth whoami`` ...) send built-in kinds in the Kubernetes protobuf
encoding (staging/src/k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go): the magic
``k8s\\x00``, then a ``runtime.Unknown`` whose ``typeMeta`` names apiVersion and kind and whose ``raw`` is the
object's message. The field tables (``protobuf_data/messages.json.gz``, :mod:`gpuplan.sim.api.gen_protobuf`)
give each field's JSON name and type; the special messages become what their JSON marshalling writes
(``Time`` an RFC 3339 string, ``Quantity`` its string, ``IntOrString`` an int or string, ``RawExtension`` and
``FieldsV1`` their JSON, ``bytes`` base64). Zero values of non-pointer ``omitempty`` fields are left out, as
JSON leaves them out. Answers stay JSON (the client accepts it). Kinds without a table (custom resources)
are refused with 415, as before.

Caller: :func:`gpuplan.sim.api.protocol.decode_body`.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import struct
from datetime import UTC, datetime
from importlib import resources
from typing import Any

MAGIC = b"k8s\x00"
_UNKNOWN = {"1": ["typeMeta", "typeMeta", False, True], "2": ["raw", "bytes", False, True]}
_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
_TIMES = (_META + "Time", _META + "MicroTime")


class ProtobufError(ValueError):
    """A body that is not a protobuf object this server can read."""


class UnknownKind(ProtobufError):
    """A well-formed envelope of a kind this server has no protobuf table for (CRDs, rare review kinds)."""


@functools.cache
def tables() -> dict[str, dict[str, list[Any]]]:
    """{message: {field number: [json name, type, repeated, omit zero]}} of the built-in kinds (also read by
    ``sim.api.roundtrip``, which drops the zero values JSON leaves out)."""
    data = (resources.files("gpuplan.sim.api") / "protobuf_data" / "messages.json.gz").read_bytes()
    loaded: dict[str, dict[str, list[Any]]] = json.loads(gzip.decompress(data))
    return loaded


def message_name(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    if group == "meta.k8s.io" or kind == "DeleteOptions":  # options travel as meta/v1 in every group
        return f"{_META}{kind}"
    package = group.split(".")[0] if group else "core"
    return f"k8s.io.api.{package}.{version}.{kind}"


def decode(body: bytes) -> dict[str, Any]:
    """The JSON object of a protobuf-encoded request body; ``ProtobufError`` when it cannot be read."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic")
    unknown = _fields(body[len(MAGIC) :])
    type_meta = _fields(unknown.get(1, [b""])[-1])
    api_version = _text(type_meta.get(1, [b""])[-1])
    kind = _text(type_meta.get(2, [b""])[-1])
    name = message_name(api_version, kind)
    if name not in tables():
        raise UnknownKind(f"no protobuf table for {api_version} {kind}")
    obj = _message(name, unknown.get(2, [b""])[-1])
    return {"apiVersion": api_version, "kind": kind, **obj}


def _message(name: str, data: bytes) -> dict[str, Any]:
    table = tables().get(name, {})
    out: dict[str, Any] = {}
    for number, values in _fields(data).items():
        field = table.get(str(number))
        if field is None:
            continue
        json_name, kind, repeated, omit = field
        if kind.startswith("map:"):
            value: Any = dict(_entry(kind, raw) for raw in values)
        elif repeated:
            value = [v for raw in values for v in _repeated(kind, raw)]
        else:
            value = _value(kind, values[-1])
        if value is None or (
            omit and value in ("", 0, False, []) or (omit and value == {} and not _message_kind(kind))
        ):
            continue
        if json_name == "" and isinstance(value, dict):
            out.update(value)  # an embedded struct (`json:",inline"`: Volume's VolumeSource) adds its fields
            continue
        out[json_name] = value
    return out


def _message_kind(kind: str) -> bool:
    """A struct field: Go's JSON encoder writes an empty struct as {} even with omitempty (only an empty map
    or a nil pointer is left out, and protobuf sends neither)."""
    return not kind.startswith("map:") and kind in tables()


def _entry(kind: str, raw: Any) -> tuple[str, Any]:
    _, key_kind, value_kind = kind.split(":", 2)
    fields = _fields(raw)
    key = _value(key_kind, fields.get(1, [b""])[-1])
    value = _value(value_kind, fields[2][-1]) if 2 in fields else _zero(value_kind)
    return str(key), value


def _repeated(kind: str, raw: Any) -> list[Any]:
    if isinstance(raw, bytes) and kind in ("int32", "int64", "uint32", "uint64", "bool"):
        return [_value(kind, v) for v in _packed_varints(raw)]  # packed encoding
    return [_value(kind, raw)]


def _zero(kind: str) -> Any:
    return "" if kind in ("string", "bytes") else {} if kind not in ("int32", "int64", "bool") else 0


def _value(kind: str, raw: Any) -> Any:
    if kind == "string":
        return _text(raw)
    if kind == "bytes":
        return base64.b64encode(raw).decode()
    if kind == "bool":
        return bool(raw)
    if kind in ("int32", "int64"):
        return raw - (1 << 64) if raw >= 1 << 63 else raw
    if kind in ("uint32", "uint64"):
        return raw
    if kind == "double":
        return struct.unpack("<d", raw)[0]
    if kind == "float":
        return struct.unpack("<f", raw)[0]
    return _special(kind, raw)


def _special(kind: str, raw: bytes) -> Any:
    if kind in _TIMES:
        seconds = _fields(raw).get(1, [0])[-1]
        if not seconds:
            return None
        stamp = datetime.fromtimestamp(seconds, UTC)
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if kind.endswith("MicroTime") else "%Y-%m-%dT%H:%M:%SZ")
    if kind == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return _text(_fields(raw).get(1, [b""])[-1])
    if kind == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        fields = _fields(raw)
        if fields.get(1, [0])[-1] == 1:
            return _text(fields.get(3, [b""])[-1])
        return _value("int32", fields.get(2, [0])[-1])
    if kind in ("k8s.io.apimachinery.pkg.runtime.RawExtension", _META + "FieldsV1"):
        payload = _fields(raw).get(1, [b""])[-1]
        return json.loads(payload) if payload else None
    if kind == _META + "Duration":
        return f"{_fields(raw).get(1, [0])[-1] / 1e9:g}s"
    return _message(kind, raw)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _fields(data: bytes) -> dict[int, list[Any]]:
    """Field number -> the values in order (ints for varints, bytes for the rest)."""
    out: dict[int, list[Any]] = {}
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported protobuf wire type {wire}")
        if pos > end:
            raise ProtobufError("truncated protobuf message")
        out.setdefault(number, []).append(value)
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated protobuf varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _packed_varints(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _varint(data, pos)
        values.append(value)
    return values
