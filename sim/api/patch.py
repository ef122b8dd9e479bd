"""The four PATCH bodies a kube-apiserver accepts, as pure functions over JSON dicts.

- JSON merge patch (RFC 7386, ``application/merge-patch+json``);
- JSON patch (RFC 6902, ``application/json-patch+json``): add, remove, replace, move, copy, test; a failed
  ``test`` or a missing path is a 422;
- strategic merge patch (``application/strategic-merge-patch+json``, built-in kinds only, as on a real
  server): lists with a merge key (``managed.LIST_KEYS``: containers, env, volumes, volumeMounts by mountPath,
  ports by containerPort, ...) merge item by item, ``finalizers`` merge as a set, other lists (tolerations,
  args) are replaced; ``$patch: delete|replace``, ``$retainKeys``, ``$setElementOrder/<list>`` and
  ``$deleteFromPrimitiveList/<list>`` directives, as kubectl sends them;
- server-side apply (``application/apply-patch+yaml``, YAML or JSON): ``apply_merge`` merges the applied
  configuration into the live object and ``remove_paths`` drops fields the manager stopped applying. Conflict
  detection and ownership live in ``sim.api.managed``; ``sim.api.store.Store.patch`` puts them together.

Errors raise ``PatchError`` with the HTTP code and reason the store reports.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, TypeVar, cast

import yaml

from gpuplan.sim.api import managed

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC, APPLY)


class PatchError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


_T = TypeVar("_T")


def _copy(value: _T) -> _T:
    if isinstance(value, dict):
        return cast(_T, {k: _copy(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(_T, [_copy(v) for v in value])
    return value


def decode(body: Any, patch_type: str, *, strategic_ok: bool = True) -> Any:
    """The patch document of a request body (bytes, str, or already-parsed JSON)."""
    accepted = [t for t in PATCH_TYPES if strategic_ok or t != STRATEGIC]
    if patch_type not in accepted:
        raise PatchError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - "
            "accepted media types include: " + ", ".join(accepted),
        )
    document = body
    if isinstance(body, (bytes, str)):
        try:
            document = yaml.safe_load(body) if patch_type == APPLY else json.loads(body)
        except (ValueError, yaml.YAMLError) as exc:
            raise PatchError(400, "BadRequest", f"error decoding patch: {exc}") from exc
    expected = list if patch_type == JSON_PATCH else dict
    if not isinstance(document, expected):
        what = "a JSON array of operations" if expected is list else "a JSON object"
        raise PatchError(400, "BadRequest", f"the patch must be {what}")
    return document


def apply(obj: dict[str, Any], document: Any, patch_type: str) -> dict[str, Any]:
    """``obj`` patched by ``document`` (merge, JSON or strategic merge patch)."""
    if patch_type == MERGE:
        result = merge_patch(obj, document)
    elif patch_type == JSON_PATCH:
        result = json_patch(obj, document)
    else:
        result = strategic_merge_patch(obj, document)
    if not isinstance(result, dict):
        raise PatchError(422, "Invalid", "the patched document is not an object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------------- JSON patch (RFC 6902)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PatchError(422, "Invalid", f'doc is missing path: "{path}": missing value')
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(422, "Invalid", f'doc is missing path: "{path}": missing value')


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else _index(last, len(parent) + 1, path)
        parent.insert(index, value)
    else:
        raise PatchError(422, "Invalid", f'doc is missing path: "{path}": missing value')
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    parent, last = _parent(doc, tokens, path), tokens[-1] if tokens else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), path))
    raise PatchError(422, "Invalid", f'doc is missing path: "{path}": missing value')


def _index(token: str, size: int, path: str) -> int:
    if not token.isdigit() or int(token) >= size:
        raise PatchError(422, "Invalid", f'doc is missing path: "{path}": missing value')
    return int(token)


def json_patch(obj: Any, operations: list[Any]) -> Any:
    """RFC 6902, operations applied in order to a copy; the first failure aborts the whole patch."""
    doc = _copy(obj)
    for op in operations:
        if not isinstance(op, dict) or "path" not in op:
            raise PatchError(400, "BadRequest", f"invalid JSON patch operation: {json.dumps(op)}")
        kind, path = op.get("op"), op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(400, "BadRequest", f"missing value for {kind} operation on {path}")
        if kind == "add":
            doc = _add(doc, path, _copy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, _copy(op["value"]))
        elif kind in ("move", "copy"):
            value = (
                _remove(doc, op.get("from", "")) if kind == "move" else _copy(_get(doc, op.get("from", "")))
            )
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(422, "Invalid", f"testing value {path} failed: test failed")
        else:
            raise PatchError(400, "BadRequest", f"unexpected kind of JSON patch operation: {kind!r}")
    return doc


# ---------------------------------------------------------------------- strategic merge patch

_SMP_KEYS: dict[str, str] = {field: keys[0] for field, keys in managed.LIST_KEYS.items()}


def _merge_key(field: str, items: list[Any]) -> str | None:
    key = _SMP_KEYS.get(field)
    if field == "ports" and any(
        isinstance(i, dict) and "port" in i and "containerPort" not in i for i in items
    ):
        key = "port"
    return key


def strategic_merge_patch(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    """A strategic merge patch of a map; None when the patch says ``$patch: delete``."""
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    result = _copy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key) or {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            current = result.get(key)
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = value
    for key, order in patch.items():
        if key.startswith("$setElementOrder/") and isinstance(result.get(key.split("/", 1)[1]), list):
            field = key.split("/", 1)[1]
            result[field] = _reorder(field, result[field], order)
    if isinstance(patch.get("$retainKeys"), list):
        result = {k: v for k, v in result.items() if k in patch["$retainKeys"]}
    return result


def _strip_directives(value: _T) -> _T:
    if isinstance(value, dict):
        return cast(_T, {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")})
    if isinstance(value, list):
        return cast(_T, [_strip_directives(v) for v in value])
    return value


def _merge_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return _strip_directives([i for i in patch if not (isinstance(i, dict) and "$patch" in i)])
    if field in managed.SET_LISTS:
        return _copy(current) + [v for v in patch if v not in current]
    key = _merge_key(field, current + patch)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return _strip_directives(_copy(patch))
    result = _copy(current)
    for item in patch:
        at = next(
            (i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item.get(key)),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                result.pop(at)
        elif at is not None:
            result[at] = strategic_merge_patch(result[at], item)
        else:
            result.append(strategic_merge_patch({}, item))
    return result


def _reorder(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = _merge_key(field, items)
    if key is None:
        ranked = {json.dumps(v, sort_keys=True): n for n, v in enumerate(order)}
        return sorted(items, key=lambda v: ranked.get(json.dumps(v, sort_keys=True), len(ranked)))
    ranks = {json.dumps(o.get(key)): n for n, o in enumerate(order) if isinstance(o, dict)}
    return sorted(
        items, key=lambda i: ranks.get(json.dumps(i.get(key) if isinstance(i, dict) else None), len(ranks))
    )


# ---------------------------------------------------------------------- server-side apply


def apply_merge(live: dict[str, Any], applied: dict[str, Any], part: str | None) -> dict[str, Any]:
    """``live`` with the applied configuration merged in (keyed lists item by item, atomic lists replaced).

    ``part`` is "main" (status left as it is), "status" (only status taken), or None (everything).
    """
    result = _copy(live)
    for key, value in applied.items():
        if (part == "main" and key == "status") or (part == "status" and key != "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = result.setdefault("metadata", {})
            for mkey, mvalue in value.items():
                if mkey not in managed.SERVER_METADATA:
                    meta[mkey] = _merge_value(mkey, meta.get(mkey), mvalue)
            continue
        result[key] = _merge_value(key, result.get(key), value)
    return result


def _merge_value(field: str, live: Any, applied: Any) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        out = _copy(live)
        for key, value in applied.items():
            out[key] = _merge_value(key, live.get(key), value)
        return out
    if isinstance(live, list) and isinstance(applied, list):
        if field in managed.SET_LISTS:
            return _copy(live) + [v for v in applied if v not in live]
        keys = managed.list_keys(field, applied)
        if keys is not None and (not live or managed.list_keys(field, live) == keys):
            merged = _copy(live)
            positions = {managed.item_element(keys, item): n for n, item in enumerate(merged)}
            for item in applied:
                element = managed.item_element(keys, item)
                if element in positions:
                    merged[positions[element]] = _merge_value("", merged[positions[element]], item)
                else:
                    merged.append(_copy(item))
            return merged
    return _copy(applied)


def remove_paths(obj: dict[str, Any], paths: list[managed.Path]) -> None:
    """Remove fields (and keyed list items, set members) from ``obj`` in place, as server-side apply drops
    what a manager no longer applies and nobody else owns.

    Every target is found before anything is removed: removing a keyed item's key field first (``name`` of
    an ``env`` entry) would leave its other fields unreachable by their ``k:{"name":...}`` path, keeping a
    nameless ``{"value": ...}``. A key field is never removed on its own: an item left with nothing but its
    keys is removed whole, as the real API server removes the item."""
    targets = [target for path in sorted(paths, key=len, reverse=True) if (target := _locate(obj, path))]
    emptied: list[_Target] = []
    for target in targets:
        if isinstance(target.container, list):
            _remove_item(target.container, target.member)
        elif target.keys is not None and target.member in target.keys:
            emptied.append(target)
        else:
            target.container.pop(target.member, None)
    for target in emptied:
        if target.items is not None and target.keys is not None and set(target.container) <= set(target.keys):
            _remove_item(target.items, target.container)
    for target in targets + emptied:  # an emptied list is omitted, as the API types marshal it (omitempty)
        if target.holder is not None and target.field and target.holder.get(target.field) == []:
            target.holder.pop(target.field, None)


class _Target(NamedTuple):
    container: Any
    """The dict holding the field, or the list holding the item, to remove."""
    member: Any
    """The field's name, or the item itself."""
    keys: tuple[str, ...] | None = None
    """The merge keys, when ``container`` is an item of a keyed list."""
    items: list[Any] | None = None
    """The keyed list ``container`` is an item of."""
    holder: dict[str, Any] | None = None
    """The object whose field ``field`` is the list removed from (``items``, or ``container`` itself)."""
    field: str = ""


