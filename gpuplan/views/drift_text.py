"""``drift report`` (text): the summary, the findings, then the nodes × components table.

Called by :mod:`gpuplan.commands.drift`. The table follows kubectl (upper-case headers, columns as wide as
their widest cell); each cell is the component's status on that node (ok, drifted, missing, unhealthy, n/a),
and the reasons of the cells that are not ok follow the table, node by node, so the table stays narrow on a
fleet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.views import drift_common
from gpuplan.views.colour import PLAIN, Palette
from gpuplan.views.inventory import table

STATUS_STYLE = {"ok": "green", "drifted": "yellow", "missing": "red", "unhealthy": "red", "n/a": "dim"}


def render(document: Mapping[str, Any], *, palette: Palette = PLAIN) -> str:
    lines = [
        palette.bold(
            f"Drift report for stack {document['stack']} (namespace {document['namespace']}), "
            f"checked {document['checked_at']}"
        )
    ]
    head = drift_common.headline(document)
    lines += [
        palette.red(head) if document["drift"] else palette.green(head),
        drift_common.coverage_line(document),
        drift_common.nodes_line(document),
    ]
    lines += [f"Note: {note}" for note in document.get("notes") or ()]
    findings: Sequence[Mapping[str, Any]] = document["findings"]
    if findings:
        lines += ["", palette.bold("Findings:")]
        for finding in findings:
            where = finding.get("address") or (f"node {finding['node']}" if finding.get("node") else "")
            lines.append(
                f"  {palette.yellow(finding['kind'].ljust(10))} {finding.get('component') or '-'}  {where}"
            )
            lines.append(f"      {finding['detail']}")
    ignored: Sequence[Mapping[str, Any]] = document.get("ignored") or ()
    if ignored:
        lines += ["", palette.bold("Ignored (spec.ignore, not drift):")]
        for finding in ignored:
            lines += [
                f"  {palette.dim(finding['kind'].ljust(10))} {finding.get('component') or '-'}  "
                f"{finding.get('address') or ''}",
                f"      {finding['detail']}",
            ]
    lines += ["", *matrix(document, palette)]
    return "\n".join(lines) + "\n"


def matrix(document: Mapping[str, Any], palette: Palette = PLAIN) -> list[str]:
    nodes: Sequence[Mapping[str, Any]] = document["nodes"]
    if not nodes:
        return ["No nodes found."]
    columns = drift_common.columns(document)
    headers = (*drift_common.NODE_HEADERS, *(title for _, title in columns), "LOAD")
    rows = [
        [
            *drift_common.node_facts(node),
            *(node["components"][name]["status"] for name, _ in columns),
            drift_common.load_text(node) or "-",
        ]
        for node in nodes
    ]
    lines = table(headers, rows)
    lines[0] = palette.bold(lines[0])
    if palette.enabled:
        lines[1:] = [_paint_statuses(line, palette) for line in lines[1:]]
    details = [
        f"  {node['name']} {name}: {status} ({reason})"
        for node in nodes
        for name, status, reason in drift_common.problems(node)
    ]
    errors = [
        f"  {node['name']}: telemetry unavailable ({node['telemetry']['error']})"
        for node in nodes
        if node["telemetry"].get("error")
    ]
    if details or errors:
        lines += ["", "Node problems:", *details, *errors]
    return lines


def _paint_statuses(line: str, palette: Palette) -> str:
    words = line.split("   ")
    return "   ".join(
        palette.paint(STATUS_STYLE[word.strip()], word) if word.strip() in STATUS_STYLE else word
        for word in words
    )
