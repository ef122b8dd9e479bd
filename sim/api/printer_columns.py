"""The Table columns of a custom resource kind whose CustomResourceDefinition names
``additionalPrinterColumns``: Name, then each named column with the value its ``jsonPath`` selects.

As the API server's CRD table convertor (k8s.io/apiextensions-apiserver pkg/registry/customresource/
tableconvertor): a path that selects nothing is an empty cell, a value of another type than the column's is
shown as the API server would print it; ``date`` columns hold the timestamp (kubectl prints its age). Only
the paths CRDs use in practice are followed: dotted fields (``.status.state``) and list indexes
(``.status.conditions[0].type``).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = Mapping[str, Any]
Column = dict[str, Any]
PrinterColumn = tuple[str, str, str, str]
"""(name, type, jsonPath, description) of one additionalPrinterColumns entry."""
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def from_version(version: Mapping[str, Any]) -> tuple[PrinterColumn, ...]:
    return tuple(
        (
            str(column.get("name", "")),
            str(column.get("type", "string")),
            str(column.get("jsonPath", "")),
            str(column.get("description", "")),
        )
        for column in version.get("additionalPrinterColumns") or ()
    )


def select(obj: Any, path: str) -> Any:
    """The value at ``path`` (None where it selects nothing)."""
    value = obj
    for field, index in _STEP.findall(path):
        if field:
            value = value.get(field) if isinstance(value, dict) else None
        else:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
        if value is None:
            return None
    return value


def columns_and_cells(
    printer: tuple[PrinterColumn, ...], name_column: Column
) -> tuple[list[Column], Callable[[Obj, datetime.datetime], list[Any]]]:
    """The column definitions and the row function for ``printer``."""
    columns = [dict(name_column)] + [
        {"name": name, "type": kind, "format": "", "description": description, "priority": 0}
        for name, kind, _, description in printer
    ]

    def cells(obj: Obj, now: datetime.datetime) -> list[Any]:
        del now  # a date column holds the timestamp itself
        name = str((obj.get("metadata") or {}).get("name", ""))
        return [name, *(select(obj, path) for _, _, path, _ in printer)]

    return columns, cells
