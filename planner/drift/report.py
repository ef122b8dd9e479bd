"""The drift report: what changed outside gpuplan, what runs without an owner, and how each node's stack
looks.

:func:`build_report` is pure: it takes what the ``drift report`` command read (the spec, the state, one
refresh snapshot, the stack's pods folded page by page (:mod:`gpuplan.planner.drift.pods`), the DCGM scrapes)
and returns a :class:`Report`, whose :meth:`Report.document` is the JSON document of design §4.1 that every
view renders. Finding kinds:

- ``changed`` / ``missing``: a recorded object differs from the state on an owned field, or is gone. These are
  the refresh-only plan's drift (:func:`gpuplan.planner.plan.build.make_plan`, the same three-way diff and
  managers from managedFields), so the report and ``plan --refresh-only`` can never disagree. A node label
  gpuplan sets for a component (``nvidia.com/mig.config``) that another manager changed is ``changed`` too,
  with the node (:mod:`gpuplan.planner.drift.labels`; the plan relabels it).
- ``unmanaged``: a foreign NVIDIA component (:mod:`gpuplan.providers.foreign`) running a component the spec
  does not give to an external owner: a second device plugin, a hand-deployed exporter, a ClusterPolicy.
- ``version``: a node whose driver (GFD label, else the exporter's ``DCGM_FI_DRIVER_VERSION``) differs from
  the spec's external driver version, or a pod of the stack running another image than the spec's.
- ``unhealthy``: a matrix cell (:mod:`gpuplan.planner.drift.nodes`) that is ``missing`` or ``unhealthy``.
- ``telemetry``: a GPU past a threshold (:mod:`gpuplan.planner.observe.telemetry`): hot, or an XID error;
  or, when a Prometheus server is the source, a node with a Ready exporter it has no series for.

Coverage (driftctl's): managed objects found live, out of those plus the foreign GPU-stack objects found.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuplan.errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK
from gpuplan.modules.base import StackContext
from gpuplan.modules.common import COMPONENT_LABEL, POOL_LABEL, STACK_LABEL
from gpuplan.planner import facts, pools
from gpuplan.planner.drift import nodes as drift_nodes
from gpuplan.planner.drift import pods as drift_pods
from gpuplan.planner.drift.nodes import Cell, ComponentView
from gpuplan.planner.drift.pods import PodFacts
from gpuplan.planner.health import nodes as health_nodes
from gpuplan.planner.health import wait as health_wait
from gpuplan.planner.health.gates import Observation, Scrape
from gpuplan.planner.observe import adopt, inventory, refresh, telemetry
from gpuplan.planner.plan.build import FieldDiff, make_plan
from gpuplan.planner.spec import ignore as spec_ignore
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.protocols import NODE_LABELS_FIELD_MANAGER
from gpuplan.providers.snapshot import ClusterSnapshot
from gpuplan.state.model import StateFile, gpuplan_version

FORMAT_VERSION = "1"
Kind = Literal["changed", "missing", "unmanaged", "version", "unhealthy", "telemetry"]
KINDS: tuple[Kind, ...] = ("changed", "missing", "unmanaged", "version", "unhealthy", "telemetry")
NO_SERIES = "no telemetry from Prometheus"
SHOWN_NODES = 5  # node names a finding's detail shows before "and N more"
IGNORED = "ignored: spec.ignore"
SOURCES = {"gfd-label": " (GFD's label)", "dcgm": " (the DCGM exporter's metrics)", "nvml": " (NVML)"}


@dataclass(frozen=True)
class Finding:
    """One thing that drifted. ``address``: a managed address or an object reference; ``node``: a node."""

    kind: Kind
    component: str | None
    detail: str
    address: str | None = None
    node: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    """Kind-specific facts for machines: changed fields, both versions, the GPU and its reading, ..."""

    def document(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "component": self.component,
            "address": self.address,
            "node": self.node,
            "detail": self.detail,
            **dict(self.data),
        }


@dataclass(frozen=True)
class Inputs:
    """Everything the command read; ``scrapes`` by node; ``telemetry_note``: why some nodes were not
    scraped."""

    spec: Spec
    state: StateFile
    snapshot: ClusterSnapshot
    pods: Sequence[PodFacts | None]
    """The stack's pods, folded while listed (:func:`gpuplan.planner.drift.pods.pod_facts`)."""
    scrapes: Mapping[str, Scrape]
    checked_at: str
    now: float
    thresholds: telemetry.Thresholds = telemetry.Thresholds()
    telemetry_note: str | None = None
    """A note for the report, e.g. that --telemetry-max-nodes left nodes out."""
    unscraped_reason: str = "--no-telemetry"
    """Why a node with an exporter has no scrape (shown in its DCGM exporter cell)."""
    not_scraped: Mapping[str, str] = field(default_factory=dict)
    """Nodes whose scrape kept failing transiently (429, 5xx, dropped), with the reason: a note, not drift."""
    no_series: tuple[str, ...] = ()
    """Nodes with a Ready exporter that the Prometheus server read instead of scrapes has no series for."""
    spec_file: str = "gpustack.yaml"
    api_requests: int = 0


