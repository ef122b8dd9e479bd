"""``gpuplan inventory`` output: a kubectl-like table with a summary line, or the JSON document.

Called by :mod:`gpuplan.commands.inventory`. Both views render the document of
:meth:`gpuplan.planner.observe.inventory.ClusterInventory.document` (``source: cluster``) or
:meth:`~gpuplan.planner.observe.inventory.LocalInventory.document` (``source: nvml``), so the table and
``--json`` say the same thing. Tables follow kubectl: upper-case headers, columns as wide as their widest
cell, three spaces apart, no trailing blanks.

The summary line reads "4 nodes, 21 GPUs: ampere 9 (NVIDIA-A100-SXM4-80GB ×8, NVIDIA-GeForce-RTX-3060 ×1),
hopper 8, ada-lovelace 4": GPUs per family, most first, with the models spelled out where a family has
several. GPU names and memory are in the words of :mod:`gpuplan.views.gpu`, as in the drift report; the
GPU-SOURCE column says which source identified the GPU (:mod:`gpuplan.views.gpu_sources`). The MIG devices
and the shared GPUs (MPS, time-slicing) of the nodes that have them follow the table, a line per node, so the
table keeps its columns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.views import gpu_sources
from gpuplan.views.colour import PLAIN, Palette
from gpuplan.views.gpu import cell, gib, gpu_words, product_label

DRIVER_UNKNOWN = "unknown until GFD runs"
NOT_IDENTIFIED = "unknown"
NONE = "-"
CLUSTER_HEADERS = (
    "NODE",
    "GPU",
    "GPU-SOURCE",
    "FAMILY",
    "COUNT",
    "MEMORY",
    "CC",
    "MIG",
    "DRIVER",
    "DRIVER-SOURCE",
    "TOOLKIT",
    "DEVICE-PLUGIN",
    "GFD",
)
DRIVER_SOURCES = {"gfd-label": "GFD label", "dcgm": "DCGM metric", "nvml": "NVML"}
LOCAL_HEADERS = ("INDEX", "NAME", "UUID", "BUS-ID", "MEMORY", "CC", "MIG", "TEMP", "POWER", "UTIL")


def render_json(document: Mapping[str, Any]) -> str:
    """The document as stable JSON: keys in the document's order, two-space indent, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def render(document: Mapping[str, Any], *, palette: Palette = PLAIN) -> str:
    """The human view of either document."""
    if document.get("source") == "nvml":
        return render_local(document, palette=palette)
    return render_cluster(document, palette=palette)


def render_cluster(document: Mapping[str, Any], *, palette: Palette = PLAIN) -> str:
    nodes: Sequence[Mapping[str, Any]] = document.get("nodes") or ()
    rows = [node_cells(node) for node in nodes]
    headers: Sequence[str] = CLUSTER_HEADERS
    if any(node.get("pool") for node in nodes):  # a spec with node pools: which pool each node is in
        headers = (CLUSTER_HEADERS[0], "POOL", *CLUSTER_HEADERS[1:])
        rows = [[row[0], node.get("pool") or NONE, *row[1:]] for row, node in zip(rows, nodes)]
    lines = table(headers, rows) if nodes else ["No nodes found."]
    lines[0] = palette.bold(lines[0]) if nodes else lines[0]
    return "\n".join([*lines, *sharing_lines(nodes), "", summary_line(document["summary"])]) + "\n"


def sharing_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The MIG devices (profile × count) and the shared GPUs of the nodes that have them."""
    mig = [
        f"  {node['name']}: "
        + ", ".join(f"{device['profile']} ×{device['count']}" for device in node.get("mig_devices") or ())
        for node in nodes
        if node.get("mig_devices")
    ]
    shared = [
        f"  {node['name']}: {node['sharing']['strategy']}, {node['sharing']['replicas']} replicas per GPU "
        f"({node['sharing']['shared_gpus']} allocatable nvidia.com/gpu)"
        for node in nodes
        if node.get("sharing")
    ]
    return [*(["", "MIG devices:", *mig] if mig else []), *(["", "Shared GPUs:", *shared] if shared else [])]


def node_cells(node: Mapping[str, Any]) -> list[object]:
    """One table row; the JSON node document's fields in words."""
    gpu, driver, components = node["gpu"], node["driver"], node["components"]
    if not gpu["present"]:
        unknown = bool(gpu.get("unidentified"))  # no source could say whether it has a GPU
        return [
            node["name"],
            NOT_IDENTIFIED if unknown else "<none>",
            gpu_sources.UNIDENTIFIED if unknown else NONE,
            NONE,
            NONE,
            NONE,
            NONE,
            NONE,
            NONE,
            NONE,
            components["toolkit"],
            NONE,
            NONE,
        ]
    name, memory = gpu_words(gpu["product"], gpu["memory_mib"], unknown=NOT_IDENTIFIED)
    return [
        node["name"],
        name,
        gpu_sources.source_name(gpu.get("source")),
        gpu["family"] or NOT_IDENTIFIED,
        _or_unknown(gpu["count"]),
        memory,
        gpu["compute_capability"] or NOT_IDENTIFIED,
        _mig(gpu["mig_capable"], gpu["mig_enabled"]),
        driver["version"] or DRIVER_UNKNOWN,
        DRIVER_SOURCES.get(driver["source"], driver["source"]) if driver["source"] else NONE,
        components["toolkit"],
        _device_plugin(node),
        components["gfd"],
    ]


