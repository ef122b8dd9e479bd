"""What every drift report view shares: the matrix columns, the words of a node's GPU cell, the headline.

Called by :mod:`gpuplan.views.drift_text`, :mod:`~gpuplan.views.drift_markdown` and
:mod:`~gpuplan.views.drift_html`
(the JSON and Prometheus views need none of it). Every view renders the document of
:meth:`gpuplan.planner.drift.report.Report.document`, so the formats cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuplan.views.gpu import gpu_words
from gpuplan.views.inventory import DRIVER_SOURCES

NODE_HEADERS = ("NODE", "GPU", "FAMILY", "COUNT", "MEMORY", "DRIVER-VERSION")


def columns(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(component, header) of the matrix's columns, as the report chose them (its ``components``):
    ``devicePlugin`` -> ``DEVICE-PLUGIN``, ``migManager`` -> ``MIG-MANAGER``."""
    return [(name, re.sub(r"(?<=[a-z])(?=[A-Z])", "-", name).upper()) for name in document["components"]]


def headline(document: Mapping[str, Any]) -> str:
    """ "Drift found: 3 findings (changed 1, unhealthy 2)" or "No drift"."""
    summary = document["summary"]
    if not document["drift"]:
        return "No drift: the cluster matches the state and every node's stack is healthy."
    counts = ", ".join(f"{kind} {count}" for kind, count in summary["findings"].items() if count)
    return f"Drift found: {summary['total']} finding{'s' if summary['total'] != 1 else ''} ({counts})."


def coverage_line(document: Mapping[str, Any]) -> str:
    coverage = document["coverage"]
    return (
        f"Coverage: {coverage['managed']} of {coverage['total']} GPU-stack objects managed by gpuplan "
        f"({coverage['ratio'] * 100:.0f}%), {coverage['unmanaged']} not managed."
    )


def nodes_line(document: Mapping[str, Any]) -> str:
    summary = document["summary"]
    return (
        f"Nodes: {summary['nodes']} ({summary['gpu_nodes']} with GPUs, {summary['healthy_nodes']} with a "
        "healthy stack)."
    )


def node_facts(node: Mapping[str, Any]) -> list[str]:
    """NODE, GPU, FAMILY, COUNT, MEMORY, DRIVER-VERSION (with its source) in words."""
    gpu, driver = node["gpu"], node["driver"]
    if not gpu["present"]:
        return [node["name"], "<none>", "-", "-", "-", "-"]
    name, memory = gpu_words(gpu["product"], gpu.get("memory_mib"))
    version = driver["version"] or "unknown"
    if driver["version"] and driver.get("source"):
        version += f" ({DRIVER_SOURCES.get(driver['source'], driver['source'])})"
    return [
        node["name"],
        name,
        gpu["family"] or "unknown",
        str(gpu["count"]) if gpu["count"] is not None else "unknown",
        memory,
        version,
    ]


def load_text(node: Mapping[str, Any]) -> str:
    """Heavy-load GPUs, for information (not drift)."""
    heavy = node["telemetry"]["heavy_load_gpus"]
    return f"heavy load: GPU {', '.join(heavy)}" if heavy else ""


def problems(node: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(component, status, reason) of the node's cells that are not ok or n/a."""
    return [
        (name, state["status"], state["reason"])
        for name, state in node["components"].items()
        if state["status"] not in ("ok", "n/a")
    ]
