"""Plain-JSON object helpers shared by the store's modules: copies, metadata access, keys, timestamps.

Objects are dicts as decoded from JSON. The store never mutates a stored dict (each write stores a new one,
which may share unchanged subtrees with the old), so these helpers copy where a caller could otherwise reach
into stored state.

Callers: ``sim.api.store`` and the modules split out of it (``watchlog``, ``paging``, ``table``, ``core``,
``lifecycle``, ``writes``), and ``sim.api.strategy``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from gpuplan.sim.api.registry import ResourceType

Key = tuple[str, str]  # (namespace or "", name)
Obj = dict[str, Any]
StorageKey = tuple[str, str]  # (group, plural): every served version of a resource shares it

_T = TypeVar("_T")


_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy_json(value: _T) -> _T:
    """A deep copy of JSON data (dicts and lists copied, scalars and tuples shared), several times faster than
    copy.deepcopy. The store's hottest function: a write makes one working copy and one of its answer."""
    kind = type(value)
    if kind is dict:
        return cast(_T, _copy_dict(cast(dict[str, Any], value)))
    if kind is list:
        return cast(_T, _copy_list(cast(list[Any], value)))
    return cast(_T, _copy_other(value))


# The two helpers below branch on the exact type inline instead of calling copy_json for every value: a
# function call per scalar was most of the cost. Anything else (dict or list subclasses) takes _copy_other.


def _copy_dict(source: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in source.items():
        kind = type(v)
        if kind is dict:
            out[k] = _copy_dict(v)
        elif kind is list:
            out[k] = _copy_list(v)
        elif kind in _SCALARS:
            out[k] = v
        else:
            out[k] = _copy_other(v)
    return out


def _copy_list(source: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in source:
        kind = type(v)
        if kind is dict:
            out.append(_copy_dict(v))
        elif kind is list:
            out.append(_copy_list(v))
        elif kind in _SCALARS:
            out.append(v)
        else:
            out.append(_copy_other(v))
    return out


def _copy_other(value: Any) -> Any:
    """Subclasses of dict and list become plain copies; anything else (immutable) is shared."""
    if isinstance(value, dict):
        return _copy_dict(value)
    if isinstance(value, list):
        return _copy_list(value)
    return value


def meta(obj: Obj) -> dict[str, Any]:
    """``obj["metadata"]``, or an empty dict when the object has none (never inserted)."""
    found = obj.get("metadata")
    return found if isinstance(found, dict) else {}


def key(obj: Obj) -> Key:
    found = meta(obj)
    return (found.get("namespace") or "", found.get("name") or "")


def as_version(rt: ResourceType, obj: Obj) -> Obj:
    """A deep copy of ``obj`` answering as ``rt``'s group version (the apiVersion of the request)."""
    out: Obj = copy_json(obj)
    out["apiVersion"] = rt.api_version
    out["kind"] = rt.kind
    return out


def without_bookkeeping(obj: Obj) -> Obj:
    """The object without resourceVersion, to compare content for no-op writes."""
    found = {k: v for k, v in meta(obj).items() if k != "resourceVersion"}
    return {**obj, "metadata": found}


def spec_part(obj: Obj) -> Obj:
    """What ``metadata.generation`` tracks: everything but metadata, status and the type fields."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def now_rfc3339(clock: Callable[[], datetime]) -> str:
    return rfc3339(clock())


_LAST_SECOND: tuple[tuple[int, ...], str] = ((), "")


def rfc3339(moment: datetime) -> str:
    """``moment`` to the second in UTC, as the API writes times. Every write stamps a few times, mostly
    within the same second: that second's string is made once and shared (one object, not one per field)."""
    global _LAST_SECOND
    utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    second = (utc.second, utc.minute, utc.hour, utc.day, utc.month, utc.year)
    last = _LAST_SECOND  # one read: another thread may replace it meanwhile
    if last[0] == second:
        return last[1]
    text = utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    _LAST_SECOND = (second, text)
    return text