@dataclass(frozen=True)
class NodeStatus:
    row: inventory.NodeRow
    cells: Mapping[str, Cell]
    gpus: tuple[telemetry.GpuReading, ...] = ()
    heavy_load: tuple[str, ...] = ()
    telemetry_error: str | None = None

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = self.row.document()
        document["components"] = {
            name: {"status": c.status, "reason": c.reason, **({"check": c.check} if c.check else {})}
            for name, c in self.cells.items()
        }
        document["telemetry"] = {
            "gpus": [dataclasses.asdict(gpu) for gpu in self.gpus],
            "heavy_load_gpus": list(self.heavy_load),
            "error": self.telemetry_error,
        }
        return document


@dataclass(frozen=True)
class Report:
    inputs: Inputs
    findings: tuple[Finding, ...]
    nodes: tuple[NodeStatus, ...]
    managed: int
    foreign: int
    notes: tuple[str, ...]
    columns: tuple[str, ...] = ()
    """The matrix's components (:func:`gpuplan.planner.drift.nodes.columns`)."""
    ignored: tuple[Finding, ...] = ()
    """Differences ``spec.ignore`` declares: shown, never drift (design §8.3)."""

    @property
    def drift(self) -> bool:
        return bool(self.findings)

    @property
    def telemetry_unchecked(self) -> bool:
        """Scrapes were tried and none succeeded: the GPUs' telemetry could not be judged at all."""
        tried = self.inputs.not_scraped
        return bool(tried) and not self.inputs.scrapes

    def exit_code(self) -> int:
        """For cron: 2 drift found in what was judged (notes name what was not), 0 none and every part judged
        at least partly, 1 no drift found but the telemetry could not be judged at all (never a false 0)."""
        if self.drift:
            return EXIT_CHANGES
        return EXIT_ERROR if self.telemetry_unchecked else EXIT_OK

    def document(self) -> dict[str, Any]:
        counts = Counter(f.kind for f in self.findings)
        total = self.managed + self.foreign
        spec, state, snapshot = self.inputs.spec, self.inputs.state, self.inputs.snapshot
        return {
            "format_version": FORMAT_VERSION,
            "gpuplan_version": gpuplan_version(),
            "checked_at": self.inputs.checked_at,
            "stack": spec.metadata.name,
            "namespace": spec.spec.namespace,
            "spec_file": self.inputs.spec_file,
            "server_version": snapshot.server_version,
            "state_lineage": state.lineage,
            "state_serial": state.serial,
            "drift": self.drift,
            "summary": {
                "findings": {kind: counts.get(kind, 0) for kind in KINDS},
                "total": len(self.findings),
                "ignored": len(self.ignored),
                "nodes": len(self.nodes),
                "gpu_nodes": sum(1 for n in self.nodes if n.row.has_gpu),
                "healthy_nodes": sum(
                    1
                    for n in self.nodes
                    if all(c.status in drift_nodes.RUNNING or c.status == "n/a" for c in n.cells.values())
                ),
                "telemetry_not_scraped": len(self.inputs.not_scraped),
            },
            "coverage": {
                "managed": self.managed,
                "unmanaged": self.foreign,
                "total": total,
                "ratio": round(self.managed / total, 4) if total else 1.0,
            },
            "components": list(self.columns),
            "findings": [f.document() for f in self.findings],
            "ignored": [f.document() for f in self.ignored],
            "nodes": [n.document() for n in self.nodes],
            "notes": list(self.notes),
            "api_requests": self.inputs.api_requests,
        }


# ------------------------------------------------------------------------------------------------ build


