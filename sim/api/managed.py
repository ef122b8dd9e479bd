"""managedFields bookkeeping: who set which field of an object, when, and how (Update or Apply).

A field path is a tuple of FieldsV1 path elements exactly as the apiserver encodes them: ``"f:spec"`` for a
map field, ``'k:{"name":"x"}'`` for the item of a list with a merge key (containers, env, volumes,
volumeMounts by mountPath, ports by containerPort+protocol, ...), ``'v:"x"'`` for a member of a set of
scalars (finalizers). Atomic lists (tolerations, args, command) are leaves. A keyed list item is itself a
member of the set (encoded ``".": {}`` beside its children), as in real managedFields.

Rules (structured-merge-diff's, simplified to what clients observe):

- an Update write makes its manager own every leaf it added or changed, and takes those leaves away from
  every other manager; leaves that disappear leave every set;
- create is an Update from nothing, so the creating manager owns every field it set;
- an Apply makes its manager own exactly the applied fields (``record_apply``); other managers keep fields
  whose value the apply did not change (shared ownership), and a differing value owned by another manager is
  a conflict (``conflicts``) unless forced;
- entries whose set becomes empty are dropped; the list is ordered as the apiserver orders it (Apply before
  Update, then by time, manager, apiVersion).

Callers: ``sim.api.store`` (every write), ``sim.api.patch`` (server-side apply), and gpuplan's drift report
through the objects' ``metadata.managedFields`` (``owners`` answers "who last set this field").
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Set as AbstractSet
from typing import Any

Path = tuple[str, ...]

# Lists with a merge key in the Kubernetes API (patchMergeKey / listMapKeys) that gpuplan and kubectl touch.
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "volumes": ("name",),
    "env": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "ownerReferences": ("uid",),
    "conditions": ("type",),
    "hostAliases": ("ip",),
    "resourceClaims": ("name",),
    "ports": ("containerPort", "protocol"),
}
SERVICE_PORT_KEYS = ("port", "protocol")
KEY_DEFAULTS = {"protocol": "TCP"}
SET_LISTS = frozenset({"finalizers"})

# Set by the server, never owned by a manager.
SERVER_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    }
)


def list_keys(field: str, items: list[Any]) -> tuple[str, ...] | None:
    """The merge key of list ``field`` given its items, or None for an atomic list."""
    found = _keyed(field, items)
    return None if found is None else found[0]


def _keyed(field: str, items: list[Any]) -> tuple[tuple[str, ...], list[str]] | None:
    """``list_keys`` and each item's element, or None for an atomic list."""
    keys = LIST_KEYS.get(field)
    if keys is None or not items:
        return None
    for item in items:  # loops, not all(<generator>): every keyed list of every write comes here
        if type(item) is not dict and not isinstance(item, dict):
            return None
    if field == "ports" and not any("containerPort" in i for i in items):
        keys = SERVICE_PORT_KEYS
    first = keys[0]
    for item in items:
        if first not in item:
            return None
    encoded = [item_element(keys, item) for item in items]
    return (keys, encoded) if len(set(encoded)) == len(encoded) else None


def item_element(keys: tuple[str, ...], item: dict[str, Any]) -> str:
    """``k:{"containerPort":80,"protocol":"TCP"}``: keys sorted, defaults filled as the server defaults."""
    # The value's type is part of the cache key: 1, 1.0 and True are equal keys but encode differently.
    if len(keys) == 1 and keys[0] in item:  # name, type, uid, mountPath: most lists
        value = item[keys[0]]
        typed: tuple[tuple[str, type, Any], ...] = ((keys[0], type(value), value),)
    else:
        typed = tuple(
            (k, type(v), v)
            for k in keys
            if k in item or k in KEY_DEFAULTS
            for v in (item.get(k, KEY_DEFAULTS.get(k)),)
        )
    try:
        return _encoded_element(typed)
    except TypeError:  # an unhashable key value (a map or list): not worth caching
        return _encode_element(typed)


@functools.lru_cache(maxsize=16384)
def _encoded_element(typed: tuple[tuple[str, type, Any], ...]) -> str:
    """Every write walks every keyed list item (conditions, containers, env): the same few keys recur."""
    return _encode_element(typed)


def _encode_element(typed: tuple[tuple[str, type, Any], ...]) -> str:
    return "k:" + json.dumps({k: v for k, _, v in typed}, sort_keys=True, separators=(",", ":"))


