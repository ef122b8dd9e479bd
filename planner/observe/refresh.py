"""Refresh: what the cluster runs, read through a provider and turned into what the planner compares.

Called before :func:`gpuplan.planner.plan.build.make_plan`, which stays pure, by the plan of a live cluster
(:mod:`gpuplan.planner.driver.live_plan`, through :func:`observe`, which keeps the desired objects it
rendered so the plan renders them once), apply's check of a saved plan and drift. This module talks to a
provider only through the :class:`~gpuplan.providers.snapshot.ClusterReader` read interface.

- :func:`refresh` lists the stack's objects of every kind gpuplan could manage (whatever the owners say now,
  so objects of a component switched to ``none`` are still found), the foreign NVIDIA components and the
  nodes; then reads, one by one, the recorded objects the label-selected lists cannot see (an imported object
  carries no gpuplan label), the RuntimeClass ``nvidia`` that an external toolkit must provide, and each
  desired object the lists did not return (a hand-made object squatting gpuplan's name is a foreign object:
  a conflict, not a create that fails half-way). The number of requests depends on kinds, records and the
  stack's size, never on nodes (nodes are one paginated list).
- :func:`node_facts` turns the snapshot's node dicts into :class:`~gpuplan.planner.facts.NodeFacts`, with
  what NFD's NodeFeatures say of the GPUs of nodes GFD has not labelled (``facts.with_node_features``).
- :func:`scheduled_nodes` says which nodes a DaemonSet's pods land on (nodeSelector, required node affinity,
  taints against tolerations), the nodes a change "touches".
- :func:`verify_driver` / :func:`verify_toolkit` check an external driver or toolkit from node facts, and
  say "unknown" when a node cannot tell yet: nothing is guessed.

Host facts come from GFD's ``nvidia.com/cuda.driver-version.full`` label; for GPU nodes without it, the DCGM
exporter's ``DCGM_FI_DRIVER_VERSION`` metric label and NVML on the node itself
(:mod:`gpuplan.planner.observe.driver_versions`, read by the ``plan`` command) fill NodeFacts'
``driver_version`` and ``driver_version_source``; the driver's status names the source when it is not GFD.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuplan.modules import catalog
from gpuplan.modules.base import ComponentConfig, DesiredObject, StackContext
from gpuplan.planner import placement
from gpuplan.planner.facts import NodeFacts, with_node_features
from gpuplan.planner.observe.adopt import describe, owner_phrase
from gpuplan.planner.spec.model import Spec
from gpuplan.providers import foreign
from gpuplan.providers.snapshot import ClusterReader, ClusterSnapshot, ForeignObject, LiveObject, ObjectKey
from gpuplan.state.model import StateFile

RUNTIME_CLASS = ObjectKey("node.k8s.io/v1", "RuntimeClass", None, "nvidia")
NVIDIA_HANDLER = "nvidia"
SOURCE_NAMES = {"gfd-label": "GFD label", "dcgm": "DCGM exporter", "nvml": "NVML on this host"}
"""How the component status names where a driver version came from."""
Verdict = Literal["verified", "mismatch", "unknown", "partial", "no-gpu-nodes"]


def manageable_kinds(spec: Spec, state: StateFile | None) -> list[tuple[str, str]]:
    """(apiVersion, kind) of everything gpuplan could own for this stack, plus the kinds of recorded objects.

    Each component is rendered as if gpuplan owned it, so that a component now external or none still has
    its leftover objects listed (and deleted by the plan)."""
    stack = spec.context().model_copy(update={"owners": dict.fromkeys(spec.components(), "gpuplan")})
    kinds: dict[tuple[str, str], None] = {}
    for name, config in spec.components().items():
        owned = config.model_copy(update={"owner": "gpuplan"})
        for obj in catalog.get(name).render(owned, stack):
            kinds[(str(obj.manifest["apiVersion"]), str(obj.manifest["kind"]))] = None
    for record in state.resources.values() if state else ():
        kinds[(record.api_version, record.kind)] = None
    return sorted(kinds)


def record_key(api_version: str, kind: str, namespace: str | None, name: str) -> ObjectKey:
    return ObjectKey(api_version, kind, namespace or None, name)


def refresh(reader: ClusterReader, spec: Spec, state: StateFile | None) -> ClusterSnapshot:
    """One snapshot with everything the plan compares (see the module doc)."""
    return observe(reader, spec, state).snapshot


@dataclass(frozen=True)
class Observed:
    """A refresh and what a plan renders from it, so that a plan renders its desired objects once: the
    snapshot, the rendering context its nodes give (:meth:`Spec.context_for`) and the desired objects in that
    context, and the nodes' facts it rendered them for."""

    snapshot: ClusterSnapshot
    stack: StackContext
    desired: tuple[DesiredObject, ...]
    facts: tuple[NodeFacts, ...]
    """Every node's facts, without a driver DaemonSet's marks (:func:`node_facts`)."""


