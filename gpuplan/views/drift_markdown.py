"""``drift report --format markdown``: for a chat message or a pull request.

Called by :mod:`gpuplan.commands.drift`. A summary, a findings table and the nodes × components matrix
(status emoji-free words, so it reads the same in every renderer). Table cells escape ``|``, backticks and
newlines, so a finding's detail cannot break the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.views import drift_common
from gpuplan.views.gpu import cell

STATUS_MARK = {
    "ok": "ok",
    "drifted": "**drifted**",
    "missing": "**missing**",
    "unhealthy": "**unhealthy**",
    "n/a": "n/a",
}


def render(document: Mapping[str, Any]) -> str:
    lines = [
        f"## gpuplan drift report: stack `{_code(document['stack'])}`",
        "",
        f"{drift_common.headline(document)}  ",
        f"{drift_common.coverage_line(document)}  ",
        f"{drift_common.nodes_line(document)}  ",
        f"Checked {_cell(document['checked_at'])}.",
    ]
    lines += [f"> Note: {_cell(note)}" for note in document.get("notes") or ()]
    for title, key in (("Findings", "findings"), ("Ignored (spec.ignore, not drift)", "ignored")):
        findings: Sequence[Mapping[str, Any]] = document.get(key) or ()
        if findings:
            lines += [
                "",
                f"### {title}",
                "",
                "| Kind | Component | Address or node | Detail |",
                "|---|---|---|---|",
            ]
            lines += [
                f"| {finding['kind']} | {_cell(finding.get('component') or '-')} | "
                f"{_cell(finding.get('address') or finding.get('node') or '-')} | "
                f"{_cell(finding['detail'])} |"
                for finding in findings
            ]
    nodes: Sequence[Mapping[str, Any]] = document["nodes"]
    lines += ["", "### Nodes", ""]
    if not nodes:
        return "\n".join([*lines, "No nodes found."]) + "\n"
    columns = drift_common.columns(document)
    headers = [*drift_common.NODE_HEADERS, *(title for _, title in columns), "LOAD"]
    lines += ["| " + " | ".join(_header(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for node in nodes:
        cells = [
            *drift_common.node_facts(node),
            *(_status(node["components"][name]) for name, _ in columns),
            drift_common.load_text(node) or "-",
        ]
        lines.append("| " + " | ".join(c if str(c).startswith("**") else _cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


# Acronyms and product names keep their casing ("GFD", "DCGM exporter"), the rest is sentence case.
_HEADER_WORDS = {"GPU": "GPU", "GFD": "GFD", "DCGM": "DCGM", "MIG": "MIG", "LOAD": "Load"}


def _header(column: str) -> str:
    """A table header from a column name: "DCGM-EXPORTER" -> "DCGM exporter", "DRIVER-VERSION" -> "Driver
    version"."""
    words = [_HEADER_WORDS.get(word, word.lower()) for word in column.split("-")]
    head = words[0] if words[0].isupper() else words[0].capitalize()
    return " ".join([head, *words[1:]])


def _status(state: Mapping[str, Any]) -> str:
    mark = STATUS_MARK.get(state["status"], state["status"])
    return mark if state["status"] in ("ok", "n/a") else f"{mark}: {_cell(state['reason'])}"


def _cell(text: object) -> str:
    return " ".join(cell(text).split()).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")


def _code(text: str) -> str:
    return str(text).replace("`", "'")
