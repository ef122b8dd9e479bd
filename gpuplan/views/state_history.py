"""``gpuplan state history``: the applied generations of a state, as a table or a JSON document.

Callers: :mod:`gpuplan.commands.state_team`. Pure: the state in, text out. A generation written before
generations recorded who applied them and what changed shows ``-`` there (``null`` in JSON).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from gpuplan.errors import StateError
from gpuplan.state.model import Generation, StateFile

_SYMBOLS = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "adopt": "<="}
_HEADERS = ("GENERATION", "SERIAL", "APPLIED", "BY", "CHANGES", "OUTCOME")


def changes_text(generation: Generation) -> str:
    """``+2 ~1 -1``: the count of each action, in plan order; ``no changes`` for an apply that changed
    nothing."""
    if generation.changes is None:
        return "-"
    counts = [
        f"{_SYMBOLS.get(action, action + ':')}{count}"
        for action, count in sorted(generation.changes.items(), key=lambda item: _order(item[0]))
        if count and action != "no-op"
    ]
    return " ".join(counts) or "no changes"


def _order(action: str) -> int:
    return list(_SYMBOLS).index(action) if action in _SYMBOLS else len(_SYMBOLS)


def _who(generation: Generation) -> str:
    if generation.user is None and generation.host is None:
        return "-"
    return f"{generation.user or '?'}@{generation.host or '?'}"


def render_spec(generation: Generation) -> str:
    """The spec ``generation`` was applied with, as a gpustack.yaml; refused for a generation recorded before
    gpuplan kept its spec."""
    if generation.spec is None:
        raise StateError(
            f"generation {generation.number} was applied by a gpuplan that did not record its spec",
            hint="only generations applied since gpuplan records specs have one to print",
        )
    return yaml.safe_dump(generation.spec, sort_keys=False)


def render_text(state: StateFile) -> str:
    rows = [
        (
            str(g.number),
            str(g.serial),
            g.applied_at,
            _who(g),
            changes_text(g),
            g.outcome or "-",
        )
        for g in state.history
    ]
    widths = [max(len(row[i]) for row in [_HEADERS, *rows]) for i in range(len(_HEADERS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [_HEADERS, *rows]
    ]
    return "\n".join(lines)


def document(state: StateFile | None, where: str) -> dict[str, Any]:
    return {
        "state": where,
        "lineage": state.lineage if state is not None else None,
        "serial": state.serial if state is not None else None,
        "generations": [
            {
                "number": g.number,
                "serial": g.serial,
                "applied_at": g.applied_at,
                "user": g.user,
                "host": g.host,
                "changes": g.changes,
                "outcome": g.outcome,
                "objects": len(g.records),
                "spec_digest": g.spec_digest,
            }
            for g in (state.history if state is not None else ())
        ],
    }


def render_json(state: StateFile | None, where: str) -> str:
    return json.dumps(document(state, where), indent=2)