def value_element(value: Any) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"))


def leaves(
    obj: dict[str, Any] | None,
    part: str | None = None,
    *,
    maps: bool = False,
    apart_from: dict[str, Any] | None = None,
) -> dict[Path, Any]:
    """Every owned path of ``obj`` with its value (list items map to their key element).

    ``part``: None for the whole object, "main" for all but status (main-resource writes of kinds with a
    status subresource), "status" for status only. ``maps``: also list optional maps as members (value
    ``MAP``), which an Update that adds them owns (``f:labels: {".": {}, ...}``); an Apply set has none.
    ``apart_from``: leave out the parts (down to a section's fields) that are the very instances
    ``apart_from`` holds at the same place: their leaves are the same in both, so comparing the leaves of
    two versions needs neither (a status write keeps the stored spec and its unchanged status fields).
    """
    out: dict[Path, Any] = {}
    other = apart_from if apart_from is not None else {}
    for key, value in (obj or {}).items():
        if (
            key in ("apiVersion", "kind")
            or (part == "main" and key == "status")
            or (part == "status" and key != "status")
        ):
            continue
        if apart_from is not None and value is other.get(key, _ABSENT):
            continue
        if key == "metadata" and isinstance(value, dict):
            other_meta = other.get("metadata")
            other_meta = other_meta if isinstance(other_meta, dict) else {}
            for mkey, mvalue in value.items():
                if mkey not in SERVER_METADATA and mvalue is not other_meta.get(mkey, _ABSENT):
                    _walk(mvalue, ("f:metadata", f"f:{mkey}"), out, maps)
            continue
        before = other.get(key)
        if (
            type(value) is dict
            and type(before) is dict
            and value
            and not _is_label_selector((f"f:{key}",), value)
        ):
            _walk_apart(value, before, (f"f:{key}",), out, maps)
            continue
        _walk(value, (f"f:{key}",), out, maps)
    return out


def _walk_apart(
    value: dict[str, Any], other: dict[str, Any], path: Path, out: dict[Path, Any], maps: bool
) -> None:
    """``_walk`` of a non-empty map, without the fields that are the very instances ``other`` holds."""
    if maps and path[-1] not in VALUE_STRUCTS:
        out[path] = MAP
    for key, child in value.items():
        if child is other.get(key, _ABSENT):
            continue
        if isinstance(child, (dict, list)):
            _walk(child, (*path, f"f:{key}"), out, maps)
        else:
            out[(*path, f"f:{key}")] = child


class _MapMarker:
    def __repr__(self) -> str:
        return "MAP"


MAP = _MapMarker()

# Struct fields that the Go types hold by value (never null), so an Update never "adds" them and they get
# no "." membership; pointers and maps (labels, annotations, data, nodeSelector, securityContext, ...) do.
VALUE_STRUCTS = frozenset(
    {"f:spec", "f:status", "f:metadata", "f:template", "f:updateStrategy", "f:strategy", "f:resources"}
)


def _is_label_selector(path: Path, value: dict[str, Any]) -> bool:
    """metav1.LabelSelector is an atomic struct: owned as a whole, ``f:selector: {}``."""
    return path[-1] == "f:selector" and bool(value.keys() & {"matchLabels", "matchExpressions"})


def _walk(value: Any, path: Path, out: dict[Path, Any], maps: bool) -> None:
    # The hottest function of a write (every leaf of every write): scalar children are stored inline, a
    # call is made only for a map or list, and a label selector is looked for only where one can be.
    if (
        isinstance(value, dict)
        and value
        and not (path[-1] == "f:selector" and _is_label_selector(path, value))
    ):
        if maps and path[-1].startswith("f:") and path[-1] not in VALUE_STRUCTS:
            out[path] = MAP
        _walk_members(value, path, out, maps)
        return
    if isinstance(value, list) and value:
        field = path[-1][2:] if path[-1].startswith("f:") else ""
        if field in SET_LISTS and all(not isinstance(v, (dict, list)) for v in value):
            for v in value:
                out[(*path, value_element(v))] = v
            return
        keyed = _keyed(field, value)
        if keyed is not None:
            for item, element in zip(value, keyed[1]):
                item_path = (*path, element)
                out[item_path] = element
                _walk_members(item, item_path, out, maps)
            return
    out[path] = value