def observe(reader: ClusterReader, spec: Spec, state: StateFile | None) -> Observed:
    """:func:`refresh`, keeping the desired objects it rendered for the cluster's nodes."""
    before = reader.request_count
    snapshot = reader.refresh(
        stack=spec.metadata.name, namespace=spec.spec.namespace, kinds=manageable_kinds(spec, state)
    )
    facts = node_facts(snapshot)
    stack = spec.context_for(facts)
    desired = spec.desired_objects(stack)
    seen = set(snapshot.managed) | {obj.key for obj in snapshot.foreign}
    unserved = set(snapshot.unserved)
    recorded = {
        record_key(record.api_version, record.kind, record.namespace, record.name)
        for record in (state.resources.values() if state else ())
    }
    # imported objects carry no gpuplan label, so the lists did not return them; hand-made objects at the
    # names gpuplan wants (squatters) neither: both are read by name, one request per kind and namespace
    unlisted: dict[ObjectKey, str] = {}
    for key, component in [
        *((key, "") for key in sorted(recorded)),
        (RUNTIME_CLASS, "toolkit"),
        *((ObjectKey.of(obj.manifest), obj.address.component) for obj in desired),
    ]:
        if key not in seen and (key.api_version, key.kind) not in unserved:
            unlisted.setdefault(key, component)
    read = reader.read_many(unlisted)
    managed = dict(snapshot.managed)
    extra_foreign: list[ForeignObject] = []
    for key, component in unlisted.items():
        live = read.get(key)
        if live is None:
            continue
        if key in recorded:
            managed[key] = live
        else:
            extra_foreign.append(_as_foreign(live, component))
    observed = dataclasses.replace(
        snapshot,
        managed=managed,
        foreign=tuple(sorted((*snapshot.foreign, *extra_foreign), key=lambda f: f.key)),
        requests=reader.request_count - before,
    )
    return Observed(observed, stack, desired, facts)


def _as_foreign(live: LiveObject, component: str = "toolkit") -> ForeignObject:
    owner, owner_name = foreign.owner_of(live.manifest)
    return ForeignObject(live.key, live.manifest, (component,), owner, owner_name)


def live_object(snapshot: ClusterSnapshot, key: ObjectKey) -> LiveObject | None:
    """The object at ``key``, whether it carries gpuplan's label (managed) or not (foreign)."""
    found = snapshot.managed.get(key)
    if found is not None:
        return found
    return next((obj for obj in snapshot.foreign if obj.key == key), None)


# ------------------------------------------------------------------------------------------------ nodes


def node_facts(
    snapshot: ClusterSnapshot,
    *,
    driver_daemonsets: Iterable[Mapping[str, Any]] = (),
    base: Sequence[NodeFacts] | None = None,
) -> tuple[NodeFacts, ...]:
    """NodeFacts of every node; ``driver_daemonsets`` (gpuplan's live driver DaemonSets: the stack's and one
    per node pool with a driver of its own) mark the nodes they run on as having a containerised driver, so
    its GFD-reported version is not taken for a host driver. ``base``: this snapshot's facts as an earlier
    call made them without a driver DaemonSet (a plan reads them three times; at fleet scale each pass costs
    as much as a page of the list)."""
    facts = (
        tuple(base)
        if base is not None
        else tuple(
            with_node_features(NodeFacts.from_node(as_node_object(node)), snapshot.node_features)
            for node in snapshot.nodes
        )
    )
    with_driver = {node for ds in driver_daemonsets for node in scheduled_nodes(ds, snapshot.nodes)}
    if not with_driver:
        return facts
    return tuple(
        dataclasses.replace(fact, containerized_driver=True) if fact.name in with_driver else fact
        for fact in facts
    )


def as_node_object(node: Mapping[str, Any]) -> dict[str, Any]:
    """The provider keeps a reduced node dict (snapshot.node_facts); NodeFacts, the health judges and the
    drift report's matrix read the v1 Node shape: this rebuilds it (the GPU labels' owners as
    managedFields)."""
    managed = [
        {"manager": manager, "fieldsV1": {"f:metadata": {"f:labels": {f"f:{label}": {}}}}}
        for label, managers in (node.get("labelManagers") or {}).items()
        for manager in managers
    ]
    return {
        "metadata": {
            "name": node.get("name", ""),
            "labels": node.get("labels") or {},
            "managedFields": managed,
        },
        "spec": {"taints": node.get("taints") or []},
        "status": {
            "nodeInfo": node.get("nodeInfo") or {},
            "runtimeHandlers": node.get("runtimeHandlers") or [],
            "allocatable": node.get("allocatable") or {},
            "capacity": node.get("capacity") or {},
        },
    }


