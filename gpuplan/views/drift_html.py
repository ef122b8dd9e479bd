"""``drift report --format html``: ONE self-contained page (inline CSS, no script, nothing from the network).

Called by :mod:`gpuplan.commands.drift`. The page has the summary, a colour-coded nodes × components matrix
(``table#matrix``: one row per node, a cell per component whose class is its status and whose ``title`` is the
reason) and the findings table. Every text from the cluster or the spec goes through :func:`html.escape`,
so a label value or an object name cannot inject markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from gpuplan.views import drift_common
from gpuplan.views.gpu import cell

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;color:#1b1f24;background:#fff}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.6rem}
p.head{font-weight:600}p.drift{color:#b42318}p.clean{color:#067647}
table{border-collapse:collapse;font-size:.85rem;margin-top:.5rem}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}
td.ok{background:#dafbe1;color:#055d20}td.missing{background:#ffd8d3;color:#8a1c0f;font-weight:600}
td.unhealthy{background:#ffebc2;color:#7a4100;font-weight:600}td.na{background:#f6f8fa;color:#6e7781}
td.drifted{background:#fff8c5;color:#633c01}
td small{display:block;font-weight:400}
.legend span{display:inline-block;padding:.1rem .5rem;margin-right:.4rem;border:1px solid #d0d7de}
"""
CLASS = {"ok": "ok", "drifted": "drifted", "missing": "missing", "unhealthy": "unhealthy", "n/a": "na"}


def render(document: Mapping[str, Any]) -> str:
    title = f"gpuplan drift report: {document['stack']}"
    head_class = "drift" if document["drift"] else "clean"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="head {head_class}" id="headline">{escape(drift_common.headline(document))}</p>',
        f"<p>{escape(drift_common.coverage_line(document))}<br>{escape(drift_common.nodes_line(document))}<br>"
        f"Namespace {escape(str(document['namespace']))}, checked {escape(str(document['checked_at']))}.</p>",
    ]
    parts += [f'<p class="note">{escape(str(note))}</p>' for note in document.get("notes") or ()]
    parts += [
        "<h2>Nodes × components</h2>",
        _legend(),
        _matrix(document),
        "<h2>Findings</h2>",
        _findings(document["findings"]),
    ]
    if document.get("ignored"):
        parts += ["<h2>Ignored (spec.ignore, not drift)</h2>", _findings(document["ignored"], "ignored")]
    parts += [
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def _legend() -> str:
    return (
        '<p class="legend"><span class="ok" style="background:#dafbe1">ok</span>'
        '<span style="background:#fff8c5">drifted</span><span style="background:#ffd8d3">missing</span><span style="background:#ffebc2">unhealthy</span>'
        '<span style="background:#f6f8fa">n/a</span></p>'
    )


def _matrix(document: Mapping[str, Any]) -> str:
    nodes: Sequence[Mapping[str, Any]] = document["nodes"]
    columns = drift_common.columns(document)
    if not nodes:
        return "<p>No nodes found.</p>"
    headers = [*drift_common.NODE_HEADERS, *(title for _, title in columns), "LOAD"]
    rows = [
        '<table id="matrix">',
        "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr></thead>",
        "<tbody>",
    ]
    for node in nodes:
        facts = "".join(f"<td>{escape(cell(value))}</td>" for value in drift_common.node_facts(node))
        cells = "".join(_cell(name, node["components"][name]) for name, _ in columns)
        load = escape(drift_common.load_text(node) or "-")
        rows.append(f'<tr data-node="{escape(str(node["name"]))}">{facts}{cells}<td>{load}</td></tr>')
    rows += ["</tbody>", "</table>"]
    return "\n".join(rows)


def _cell(component: str, state: Mapping[str, Any]) -> str:
    status, reason = cell(state["status"]), cell(state["reason"])
    detail = f"<small>{escape(reason)}</small>" if status not in ("ok", "n/a") else ""
    return (
        f'<td class="{CLASS.get(status, "na")}" data-component="{escape(component)}" '
        f'title="{escape(reason)}">{escape(status)}{detail}</td>'
    )


def _findings(findings: Sequence[Mapping[str, Any]], table_id: str = "findings") -> str:
    if not findings:
        return f'<p id="{table_id}">No findings.</p>'
    rows = [
        f'<table id="{table_id}">',
        "<thead><tr><th>Kind</th><th>Component</th><th>Address or node</th><th>Detail</th></tr></thead>",
        "<tbody>",
    ]
    rows += [
        f"<tr><td>{escape(str(f['kind']))}</td><td>{escape(str(f.get('component') or '-'))}</td>"
        f"<td>{escape(str(f.get('address') or f.get('node') or '-'))}</td>"
        f"<td>{escape(str(f['detail']))}</td></tr>"
        for f in findings
    ]
    rows += ["</tbody>", "</table>"]
    return "\n".join(rows)