def _walk_members(value: dict[str, Any], path: Path, out: dict[Path, Any], maps: bool) -> None:
    """The members of a map (or of a keyed list's item) below ``path``: scalars inline."""
    for key, child in value.items():
        kind = type(child)
        if kind in _SCALARS:
            out[(*path, _FIELDS.get(key) or _field(key))] = child
        elif kind is dict or kind is list or isinstance(child, (dict, list)):
            _walk(child, (*path, _FIELDS.get(key) or _field(key)), out, maps)
        else:
            out[(*path, _field(key))] = child


_SCALARS = frozenset({str, int, float, bool, type(None)})
_FIELDS: dict[Any, str] = {}
"""Field names and their ``f:`` elements: one string per name, its hash computed once, for every leaf path
of every write that names it (a pod has about 200 leaves)."""
FIELD_NAMES_KEPT = 65536


def _field(key: Any) -> str:
    element = f"f:{key}"
    if type(key) is str:
        if len(_FIELDS) >= FIELD_NAMES_KEPT:  # label and data keys are unbounded: start again
            _FIELDS.clear()
        _FIELDS[key] = element
    return element


def decode(fields_v1: dict[str, Any]) -> frozenset[Path]:
    """The set of paths a FieldsV1 trie encodes (read-only: tries are shared, so is their decoding)."""
    return _TRIES.paths_of(fields_v1 or {})


def _decode(fields_v1: dict[str, Any]) -> frozenset[Path]:
    paths: set[Path] = set()

    def visit(node: dict[str, Any], path: Path) -> None:
        for key, child in node.items():
            if key == ".":
                paths.add(path)
            elif not child:
                paths.add(path + (key,))
            else:
                visit(child, path + (key,))

    visit(fields_v1, ())
    return frozenset(paths)


def encode(paths: AbstractSet[Path]) -> dict[str, Any]:
    """The FieldsV1 trie of a set of paths: members with descendants carry ``".": {}``. The same set gives
    the same trie object: stored objects are immutable, so the pods of one DaemonSet (one template, one
    status shape) share their managedFields tries instead of each holding its own."""
    return _TRIES.trie_of(frozenset(paths))


def _encode(paths: AbstractSet[Path]) -> dict[str, Any]:
    trie: dict[str, Any] = {}
    for path in paths:
        node = trie
        for element in path:
            node = node.setdefault(element, {})
    for path in paths:
        node = trie
        for element in path:
            node = node[element]
        if node and "." not in node:
            node["."] = {}
    return _sorted_trie(trie)


def _sorted_trie(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted_trie(node[k]) for k in sorted(node)}


