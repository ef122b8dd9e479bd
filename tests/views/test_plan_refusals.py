"""The Error: lines of a refused plan: one per broken rule, the nodes as a count and the first names."""

from __future__ import annotations

from typing import Any

from gpuplan.errors import Refusals
from gpuplan.views.plan_refusals import refusals

HANDLER = "the toolkit is external, but the node's container runtime has no nvidia runtime handler"


def finding(node: str | None, message: str = HANDLER, severity: str = "error") -> dict[str, Any]:
    return {"severity": severity, "component": "toolkit", "node": node, "message": message, "hint": "fix it"}


def test_a_rule_broken_on_a_fleet_is_one_line_with_a_count_and_the_first_names() -> None:
    document = {
        "findings": [
            *(finding(f"gpu-{index:04d}") for index in range(1, 201)),
            finding(None, "spec.nodeSelector (a=b) matches none of the 200 nodes"),
            finding("gpu-0001", "GPU model unknown", severity="warning"),
        ]
    }
    assert Refusals(refusals(document)).render().splitlines() == [
        f"Error: toolkit, on 200 nodes: gpu-0001, gpu-0002, gpu-0003 and 197 more: {HANDLER}",
        "  Hint: fix it",
        "Error: toolkit: spec.nodeSelector (a=b) matches none of the 200 nodes",
        "  Hint: fix it",
    ]


def test_a_plan_without_errors_is_not_refused() -> None:
    assert refusals({"findings": [finding("gpu-0001", severity="warning")]}) == []
