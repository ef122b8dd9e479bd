"""The GPU inventory: which GPUs each node (or this host) has, what of the stack runs there, and the totals.

Called by ``gpuplan inventory`` (:mod:`gpuplan.commands.inventory`), which renders the documents built here
with :mod:`gpuplan.views.inventory`; the human table and ``--json`` come from the same document, so they
cannot disagree.

- Cluster: :func:`read_cluster` takes one refresh from a :class:`~gpuplan.providers.snapshot.ClusterReader`
  (no managed kinds: the version, the DaemonSet list, discovery, the nodes and NFD's NodeFeatures as ONE
  paginated list each, and the namespace, so the request count grows only by two pages per 500 nodes) and
  reduces every node to a small :class:`NodeRow` (:meth:`NodeRow.of` reads
  :class:`~gpuplan.planner.facts.NodeFacts`), so no label map is kept per node once the rows exist.
- This host: :func:`local_inventory` turns NVML's :class:`~gpuplan.providers.nvml.LocalHost` into the same
  kind of document, with the same per-family totals.

Before GFD has run on a node, its GPU is what NFD's NodeFeature says (the PCI device id looked up in
``modules/pci_ids.py``; ``gpu.source`` ``nfd``, MIG mode unknown), and unknown without one (``gpu.present``
from NFD's PCI label, product ``None``, source ``None``); nothing is guessed. Once GFD has labelled the node,
its labels win (``gpu.source`` ``gfd-label``). A MIG node's devices are what the device plugin advertises:
``nvidia.com/mig-<profile>`` each (the mixed strategy), or ``nvidia.com/gpu`` of GFD's
``<product>-MIG-<profile>`` (the single one); a shared GPU's replicas and strategy (MPS, time-slicing) are
GFD's ``nvidia.com/gpu.replicas`` and ``nvidia.com/gpu.sharing-strategy``. The driver version comes from GFD's
``nvidia.com/cuda.driver-version.full`` label (``driver.source`` ``gfd-label``). The components present on a
node are read from their effects: the container runtime reports the ``nvidia`` handler (toolkit), the node
advertises allocatable ``nvidia.com/gpu`` (device plugin), GFD's labels are there (GFD); the DCGM exporter and
the validator have no effect on the node, so a Ready pod of theirs shows them, read as one label-selected
paginated pods list (no request per node). With a Prometheus server that scrapes the DCGM exporters
(``--prometheus`` or the spec's ``telemetry.prometheus``), a node GFD has not labelled yet shows the driver
version its exporter labels its series with (``driver.source`` ``dcgm``): two queries for the whole fleet
(:func:`gpuplan.planner.observe.telemetry.driver_versions`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.modules import dcgm_exporter, validator
from gpuplan.modules.common import COMPONENT_LABEL
from gpuplan.planner.facts import NodeFacts, family_of, pool_labels
from gpuplan.planner.observe import refresh, telemetry
from gpuplan.planner.pools import PoolSelector, pool_of_labels
from gpuplan.providers.nvml import LocalGpu, LocalHost
from gpuplan.providers.protocols import MetricsQuerier, ReducedLister
from gpuplan.providers.snapshot import ClusterReader

FORMAT_VERSION = "1"
GFD_MARKERS = ("nvidia.com/gfd.timestamp", "nvidia.com/gpu.product")
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
SINGLE_MIG_MARK = "-MIG-"
"""GFD's product label under the single strategy: ``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb``."""
POD_COMPONENTS = ("dcgmExporter", "validator")
"""Components whose presence shows only in their pods (no node effect to read)."""
POD_APPS = {dcgm_exporter.NAME: "dcgmExporter", validator.NAME: "validator"}
"""Their pods' ``app`` label (their DaemonSets' selector; a pod of the operator's template shape carries no
gpuplan label)."""

GpuModels = Mapping[tuple[str, str], int]
"""(family, product) -> GPUs of that model on one node or host."""