def build_report(inputs: Inputs) -> Report:
    """The report (pure; see the module doc)."""
    spec, state, snapshot = inputs.spec, inputs.state, inputs.snapshot
    owners: dict[str, str] = {name: config.owner for name, config in spec.components().items()}
    plan = make_plan(
        spec, state, snapshot, refresh_only=True, spec_file=inputs.spec_file, created_at=inputs.checked_at
    )
    found: list[Finding] = []
    for item in plan.drift:
        if item.status == "deleted":
            found.append(
                Finding(
                    "missing",
                    item.component,
                    f"{_what(item.object)} is recorded in the state but "
                    "missing from the cluster (deleted outside gpuplan)",
                    address=item.address,
                )
            )
        else:
            found.append(_changed(item.component, item.object, item.address, item.fields))
    ignored = [
        _changed(item.component, item.object, item.address, item.fields, ignored=True)
        for item in plan.ignored
    ]
    uids = {obj.key.ref: obj.uid for obj in snapshot.managed.values() if obj.uid}
    touched = [(d.object, d.address) for d in plan.drift if d.status == "changed"]
    touched += [(i.object, i.address) for i in plan.ignored]
    changed_by_uid = {uids[ref]: address for ref, address in touched if ref in uids}
    found += _unmanaged(snapshot, owners)
    edits = _node_labels(spec, state, snapshot)
    found += edits
    node_facts = _facts(snapshot)
    stack = spec.context_for(node_facts)
    columns = drift_nodes.columns(owners, _present(snapshot, inputs.pods))
    views = _component_views(spec, snapshot, stack, _planned(spec, node_facts))
    parsed = telemetry.parse_all(inputs.scrapes)
    relabelled = {(str(f.component), str(f.node)) for f in edits}
    # objects whose every difference is declared: their pods are neither drift nor a drifted cell
    quiet = frozenset(item.address for item in plan.ignored) - {str(f.address) for f in found}
    nodes, node_findings, waived, reached = _nodes(
        inputs, views, node_facts, parsed, stack, columns, relabelled, changed_by_uid, quiet
    )
    found = [_with_nodes(f, reached.get(f.address or "")) for f in found]
    # an object that differs on fields not ignored too: its pods' nodes are the finding's, not the rule's
    ignored = [_with_nodes(i, reached.get(i.address or "")) if i.address in quiet else i for i in ignored]
    ignored += waived
    found += node_findings
    managed = len(state.resources) - sum(1 for f in found if f.kind == "missing")
    notes = [inputs.telemetry_note] if inputs.telemetry_note else []
    if inputs.not_scraped:
        notes.append(not_scraped_note(inputs.not_scraped))
    order = {kind: index for index, kind in enumerate(KINDS)}
    found.sort(key=lambda f: (order[f.kind], f.component or "", f.node or "", f.address or "", f.detail))
    return Report(
        inputs,
        tuple(found),
        tuple(nodes),
        managed,
        len(snapshot.foreign),
        tuple(notes),
        columns,
        tuple(ignored),
    )


def _present(snapshot: ClusterSnapshot, pods: Sequence[PodFacts | None]) -> set[str]:
    """The components something found belongs to: a stack object, a stack pod, a foreign object."""
    found = {str(obj.labels.get(COMPONENT_LABEL)) for obj in snapshot.managed.values()}
    found |= {pod.component for pod in pods if pod is not None}
    return found | {component for other in snapshot.foreign for component in other.components}


def _node_labels(spec: Spec, state: StateFile, snapshot: ClusterSnapshot) -> list[Finding]:
    """The node labels gpuplan wrote (the state's record) that someone changed or removed since, with the
    field managers that own the label now (the refresh's reduced nodes: no request more). A deploy label
    set only where absent is drift only when removed: another value is k8s-driver-manager's or the
    mig-manager's to set."""
    rules = spec.label_rules()
    honoured = pools.if_absent_labels(rules)  # a value someone set there is theirs (the operator's rule)
    live = {str(node.get("name")): node for node in snapshot.nodes}
    found = []
    for node, labels in state.node_labels.items():
        if node not in live:
            continue  # the node left the cluster; its labels went with it
        now: Mapping[str, str] = live[node].get("labels") or {}
        owners: Mapping[str, Sequence[str]] = live[node].get("labelManagers") or {}
        for label, value in sorted(labels.items()):
            if now.get(label) == value or (label in honoured and label in now):
                continue
            managers = [m for m in owners.get(label, ()) if m != NODE_LABELS_FIELD_MANAGER]
            field_doc = {
                "path": f"metadata.labels.{label}",
                "before": value,
                "after": now.get(label),
                "managers": managers,
            }
            found.append(
                Finding(
                    "changed",
                    pools.component_of(rules, label),
                    f"label {label} of node {node} changed outside gpuplan: {_field_text(field_doc)}",
                    node=node,
                    data={"fields": [field_doc]},
                )
            )
    return found


