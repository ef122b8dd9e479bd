"""The host driver versions a successful apply records, for an external driver whose spec pins no version.

Such a driver is taken as each node has it (a fleet grown over time runs 570 on its older nodes and 580 on
the newer ones), so no version is wrong; what the drift report can still tell is a node whose driver changed
since the last apply (an unattended upgrade, a reinstalled node). The apply records what every GPU node
reports once its gates passed (GFD's label ``nvidia.com/cuda.driver-version.full``, which the driver's gate
waited for), from the apply's node cache where its gates kept one (no list of the fleet), else in one list
of the nodes; a spec that pins the version, or a driver gpuplan owns, records
nothing (its version is the spec's). A failed read records nothing new: the last record stays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuplan.errors import ProviderError
from gpuplan.planner.facts import reported_driver
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.protocols import Reader


def reported(
    spec: Spec, reader: Reader, nodes: Callable[[], Sequence[Mapping[str, Any]]] | None = None
) -> dict[str, str] | None:
    """Node -> driver version for the record; empty when the spec pins or owns the driver; None when the
    nodes could not be read (keep the last record). ``nodes``: the apply's cache of them (its labels are
    among what it keeps)."""
    if not spec.spec.driver.host_as_is():
        return {}
    try:
        manifests = nodes() if nodes is not None else [live.manifest for live in reader.list_nodes()]
    except ProviderError:
        return None
    found = {}
    for manifest in manifests:
        if (driver := reported_driver(manifest)) is not None:
            found[str((manifest.get("metadata") or {}).get("name", ""))] = driver
    return found
