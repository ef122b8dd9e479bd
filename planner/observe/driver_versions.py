"""Driver versions GFD has not reported yet: the DCGM exporters' ``DCGM_FI_DRIVER_VERSION`` and NVML here.

An external driver is verified from node facts (design §5): GFD's ``nvidia.com/cuda.driver-version.full``
label first (:class:`gpuplan.planner.facts.NodeFacts`), then, for GPU nodes without it, these two sources:

- **NVML on this host**: when gpuplan runs on a node of the cluster (:func:`this_host_node`: its name, or the
  kubelet's machineID / systemUUID, matches :func:`gpuplan.providers.host.local_identity`), the driver NVML
  reports (:func:`gpuplan.providers.nvml.read_local_host`) is that node's. No driver is no source, not an
  error.
- **the DCGM exporter**: a Ready exporter pod on the node, of the stack or of another owner (the DaemonSets
  refresh found), is scraped through the pod proxy with :func:`gpuplan.planner.observe.telemetry.scrape_nodes`
  (the drift report's scraper) and its samples' ``DCGM_FI_DRIVER_VERSION`` label is read. The pods come from
  ONE label-selected paginated list per exporter DaemonSet (:meth:`KubernetesProvider.list_reduced`, the drift
  report's pod listing), each pod reduced to a scrape target as its page arrives. At most ``max_scrapes``
  nodes (by name) are scraped, so the plan's requests stay independent of the nodes by default; when the cap
  leaves nodes out the plan carries a note.

Nothing is read when the driver is not external, or when GFD already reported every GPU node's driver.

Callers: :func:`gpuplan.planner.driver.live_plan.build` (:func:`gather`, then
:func:`gpuplan.planner.plan.build.make_plan` with the :class:`DriverReports`, which stays pure);
:func:`gpuplan.planner.observe.refresh.verify_driver` names the source in the driver's status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import ProviderError
from gpuplan.modules.common import COMPONENT_LABEL, STACK_LABEL
from gpuplan.planner.facts import DriverSource, NodeFacts
from gpuplan.planner.health import gates as health
from gpuplan.planner.observe import refresh, telemetry
from gpuplan.planner.spec.model import Spec
from gpuplan.providers import nvml
from gpuplan.providers.host import HostIdentity, local_identity
from gpuplan.providers.protocols import ProxyReader, ReducedLister
from gpuplan.providers.snapshot import ClusterSnapshot

DEFAULT_MAX_SCRAPES = 20


@dataclass(frozen=True)
class DriverReports:
    """Node -> (driver version, source) for GPU nodes GFD has not labelled, the requests spent reading them,
    and notes for the plan (a capped scrape, scrapes that failed)."""

    versions: Mapping[str, tuple[str, DriverSource]] = field(default_factory=dict)
    requests: int = 0
    notes: tuple[str, ...] = ()


def gather(
    reader: ReducedLister,
    snapshot: ClusterSnapshot,
    spec: Spec,
    *,
    open_reader: Callable[[], ProxyReader],
    max_scrapes: int = DEFAULT_MAX_SCRAPES,
    identity: HostIdentity | None = None,
    read_nvml: Callable[[], nvml.LocalHost] = nvml.read_local_host,
    facts: Sequence[NodeFacts] | None = None,
) -> DriverReports:
    """The driver versions NVML here and the DCGM exporters report for the GPU nodes GFD has not labelled.
    ``facts``: the snapshot's node facts, when the caller made them (:func:`refresh.node_facts`)."""
    if spec.spec.driver.owner != "external":
        return DriverReports()
    missing = unreported_gpu_nodes(refresh.node_facts(snapshot, base=facts))
    if not missing:
        return DriverReports()
    versions: dict[str, tuple[str, DriverSource]] = {}
    here = this_host_node(snapshot.nodes, identity or local_identity())
    if here in missing:
        version = nvml_version(read_nvml)
        if version is not None:
            versions[here] = (version, "nvml")
            missing.remove(here)
    requests, notes = 0, []
    selectors = exporter_selectors(snapshot, spec.metadata.name)
    if missing and selectors and max_scrapes > 0:
        before = reader.request_count
        pods = [
            pod
            for selector in selectors
            for pod in reader.list_reduced("v1", "Pod", exporter_target, label_selector=selector)
        ]
        requests += reader.request_count - before
        targets, capped = choose_targets(pods, missing, max_scrapes)
        run = telemetry.scrape_nodes(targets, open_reader)
        requests += run.requests
        for node, reading in telemetry.parse_all(run.scrapes).items():
            if isinstance(reading, telemetry.NodeTelemetry) and reading.driver_version:
                versions[node] = (reading.driver_version, "dcgm")
        notes += [note for note in (capped, _not_scraped_note(run.not_scraped)) if note]
    return DriverReports(versions, requests, tuple(notes))