def _what(ref: str) -> str:
    parts = ref.split("/")
    kind_at = next((i for i, part in enumerate(parts) if part[:1].isupper()), 1)
    return f"{parts[kind_at]} {'/'.join(parts[kind_at + 1 :])}"


def _field_text(field_doc: Mapping[str, Any]) -> str:
    who = f" (by {', '.join(field_doc['managers'])})" if field_doc.get("managers") else ""
    return f"{field_doc['path']}: {field_doc.get('before')!r} -> {field_doc.get('after')!r}{who}"


def _unmanaged(snapshot: ClusterSnapshot, owners: Mapping[str, str]) -> list[Finding]:
    """Foreign components the spec does not hand to an external owner."""
    found = []
    for other in snapshot.foreign:
        loose = [c for c in other.components if owners.get(c) != "external"]
        if not loose:
            continue
        what = adopt.describe(other.key.kind, other.key.namespace, other.key.name)
        owned = ", ".join(f"{c} (owner {owners.get(c)})" for c in loose)
        found.append(
            Finding(
                "unmanaged",
                loose[0],
                f"{what} runs {', '.join(other.components)}, "
                f"owned by {adopt.owner_phrase(other)}; the spec accounts for no other owner of {owned}",
                address=other.key.ref,
                data={
                    "owner": other.owner,
                    "owner_name": other.owner_name,
                    "components": list(other.components),
                },
            )
        )
    return found


def _facts(snapshot: ClusterSnapshot) -> tuple[facts.NodeFacts, ...]:
    drivers = [
        obj.manifest
        for obj in snapshot.managed.values()
        if obj.key.kind == "DaemonSet" and obj.labels.get(COMPONENT_LABEL) == "driver"
    ]  # the stack's and each node pool's
    found: tuple[facts.NodeFacts, ...] = refresh.node_facts(snapshot, driver_daemonsets=drivers)
    return found


def _planned(spec: Spec, node_facts: Sequence[facts.NodeFacts]) -> pools.PlannedPools:
    """The node pools as a plan made now would place the nodes (the report's gates judge each pool's)."""
    if not spec.spec.node_pools:
        return pools.PlannedPools()
    identity = {fact.name: facts.gpu_identity(fact) for fact in node_facts}
    selectors = tuple(spec.pool_selectors())
    members = pools.membership(selectors, ((f.name, facts.pool_labels(f)) for f in node_facts))
    return pools.PlannedPools(selectors, identity, members.pool_of)


def _component_views(
    spec: Spec, snapshot: ClusterSnapshot, stack: StackContext, planned: pools.PlannedPools
) -> dict[tuple[str, str | None], ComponentView]:
    """(component, node pool or None) -> its view: the stack's, and one per node pool with gates of its own
    (its DaemonSet, or the stack's DaemonSet with the pool's expected effects)."""
    checks = spec.health_checks(stack)
    desired = {
        obj.address.name: obj.manifest
        for obj in spec.desired_objects(stack)
        if obj.manifest.get("kind") == "DaemonSet"
    }
    live_sets = [
        obj.manifest
        for obj in snapshot.managed.values()
        if obj.key.kind == "DaemonSet" and obj.labels.get(STACK_LABEL) == spec.metadata.name
    ]
    nodes = tuple(refresh.as_node_object(node) for node in snapshot.nodes)
    views: dict[tuple[str, str | None], ComponentView] = {}
    for name, config in spec.components().items():
        selector = config.node_selector if config.node_selector is not None else spec.spec.node_selector
        stack_set: tuple[Mapping[str, Any] | None, bool] = (None, False)
        for group in health_wait.pool_groups(checks[name]) or [()]:
            params = group[0].params if group else {}
            pool = params.get("pool")
            rollout = next((check for check in group if check.kind == "rollout"), None)
            if config.owner != "gpuplan":
                daemonset, live = None, False
            elif rollout is None and pool is not None:
                daemonset, live = stack_set  # the stack's DaemonSet runs on the pool's nodes
            else:
                wanted = str(rollout.params.get("daemonset")) if rollout else ""
                found = _live_daemonset(live_sets, name, pool, wanted)
                daemonset, live = (found, True) if found else (desired.get(wanted), False)
            if pool is None:
                stack_set = (daemonset, live)
            observation = Observation(
                daemonset=daemonset,
                nodes=nodes,
                node_selector=selector,
                pool_selector=params.get("poolSelector") or {},
                excluded=tuple(params.get("excludeSelectors") or ()),
                pools=planned,
            )
            targeted = frozenset(str(n["metadata"]["name"]) for n in health_nodes.targeted_nodes(observation))
            views[(name, pool)] = ComponentView(name, config.owner, daemonset, live, group, targeted)
    return views


