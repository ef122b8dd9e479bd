"""Which source identified each node's GPU, in words: shared by the human plan and the inventory.

The plan document's ``node_gpus`` and the inventory's rows carry the source as a code (``gfd-label``,
``nfd``, or None when none did, ``planner/facts.py``); these are the words for it and the plan's summary of
it, one line per (source, GPU) with the nodes it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.planner.facts import GPU_SOURCE_NAMES

UNIDENTIFIED = "not identified"


def source_name(source: str | None) -> str:
    """``GFD labels``, ``NFD NodeFeature``, or ``not identified``."""
    return GPU_SOURCE_NAMES.get(source or "", UNIDENTIFIED)


def grouped(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """(source words, GPU words, node names) for each source and GPU, in first-seen order; the GPU words
    of nodes no source identified are empty (the plan's findings say why)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        gpu = f"{row['gpu']} ({row['family']})" if row.get("gpu") else ""
        groups.setdefault((source_name(row.get("source")), gpu), []).append(str(row["node"]))
    return [(source, gpu, nodes) for (source, gpu), nodes in groups.items()]