@dataclass(frozen=True)
class NodeRow:
    """One node's GPUs and stack components. ``None``: unknown (GFD has not labelled the node yet)."""

    name: str
    has_gpu: bool
    product: str | None
    family: str | None
    count: int | None
    memory_mib: int | None
    cc: tuple[int, int] | None
    mig_capable: bool | None
    mig_enabled: bool | None
    driver_version: str | None
    driver_source: str | None
    toolkit: bool
    """The container runtime reports the ``nvidia`` runtime handler."""
    allocatable_gpus: int | None
    """Allocatable ``nvidia.com/gpu``: a device plugin advertises the GPUs (None: not advertised)."""
    gfd: bool
    """GFD's labels are on the node."""
    dcgm_exporter: bool | None = None
    """A Ready DCGM exporter pod of the stack runs there (None: the stack's pods were not read)."""
    validator: bool | None = None
    """A Ready validator pod of the stack runs there (None: the stack's pods were not read)."""
    gpu_source: str | None = None
    """Which source identified the GPU: ``gfd-label``, ``nfd`` (NFD's NodeFeature) or None (none did)."""
    unidentified: str | None = None
    """Why no source could tell this GPU node's GPU, or, on a node NFD has not described while it runs
    elsewhere in the cluster, whether it has one (the table then says ``unknown``, not ``<none>``)."""
    mig_devices: tuple[tuple[str, str, int], ...] = ()
    """The MIG devices the device plugin advertises: (profile, resource, count)."""
    sharing: str | None = None
    """GFD's sharing strategy of a shared GPU (``mps``, ``time-slicing``); None: not shared."""
    replicas: int | None = None
    """How many replicas each shared GPU is advertised as."""
    pool: str | None = None
    """The spec's node pool the node is in (design §7.1), when a spec was given."""

    @classmethod
    def of(
        cls, facts: NodeFacts, ready: Mapping[str, frozenset[str]] | None = None, pool: str | None = None
    ) -> NodeRow:
        """The row of one node; ``ready``: node -> the stack components with a Ready pod there, when read;
        ``pool``: its node pool."""
        running = ready.get(facts.name, frozenset()) if ready is not None else None
        return cls(
            name=facts.name,
            has_gpu=facts.has_nvidia_gpu,
            product=facts.gpu_product,
            family=facts.gpu_family,
            count=facts.gpu_count,
            memory_mib=facts.gpu_memory_mib,
            cc=facts.cc,
            mig_capable=facts.mig_capable,
            mig_enabled=facts.mig_enabled,
            driver_version=facts.driver_version,
            driver_source=facts.driver_version_source,
            toolkit=refresh.NVIDIA_HANDLER in facts.runtime_handlers,
            allocatable_gpus=facts.allocatable_gpus if facts.allocatable_gpus else None,
            gfd=any(key in facts.labels for key in GFD_MARKERS),
            dcgm_exporter=None if running is None else "dcgmExporter" in running,
            validator=None if running is None else "validator" in running,
            gpu_source=facts.gpu_source,
            unidentified=facts.unidentified if facts.has_nvidia_gpu or facts.nfd_missing_here else None,
            mig_devices=_mig_devices(facts),
            **_sharing(facts.labels),
            pool=pool,
        )

    def gpu_models(self) -> GpuModels | None:
        """This node's GPUs for the totals; None while GFD has not identified them."""
        if self.product is None:
            return None
        return {(self.family or "undefined", self.product): self.count or 0}

    def document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pool": self.pool,
            "gpu": {
                "present": self.has_gpu,
                "product": self.product,
                "family": self.family,
                "count": self.count,
                "memory_mib": self.memory_mib,
                "compute_capability": _cc(self.cc),
                "mig_capable": self.mig_capable,
                "mig_enabled": self.mig_enabled,
                "source": self.gpu_source,
                "unidentified": self.unidentified,
            },
            "driver": {"version": self.driver_version, "source": self.driver_source},
            "components": {
                "toolkit": self.toolkit,
                "device_plugin": self.allocatable_gpus is not None or bool(self.mig_devices),
                "gfd": self.gfd,
                "dcgm_exporter": self.dcgm_exporter,
                "validator": self.validator,
            },
            "allocatable_gpus": self.allocatable_gpus,
            "mig_devices": [
                {"profile": profile, "resource": resource, "count": count}
                for profile, resource, count in self.mig_devices
            ],
            "sharing": (
                {"strategy": self.sharing, "replicas": self.replicas, "shared_gpus": self.allocatable_gpus}
                if self.sharing
                else None
            ),
        }