def _live_daemonset(
    live_sets: Sequence[Mapping[str, Any]], component: str, pool: str | None, name: str
) -> Mapping[str, Any] | None:
    """The live DaemonSet ``name`` of ``component`` (of ``pool``'s, None: the stack's own); by name too, as
    a component may run more than one (the device plugin and its MPS control daemon)."""
    return next(
        (
            manifest
            for manifest in live_sets
            if (manifest.get("metadata") or {}).get("labels", {}).get(COMPONENT_LABEL) == component
            and (manifest.get("metadata") or {}).get("labels", {}).get(POOL_LABEL) == pool
            and (not name or (manifest.get("metadata") or {}).get("name") == name)
        ),
        None,
    )


def _nodes(
    inputs: Inputs,
    views: Mapping[tuple[str, str | None], ComponentView],
    node_facts: Sequence[facts.NodeFacts],
    parsed: Mapping[str, telemetry.NodeTelemetry | str],
    stack: StackContext,
    columns: Sequence[str],
    relabelled: set[tuple[str, str]],
    changed_by_uid: Mapping[str, str],
    quiet: frozenset[str] = frozenset(),
) -> tuple[list[NodeStatus], list[Finding], list[Finding], dict[str, list[str]]]:
    """Each node's row, its findings, and those a ``nodes`` rule of ``spec.ignore`` declares (a check it
    names, on a node its selector matches: the cell reads ok and names the rule). A cell whose node label
    was changed by hand (``relabelled``: component, node) is not reported a second time as unhealthy. A pod
    owned by an object changed by hand (``changed_by_uid``: uid -> address) is no finding of its own: its
    node joins that object's one finding (the last value: address -> nodes), as design §8.3 asks, and its
    cell says so."""
    spec = inputs.spec
    grouped = drift_pods.cells_of(inputs.pods)
    recorded = inputs.state.host_drivers if spec.spec.driver.host_as_is() else {}
    members = pools.membership(spec.pool_selectors(), ((f.name, facts.pool_labels(f)) for f in node_facts))
    expected_by_pool = {
        pool: _expected(spec, pool, stack) for pool in [None, *(p.name for p in spec.spec.node_pools)]
    }
    by_name = {str(node.get("name")): node for node in inputs.snapshot.nodes}
    statuses, found, waived = [], [], []
    reached: dict[str, list[str]] = {}
    declared: frozenset[str] = frozenset()

    def judged_by(finding: Finding, check: str) -> None:
        if check in declared:
            waived.append(_waived(finding, check))
        else:
            found.append(finding)

    for fact in sorted(node_facts, key=lambda f: f.name):
        declared = spec_ignore.checks_on(spec.spec.ignore, fact.labels)
        reading = parsed.get(fact.name)
        seen = reading if isinstance(reading, telemetry.NodeTelemetry) else None
        if fact.driver_version is None and seen is not None and seen.driver_version:
            fact = dataclasses.replace(fact, driver_version=seen.driver_version, driver_version_source="dcgm")
        node = refresh.as_node_object(by_name[fact.name])
        pool = members.pool_of.get(fact.name)
        expected_driver, images = expected_by_pool[pool]
        if fact.driver_version_source == "dcgm":  # the driver judge reads the label; give it what DCGM said
            node["metadata"]["labels"] = {
                **node["metadata"]["labels"],
                health_nodes.DRIVER_LABEL: fact.driver_version,
            }
        versioned: set[str] = set()
        # a host driver taken as it is (no version in the spec) drifts only from what the last apply recorded
        expected, said = (
            (recorded.get(fact.name), "the last apply recorded")
            if expected_driver is None
            else (expected_driver, "the spec says")
        )
        if expected and fact.has_nvidia_gpu and fact.driver_version and fact.driver_version != expected:
            versioned.add("driver")
            source = SOURCES.get(fact.driver_version_source or "", "")
            judged_by(
                Finding(
                    "version",
                    "driver",
                    f"node {fact.name} reports driver {fact.driver_version}{source}, {said} {expected}",
                    node=fact.name,
                    data={
                        "found": fact.driver_version,
                        "expected": expected,
                        "source": fact.driver_version_source,
                    },
                ),
                "driver-version",
            )
        failed = inputs.not_scraped.get(fact.name)
        silent = fact.name in inputs.no_series
        scraping = f"not scraped: {failed}" if failed else (NO_SERIES if silent else inputs.unscraped_reason)
        cells: dict[str, Cell] = {}
        for name in columns:
            pods = grouped.get((name, fact.name), [])
            view = views.get((name, pool)) or views[(name, None)]
            by_hand = _changed_owner(pods, changed_by_uid)
            if by_hand is None and not pods and name in view.targeted:
                # between the old pod and the new one of a DaemonSet changed by hand: its rollout's node
                by_hand = _changed_daemonset(view, changed_by_uid)
            if by_hand is not None:
                versioned.add(name)
                if fact.name not in reached.setdefault(by_hand, []):
                    reached[by_hand].append(fact.name)
            for pod in pods:
                image = pod.image
                if name in images and image and image != images[name] and name not in versioned:
                    versioned.add(name)
                    found.append(
                        Finding(
                            "version",
                            name,
                            f"pod {pod.name} on node {fact.name} runs {image}, the spec says {images[name]}",
                            node=fact.name,
                            data={"found": image, "expected": images[name]},
                        )
                    )
            cells[name] = drift_nodes.cell(
                view,
                node,
                pods,
                inputs.scrapes.get(fact.name),
                scraping=scraping,
                now=inputs.now,
            )
            if by_hand is not None and by_hand in quiet:
                cells[name] = Cell(
                    "ok", f"{_what(by_hand)} changed as spec.ignore allows; {cells[name].reason}"
                )
            elif cells[name].status == "ok" and name in versioned and (by_hand or name != "driver"):
                why = (
                    f"{_what(by_hand)} changed outside gpuplan"
                    if by_hand is not None
                    else "its pod runs another image than the spec's"
                )
                cells[name] = Cell("drifted", f"{why}; {cells[name].reason}")
            judged = name in versioned or (name, fact.name) in relabelled
            failed_check = cells[name].check
            if cells[name].status in ("missing", "unhealthy") and not judged:
                judged_by(
                    Finding(
                        "unhealthy",
                        name,
                        f"{name} on node {fact.name}: {cells[name].reason}",
                        node=fact.name,
                        data={"status": cells[name].status},
                    ),
                    failed_check or "",
                )
            if failed_check in declared and cells[name].status in ("missing", "unhealthy"):
                cells[name] = Cell(
                    "ok", f"{failed_check} not judged ({IGNORED}): {cells[name].reason}", failed_check
                )
        hot: list[str] = []
        if silent:
            judged_by(
                Finding(
                    "telemetry",
                    "dcgmExporter",
                    f"no telemetry from Prometheus for node {fact.name}: its DCGM exporter is Ready, but the "
                    "server has no series naming the node (node, Hostname or hostname label)",
                    node=fact.name,
                    data={"gpu": None, "uuid": None, "metric": None, "value": None},
                ),
                "telemetry",
            )
        if seen is not None:
            for t in telemetry.findings(fact.name, seen, inputs.thresholds):
                judged_by(
                    Finding(
                        "telemetry",
                        "dcgmExporter",
                        t.detail,
                        node=t.node,
                        data={"gpu": t.gpu, "uuid": t.uuid, "metric": t.metric, "value": t.value},
                    ),
                    "telemetry",
                )
            hot = telemetry.heavy_load(seen, inputs.thresholds)
        error = reading if isinstance(reading, str) else (f"not scraped: {failed}" if failed else None)
        error = NO_SERIES if silent else error
        statuses.append(
            NodeStatus(
                inventory.NodeRow.of(fact, pool=pool), cells, seen.gpus if seen else (), tuple(hot), error
            )
        )
    return statuses, found, waived, reached


