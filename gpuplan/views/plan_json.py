"""The machine-readable plan (design §4.1): ``plan --json`` and ``show --json``.

The document is :meth:`gpuplan.planner.plan.build.Plan.document`; the human view renders the very same dict
(:mod:`gpuplan.views.plan_human`), and the exit code of ``--detailed-exitcode`` is computed from it too
(:func:`exit_code`), so output and exit status cannot disagree (and the refusal of a plan with compatibility
errors: :mod:`gpuplan.views.plan_refusals`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpuplan import errors
from gpuplan.planner.plan.build import has_changes


def render(document: Mapping[str, Any]) -> str:
    """One JSON document, keys in the plan's order, two-space indent, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def exit_code(document: Mapping[str, Any], *, detailed: bool) -> int:
    """0, or 2 with ``detailed`` when the document has changes (or drift, in a refresh-only plan)."""
    return errors.EXIT_CHANGES if detailed and has_changes(document) else errors.EXIT_OK