def _mig_devices(facts: NodeFacts) -> tuple[tuple[str, str, int], ...]:
    mixed = tuple((profile, f"nvidia.com/mig-{profile}", count) for profile, count in facts.allocatable_mig)
    product = facts.gpu_product or ""
    if mixed or SINGLE_MIG_MARK not in product or not facts.allocatable_gpus:
        return mixed
    return ((product.rsplit(SINGLE_MIG_MARK, 1)[1], "nvidia.com/gpu", facts.allocatable_gpus),)


def _sharing(labels: Mapping[str, str]) -> dict[str, Any]:
    """GFD's sharing labels of a shared GPU (``none``, or one replica, is not sharing)."""
    strategy = labels.get(SHARING_LABEL)
    try:
        replicas = int(labels.get(REPLICAS_LABEL) or "")
    except ValueError:
        replicas = None
    if not strategy or strategy == "none" or replicas is None or replicas < 2:
        return {}
    return {"sharing": strategy, "replicas": replicas}


@dataclass(frozen=True)
class ModelCount:
    product: str
    gpus: int
    nodes: int


@dataclass(frozen=True)
class FamilyCount:
    """The GPUs of one architecture family, and of each model in it (most GPUs first)."""

    family: str
    gpus: int
    nodes: int
    models: tuple[ModelCount, ...]


@dataclass(frozen=True)
class Summary:
    """Totals. ``nodes``: all nodes (or hosts); ``gpu_nodes``: those with an NVIDIA GPU; ``gpus``: the GPUs
    identified so far; ``unidentified_gpu_nodes``: GPU nodes GFD has not labelled yet (their count is
    unknown). Families are ordered by GPUs, most first, then by name."""

    nodes: int
    gpu_nodes: int
    gpus: int
    unidentified_gpu_nodes: int
    families: tuple[FamilyCount, ...]

    def document(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpu_nodes": self.gpu_nodes,
            "gpus": self.gpus,
            "unidentified_gpu_nodes": self.unidentified_gpu_nodes,
            "families": [
                {
                    "family": f.family,
                    "gpus": f.gpus,
                    "nodes": f.nodes,
                    "models": [{"product": m.product, "gpus": m.gpus, "nodes": m.nodes} for m in f.models],
                }
                for f in self.families
            ],
        }


class Tally:
    """Counts nodes and GPUs per family and model as nodes arrive: totals need no second pass over the
    rows."""

    def __init__(self) -> None:
        self.nodes = 0
        self.gpu_nodes = 0
        self.unidentified = 0
        self._gpus: Counter[tuple[str, str]] = Counter()
        self._model_nodes: Counter[tuple[str, str]] = Counter()
        self._family_nodes: Counter[str] = Counter()

    def add_node(self, gpus: GpuModels | None, *, has_gpu: bool = True) -> None:
        """One node (or host): its GPUs by model, or None for a GPU node whose GPUs are not identified yet."""
        self.nodes += 1
        if not has_gpu:
            return
        self.gpu_nodes += 1
        if gpus is None:
            self.unidentified += 1
            return
        for key, count in gpus.items():
            self._gpus[key] += count
            self._model_nodes[key] += 1
        self._family_nodes.update({family for family, _ in gpus})

    def summary(self) -> Summary:
        by_family: dict[str, list[ModelCount]] = defaultdict(list)
        for (family, product), gpus in self._gpus.items():
            by_family[family].append(ModelCount(product, gpus, self._model_nodes[(family, product)]))
        families = [
            FamilyCount(
                family,
                sum(m.gpus for m in models),
                self._family_nodes[family],
                tuple(sorted(models, key=lambda m: (-m.gpus, m.product))),
            )
            for family, models in by_family.items()
        ]
        families.sort(key=lambda f: (-f.gpus, f.family))
        return Summary(
            self.nodes, self.gpu_nodes, sum(f.gpus for f in families), self.unidentified, tuple(families)
        )


