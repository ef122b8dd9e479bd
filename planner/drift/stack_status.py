"""The stack's status after a drift report (design §7.3), from the report's document (pure).

Versions of the components gpuplan does not own are the ones the nodes report.
``Drifted`` is True when the report found drift; its message counts the findings by component and kind
(``devicePlugin: 1 changed, unhealthy on 1 node``) and quotes the first one. ``Ready`` counts each
component's matrix cells: a node whose cell is ``ok`` is ready, every cell but ``n/a`` is desired. The last
apply (``lastApplied``) is left as it was.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from gpuplan.modules import stack_status
from gpuplan.modules.base import ComponentConfig, ComponentName
from gpuplan.planner.drift import nodes as drift_nodes

NODE_KINDS = frozenset({"unhealthy", "version", "telemetry"})
"""Finding kinds about a node: counted as nodes, not objects."""


def from_report(
    document: Mapping[str, Any], configs: Mapping[ComponentName, ComponentConfig]
) -> dict[str, Any]:
    """The status document to write (see the module doc)."""
    gpu_nodes = [node for node in document.get("nodes") or () if (node.get("gpu") or {}).get("present")]
    running = stack_status.host_versions((node.get("driver") or {}).get("version") for node in gpu_nodes)
    entries = stack_status.components(configs, node_counts(document), running=running)
    short = stack_status.not_ready(entries)
    if short:
        ready = stack_status.condition(
            "Ready", "False", "ComponentsNotReady", "not ready: " + "; ".join(short)
        )
    else:
        healthy = stack_status.healthy_words(entries)
        ready = stack_status.condition(
            "Ready", "True", "Healthy", "every component healthy" + (f": {healthy}" if healthy else "")
        )
    return {
        "conditions": [ready, drifted(document)],
        "components": entries,
        "serial": document.get("state_serial", 0),
        "lastChecked": document.get("checked_at", ""),
    }


def node_counts(document: Mapping[str, Any]) -> dict[str, stack_status.NodeCounts]:
    """component -> (nodes whose cell is ok, nodes whose cell is not n/a), for components with any."""
    ready: Counter[str] = Counter()
    desired: Counter[str] = Counter()
    for node in document.get("nodes") or ():
        for name, cell in (node.get("components") or {}).items():
            if cell.get("status") != "n/a":
                desired[name] += 1
                ready[name] += cell.get("status") in drift_nodes.RUNNING
    return {name: (ready[name], desired[name]) for name in desired}


def drifted(document: Mapping[str, Any]) -> dict[str, Any]:
    findings = list(document.get("findings") or ())
    if not findings:
        return stack_status.condition("Drifted", "False", "NoDrift", "no drift found")
    by_component: dict[str, Counter[str]] = defaultdict(Counter)
    nodes: dict[str, set[str]] = defaultdict(set)
    for finding in findings:
        component = finding.get("component") or "stack"
        if finding["kind"] in NODE_KINDS and finding.get("node"):
            nodes[component].add(finding["node"])
        else:
            by_component[component][finding["kind"]] += 1
    parts = []
    for component in dict.fromkeys([*by_component, *nodes]):
        words = [f"{count} {kind}" for kind, count in sorted(by_component[component].items())]
        if nodes[component]:
            count = len(nodes[component])
            words.append(f"{_node_kinds(findings, component)} on {count} node{'s' if count != 1 else ''}")
        parts.append(f"{component}: {', '.join(words)}")
    first = findings[0]
    where = first.get("address") or first.get("node") or ""
    return stack_status.condition(
        "Drifted",
        "True",
        "DriftFound",
        f"{len(findings)} finding(s): {'; '.join(parts)}. First: {where}: {first.get('detail', '')}".strip(),
    )


def _node_kinds(findings: list[Mapping[str, Any]], component: str) -> str:
    kinds = sorted(
        {
            f["kind"]
            for f in findings
            if (f.get("component") or "stack") == component and f.get("node") and f["kind"] in NODE_KINDS
        }
    )
    return "/".join(kinds)