def scheduled_nodes(
    daemonset: Mapping[str, Any] | None,
    nodes: Iterable[Mapping[str, Any]],
    relabels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[str]:
    """Names of the snapshot's nodes a DaemonSet's pods are placed on
    (:func:`gpuplan.planner.placement.places`, the rule the health gates use too), read from the reduced
    nodes as they are, with no node object built per node and DaemonSet. ``relabels`` (node -> labels) are
    the labels apply writes before the DaemonSet's gates, counted as written: the deploy labels a DaemonSet
    of the operator's pod-template shape selects."""
    if not daemonset or daemonset.get("kind") != "DaemonSet":
        return []
    pod_spec = placement.pod_spec_of(daemonset)
    written = relabels or {}
    placed = []
    for node in nodes:
        name = str(node.get("name") or "")
        labels: Mapping[str, str] = node.get("labels") or {}
        if name in written:
            labels = {**labels, **written[name]}
        if placement.places(pod_spec, name, labels, node.get("taints") or ()):
            placed.append(str(node.get("name")))
    return placed


# -------------------------------------------------------------------------------- external components


@dataclass(frozen=True)
class Verification:
    """How an external component looks from the nodes: a verdict, a sentence, and the nodes at fault."""

    verdict: Verdict
    detail: str
    problem_nodes: tuple[str, ...] = ()


def _names(nodes: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def verify_driver(
    expected: str | None,
    nodes: Sequence[NodeFacts],
    recorded: Mapping[str, str] | None = None,
    pinned: Mapping[str, str] | None = None,
) -> Verification:
    """An external driver: every GPU node must report ``expected`` (or any version when the spec pins
    none); ``pinned``: node -> the version its node pool pins instead (design §7.1). ``recorded``: the
    versions the last apply recorded for a driver taken as it is; a node that runs another since is named
    (the drift report calls it drift)."""
    pinned = pinned or {}
    gpu_nodes = [node for node in nodes if node.has_nvidia_gpu]
    if not gpu_nodes:
        return Verification("no-gpu-nodes", "no GPU nodes found (no node carries NFD's NVIDIA PCI label)")
    unknown = [node.name for node in gpu_nodes if node.driver_version is None]
    known = [node for node in gpu_nodes if node.driver_version is not None]

    def wanted(node: NodeFacts) -> str | None:
        return pinned.get(node.name, expected)

    wrong = [node for node in known if wanted(node) is not None and node.driver_version != wanted(node)]
    parts: list[str] = []
    right = len(known) - len(wrong)
    if right:
        sources = _sources_phrase([node for node in known if node not in wrong])
        versions = sorted({str(wanted(node)) for node in known if node not in wrong and wanted(node)})
        if expected is not None or versions:
            shown = ", ".join(versions) + (" (each node pool's)" if len(versions) > 1 else "")
            parts.append(f"verified {shown} on {right}/{len(gpu_nodes)} nodes{sources}")
        else:
            parts.append(f"{host_drivers_phrase(known)} (the spec pins no version: taken as they are)")
    parts += [
        f"mismatch on node {node.name}: reports {node.driver_version}, spec says {wanted(node)}"
        for node in wrong[:5]
    ]
    if len(wrong) > 5:
        parts.append(f"mismatch on {len(wrong) - 5} more nodes")
    changed = [
        f"{node.name} ({recorded[node.name]} -> {node.driver_version})"
        for node in known
        if wanted(node) is None
        and recorded
        and recorded.get(node.name, node.driver_version) != node.driver_version
    ]
    if changed:
        parts.append(f"changed since the last apply on {_names(changed)}")
    if unknown:
        parts.append(
            f"not reported yet: unknown until GFD runs (or a DCGM exporter) on {len(unknown)} "
            f"node{'s' if len(unknown) != 1 else ''} ({_names(unknown)})"
        )
    verdict: Verdict = (
        "mismatch" if wrong else ("unknown" if not right else ("partial" if unknown else "verified"))
    )
    return Verification(verdict, "; ".join(parts), tuple(node.name for node in wrong) + tuple(unknown))


def host_drivers_phrase(nodes: Sequence[NodeFacts]) -> str:
    """``host 570.195.03 on a100-node, 580.105.08 on 3 nodes``: each version the nodes report, with the node
    that runs it when only one does, else how many (fewest first: the odd ones out lead)."""
    by_version: dict[str, list[str]] = {}
    for node in nodes:
        if node.driver_version is not None:
            by_version.setdefault(node.driver_version, []).append(node.name)
    groups = sorted(by_version.items(), key=lambda item: (len(item[1]), item[0]))
    return "host " + ", ".join(
        f"{version} on {names[0] if len(names) == 1 else f'{len(names)} nodes'}" for version, names in groups
    )


def _sources_phrase(nodes: Sequence[NodeFacts]) -> str:
    """`` (DCGM exporter)`` when a source other than GFD's label verified some nodes (mixed: counted per
    source); nothing when GFD's label verified them all, the usual case."""
    counted: dict[str, int] = {}
    for node in nodes:
        source = node.driver_version_source or "gfd-label"
        counted[source] = counted.get(source, 0) + 1
    if set(counted) <= {"gfd-label"}:
        return ""
    if len(counted) == 1:
        return f" ({SOURCE_NAMES[next(iter(counted))]})"
    return (
        " ("
        + ", ".join(f"{SOURCE_NAMES[source]} on {count}" for source, count in sorted(counted.items()))
        + ")"
    )


def verify_toolkit(
    nodes: Sequence[NodeFacts], runtime_class: ForeignObject | None, runtime_class_note: str | None = None
) -> Verification:
    """An external toolkit: every GPU node's runtime reports the ``nvidia`` handler (the verdict); whether
    RuntimeClass ``nvidia``, which the operands' pods name, exists is said in the detail (the plan also
    makes it a finding). ``runtime_class_note``: what the plan knows of gpuplan's own RuntimeClass (it manages
    it, or creates it), which a hand-made one's absence does not tell."""
    gpu_nodes = [node for node in nodes if node.has_nvidia_gpu]
    if not gpu_nodes:
        return Verification("no-gpu-nodes", "no GPU nodes found (no node carries NFD's NVIDIA PCI label)")
    missing = [node.name for node in gpu_nodes if NVIDIA_HANDLER not in node.runtime_handlers]
    ready = len(gpu_nodes) - len(missing)
    parts = []
    if ready:
        parts.append(f"the nvidia runtime handler is on {ready}/{len(gpu_nodes)} nodes")
    if missing:
        parts.append(
            f"no nvidia runtime handler on {len(missing)} node{'s' if len(missing) != 1 else ''} "
            f"({_names(missing)})"
        )
    parts.append(
        runtime_class_note
        or ("RuntimeClass nvidia exists" if runtime_class is not None else "RuntimeClass nvidia is missing")
    )
    verdict: Verdict = "verified" if not missing else ("mismatch" if not ready else "partial")
    return Verification(verdict, "; ".join(parts), tuple(missing))


def verify_external(
    component: str,
    expected_driver: str | None,
    nodes: Sequence[NodeFacts],
    others: Sequence[ForeignObject],
    runtime_class_note: str | None = None,
    recorded_drivers: Mapping[str, str] | None = None,
    pinned_drivers: Mapping[str, str] | None = None,
) -> Verification:
    """How an external component looks: the driver and toolkit from node facts; the device plugin from the
    nodes' allocatable nvidia.com/gpu; GFD from its labels; the others from who runs them.
    ``pinned_drivers``: node -> the driver version its node pool pins."""
    if component == "driver":
        return verify_driver(expected_driver, nodes, recorded_drivers, pinned_drivers)
    if component == "toolkit":
        return verify_toolkit(
            nodes, next((obj for obj in others if obj.key == RUNTIME_CLASS), None), runtime_class_note
        )
    running = "; ".join(
        f"run by {owner_phrase(o)} as {describe(o.key.kind, o.key.namespace, o.key.name)}"
        for o in others
        if component in o.components
    )
    gpu_nodes = [node for node in nodes if node.has_nvidia_gpu]
    if component in ("devicePlugin", "gfd") and gpu_nodes:
        if component == "devicePlugin":
            missing = [node.name for node in gpu_nodes if not node.allocatable_gpus]
            what = "nvidia.com/gpu allocatable"
        else:
            missing = [node.name for node in gpu_nodes if node.gpu_source != "gfd-label"]
            what = "GFD labels"
        found = f"{what} on {len(gpu_nodes) - len(missing)}/{len(gpu_nodes)} nodes" + (
            f" (missing on {_names(missing)})" if missing else ""
        )
        verdict: Verdict = (
            "verified" if not missing else ("mismatch" if len(missing) == len(gpu_nodes) else "partial")
        )
        return Verification(verdict, "; ".join(part for part in (found, running) if part), tuple(missing))
    return Verification(
        "verified" if running else "unknown",
        running or "not checked: no object of another owner found running it",
    )


def component_image(config: ComponentConfig, stack: StackContext) -> str:
    """The main image of a component, as its module renders it (the driver's tag carries the OS suffix)."""
    image_for = getattr(config, "image_for", None)
    if callable(image_for):
        return str(image_for(stack))
    return str(config.image_ref())