class _Tries:
    """The recent tries and their path sets, both ways: every write decodes each entry of the object's
    managedFields and encodes the sets it changed, and at fleet scale the same few sets recur (one per
    DaemonSet template and pod status shape, per node label set). Bounded (oldest out first); a trie found
    by identity is held here, so its id cannot be reused while it is. Thread-safe: reads of managedFields
    happen outside the store lock too."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._by_paths: dict[frozenset[Path], dict[str, Any]] = {}
        self._by_id: dict[int, tuple[dict[str, Any], frozenset[Path]]] = {}

    def trie_of(self, paths: frozenset[Path]) -> dict[str, Any]:
        with self._lock:
            found = self._by_paths.get(paths)
        if found is not None:
            return found
        trie = _encode(paths)
        self._remember(trie, paths)
        return trie

    def paths_of(self, trie: dict[str, Any]) -> frozenset[Path]:
        with self._lock:
            found = self._by_id.get(id(trie))
        if found is not None and found[0] is trie:
            return found[1]
        paths = _decode(trie)
        self._remember(trie, paths)
        return paths

    def _remember(self, trie: dict[str, Any], paths: frozenset[Path]) -> None:
        with self._lock:
            self._by_paths.setdefault(paths, trie)
            self._by_id[id(trie)] = (trie, paths)
            while len(self._by_id) > self._size:
                old_trie, old_paths = self._by_id.pop(next(iter(self._by_id)))
                if self._by_paths.get(old_paths) is old_trie:
                    del self._by_paths[old_paths]


TRIE_CACHE_SIZE = 2048
_TRIES = _Tries(TRIE_CACHE_SIZE)


def _entry_key(entry: dict[str, Any]) -> tuple[str, str, str]:
    return (entry.get("manager", ""), entry.get("operation", ""), entry.get("subresource", ""))


def _sort_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        entries,
        key=lambda e: (
            e.get("operation", ""),
            e.get("time", ""),
            e.get("manager", ""),
            e.get("apiVersion", ""),
        ),
    )


def _entry(
    manager: str,
    operation: str,
    api_version: str,
    time: str,
    subresource: str | None,
    paths: AbstractSet[Path],
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }  # _rebuild encodes
    if subresource:
        entry["subresource"] = subresource
    return entry


def _rebuild(entries: list[tuple[dict[str, Any], set[Path] | None]]) -> list[dict[str, Any]]:
    """The entries with their new sets encoded (``None``: unchanged, kept as is); empty sets dropped."""
    kept = []
    for entry, paths in entries:
        if paths is None:
            kept.append(entry)
        elif paths:
            kept.append({**entry, "fieldsV1": encode(paths)})
    return _sort_entries(kept)


def _shrunk(fields_v1: dict[str, Any], gone: set[Path]) -> set[Path] | None:
    """The paths of ``fields_v1`` without ``gone`` (and what is under it), or None when nothing was taken.
    A path loses members only where the trie has a node at it, so most entries (another part of the object)
    are passed over without decoding them."""
    if not any(_has_node(fields_v1, path) for path in gone):
        return None
    paths = decode(fields_v1)
    left = _without(paths, gone)
    return None if len(left) == len(paths) else left


def _has_node(trie: dict[str, Any], path: Path) -> bool:
    node = trie
    for element in path:
        child = node.get(element)
        if child is None:
            return False
        node = child
    return True


_ABSENT = object()


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    managed: list[dict[str, Any]],
    *,
    manager: str,
    api_version: str,
    time: str,
    subresource: str | None = None,
    part: str | None = None,
) -> list[dict[str, Any]]:
    """managedFields after an Update write (create, PUT, or a non-apply patch) by ``manager``."""
    if old is None and not managed:  # a create: the manager owns all it set (its paths hashed once)
        new_leaves = leaves(new, part, maps=True)
        if not new_leaves:
            return managed
        return _rebuild([(_entry(manager, "Update", api_version, time, subresource, set()), set(new_leaves))])
    # what changed or went: the parts both versions share (one instance) are neither, and not walked
    new_leaves = leaves(new, part, maps=True, apart_from=old)
    old_leaves = leaves(old, part, maps=True, apart_from=new)
    changed = {p for p, v in new_leaves.items() if old_leaves.get(p, _ABSENT) != v}
    removed = set(old_leaves) - set(new_leaves)
    if not changed and not removed:
        return managed
    own_key = (manager, "Update", subresource or "")
    entries: list[tuple[dict[str, Any], set[Path] | None]] = []
    own_paths: AbstractSet[Path] = frozenset()
    own_fields: dict[str, Any] | None = None
    gone = changed | removed
    for entry in managed:
        if _entry_key(entry) == own_key:
            own_fields = entry.get("fieldsV1") or {}
            own_paths = decode(own_fields)
            continue
        entries.append((entry, _shrunk(entry.get("fieldsV1") or {}, gone)))
    new_own = _without(own_paths, removed) | changed
    own_entry = _entry(manager, "Update", api_version, time, subresource, new_own)
    if own_fields is not None and new_own == own_paths:
        # A manager rewriting the fields it owns (a kubelet's status) keeps its set: reuse its encoding
        # (stored
        # objects are immutable, so entries may share it) instead of building and sorting the trie again.
        entries.append(({**own_entry, "fieldsV1": own_fields}, None))
    else:
        entries.append((own_entry, new_own))
    return _rebuild(entries)


def _without(paths: AbstractSet[Path], gone: set[Path]) -> set[Path]:
    """``paths`` minus ``gone`` and minus everything under a gone path (a replaced atomic value)."""
    if not gone:
        return set(paths)
    lengths = sorted({len(g) for g in gone})  # only prefixes as long as a gone path can match one
    if len(lengths) == 1:  # most writes: one comparison per path, no generator
        n = lengths[0]
        return {p for p in paths if p[:n] not in gone}
    return {p for p in paths if not any(p[:n] in gone for n in lengths if n <= len(p))}


def conflicts(
    live: dict[str, Any],
    applied: dict[Path, Any],
    managed: list[dict[str, Any]],
    *,
    manager: str,
    subresource: str | None = None,
    part: str | None = None,
) -> list[tuple[dict[str, Any], Path]]:
    """(entry, path) pairs where another manager owns a field the apply sets to a different value."""
    live_leaves = leaves(live, part)
    own_key = (manager, "Apply", subresource or "")
    found = []
    for entry in managed:
        if _entry_key(entry) == own_key or entry.get("subresource", "") != (subresource or ""):
            continue
        for path in sorted(decode(entry.get("fieldsV1") or {}) & set(applied)):
            if path in live_leaves and live_leaves[path] != applied[path]:
                found.append((entry, path))
    return found


def record_apply(
    live: dict[str, Any] | None,
    merged: dict[str, Any],
    managed: list[dict[str, Any]],
    *,
    applied: set[Path],
    manager: str,
    api_version: str,
    time: str,
    subresource: str | None = None,
    part: str | None = None,
    forced: list[tuple[dict[str, Any], Path]] | None = None,
) -> list[dict[str, Any]]:
    """managedFields after ``manager`` applied the fields ``applied`` (forced conflicts change owner)."""
    live_leaves, merged_leaves = leaves(live, part, maps=True), leaves(merged, part, maps=True)
    removed = set(live_leaves) - set(merged_leaves)
    changed = {p for p, v in merged_leaves.items() if p in live_leaves and live_leaves[p] != v}
    taken = {path for _, path in forced or []} | changed
    own_key = (manager, "Apply", subresource or "")
    entries: list[tuple[dict[str, Any], set[Path] | None]] = []
    for entry in managed:
        if _entry_key(entry) != own_key:
            entries.append((entry, _shrunk(entry.get("fieldsV1") or {}, removed | taken)))
    entries.append((_entry(manager, "Apply", api_version, time, subresource, applied), set(applied)))
    if _same_ownership(managed, entries):
        return managed  # re-applying the same fields keeps the entry (and its time): a no-op write
    return _rebuild(entries)


def _same_ownership(
    managed: list[dict[str, Any]], entries: list[tuple[dict[str, Any], set[Path] | None]]
) -> bool:
    before = {_entry_key(e): decode(e.get("fieldsV1") or {}) for e in managed}
    after = {
        _entry_key(e): decode(e.get("fieldsV1") or {}) if paths is None else paths
        for e, paths in entries
        if paths is None or paths
    }
    return before == after


def applied_by(
    managed: list[dict[str, Any]], manager: str, subresource: str | None = None
) -> AbstractSet[Path]:
    """The fields ``manager`` owns through Apply (what its previous apply set)."""
    for entry in managed:
        if _entry_key(entry) == (manager, "Apply", subresource or ""):
            return decode(entry.get("fieldsV1") or {})
    return frozenset()


def owners_of_path(
    managed: list[dict[str, Any]],
    path: Path,
    obj: dict[str, Any] | None = None,
    exclude: tuple[str, str, str] | None = None,
) -> list[dict[str, Any]]:
    """Entries owning ``path`` or a path under it, or (given the object) an atomic value above it."""
    atomic = (
        {p for p, v in leaves(obj, maps=True).items() if v is not MAP and not p[-1].startswith("k:")}
        if obj is not None
        else set()
    )
    found = []
    for entry in managed:
        if exclude is not None and _entry_key(entry) == exclude:
            continue
        for owned in decode(entry.get("fieldsV1") or {}):
            if owned[: len(path)] == path or (
                len(owned) < len(path) and path[: len(owned)] == owned and owned in atomic
            ):
                found.append(entry)
                break
    return found


def owners(obj: dict[str, Any], path: str | Path) -> list[tuple[str, str, str]]:
    """Who set ``path`` of ``obj``, most recent first: [(manager, operation, time)].

    ``path`` is either encoded elements (``fields(...)`` builds them, needed for label keys with dots) or the
    apiserver's conflict notation, e.g. ``.spec.template.spec.containers[name="x"].image``. A manager owning
    the path, a field under it, or an atomic value containing it counts.
    """
    elements = parse_path(path) if isinstance(path, str) else path
    managed = (obj.get("metadata") or {}).get("managedFields") or []
    entries = owners_of_path(managed, elements, obj)
    entries.sort(key=lambda e: (e.get("time", ""), e.get("manager", "")), reverse=True)
    return [(e.get("manager", ""), e.get("operation", ""), e.get("time", "")) for e in entries]


def fields(*names: str) -> Path:
    """A path of plain field names, for names with dots: ``fields("metadata", "labels",
    "nvidia.com/gpu.product")``."""
    return tuple(f"f:{name}" for name in names)


def format_path(path: Path) -> str:
    """The apiserver's notation: ``.spec.containers[name="x"].image``, ``.metadata.finalizers[="a"]``."""
    out = ""
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            key = json.loads(rest)
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in key.items()) + "]"
        elif kind == "v":
            out += f"[={rest}]"
        elif kind == "i":
            out += f"[{rest}]"
    return out