# ------------------------------------------------------------------------------------------------ cluster


@dataclass(frozen=True)
class ClusterInventory:
    """Every node's row, the totals, and what the read cost (``requests``: API requests of the refresh)."""

    nodes: tuple[NodeRow, ...]
    summary: Summary
    server_version: str
    requests: int
    stack: str | None = None
    namespace: str | None = None

    def document(self) -> dict[str, Any]:
        """The ``inventory --json`` document (format_version 1); the table is rendered from it."""
        cluster: dict[str, Any] = {"server_version": self.server_version}
        if self.stack is not None:
            cluster.update(stack=self.stack, namespace=self.namespace)
        return {
            "format_version": FORMAT_VERSION,
            "source": "cluster",
            "cluster": cluster,
            "summary": self.summary.document(),
            "nodes": [row.document() for row in self.nodes],
        }


def cluster_inventory(
    facts: Iterable[NodeFacts],
    *,
    server_version: str = "unknown",
    requests: int = 0,
    stack: str | None = None,
    namespace: str | None = None,
    ready: Mapping[str, frozenset[str]] | None = None,
    pools: Sequence[PoolSelector] = (),
) -> ClusterInventory:
    """Rows and totals from node facts, in one pass; ``ready`` as :meth:`NodeRow.of` reads it; ``pools``:
    the spec's node pools, each node's named in its row."""
    tally = Tally()
    rows = []
    for fact in facts:
        row = NodeRow.of(fact, ready, pool_of_labels(pools, pool_labels(fact)))
        tally.add_node(row.gpu_models(), has_gpu=row.has_gpu)
        rows.append(row)
    return ClusterInventory(tuple(rows), tally.summary(), server_version, requests, stack, namespace)


def read_cluster(
    reader: ClusterReader,
    *,
    stack: str | None = None,
    namespace: str = "gpu-operator",
    querier: MetricsQuerier | None = None,
    pools: Sequence[PoolSelector] = (),
) -> ClusterInventory:
    """Read the nodes through one refresh that lists no managed kinds (see the module doc for its cost), and,
    when the reader can list (:class:`~gpuplan.providers.protocols.ReducedLister`), the stack's exporter
    and validator pods as ONE paginated list: a page per 500 pods, never a request per node.

    ``stack``/``namespace`` come from ``-f SPEC`` when given; without one, no stack is named. ``querier``:
    the Prometheus server that fills in the driver of nodes GFD has not labelled (see the module doc)."""
    snapshot = reader.refresh(stack=stack or "", namespace=namespace, kinds=())
    requests = snapshot.requests
    ready: dict[str, frozenset[str]] | None = None
    if isinstance(reader, ReducedLister):
        before = reader.request_count
        selector, reduce = _stack_pods(namespace) if stack else _any_stack_pods()
        found: dict[str, set[str]] = defaultdict(set)
        for placed in reader.list_reduced("v1", "Pod", reduce, label_selector=selector):
            if placed is not None:
                found[placed[0]].add(placed[1])
        ready = {node: frozenset(components) for node, components in found.items()}
        requests += reader.request_count - before
    facts = refresh.node_facts(snapshot)
    if querier is not None:
        facts = with_dcgm_drivers(facts, telemetry.driver_versions(querier))
    return cluster_inventory(
        facts,
        server_version=snapshot.server_version,
        requests=requests,
        stack=stack,
        namespace=namespace if stack else None,
        ready=ready,
        pools=pools,
    )


