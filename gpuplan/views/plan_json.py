"""The machine-readable plan (design §4.1): ``plan --json`` and ``show --json``.

The document is :meth:`gpuplan.planner.plan.build.Plan.document`; the human view renders the very same dict
(:mod:`gpuplan.views.plan_human`), and the exit code of ``--detailed-exitcode`` is computed from it too
(:func:`exit_code`), so output and exit status cannot disagree; so is the refusal of a plan whose
configuration a node's GPU cannot run (:func:`gpu_refusal`).
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


REFUSALS_SHOWN = 5


def gpu_refusal(document: Mapping[str, Any]) -> errors.ConfigError | None:
    """The error that refuses a plan at plan time (exit 1): the compatibility errors of the rules that read a
    node's GPU (the driver branch against its architecture, the kernel modules, MPS), whichever source
    identified the GPU; None when there is none."""
    refused = [f for f in document.get("findings") or () if f["severity"] == "error" and f.get("gpu")]
    if not refused:
        return None
    if len(refused) == 1:
        return errors.ConfigError(
            refused[0]["message"], where=f"node {refused[0]['node']}", hint=refused[0]["hint"]
        )
    lines = [f"node {f['node']}: {f['message']}" for f in refused[:REFUSALS_SHOWN]]
    if len(refused) > REFUSALS_SHOWN:
        lines.append(f"and {len(refused) - REFUSALS_SHOWN} more (the plan's findings list them all)")
    nodes = len({f["node"] for f in refused})
    return errors.ConfigError(
        f"the configuration cannot run on the GPUs of {nodes} node{'s' if nodes != 1 else ''}",
        detail="\n".join(lines),
        hint=refused[0]["hint"],
    )
