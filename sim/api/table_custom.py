"""``as=Table`` answers for custom resources: the columns of their CustomResourceDefinition's
``additionalPrinterColumns``, as the apiextensions-apiserver computes them.

The real server (k8s.io/apiextensions-apiserver ``pkg/registry/customresource/tableconvertor``) puts NAME
first, then one column per ``additionalPrinterColumns`` entry of the served version, each cell the first
result of its ``jsonPath`` (a simple JSONPath: fields, ``[n]``, ``[*]`` and ``[?(@.field=="value")]``
filters), or none when the path finds nothing. A ``string`` column prints the value as kubectl's JSONPath
printer does; an ``integer``, ``number`` or ``boolean`` column keeps a value of that JSON type; a ``date``
column turns an RFC 3339 time into an age (``5m``). A version without columns is served one: Age, from
``.metadata.creationTimestamp`` (``serveDefaultColumnsIfEmpty`` in ``customresource_handler.go``).

:func:`columns_of` reads a version's columns when the CRD is registered (kept on the ResourceType as canonical
JSON text, like its schema; "" for a built-in kind); :func:`printer` turns that text into the Table's columns
and cells.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = Mapping[str, Any]
Column = dict[str, Any]
RowCells = Callable[[Obj, datetime.datetime], list[Any]]

DEFAULT_COLUMNS = [
    {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
        "description": "CreationTimestamp is a timestamp representing the server time when this object was "
        "created.",
    }
]
_NAME_COLUMN: Column = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_STEP = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-/]+)
      | \[(?P<index>\d+|\*)\]
      | \[\?\(@\.(?P<key>[A-Za-z0-9_.\-]+)\s*==\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')\)\]""",
    re.VERBOSE,
)


def columns_of(version: Mapping[str, Any]) -> str:
    """The columns one CRD version declares, as canonical JSON text (``[]`` when none: the default then)."""
    return json.dumps(
        list(version.get("additionalPrinterColumns") or ()), sort_keys=True, separators=(",", ":")
    )


def printer(
    columns_text: str, since: Callable[[Any, datetime.datetime], str]
) -> tuple[list[Column], RowCells]:
    """The Table columns and the row function of a custom resource whose columns are ``columns_text``;
    ``since`` renders a date as an age, as the built-in printers do."""
    columns = json.loads(columns_text) or DEFAULT_COLUMNS
    definitions = [_NAME_COLUMN] + [_definition(column) for column in columns]
    paths = [(_parse(str(column["jsonPath"])), str(column.get("type", "string"))) for column in columns]

    def cells(obj: Obj, now: datetime.datetime) -> list[Any]:
        row: list[Any] = [str((obj.get("metadata") or {}).get("name", ""))]
        for steps, kind in paths:
            found = _evaluate(steps, obj)
            row.append(None if not found else _cell(kind, found[0], now, since))
        return row

    return definitions, cells


def _definition(column: Mapping[str, Any]) -> Column:
    description = column.get("description") or (
        f"Custom resource definition column (in JSONPath format): {column['jsonPath']}"
    )
    return {
        "name": column["name"],
        "type": column.get("type", "string"),
        "format": column.get("format", ""),
        "description": description,
        "priority": int(column.get("priority", 0)),
    }


Step = tuple[str, str | None, str | None]
"""(``field`` | ``index`` | ``all`` | ``filter``, the field name / index / filter key, the filter value)."""


def _parse(path: str) -> list[Step]:
    """The steps of a simple JSONPath; the real server refuses a CRD whose path it cannot parse, so an
    unparsable rest is ignored here rather than answered."""
    steps: list[Step] = []
    for match in _STEP.finditer(path.strip().removeprefix("{").removesuffix("}")):
        if match.group("field") is not None:
            steps.append(("field", match.group("field"), None))
        elif match.group("index") == "*":
            steps.append(("all", None, None))
        elif match.group("index") is not None:
            steps.append(("index", match.group("index"), None))
        else:
            value = match.group("dq") if match.group("dq") is not None else match.group("sq")
            steps.append(("filter", match.group("key"), value))
    return steps


def _evaluate(steps: list[Step], obj: Any) -> list[Any]:
    """Every value the path reaches (missing keys reach nothing, as with ``AllowMissingKeys``)."""
    current = [obj]
    for kind, name, value in steps:
        reached: list[Any] = []
        for item in current:
            if kind == "field" and isinstance(item, Mapping) and name in item:
                reached.append(item[name])
            elif kind == "index" and isinstance(item, list) and name is not None and int(name) < len(item):
                reached.append(item[int(name)])
            elif kind == "all" and isinstance(item, list):
                reached.extend(item)
            elif kind == "filter" and isinstance(item, list):
                reached.extend(e for e in item if _lookup(e, name) == value)
        current = reached
    return current


def _lookup(item: Any, dotted: str | None) -> Any:
    for part in (dotted or "").split("."):
        if not isinstance(item, Mapping):
            return None
        item = item.get(part)
    return str(item) if isinstance(item, str | int | float) and not isinstance(item, bool) else item


def _cell(
    kind: str, value: Any, now: datetime.datetime, since: Callable[[Any, datetime.datetime], str]
) -> Any:
    """``cellForJSONValue`` of the tableconvertor; a string column prints as kubectl's JSONPath does."""
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        return json.dumps(value, separators=(",", ":"))
    if kind == "integer":
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date":
        if not isinstance(value, str):
            return None
        age = since(value, now)
        return "<invalid>" if age == "<unknown>" else age
    return None