def _changed(
    component: str, ref: str, address: str, fields: Sequence[FieldDiff], *, ignored: bool = False
) -> Finding:
    """The ``changed`` finding of one object (``ignored``: its differences ``spec.ignore`` declares)."""
    data = [f.model_dump(mode="json") for f in fields]
    return Finding(
        "changed",
        component,
        f"{_what(ref)} changed outside gpuplan: "
        + "; ".join(_field_text(f) for f in data)
        + (f" ({IGNORED})" if ignored else ""),
        address=address,
        data={"fields": data},
    )


def _waived(finding: Finding, check: str) -> Finding:
    """A node's finding that a ``nodes`` rule of ``spec.ignore`` declares (``check``)."""
    return dataclasses.replace(
        finding, detail=f"{finding.detail} ({IGNORED}: {check})", data={**finding.data, "check": check}
    )


def _changed_daemonset(view: drift_nodes.ComponentView, changed_by_uid: Mapping[str, str]) -> str | None:
    """The address of the component's live DaemonSet when it was changed by hand, else None."""
    if view.daemonset is None or not view.daemonset_live:
        return None
    return changed_by_uid.get(str((view.daemonset.get("metadata") or {}).get("uid") or ""))


def _changed_owner(pods: Sequence[PodFacts], changed_by_uid: Mapping[str, str]) -> str | None:
    """The address of the object changed by hand that owns one of ``pods``, if any."""
    return next((changed_by_uid[uid] for pod in pods for uid in pod.owners if uid in changed_by_uid), None)