def render_local(document: Mapping[str, Any], *, palette: Palette = PLAIN) -> str:
    host = document["host"]
    head = (
        f"Driver {host['driver_version'] or NOT_IDENTIFIED}, "
        f"CUDA {host['cuda_driver_version'] or NOT_IDENTIFIED} (NVML on this host)"
    )
    gpus: Sequence[Mapping[str, Any]] = host.get("gpus") or ()
    lines = table(LOCAL_HEADERS, [gpu_cells(gpu) for gpu in gpus]) if gpus else ["No GPUs found."]
    lines[0] = palette.bold(lines[0]) if gpus else lines[0]
    return "\n".join([head, "", *lines, "", summary_line(document["summary"], hosts=True)]) + "\n"


def gpu_cells(gpu: Mapping[str, Any]) -> list[object]:
    memory, power, util, mig = gpu["memory"], gpu["power"], gpu["utilization"], gpu["mig"]
    return [
        str(gpu["index"]),
        product_label(gpu["name"]) if gpu["name"] else NOT_IDENTIFIED,
        gpu["uuid"] or NONE,
        gpu["pci_bus_id"] or NONE,
        f"{_gib_or_na(memory['used_mib'])} / {_gib_or_na(memory['total_mib'])} GiB",
        gpu["compute_capability"] or NONE,
        _local_mig(mig),
        f"{gpu['temperature_c']}C" if gpu["temperature_c"] is not None else "N/A",
        f"{_watts(power['usage_w'])} / {_watts(power['limit_w'])} W",
        f"{_or_na(util['gpu_pct'])}% / {_or_na(util['memory_pct'])}%",
    ]


def summary_line(summary: Mapping[str, Any], *, hosts: bool = False) -> str:
    """ "4 nodes, 21 GPUs: ampere 9 (A100-SXM4-80GB ×8, GeForce-RTX-3060 ×1), hopper 8, ada-lovelace 4"."""
    head = _plural(summary["nodes"], "host" if hosts else "node")
    if not summary["gpu_nodes"]:
        return f"{head}, no NVIDIA GPUs"
    parts = []
    if summary["families"]:
        families = ", ".join(_family_text(family) for family in summary["families"])
        parts.append(f"{head}, {_plural(summary['gpus'], 'GPU')}: {families}")
    unidentified = summary["unidentified_gpu_nodes"]
    if unidentified:
        unknown = f"{_plural(unidentified, 'GPU node')} not identified yet ({DRIVER_UNKNOWN})"
        parts.append(unknown if parts else f"{head}: {unknown}")
    return "; ".join(parts)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """kubectl's layout: every column as wide as its widest cell, three spaces between columns; a boolean
    cell reads yes or no."""
    cells = [list(headers), *([cell(value) for value in row] for row in rows)]
    widths = [max(len(text) for text in column) for column in zip(*cells)]
    return ["   ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in cells]


def _family_text(family: Mapping[str, Any]) -> str:
    models = family["models"]
    text = f"{family['family']} {family['gpus']}"
    if len(models) > 1:
        text += " (" + ", ".join(f"{product_label(m['product'])} ×{m['gpus']}" for m in models) + ")"
    return text


def _device_plugin(node: Mapping[str, Any]) -> object:
    """The GPUs it advertises; ``yes`` where it advertises MIG devices only (the mixed strategy)."""
    if not node["components"]["device_plugin"]:
        return False
    return str(node["allocatable_gpus"]) if node["allocatable_gpus"] is not None else True


def _mig(capable: bool | None, enabled: bool | None) -> str:
    if capable is None:
        return NOT_IDENTIFIED
    if not capable:
        return "no"
    return "enabled" if enabled else "capable"


def _local_mig(mig: Mapping[str, Any]) -> str:
    if not mig["capable"]:
        return "N/A"
    current, pending = mig["current"], mig["pending"]
    return current if pending == current else f"{current} (pending {pending})"


def _or_unknown(value: Any) -> str:
    return NOT_IDENTIFIED if value is None else str(value)


def _or_na(value: Any) -> str:
    return "N/A" if value is None else str(value)


def _gib_or_na(mib: float | None) -> str:
    return "N/A" if mib is None else gib(mib)


def _watts(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.0f}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