def _locate(node: Any, path: managed.Path) -> _Target | None:
    keys: tuple[str, ...] | None = None
    items: list[Any] | None = None
    holder: dict[str, Any] | None = None
    parent: Any = None
    for n, element in enumerate(path):
        last = n == len(path) - 1
        if element.startswith("f:") and isinstance(node, dict):
            if last:
                if keys is None:  # a field of a map, not of a keyed list item
                    return _Target(node, element[2:])
                return _Target(node, element[2:], keys, items, holder, path[n - 2][2:])
            parent, node, keys = node, node.get(element[2:]), None
        elif isinstance(node, list):
            field = path[n - 1][2:] if n else ""
            at = _find_element(node, element, field)
            if at is None:
                return None
            holder = parent if isinstance(parent, dict) else None
            if last:
                return _Target(node, node[at], holder=holder, field=field)
            keys, items, node = managed.list_keys(field, node), node, node[at]
        else:
            return None
    return None


def _remove_item(items: list[Any], member: Any) -> None:
    for n, candidate in enumerate(items):
        if candidate is member:
            items.pop(n)
            return


def _find_element(items: list[Any], element: str, field: str) -> int | None:
    if element.startswith("v:"):
        value = json.loads(element[2:])
        return items.index(value) if value in items else None
    keys = managed.list_keys(field, items)
    if keys is None:
        return None
    for n, item in enumerate(items):
        if managed.item_element(keys, item) == element:
            return n
    return None
