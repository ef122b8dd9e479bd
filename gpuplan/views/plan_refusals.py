"""The ``Error:`` lines of a plan that cannot be applied: one per rule its findings break.

A compatibility error is something the refresh already knows the stack cannot become healthy with (a host
toolkit without the nvidia runtime handler, a driver version a node does not run, a nodeSelector no node
carries, ...), so ``gpuplan plan`` refuses the plan instead of leaving apply to wait out a gate and roll back.
Findings that differ only by node are one line naming the nodes (a count and the first few names, as the
plan's Findings section shows them); the hint is each rule's fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.views.plan_human import finding_scope, group_findings


def refusals(document: Mapping[str, Any]) -> list[GpuplanError]:
    """One error per broken rule (the plan document's error findings, grouped by node)."""
    errors: Sequence[Mapping[str, Any]] = [
        finding for finding in document.get("findings") or [] if finding["severity"] == "error"
    ]
    found = []
    for finding, nodes in group_findings(errors):
        found.append(
            GpuplanError(
                str(finding["message"]),
                where=finding_scope(finding, nodes),
                hint=str(finding.get("hint") or ""),
            )
        )
    return found