def parse_path(text: str) -> Path:
    """The inverse of ``format_path``; a leading dot is optional."""
    elements: list[str] = []
    i = 0
    text = text if text.startswith((".", "[")) else "." + text
    while i < len(text):
        if text[i] == ".":
            j = i + 1
            while j < len(text) and text[j] not in ".[":
                j += 1
            elements.append("f:" + text[i + 1 : j])
            i = j
        elif text[i] == "[":
            j = _closing_bracket(text, i)
            elements.append(_bracket_element(text[i + 1 : j]))
            i = j + 1
        else:
            raise ValueError(f"invalid field path {text!r}")
    return tuple(elements)


def _closing_bracket(text: str, start: int) -> int:
    in_string = False
    for j in range(start + 1, len(text)):
        if text[j] == '"' and text[j - 1] != "\\":
            in_string = not in_string
        elif text[j] == "]" and not in_string:
            return j
    raise ValueError(f"unclosed '[' in field path {text!r}")


def _bracket_element(inner: str) -> str:
    if inner.startswith("="):
        return value_element(json.loads(inner[1:]))
    if inner.isdigit():
        return f"i:{inner}"
    decoder = json.JSONDecoder()
    key: dict[str, Any] = {}
    pos = 0
    while pos < len(inner):
        eq = inner.index("=", pos)
        value, end = decoder.raw_decode(inner, eq + 1)
        key[inner[pos:eq]] = value
        pos = end + 1 if end < len(inner) and inner[end] == "," else end
    return "k:" + json.dumps(key, sort_keys=True, separators=(",", ":"))