def with_dcgm_drivers(facts: Iterable[NodeFacts], versions: Mapping[str, str]) -> tuple[NodeFacts, ...]:
    """``facts`` with the DCGM exporter's driver version where no label gave one."""
    return tuple(
        dataclasses.replace(fact, driver_version=versions[fact.name], driver_version_source="dcgm")
        if fact.driver_version is None and fact.has_nvidia_gpu and fact.name in versions
        else fact
        for fact in facts
    )


PodReducer = Callable[[Mapping[str, Any]], "tuple[str, str] | None"]


def _stack_pods(namespace: str) -> tuple[str, PodReducer]:
    """The stack's exporter and validator pods: those of its namespace its DaemonSets' selectors match."""

    def component(pod: Mapping[str, Any]) -> str | None:
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") != namespace:
            return None
        return POD_APPS.get(str((metadata.get("labels") or {}).get("app")))

    return f"app in ({','.join(sorted(POD_APPS))})", functools.partial(_ready_component, component=component)


def _any_stack_pods() -> tuple[str, PodReducer]:
    """Without a spec: the pods of any gpuplan stack's template, by their gpuplan label."""

    def component(pod: Mapping[str, Any]) -> str | None:
        found = ((pod.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL)
        return str(found) if found else None

    selector = f"{COMPONENT_LABEL} in ({','.join(POD_COMPONENTS)})"
    return selector, functools.partial(_ready_component, component=component)


def _ready_component(
    pod: Mapping[str, Any], *, component: Callable[[Mapping[str, Any]], str | None]
) -> tuple[str, str] | None:
    """(node, component) of a Ready stack pod; None for one that is not Ready or not placed."""
    name = component(pod)
    node = (pod.get("spec") or {}).get("nodeName")
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )
    return (str(node), name) if name and node and ready else None


# ------------------------------------------------------------------------------------------------- local


@dataclass(frozen=True)
class LocalInventory:
    """This host's GPUs as NVML reports them, and the same per-family totals as the cluster inventory."""

    host: LocalHost
    summary: Summary

    def document(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "source": "nvml",
            "host": {
                "driver_version": self.host.driver_version,
                "cuda_driver_version": self.host.cuda_driver_version,
                "gpus": [_gpu_document(gpu) for gpu in self.host.gpus],
            },
            "summary": self.summary.document(),
        }


def local_inventory(host: LocalHost) -> LocalInventory:
    """This host counts as one node, with its GPUs counted by family and model."""
    tally = Tally()
    models = Counter((local_family(gpu), gpu.name or "unknown") for gpu in host.gpus)
    tally.add_node(dict(models), has_gpu=bool(host.gpus))
    return LocalInventory(host, tally.summary())


def local_family(gpu: LocalGpu) -> str:
    """GFD's family for the GPU's compute capability (``undefined`` when NVML does not report one)."""
    return family_of(*gpu.compute_capability) if gpu.compute_capability else "undefined"


def _gpu_document(gpu: LocalGpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "family": local_family(gpu),
        "compute_capability": _cc(gpu.compute_capability),
        "memory": {"total_mib": gpu.memory_total_mib, "used_mib": gpu.memory_used_mib},
        "mig": {
            "capable": gpu.mig_capable,
            "current": _mig_mode(gpu.mig_current),
            "pending": _mig_mode(gpu.mig_pending),
        },
        "temperature_c": gpu.temperature_c,
        "power": {"usage_w": gpu.power_usage_w, "limit_w": gpu.power_limit_w},
        "utilization": {"gpu_pct": gpu.utilization_gpu_pct, "memory_pct": gpu.utilization_memory_pct},
    }


def _mig_mode(enabled: bool | None) -> str | None:
    return None if enabled is None else ("enabled" if enabled else "disabled")


def _cc(cc: tuple[int, int] | None) -> str | None:
    return f"{cc[0]}.{cc[1]}" if cc is not None else None
