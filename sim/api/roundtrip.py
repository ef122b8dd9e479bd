"""A built-in object as the API server stores it: decoded into its Go type, encoded again.

kube-apiserver keeps what it decodes from a request in the Go structs of k8s.io/api and writes them back out
with encoding/json, so a client reads what that round trip leaves (the typed fields' ``json`` tags):

- the zero value of a non-pointer ``omitempty`` field is left out: an env item's ``value: ""``
  (``EnvVar.Value string `json:"value,omitempty"```), a volume mount's ``readOnly: false``, ``hostPort: 0``,
  an empty ``command: []``, an empty ``labels: {}`` map; a null of such a field likewise. A struct is always
  written (``resources: {}``), a pointer keeps its zero (``hostPath.type: ""``), and a field without
  ``omitempty`` keeps whatever it has;
- a ``resource.Quantity`` is written in its canonical form (``sim.api.quantity``: ``0.1`` -> ``100m``).

The field tables are the protobuf ones (``protobuf_data/messages.json.gz``), which record each field's JSON
name, type and whether encoding/json omits its zero (``gen_protobuf.parse_go_tags``). Fields the tables do
not know (custom resources, unknown fields pruned or refused elsewhere) are left as they are.

Objects are not changed in place below the top level: a part that changes is replaced by a new one, so a
status write may pass the stored object's shared parts (``sharing``) through it.

Caller: ``sim.api.defaults.default_object`` (every write of the main resource, after the defaults, as the
server encodes after defaulting) and ``sim.api.writes`` (status writes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from gpuplan.sim.api import quantity, registry
from gpuplan.sim.api.protobuf import message_name, tables

Obj = dict[str, Any]

QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
# Types with their own JSON marshalling: written as they are sent (a zero Time is null, never left out).
_OPAQUE = frozenset(
    {
        _META + "Time",
        _META + "MicroTime",
        _META + "Duration",
        _META + "FieldsV1",
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
        "k8s.io.apimachinery.pkg.runtime.RawExtension",
    }
)
_NUMBERS = frozenset({"int32", "int64", "uint32", "uint64", "double", "float"})
_DROP = object()
_BUILTIN = frozenset(registry.BUILTIN)


def encode_object(rt: registry.ResourceType, obj: Obj) -> None:
    """A request's object of a built-in kind (the caller's own copy) as the server stores it."""
    message = object_message(rt.api_version, rt.kind) if rt in _BUILTIN else None
    if message is not None:
        encode_in_place(message, obj)


def encode_status(rt: registry.ResourceType, obj: Obj) -> None:
    """The status a status write stores; the rest of ``obj`` is the stored object's, already encoded."""
    message = status_message(rt.api_version, rt.kind) if rt in _BUILTIN else None
    status = obj.get("status")
    if message is not None and isinstance(status, dict):
        obj["status"] = encode(message, status)


def object_message(api_version: str, kind: str) -> str | None:
    """The table of a built-in kind, None for a kind the tables lack."""
    name = message_name(api_version, kind)
    return name if name in tables() else None


def status_message(api_version: str, kind: str) -> str | None:
    """The table of a built-in kind's ``status``."""
    message = object_message(api_version, kind)
    field = _fields(message).get("status") if message is not None else None
    return field[0] if field is not None and field[0] in tables() else None


def encode(message: str, obj: Obj) -> Obj:
    """``obj`` as the Go type ``message`` writes it; ``obj`` itself when that changes nothing."""
    out = obj
    fields = _fields(message)
    for key, value in obj.items():
        field = fields.get(key)
        if field is None:
            continue
        new = _field(field, value)
        if new is value:
            continue
        if out is obj:
            out = dict(obj)
        if new is _DROP:
            del out[key]
        else:
            out[key] = new
    return out


def encode_in_place(message: str, obj: Obj) -> None:
    """``encode`` for an object the caller owns (a request's copy): its top level is rewritten."""
    encoded = encode(message, obj)
    if encoded is not obj:
        obj.clear()
        obj.update(encoded)


# How a field's value is walked: a scalar or an opaque type is only checked for its zero; the others hold
# values that may change.
_PLAIN, _QUANTITY, _STRUCT = 0, 1, 2


class _Field(NamedTuple):
    kind: str  # the item type of a list or map, the type of the rest
    shape: str  # "one", "list" or "map"
    walk: int  # _PLAIN, _QUANTITY or _STRUCT: what an item is
    omit: bool  # omitempty on a non-pointer field: its zero is left out


@functools.cache
def _fields(message: str) -> dict[str, _Field]:
    """{json name: field}; an inline struct's fields are its parent's."""
    found: dict[str, _Field] = {}
    for json_name, kind, repeated, omit in tables().get(message, {}).values():
        if not json_name:
            found.update(_fields(kind))
            continue
        shape = "list" if repeated else "map" if kind.startswith("map:") else "one"
        item = kind.split(":", 2)[2] if shape == "map" else kind
        walk = (
            _QUANTITY if item == QUANTITY else _STRUCT if item in tables() and item not in _OPAQUE else _PLAIN
        )
        found[json_name] = _Field(item, shape, walk, omit)
    return found


def _field(field: _Field, value: Any) -> Any:
    if value is None:
        return _DROP if field.omit else value
    if field.shape == "one":
        if field.walk == _PLAIN:
            return _DROP if field.omit and _zero(field.kind, value) else value
        return _item(field, value)
    if not value:
        return _DROP if field.omit and isinstance(value, list | dict) else value
    if field.walk == _PLAIN:
        return value
    if field.shape == "list" and isinstance(value, list):
        return _items(field, value, enumerate(value), list)
    if field.shape == "map" and isinstance(value, dict):
        return _items(field, value, value.items(), dict)
    return value


def _items(field: _Field, value: Any, entries: Iterable[tuple[Any, Any]], copy: Callable[[Any], Any]) -> Any:
    """A list's or map's items encoded; a copy of ``value`` only when one of them changes."""
    out = value
    for key, item in entries:
        new = _item(field, item)
        if new is not item:
            if out is value:
                out = copy(value)
            out[key] = new
    return out


def _item(field: _Field, value: Any) -> Any:
    if field.walk == _STRUCT:
        return encode(field.kind, value) if isinstance(value, dict) else value
    try:
        text = quantity.canonical(value)
    except quantity.QuantityError:
        return value  # the server refuses it on decode: validation's business, not storage's
    return value if text == value else text


def _zero(kind: str, value: Any) -> bool:
    """encoding/json's empty value of a scalar of this type."""
    if kind in ("string", "bytes"):
        return isinstance(value, str) and not value
    if kind == "bool":
        return value is False
    return kind in _NUMBERS and type(value) in (int, float) and not value