def conflict_report(found: list[tuple[dict[str, Any], Path]]) -> tuple[str, list[dict[str, str]]]:
    """The 409 message and causes of apply conflicts, as apimachinery's managedfields/internal/conflict.go
    words them (NewConflictError, getConflictMessage, printManager): one conflict inline, several grouped by
    manager in the order of their identifiers; each cause ``{reason: FieldManagerConflict, message,
    field}`` (StatusCause's Type is serialised as ``reason``)."""

    def identifier(entry: dict[str, Any]) -> str:
        """BuildManagerIdentifier: the entry without fields and time, an applier's without apiVersion."""
        update = entry.get("operation") == "Update"
        fields = {
            "manager": entry.get("manager"),
            "operation": entry.get("operation"),
            "apiVersion": entry.get("apiVersion") if update else None,
            "subresource": entry.get("subresource"),
        }
        return json.dumps({k: v for k, v in fields.items() if v}, separators=(",", ":"))

    def who(entry: dict[str, Any]) -> str:
        text = json.dumps(entry.get("manager") or "")
        if entry.get("subresource"):
            text += f" with subresource {json.dumps(entry['subresource'])}"
        if entry.get("operation") == "Update":
            text += f" using {entry.get('apiVersion')}"  # an applier is named alone
        return text

    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {who(e)}", "field": format_path(p)}
        for e, p in found
    ]
    if len(found) == 1:
        text = f"conflict with {who(found[0][0])}: {format_path(found[0][1])}"
    else:
        by_manager: dict[str, list[tuple[dict[str, Any], Path]]] = {}
        for entry, path in found:
            by_manager.setdefault(identifier(entry), []).append((entry, path))
        lines: list[str] = []
        for key in sorted(by_manager):
            lines.append(f"conflicts with {who(by_manager[key][0][0])}:")
            lines += [f"- {format_path(p)}" for _, p in by_manager[key]]
        text = "\n".join(lines)
    plural = "" if len(found) == 1 else "s"
    return f"Apply failed with {len(found)} conflict{plural}: {text}", causes