def _with_nodes(finding: Finding, nodes: Sequence[str] | None) -> Finding:
    """A ``changed`` object's finding with the nodes its pods run on: a list in JSON, a count and the first
    few names in its detail."""
    if not nodes or finding.kind != "changed":
        return finding
    named = sorted(nodes)
    shown = ", ".join(named[:SHOWN_NODES]) + (
        f" and {len(named) - SHOWN_NODES} more" if len(named) > SHOWN_NODES else ""
    )
    return dataclasses.replace(
        finding,
        detail=f"{finding.detail}; reaches {len(named)} node(s) ({shown})",
        data={**finding.data, "nodes": named},
    )


def _expected(spec: Spec, pool: str | None, stack: StackContext) -> tuple[str | None, dict[str, str]]:
    """The external driver version and the images the nodes of ``pool`` (None: of no pool) must show."""
    as_pool = spec.for_pool(spec.pool(pool) if pool else None)
    driver = as_pool.spec.driver
    images: dict[str, str] = {
        name: refresh.component_image(config, stack)
        for name, config in as_pool.components().items()
        if config.owner == "gpuplan"
    }
    return (driver.explicit_version() if driver.owner == "external" else None), images


def not_scraped_note(not_scraped: Mapping[str, str]) -> str:
    """The report's note for nodes whose DCGM exporter could not be scraped (names up to 5, one reason)."""
    nodes = sorted(not_scraped)
    named = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    return (
        f"not scraped: {len(nodes)} node(s) ({named}): {not_scraped[nodes[0]]}; their GPU telemetry "
        "was not judged"
    )


def telemetry_targets(
    pods: Sequence[PodFacts | None], *, max_nodes: int | None
) -> tuple[list[telemetry.Target], str | None]:
    """One Ready DCGM exporter pod of the stack per node, at most ``max_nodes`` nodes (by name), and the
    note the report carries when the cap left nodes out."""
    chosen: dict[str, telemetry.Target] = {}
    exporters = (pod for pod in pods if pod is not None and pod.component == "dcgmExporter")
    for pod in sorted(exporters, key=lambda pod: pod.name):
        if pod.ready and pod.node not in chosen:
            chosen[pod.node] = telemetry.Target(pod.node, pod.namespace, pod.name)
    targets = [chosen[node] for node in sorted(chosen)]
    if max_nodes is not None and len(targets) > max_nodes:
        note = (
            f"telemetry capped: scraped {max_nodes} of {len(targets)} nodes with a Ready DCGM exporter "
            f"(--telemetry-max-nodes {max_nodes})"
        )
        return targets[:max_nodes], note
    return targets, None
