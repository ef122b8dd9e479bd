"""Owned-field diffs of Kubernetes objects: the one planner module that wraps deepdiff (design §5).

Called by the plan builder (which turns :class:`ThreeWay` results into create/update/replace/delete/no-op
actions and the drift section) and by views through :class:`FieldChange` values; nothing else in gpuplan
imports deepdiff, and nothing outside this module sees a deepdiff type.

- :func:`owned_view` cuts a live object to the fields gpuplan renders (normalisation in
  :mod:`gpuplan.planner.diff.normalize`).
- :func:`diff` compares two owned views as the server stores them: keyed lists are compared by merge key,
  so reordering is not a change, and paths read ``spec.template.spec.containers[name=x].image``; an empty
  string field is no field, and a quantity is its value (``0.1`` is ``100m``). Keys that are not plain words
  are quoted: ``metadata.labels["app.kubernetes.io/name"]``. Ordered lists are reported whole.
- :func:`three_way` separates intent (desired vs recorded), drift (recorded vs live) and the work apply must
  do (live vs desired), as Terraform separates planned changes from "changed outside of Terraform".
- :func:`attribute` names the field managers that own a path according to the live object's
  ``metadata.managedFields`` (fieldsV1: ``f:`` fields, ``k:`` keyed items, ``v:`` set values, ``i:``
  indices), newest first, so drift can say who made it.

deepdiff is always called with ``threshold_to_diff_deeper=0`` (with its 0.33 default a mostly-new mapping
is reported as one root change) and ``view="tree"``; paths are read with ``level.path(output_format="list")``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuplan.planner.diff import normalize
from gpuplan.planner.diff.normalize import ItemKey

Segment = str | int  # a mapping key, an ItemKey (a str) or a list index
_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    """One changed field. ``before``/``after`` are None when the field is absent on that side.

    ``managers`` is filled for drift only: the field managers that own the path on the live object, newest
    first (empty when the cluster does not record it, e.g. for a removed field nobody owns any more).
    """

    path: str
    before: Any
    after: Any
    managers: tuple[str, ...] = ()

    @property
    def op(self) -> Literal["add", "remove", "change"]:
        if self.before is None:
            return "add"
        return "remove" if self.after is None else "change"


@dataclass(frozen=True)
class ThreeWay:
    """The three comparisons a plan needs for one object (see the module doc)."""

    intent: tuple[FieldChange, ...]  # desired vs recorded state: what the user changed in the spec
    drift: tuple[FieldChange, ...]  # recorded state vs live: changed outside gpuplan, with managers
    live_vs_desired: tuple[FieldChange, ...]  # what apply must change on the cluster

    @property
    def is_noop(self) -> bool:
        return not self.live_vs_desired


def owned_view(manifest: Mapping[str, Any], owned_template: Mapping[str, Any]) -> dict[str, Any]:
    """The live object restricted to the fields gpuplan renders (the template's shape).

    Drops ``status``, server-set metadata, annotations the server and kubectl add, and every field the
    template leaves out, which covers the server's defaults: desired plus defaults is equal to desired.
    """
    result: dict[str, Any] = normalize.restrict(normalize.strip_server_fields(manifest), owned_template)
    return result


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    """The changed fields from ``before`` to ``after`` (both owned views), ordered by path."""
    # imported here, not at the top: a plan that only creates never diffs, and deepdiff is slow to import
    from deepdiff import DeepDiff

    canon_before = normalize.canonical(before)
    canon_after = normalize.same_spelling(canon_before, normalize.canonical(after))
    tree = DeepDiff(canon_before, canon_after, view="tree", threshold_to_diff_deeper=0, verbose_level=2)
    paths: set[tuple[Segment, ...]] = set()
    for levels in tree.values():
        for level in levels:
            paths.add(_up_to_first_index(level.path(output_format="list")))
    changes = []
    for segments in _without_nested(paths):
        changes.append(
            FieldChange(
                path=render_path(segments),
                before=_value_at(canon_before, segments),
                after=_value_at(canon_after, segments),
            )
        )
    return tuple(sorted(changes, key=lambda change: change.path))


def _up_to_first_index(segments: Sequence[Segment]) -> tuple[Segment, ...]:
    # an index means an ordered list: it is one value (server-side apply treats it as atomic)
    for position, segment in enumerate(segments):
        if isinstance(segment, int):
            return tuple(segments[:position])
    return tuple(segments)


def _without_nested(paths: set[tuple[Segment, ...]]) -> list[tuple[Segment, ...]]:
    return [
        path for path in paths if not any(other != path and path[: len(other)] == other for other in paths)
    ]


def _value_at(tree: Any, segments: Sequence[Segment]) -> Any:
    for segment in segments:
        if not isinstance(tree, Mapping) or segment not in tree:
            return None
        tree = tree[segment]
    return normalize.plain(tree)


def three_way(
    desired: Mapping[str, Any] | None, recorded: Mapping[str, Any] | None, live: Mapping[str, Any] | None
) -> ThreeWay:
    """Intent, drift and live-vs-desired for one object; None means absent (not rendered, not in state,
    not in the cluster). An object deleted outside gpuplan is drift of every recorded field."""
    intent = diff(recorded or {}, desired or {}) if (desired or recorded) else ()
    drift: tuple[FieldChange, ...] = ()
    if recorded is not None:
        live_owned = owned_view(live, recorded) if live is not None else {}
        drift = diff(recorded, live_owned)
        if live is not None and drift:
            owners = attribute(live, [change.path for change in drift])
            drift = tuple(FieldChange(c.path, c.before, c.after, tuple(owners[c.path])) for c in drift)
    if live is None:
        live_vs_desired = diff({}, desired) if desired is not None else ()
    else:
        template = normalize.union_shape(recorded or {}, desired or {})
        live_vs_desired = diff(owned_view(live, template), desired or {})
    return ThreeWay(intent=intent, drift=drift, live_vs_desired=live_vs_desired)


def with_values(manifest: Mapping[str, Any], values: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """A copy of ``manifest`` with each (path, value) set, where ``value`` is the plain value at that path of
    another view (a keyed item found by its key, or appended), or removed where ``value`` is None. How a
    declared deviation's live value is laid onto the desired object (``spec.ignore``)."""
    result: dict[str, Any] = copy.deepcopy(dict(manifest))
    for path, value in values:
        segments = parse_path(path)
        node: Any = result
        for position, segment in enumerate(segments[:-1]):
            found = _step(node, segment)
            if found is None:
                if value is None or isinstance(segment, int):
                    break
                after = segments[position + 1]
                found = [] if isinstance(after, ItemKey) else {}
                _put(node, segment, dict(segment.fields) if isinstance(segment, ItemKey) else found)
                found = _step(node, segment)
            node = found
        else:
            _put(node, segments[-1], value)
    return result


def _put(node: Any, segment: Segment, value: Any) -> None:
    if isinstance(segment, ItemKey):
        if not isinstance(node, list):
            return
        at = next((i for i, item in enumerate(node) if _step([item], segment) is not None), None)
        if at is None:
            if value is not None:
                node.append(value)
        elif value is None:
            del node[at]
        else:
            node[at] = value
    elif isinstance(segment, int):
        if isinstance(node, list) and 0 <= segment < len(node):
            node[segment] = value
    elif isinstance(node, dict):
        if value is None:
            node.pop(segment, None)
        else:
            node[segment] = value


def requires_replace(changes: Sequence[FieldChange], immutable_paths: Sequence[str]) -> bool:
    """True when a change touches an immutable path or anything below it (``spec.selector`` ...)."""
    immutable = [parse_path(path) for path in immutable_paths]
    for change in changes:
        segments = parse_path(change.path)
        if any(segments[: len(prefix)] == prefix for prefix in immutable):
            return True
    return False


# ------------------------------------------------------------------------------------------------ paths

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def render_path(segments: Sequence[Segment]) -> str:
    """``spec.template.spec.containers[name=x].image``; non-word keys as ``["a.b/c"]``, indices ``[0]``."""
    out = []
    for segment in segments:
        if isinstance(segment, ItemKey):
            out.append(str(segment))
        elif isinstance(segment, int):
            out.append(f"[{segment}]")
        elif _WORD.match(segment):
            out.append(f".{segment}" if out else segment)
        else:
            out.append(f"[{json.dumps(segment)}]")
    return "".join(out)


def parse_path(path: str) -> tuple[Segment, ...]:
    """The inverse of :func:`render_path`."""
    segments: list[Segment] = []
    position = 0
    while position < len(path):
        char = path[position]
        if char == ".":
            position += 1
        elif char == "[":
            segment, position = _parse_bracket(path, position)
            segments.append(segment)
        else:
            match = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*").match(path, position)
            if match is None:
                raise ValueError(f"not a field path: {path!r} (at {position})")
            segments.append(match.group())
            position = match.end()
    return tuple(segments)


def _parse_bracket(path: str, start: int) -> tuple[Segment, int]:
    inner_start = start + 1
    if path.startswith('"', inner_start):
        text, end = json.JSONDecoder().raw_decode(path, inner_start)
        return str(text), _expect(path, end, "]")
    digits = re.compile(r"\d+\]").match(path, inner_start)
    if digits:
        return int(digits.group()[:-1]), digits.end()
    fields: list[tuple[str, Any]] = []
    position = inner_start
    while True:
        equals = path.index("=", position)
        name = path[position:equals]
        position = equals + 1
        if path.startswith('"', position):
            value, position = json.JSONDecoder().raw_decode(path, position)
        else:
            end = min(i for i in (path.find(",", position), path.find("]", position)) if i >= 0)
            raw = path[position:end]
            value, position = (int(raw) if raw.isdigit() else raw), end
        fields.append((name, value))
        if path[position] == "]":
            return ItemKey(fields), position + 1
        position = _expect(path, position, ",")


def _expect(path: str, position: int, char: str) -> int:
    if position >= len(path) or path[position] != char:
        raise ValueError(f"not a field path: {path!r} (expected {char!r} at {position})")
    return position + 1


# ----------------------------------------------------------------------------------------- attribution


def attribute(live: Mapping[str, Any], paths: Sequence[str]) -> dict[str, list[str]]:
    """path -> the field managers that own it per ``metadata.managedFields``, newest first.

    A manager owns a path when its field set reaches it, or reaches an ancestor as a leaf (an atomic list
    or map owned whole). Status-subresource entries are skipped: gpuplan's paths are never status.
    """
    entries = [
        entry
        for entry in (live.get("metadata") or {}).get("managedFields") or ()
        if isinstance(entry, Mapping)
        and entry.get("fieldsType", "FieldsV1") == "FieldsV1"
        and not entry.get("subresource")
        and isinstance(entry.get("fieldsV1"), Mapping)
    ]
    entries.sort(key=lambda entry: str(entry.get("time") or ""), reverse=True)
    result: dict[str, list[str]] = {}
    for path in paths:
        segments = parse_path(path)
        owners: list[str] = []
        for entry in entries:
            manager = str(entry.get("manager") or "")
            if manager and manager not in owners and _owns(entry["fieldsV1"], segments, live):
                owners.append(manager)
        result[path] = owners
    return result


def _owns(fields: Mapping[str, Any], segments: Sequence[Segment], live: Any) -> bool:
    """Walks the field set and the live object side by side (a ``v:`` set item is named by its value)."""
    if not fields:
        return False
    node: Mapping[str, Any] = fields
    for segment in segments:
        if not node:
            return True  # a leaf above the path: the whole value is owned
        child = _child(node, segment, live)
        if child is None:
            return False
        node, live = child, _step(live, segment)
    return True


def _child(node: Mapping[str, Any], segment: Segment, live: Any) -> Mapping[str, Any] | None:
    if isinstance(segment, ItemKey):
        for name, child in node.items():
            if name.startswith("k:") and _key_matches(name[2:], segment):
                return child if isinstance(child, Mapping) else {}
        return None
    if isinstance(segment, int):
        found = node.get(f"i:{segment}")
        if found is None and isinstance(live, list) and 0 <= segment < len(live):
            found = node.get("v:" + json.dumps(live[segment], separators=(",", ":")))
    else:
        found = node.get(f"f:{segment}")
    return found if isinstance(found, Mapping) else None


def _step(live: Any, segment: Segment) -> Any:
    if isinstance(segment, ItemKey) and isinstance(live, list):
        wanted = dict(segment.fields)
        return next(
            (
                item
                for item in live
                if isinstance(item, Mapping)
                and all(str(item.get(name)) == str(value) for name, value in wanted.items())
            ),
            None,
        )
    if isinstance(segment, int):
        return live[segment] if isinstance(live, list) and 0 <= segment < len(live) else None
    return live.get(segment) if isinstance(live, Mapping) else None


def _key_matches(encoded: str, key: ItemKey) -> bool:
    try:
        decoded = json.loads(encoded)
    except ValueError:
        return False
    if not isinstance(decoded, Mapping):
        return False
    return all(name in decoded and str(decoded[name]) == str(value) for name, value in key.fields)
