"""Structural sharing of stored objects: one canonical instance of the subtrees that recur across objects.

At fleet scale most of a stored pod is the same as its siblings': the containers, volumes and tolerations its
DaemonSet's template gave every pod, its labels and owner reference, the managedFields tries of the manager
that created it and of the kubelet that reports its status. Stored objects are immutable, so they may share
such subtrees; the pool makes them do so:

- ``share(new, old)``: before the store commits ``new`` (its own fresh object), every recurring part of it
  (each non-empty map or list under ``metadata``, ``spec`` and ``status``, and their parts three levels
  deeper, managedFields aside, which ``sim.api.managed`` shares entry by entry; and each non-empty map at
  the top level besides those, as an Event's ``involvedObject`` and ``source``) is replaced by the
  pool's equal instance, or becomes that instance. A part that is the very object ``old`` had there was
  shared when ``old`` was stored. Equal means the same JSON, key order included, so every answer reads
  exactly as before; a part's JSON is built from its parts' (each part is encoded once, not once for every
  level above it).
- ``subscriber_copy(obj)``: the copy the store's subscribers get of an event's object. A pooled part is
  copied once and that copy shared by every event (subscribers treat events as read-only, and they can never
  reach the store's own instance); the rest is copied as ``copy_json`` copies it.

Answers to requests stay full deep copies (``objects.as_version``): a caller may change its answer. Each store
has its own pool, so nothing is shared between two simulators of one process. Bounded:
the least recently used instances leave the pool (objects keep them; later equal parts share another).
Thread-safe: commits (the only callers of ``Pool.canonical``, so the pool needs no lock of its own) run under
the store lock, subscriber copies on the dispatcher thread (their reads of the pool are single dict lookups).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from json.encoder import encode_basestring_ascii as _encode_string
from typing import Any

from gpuplan.sim.api.objects import Obj, copy_json
from gpuplan.sim.api.registry import ResourceType

POOL_SIZE = 262144  # a 10,000-node fleet has tens of recurring parts per node (its pods' affinity, host IPs)
SECTIONS = ("metadata", "spec", "status")
INNER_LEVELS = (
    3  # below a section's part: a list's items, their parts, theirs (containers > volumeMounts > one)
)
UNSHARED = frozenset({"managedFields"})  # shared by sim.api.managed, cheaper than by its JSON here
_SCALARS = frozenset({str, int, float, bool, type(None)})


class Pool:
    """Canonical instances by a key of their content, and the one copy of each handed to subscribers.

    A part is pooled the second time its content is seen: most parts of an object are its own (a pod's IP, a
    node's addresses) and would only push the recurring ones out of the pool."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self._size = size
        self._by_key: OrderedDict[Any, Any] = OrderedDict()
        # id(canonical) -> [canonical, its key, the subscribers' copy or None until one is asked for]
        self.entries: dict[int, list[Any]] = {}
        # hashes of keys seen once, oldest first: an OrderedDict, whose oldest entry is found at once, where
        # a dict's first key is found by a scan over the slots of every key deleted before it
        self._seen_once: OrderedDict[int, None] = OrderedDict()

    def canonical(self, key: Any, value: Any) -> Any:
        """The pooled instance equal to ``value`` (``key`` says what it holds), or ``value`` itself: pooled
        when its key was seen before. Called under the store lock only (``share``)."""
        found = self._by_key.get(key)
        if found is not None:
            self._by_key.move_to_end(key)
            return found
        digest = hash(key)
        if digest not in self._seen_once:
            self._seen_once[digest] = None
            while len(self._seen_once) > self._size:
                self._seen_once.popitem(last=False)
            return value
        del self._seen_once[digest]
        self._by_key[key] = value
        self.entries[id(value)] = [value, key, None]
        while len(self._by_key) > self._size:
            _, gone = self._by_key.popitem(last=False)
            self.entries.pop(id(gone), None)
        return value

    def key_of(self, value: Any) -> Any | None:
        """The key ``value`` is pooled by; None when it is not (or no longer) pooled."""
        entry = self.entries.get(id(value))
        return entry[1] if entry is not None and entry[0] is value else None

    def pooled(self, value: Any) -> bool:
        entry = self.entries.get(id(value))
        return entry is not None and entry[0] is value

    def copy_of(self, value: Any) -> Any | None:
        """The subscribers' shared copy of a pooled ``value``; None when it is not (or no longer) pooled."""
        entry = self.entries.get(id(value))
        if entry is None or entry[0] is not value:
            return None
        if entry[2] is None:
            entry[2] = _copy(value, self)
        return entry[2]


def share(new: Obj, old: Obj | None, pool: Pool) -> None:
    """Make the recurring parts of ``new`` (the store's own, about to be stored) the pool's instances."""
    _share_managed_fields(new, old, pool)
    _share_top_level(new, old, pool)
    for section in SECTIONS:
        part = new.get(section)
        before = old.get(section) if old is not None else None
        if type(part) is not dict or part is before:
            continue
        if type(before) is not dict:
            before = {}
        for name, value in part.items():
            if name in UNSHARED or type(value) not in (dict, list) or not value or value is before.get(name):
                continue
            part[name] = _shared(value, pool, INNER_LEVELS)


def _share_top_level(new: Obj, old: Obj | None, pool: Pool) -> None:
    """The maps outside the sections, whole: an Event's ``source`` is its component's and node's, its
    ``involvedObject`` the same for every event about one container (Pulling, Pulled, Created, Started).
    Lists there are left alone: an Endpoints' ``subsets`` or a slice's ``endpoints`` change with every pod
    and would be encoded whole on each write for nothing."""
    for name, value in new.items():
        if name in SECTIONS or type(value) is not dict or not value:
            continue
        if old is None or value is not old.get(name):
            new[name] = _shared(value, pool, 0)


def _shared(value: Any, pool: Pool, levels: int) -> Any:
    """``value`` or the pool's equal instance, its parts ``levels`` deep shared first: a pod's containers
    differ from its siblings' by the mount of its own ``kube-api-access-<random>`` volume, and their env,
    ports, probes, resources and every other mount are still the template's."""
    try:
        return _shared_and_text(value, pool, levels)[0]
    except (TypeError, ValueError):
        return value  # not plain JSON: kept as it is (the parts shared before stay equal to what they were)


def _shared_and_text(value: Any, pool: Pool, levels: int) -> tuple[Any, str]:
    """``_shared``'s answer and its JSON, the key it is pooled by: a part's JSON is built from its parts'
    (encoded while they were shared) instead of encoding them again at every level above."""
    entry = pool.entries.get(id(value))  # pool.key_of inline: every part of every write asks
    if entry is not None and entry[0] is value:
        # pooled already: by its JSON, unless it is a managedFields part (keyed by ids)
        key = entry[1]
        return value, key if type(key) is str else _dumps(value)
    text = _composed(value, pool, levels) if levels > 0 and value else _dumps(value)
    # the JSON alone is the key: it tells a map ("{...") from a list ("[...")
    return pool.canonical(text, value), text


def _composed(value: Any, pool: Pool, levels: int) -> str:
    """The JSON of ``value`` (as ``json.dumps`` with compact separators writes it), its parts shared. The
    scalars are encoded inline and each member's ``"name":`` is made once per name: this loop runs for
    every member of every shared part of every write."""
    if type(value) is list:
        texts = []
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str:
                text = _encode_string(item)
            elif (kind is dict or kind is list) and item:
                value[index], text = _shared_and_text(item, pool, levels - 1)
            else:
                text = _scalar(item, kind)
            texts.append(text)
        return "[" + ",".join(texts) + "]"
    members = []
    for name, item in value.items():
        prefix = _MEMBER_NAMES.get(name)
        if prefix is None:
            if type(name) is not str:
                return _dumps(value)  # a key json.dumps would convert: encoded whole, as before
            prefix = _member_name(name)
        kind = type(item)
        if kind is str:
            text = _encode_string(item)
        elif (kind is dict or kind is list) and item and name not in UNSHARED:
            value[name], text = _shared_and_text(item, pool, levels - 1)
        else:
            text = _scalar(item, kind)
        members.append(prefix + text)
    return "{" + ",".join(members) + "}"


def _scalar(item: Any, kind: type) -> str:
    """``_dumps`` of a member that is no string and no part to share (a number, bool, null, or what is
    left whole)."""
    if kind is int:
        return int.__repr__(item)
    if kind is bool:
        return "true" if item else "false"
    if item is None:
        return "null"
    return "".join(_encode(item, 0))


_MEMBER_NAMES: dict[str, str] = {}
"""``"name":`` of each member name seen (bounded: label and data keys are unbounded)."""
MEMBER_NAMES_KEPT = 65536


def _member_name(name: str) -> str:
    if len(_MEMBER_NAMES) >= MEMBER_NAMES_KEPT:
        _MEMBER_NAMES.clear()
    prefix = _MEMBER_NAMES[name] = _encode_string(name) + ":"
    return prefix


def _dumps(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"))``, a string without its Python layers."""
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return "".join(_encode(value, 0))


_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=True)
# json's C encoder made once (json.dumps makes one per call, a third of its cost on a short part); the
# Python encoder where the C one is missing
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode: Any = (
    _make_encoder(None, _JSON.default, _encode_string, None, ":", ",", False, False, True)
    if _make_encoder is not None
    else lambda value, _level: _JSON.iterencode(value)
)


def _share_managed_fields(new: Obj, old: Obj | None, pool: Pool) -> None:
    """managedFields entry by entry: an entry is shared by its strings and its trie's identity (the tries
    are already shared by ``managed.encode``), the list by its entries' identities. Pooled keys that hold
    ids are safe: the pooled value holds those objects, so no other object can take their ids meanwhile."""
    metadata = new.get("metadata")
    entries = metadata.get("managedFields") if type(metadata) is dict else None
    before = old.get("metadata") if old is not None else None
    if type(entries) is not list or not entries or pool.pooled(entries):
        return
    if type(before) is dict and entries is before.get("managedFields"):
        return
    shared = [_shared_entry(entry, pool) for entry in entries]
    assert type(metadata) is dict
    metadata["managedFields"] = pool.canonical(("managedFields", *map(id, shared)), shared)


def _shared_entry(entry: Any, pool: Pool) -> Any:
    if type(entry) is not dict or pool.pooled(entry):
        return entry
    key: list[Any] = ["entry"]
    for name, value in entry.items():
        if type(value) is str:
            key.append((name, value))
        elif name == "fieldsV1" and type(value) is dict:
            key.append((name, id(pool.canonical(("fieldsV1", id(value)), value))))
        else:
            return entry  # not the shape the store writes
    return pool.canonical(tuple(key), entry)


def subscriber_copy(
    rt: ResourceType, stored: Obj, pool: Pool, previous: tuple[Obj, Obj] | None = None
) -> Obj:
    """What ``objects.as_version`` gives, with the pooled parts as their shared copies. ``previous``: the
    object ``stored`` replaced and the copy subscribers got of it: the parts (two levels deep) that
    ``stored`` holds by the very same instance are given that copy's, not copied again (a status write keeps
    the stored spec; a node's status patch most of its status)."""
    out: Obj = _copy(stored, pool) if previous is None else _copy_like(stored, *previous, pool, REUSE_LEVELS)
    out["apiVersion"] = rt.api_version
    out["kind"] = rt.kind
    return out


REUSE_LEVELS = 2
_ABSENT = object()


def _copy_like(value: Obj, before: Obj, before_copy: Obj, pool: Pool, levels: int) -> Obj:
    """``_copy`` of a map whose earlier version ``before`` was copied as ``before_copy``."""
    out: Obj = {}
    for k, v in value.items():
        vkind = type(v)
        if vkind in _SCALARS:
            out[k] = v
        elif vkind is dict or vkind is list:
            prior = before.get(k, _ABSENT)
            if prior is v and k in before_copy:
                out[k] = before_copy[k]
                continue
            shared = pool.copy_of(v)
            if shared is not None:
                out[k] = shared
            elif levels > 1 and vkind is dict and type(prior) is dict and type(before_copy.get(k)) is dict:
                out[k] = _copy_like(v, prior, before_copy[k], pool, levels - 1)
            else:
                out[k] = _copy(v, pool)
        else:
            out[k] = copy_json(v)
    return out


def _copy(value: Any, pool: Pool) -> Any:
    kind = type(value)
    if kind is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            vkind = type(v)
            if vkind in _SCALARS:
                out[k] = v
            elif vkind is dict or vkind is list:
                shared = pool.copy_of(v)
                out[k] = shared if shared is not None else _copy(v, pool)
            else:
                out[k] = copy_json(v)
        return out
    if kind is list:
        items: list[Any] = []
        for v in value:
            vkind = type(v)
            if vkind in _SCALARS:
                items.append(v)
            elif vkind is dict or vkind is list:
                shared = pool.copy_of(v)
                items.append(shared if shared is not None else _copy(v, pool))
            else:
                items.append(copy_json(v))
        return items
    return copy_json(value)