def unreported_gpu_nodes(facts: Iterable[NodeFacts]) -> list[str]:
    """GPU nodes whose driver version no label reports, by name."""
    return sorted(fact.name for fact in facts if fact.has_nvidia_gpu and fact.driver_version is None)


def this_host_node(nodes: Iterable[Mapping[str, Any]], identity: HostIdentity) -> str | None:
    """The node that is this host: same name (or hostname label, or short name), machineID or systemUUID."""
    names = {identity.hostname.lower(), identity.hostname.split(".")[0].lower()}
    for node in nodes:
        labels = node.get("labels") or {}
        info = node.get("nodeInfo") or {}
        if (
            str(node.get("name", "")).lower() in names
            or str(labels.get("kubernetes.io/hostname", "")).lower() in names
        ):
            return str(node.get("name"))
        if identity.machine_id and str(info.get("machineID", "")).lower() == identity.machine_id.lower():
            return str(node.get("name"))
        if identity.system_uuid and str(info.get("systemUUID", "")).lower() == identity.system_uuid.lower():
            return str(node.get("name"))
    return None


def nvml_version(read: Callable[[], nvml.LocalHost]) -> str | None:
    """The driver NVML reports here; None when NVML cannot tell (no driver, no library, a broken read)."""
    try:
        version: str | None = read().driver_version
    except ProviderError:  # NvmlUnavailableError included: a host without a driver is simply no source
        return None
    return version


def exporter_selectors(snapshot: ClusterSnapshot, stack: str) -> list[str]:
    """Label selectors of the pods of every DCGM exporter DaemonSet refresh saw: the stack's, and any other
    owner's (a Helm release, the GPU Operator, a hand-made one)."""
    daemonsets = [
        obj.manifest
        for obj in snapshot.managed.values()
        if obj.key.kind == "DaemonSet"
        and obj.labels.get(STACK_LABEL) == stack
        and obj.labels.get(COMPONENT_LABEL) == "dcgmExporter"
    ]
    daemonsets += [
        obj.manifest
        for obj in snapshot.foreign
        if obj.key.kind == "DaemonSet" and "dcgmExporter" in obj.components
    ]
    selectors: dict[str, None] = {}
    for daemonset in daemonsets:
        labels = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if labels:
            selectors[",".join(f"{key}={value}" for key, value in sorted(labels.items()))] = None
    return list(selectors)


def exporter_target(pod: Mapping[str, Any]) -> telemetry.Target | None:
    """A Ready exporter pod as a scrape target for its node (the list's reducer); None otherwise."""
    node = health.node_of(pod)
    if node is None or not health.pod_ready(pod):
        return None
    metadata = pod.get("metadata") or {}
    return telemetry.Target(node, str(metadata.get("namespace")), str(metadata.get("name")))


def choose_targets(
    pods: Iterable[telemetry.Target | None], nodes: Sequence[str], max_scrapes: int
) -> tuple[list[telemetry.Target], str | None]:
    """One exporter pod per node in ``nodes`` (by pod name), at most ``max_scrapes`` nodes (by node name), and
    the note when the cap left nodes out."""
    wanted = set(nodes)
    chosen: dict[str, telemetry.Target] = {}
    for pod in sorted((pod for pod in pods if pod is not None), key=lambda pod: pod.pod):
        if pod.node in wanted and pod.node not in chosen:
            chosen[pod.node] = pod
    targets = [chosen[node] for node in sorted(chosen)]
    if len(targets) <= max_scrapes:
        return targets, None
    note = (
        f"driver version read from the DCGM exporter on {max_scrapes} of {len(targets)} nodes without "
        f"GFD's label (capped at {max_scrapes}, so the plan's requests do not grow with the nodes); the "
        "others stay unknown until GFD runs"
    )
    return targets[:max_scrapes], note


def _not_scraped_note(not_scraped: Mapping[str, str]) -> str | None:
    if not not_scraped:
        return None
    node, reason = sorted(not_scraped.items())[0]
    more = f" and {len(not_scraped) - 1} more" if len(not_scraped) > 1 else ""
    return f"the DCGM exporter on {node}{more} could not be scraped for the driver version: {reason}"
