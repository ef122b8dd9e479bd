"""The plan: an immutable, versioned value saying what apply would do, on which objects and nodes, and why.

:func:`make_plan` is pure (no I/O): it takes the spec, the state (None before the first apply) and a refresh
snapshot (:func:`gpuplan.planner.refresh.refresh`) and compares three things per object, as Terraform does
(design §5): desired vs recorded is intent, recorded vs live is drift ("changed outside gpuplan", with the
field managers that made it), live vs desired is the work. Components are walked in graph order; deletions
come last, in reverse graph order.

Actions: ``create`` (absent), ``update`` (owned fields differ), ``replace`` (an immutable path changes, the
record is tainted, or the recorded object is not where the spec wants it, e.g. one adopted from another
namespace), ``delete`` (recorded or labelled but no longer desired, owner none or external, ``--destroy``),
``no-op``, and ``adopt`` (a live object with this stack's label that the state lacks, e.g. after a crashed
apply: recorded without touching the cluster beyond the listed fields). Every change has a reason code in
Terraform's style and a readable sentence.

Callers: the ``plan`` command (then views and saved plans), apply (issue 4: it walks ``changes`` and checks
freshness with :func:`gpuplan.planner.planfile.check_fresh`). Views render :meth:`Plan.document`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Literal, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, Field

from gpuplan.modules.base import ComponentName, DesiredObject
from gpuplan.modules.common import COMPONENT_LABEL, STACK_LABEL
from gpuplan.planner import adopt, compat, diff, graph, normalize, refresh
from gpuplan.planner.adopt import Conflict
from gpuplan.planner.diff import FieldChange
from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.host_driver import DriverReports
from gpuplan.planner.spec import Spec
from gpuplan.providers.snapshot import ClusterSnapshot, Fingerprint, LiveObject, ObjectKey
from gpuplan.state import credentials
from gpuplan.state.model import ResourceRecord, StateFile, gpuplan_version, make_address, now_rfc3339

FORMAT_VERSION = "1"
Action = Literal["create", "update", "replace", "delete", "no-op", "adopt"]
ACTIONS: tuple[Action, ...] = ("create", "update", "replace", "delete", "no-op", "adopt")
EXTERNAL_RUNTIME_CLASS_WHY = ("; the toolkit is external: the host toolkit provides the handler, the RuntimeClass "
                              "object is cluster configuration gpuplan manages (its operands name it)")
_Runtime = Literal["containerd", "docker", "crio"]
"""The runtimes the toolkit configures; a node reporting another one leaves the spec's default in place."""
_RUNTIMES: tuple[_Runtime, ...] = get_args(_Runtime)


class Reason(StrEnum):
    """Why a change is planned (Terraform's action_reason, spelled out). For display only: apply acts on
    ``action``."""

    CREATE_BECAUSE_ABSENT = "CREATE_BECAUSE_ABSENT"
    CREATE_BECAUSE_DELETED_OUTSIDE = "CREATE_BECAUSE_DELETED_OUTSIDE"
    CREATE_OVER_FOREIGN_OBJECT = "CREATE_OVER_FOREIGN_OBJECT"
    UPDATE_BECAUSE_SPEC_CHANGED = "UPDATE_BECAUSE_SPEC_CHANGED"
    UPDATE_BECAUSE_DRIFT = "UPDATE_BECAUSE_DRIFT"
    REPLACE_BECAUSE_IMMUTABLE_FIELD = "REPLACE_BECAUSE_IMMUTABLE_FIELD"
    REPLACE_BECAUSE_IDENTITY_CHANGED = "REPLACE_BECAUSE_IDENTITY_CHANGED"
    REPLACE_BECAUSE_TAINTED = "REPLACE_BECAUSE_TAINTED"
    DELETE_BECAUSE_NOT_IN_CONFIG = "DELETE_BECAUSE_NOT_IN_CONFIG"
    DELETE_BECAUSE_OWNER_NONE = "DELETE_BECAUSE_OWNER_NONE"
    DELETE_BECAUSE_OWNER_EXTERNAL = "DELETE_BECAUSE_OWNER_EXTERNAL"
    DELETE_BECAUSE_DESTROY = "DELETE_BECAUSE_DESTROY"
    ADOPT_BECAUSE_UNRECORDED = "ADOPT_BECAUSE_UNRECORDED"
    NOOP_BECAUSE_IN_SYNC = "NOOP_BECAUSE_IN_SYNC"


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class FieldDiff(_Value):
    """One field's change; ``managers``: who changed it on the live object (drift, from managedFields)."""

    path: str
    before: Any = None
    after: Any = None
    managers: tuple[str, ...] = ()


class Change(_Value):
    """One planned action on one object. ``before``/``after``: owned fields (None when absent)."""

    address: str
    component: str
    kind: str
    object: str
    """``apiVersion/Kind/namespace/name`` of the object acted on (for a delete: the recorded one)."""
    action: Action
    reason: Reason
    reason_text: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    fields: tuple[FieldDiff, ...] = ()
    replace_paths: tuple[str, ...] = ()
    replaces: str | None = None
    """For a replace whose old object lives elsewhere (an adopted one): that object's reference."""
    nodes: tuple[str, ...] = ()
    """The nodes the change touches (where the DaemonSet's pods run or will run)."""
    disruptive: bool = False
    disruption: str = ""
    gpu_pods: dict[str, tuple[str, ...]] | None = None
    """A disruptive driver DaemonSet change: node -> ``namespace/name`` of the GPU pods it evicts (or, for a
    delete or replace, leaves running without a driver pod), for the nodes the plan command read, in rollout
    order (:func:`gpuplan.planner.evictions.with_gpu_pods`); None when not read (make_plan, older plans)."""
    gpu_pods_note: str = ""
    """What the plan did not read there: nodes beyond the cap, nodes the rollout skips."""
    undo: str = ""
    """Why this change cannot be undone in place, when it cannot (said before the user confirms)."""


class Drift(_Value):
    """A managed object changed (or deleted) outside gpuplan since gpuplan recorded it."""

    address: str
    component: str
    object: str
    status: Literal["changed", "deleted"]
    fields: tuple[FieldDiff, ...] = ()


class Finding(_Value):
    severity: Literal["error", "warning"]
    component: str | None = None
    node: str | None = None
    message: str
    hint: str = ""


class ComponentStatus(_Value):
    owner: str
    status: str
    detail: str
    version: str | None = None
    version_default: bool = False
    """True when the spec left the version out and the default was used (views show "(default)")."""
    image: str | None = None
    problem_nodes: tuple[str, ...] = ()


class _StatusBase(TypedDict):
    """The fields every component's status shares, whatever its owner decides about the rest."""

    owner: str
    version: str | None
    version_default: bool
    image: str | None


class _ChangeBase(TypedDict):
    """The fields of a desired object's change that do not depend on the action chosen (see decide)."""

    address: str
    component: str
    kind: str
    object: str
    after: dict[str, Any]
    nodes: tuple[str, ...]


class Summary(_Value):
    create: int = 0
    update: int = 0
    replace: int = 0
    delete: int = 0
    no_op: int = Field(default=0, alias="no-op")
    adopt: int = 0


class Plan(_Value):
    """What apply would do. Decision-bearing: the state binding, resource_versions, fingerprints, changes, applicable.
    Cosmetic: reason_text, components' details, summary (derived from changes)."""

    format_version: str = FORMAT_VERSION
    gpuplan_version: str
    created_at: str
    stack: str
    namespace: str
    namespace_exists: bool
    spec_file: str
    spec_digest: str
    state_lineage: str | None
    state_serial: int
    resource_versions: dict[str, str]
    fingerprints: dict[str, Fingerprint] | None = None
    """``ObjectKey.ref`` -> what a saved plan is held to (uid, generation, content digests; status writes move
    none of them): :func:`gpuplan.planner.planfile.check_fresh`. None in plans saved by an older gpuplan."""
    server_version: str
    api_requests: int
    nodes_total: int
    gpu_nodes: int
    targets: tuple[str, ...] = ()
    complete: bool = True
    refresh_only: bool = False
    destroy: bool = False
    changes: tuple[Change, ...] = ()
    drift: tuple[Drift, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    findings: tuple[Finding, ...] = ()
    components: dict[str, ComponentStatus] = Field(default_factory=dict)
    summary: Summary = Field(default_factory=Summary)
    applicable: bool = True
    blockers: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """The JSON document (design §4.1 keys) that every view renders from."""
        document: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return document

    @property
    def has_changes(self) -> bool:
        """Exit code 2 with --detailed-exitcode: an action, or drift in a refresh-only plan."""
        return has_changes(self.document())


def has_changes(document: Mapping[str, Any]) -> bool:
    """The same test on the JSON document, so the exit code follows what the views show."""
    if document.get("refresh_only"):
        return bool(document.get("drift"))
    return any(change.get("action") != "no-op" for change in document.get("changes") or ())


# --------------------------------------------------------------------------------------------- make_plan

def make_plan(spec: Spec, state: StateFile | None, snapshot: ClusterSnapshot, *, targets: Sequence[str] = (),
              refresh_only: bool = False, destroy: bool = False, spec_file: str = "gpustack.yaml",
              created_at: str | None = None, desired: Sequence[DesiredObject] | None = None,
              driver_reports: DriverReports | None = None) -> Plan:
    """The plan for ``spec`` against ``state`` and the cluster as ``snapshot`` saw it (pure).

    ``desired``: the objects to plan for instead of what ``spec`` renders (``gpuplan rollback`` plans the
    return to a recorded generation's objects; the spec still gives owners, the stack and the gates).
    ``driver_reports``: driver versions the DCGM exporters or NVML reported for nodes without GFD's label
    (:func:`gpuplan.planner.host_driver.gather`); their requests count in the plan's, their notes are findings."""
    return _Planner(spec, state, snapshot, targets=targets, refresh_only=refresh_only, destroy=destroy,
                    spec_file=spec_file, desired=desired,
                    driver_reports=driver_reports or DriverReports()).plan(created_at or now_rfc3339())


def spec_digest(spec: Spec) -> str:
    return "sha256:" + hashlib.sha256(spec.model_dump_json(by_alias=True).encode("utf-8")).hexdigest()


def _most_common(values: Sequence[str | None]) -> str | None:
    counted = Counter(value for value in values if value)
    return counted.most_common(1)[0][0] if counted else None


def _field(change: FieldChange, managers: Mapping[str, tuple[str, ...]] | None = None) -> FieldDiff:
    return FieldDiff(path=change.path, before=change.before, after=change.after,
                     managers=change.managers or (managers or {}).get(change.path, ()))


def _key(manifest: Mapping[str, Any]) -> ObjectKey:
    return ObjectKey.of(manifest)


def _owned(key: ObjectKey, fields: Mapping[str, Any]) -> dict[str, Any]:
    redacted: dict[str, Any] = credentials.redact_owned(key.api_version, key.kind, dict(fields))
    return redacted


class _Planner:
    """The state of one make_plan call; each method decides one part of the plan."""

    def __init__(self, spec: Spec, state: StateFile | None, snapshot: ClusterSnapshot, *, targets: Sequence[str],
                 refresh_only: bool, destroy: bool, spec_file: str,
                 desired: Sequence[DesiredObject] | None = None,
                 driver_reports: DriverReports = DriverReports()) -> None:
        self.spec, self.state, self.snapshot = spec, state, snapshot
        self.driver_reports = driver_reports
        self.refresh_only, self.destroy, self.spec_file = refresh_only, destroy, spec_file
        self.graph = graph.build(spec)
        self.targets = tuple(dict.fromkeys(targets))
        self.selected = self.graph.with_dependencies(self.targets) if self.targets else set(self.graph.order())
        self.owners = {name: config.owner for name, config in spec.components().items()}
        self.records: dict[str, ResourceRecord] = dict(state.resources) if state else {}
        stack_objects = [obj for obj in snapshot.managed.values()
                         if obj.labels.get(STACK_LABEL) == spec.metadata.name]
        self.labelled = {obj.key: obj for obj in stack_objects}
        driver = next((obj.manifest for obj in stack_objects
                       if obj.key.kind == "DaemonSet" and obj.labels.get(COMPONENT_LABEL) == "driver"), None)
        self.facts = tuple(_with_reported_driver(fact, driver_reports.versions)
                           for fact in refresh.node_facts(snapshot, driver_daemonset=driver))
        gpu_facts = [fact for fact in self.facts if fact.has_nvidia_gpu] or list(self.facts)
        runtime = _most_common([fact.container_runtime for fact in gpu_facts])
        self.stack = spec.context(os_tag=_most_common([fact.os_tag for fact in gpu_facts]),
                                  container_runtime=runtime if runtime in _RUNTIMES else None)
        rendered = spec.desired_objects(self.stack) if desired is None else tuple(desired)
        self.desired = () if destroy else rendered
        self.consumed: set[str] = set()

    # -- the whole plan ---------------------------------------------------------------------------------
    def plan(self, created_at: str) -> Plan:
        changes: list[Change] = []
        deletes: dict[str, list[Change]] = {}
        order = [name for name in self.graph.order() if name in self.selected]
        if not self.refresh_only:
            for component in order:
                changes += [self._decide(obj) for obj in self._desired_of(component)]
            for component in order:
                deletes[component] = self._deletes(component)
            for component in reversed(order):
                changes += deletes[component]
            changes = [_with_undo(change) for change in changes]
        drift = [item for component in order for item in self._drift(component)]
        conflicts = [] if (self.destroy or self.refresh_only) else [
            conflict for component in order if self._desired_of(component)
            for conflict in adopt.conflicts(component, self.snapshot.foreign, self._desired_of(component),
                                            adopted=self._recorded_keys(), spec_file=self.spec_file,
                                            owner=self.owners[component])
            # an external owner's own objects are expected; only one squatting a desired name conflicts
            if self.owners[component] == "gpuplan"
            or conflict.object in {_key(obj.manifest).ref for obj in self._desired_of(component)}]
        findings = self._findings(order)
        summary = Summary.model_validate({action: sum(1 for c in changes if c.action == action)
                                          for action in ACTIONS})
        blockers = self._blockers(conflicts, findings)
        return Plan(
            gpuplan_version=gpuplan_version(), created_at=created_at, stack=self.spec.metadata.name,
            namespace=self.spec.spec.namespace, namespace_exists=self.snapshot.namespace is not None,
            spec_file=self.spec_file, spec_digest=spec_digest(self.spec),
            state_lineage=self.state.lineage if self.state else None,
            state_serial=self.state.serial if self.state else 0,
            resource_versions=self.snapshot.resource_versions(),
            fingerprints=self.snapshot.content_fingerprints(), server_version=self.snapshot.server_version,
            api_requests=self.snapshot.requests + self.driver_reports.requests, nodes_total=len(self.facts),
            gpu_nodes=sum(1 for fact in self.facts if fact.has_nvidia_gpu), targets=self.targets,
            complete=not self.targets, refresh_only=self.refresh_only, destroy=self.destroy,
            changes=tuple(changes), drift=tuple(drift), conflicts=tuple(conflicts), findings=tuple(findings),
            components=self._components(order, changes, conflicts), summary=summary,
            applicable=not blockers, blockers=tuple(blockers))

    def _desired_of(self, component: ComponentName) -> list[DesiredObject]:
        # an external toolkit still renders the RuntimeClass nvidia that gpuplan's operands need (modules/toolkit)
        if self.owners[component] != "gpuplan" and not (component == "toolkit" and
                                                         self.owners[component] == "external"):
            return []
        return [obj for obj in self.desired if obj.address.component == component]

    def _recorded_keys(self) -> set[ObjectKey]:
        return {refresh.record_key(r.api_version, r.kind, r.namespace, r.name) for r in self.records.values()}

    # -- one desired object -----------------------------------------------------------------------------
    def _decide(self, obj: DesiredObject) -> Change:
        address = str(obj.address)
        key = _key(obj.manifest)
        record = self.records.get(address)
        if record is not None:
            self.consumed.add(address)
        else:
            record = self._adopted_elsewhere(obj)
        live = refresh.live_object(self.snapshot, key)
        change = decide(obj, record, live, nodes=self.snapshot.nodes, labelled=key in self.labelled)
        if obj.address.component == "toolkit" and self.owners["toolkit"] == "external" and change.action != "no-op":
            change = change.model_copy(update={"reason_text": change.reason_text + EXTERNAL_RUNTIME_CLASS_WHY})
        return change

    def _adopted_elsewhere(self, obj: DesiredObject) -> ResourceRecord | None:
        """A record of the same component and kind that no desired object claims: an object adopted with
        ``gpuplan import`` from where it lived (its address follows its live identity)."""
        desired_addresses = {str(o.address) for o in self.desired}
        candidates = [r for r in self.records.values()
                      if r.component == obj.address.component and r.kind == obj.address.kind
                      and r.address not in desired_addresses and r.address not in self.consumed]
        candidates.sort(key=lambda r: (r.name != obj.address.name, r.address))
        if not candidates:
            return None
        self.consumed.add(candidates[0].address)
        return candidates[0]

    # -- deletions ----------------------------------------------------------------------------------------
    def _delete_reason(self, component: ComponentName) -> Reason:
        if self.destroy:
            return Reason.DELETE_BECAUSE_DESTROY
        return {"none": Reason.DELETE_BECAUSE_OWNER_NONE, "external": Reason.DELETE_BECAUSE_OWNER_EXTERNAL}.get(
            self.owners[component], Reason.DELETE_BECAUSE_NOT_IN_CONFIG)

    def _deletes(self, component: ComponentName) -> list[Change]:
        reason = self._delete_reason(component)
        found: list[Change] = []
        recorded = set()
        for record in self.records.values():
            if record.component != component or record.address in self.consumed:
                continue
            key = refresh.record_key(record.api_version, record.kind, record.namespace, record.name)
            recorded.add(key)
            live = refresh.live_object(self.snapshot, key)
            text = _delete_text(reason, component) + ("" if live else
                                                      "; it is already gone, so apply only removes its record")
            found.append(self._delete(record.address, component, key, record.owned, reason, text))
        desired_keys = {_key(obj.manifest) for obj in self._desired_of(component)}
        for key, live in sorted(self.labelled.items()):
            if live.labels.get(COMPONENT_LABEL) != component or key in recorded or key in desired_keys:
                continue
            address = make_address(component, key.kind, key.namespace, key.name)
            text = _delete_text(reason, component) + "; it carries this stack's label but is not in the state"
            found.append(self._delete(address, component, key, normalize.normalize(live.manifest), reason,
                                      text))
        # the workload goes before the ServiceAccount and RBAC its pods use (the reverse of render order)
        return sorted(found, key=lambda change: (change.kind != "DaemonSet", change.address))

    def _delete(self, address: str, component: str, key: ObjectKey, before: Mapping[str, Any], reason: Reason,
                text: str) -> Change:
        nodes = refresh.scheduled_nodes(before, self.snapshot.nodes)
        change = Change(address=address, component=component, kind=key.kind, object=key.ref, action="delete",
                        reason=reason, reason_text=text, before=_owned(key, before), nodes=tuple(nodes))
        return _with_disruption(change)

    # -- drift, findings, components ------------------------------------------------------------------------
    def _drift(self, component: str) -> list[Drift]:
        items = []
        for record in self.records.values():
            if record.component != component:
                continue
            key = refresh.record_key(record.api_version, record.kind, record.namespace, record.name)
            live = refresh.live_object(self.snapshot, key)
            if live is None:
                items.append(Drift(address=record.address, component=component, object=key.ref, status="deleted"))
                continue
            fields = diff.three_way(None, record.owned, live.manifest).drift
            if fields:
                items.append(Drift(address=record.address, component=component, object=key.ref, status="changed",
                                   fields=tuple(_field(f) for f in fields)))
        return items

    def _findings(self, order: Sequence[ComponentName]) -> list[Finding]:
        found: list[compat.Finding] = []
        if not self.destroy:
            found += compat.check_spec(self.spec) + compat.check_nodes(self.spec, self.facts)
        for component in order:
            if self.owners[component] == "none":
                for other in self.snapshot.foreign:
                    if component in other.components:
                        found.append(compat.Finding(
                            "warning", component, None,
                            f"{component} has owner none, but "
                            f"{adopt.describe(other.key.kind, other.key.namespace, other.key.name)} "
                            f"runs it ({other.describe_owner()})", "gpuplan never removes another owner's objects"))
        if self._runtime_class_missing(order):
            found.append(compat.Finding(
                "warning", "toolkit", None, "RuntimeClass nvidia does not exist, and the pods of gpuplan's "
                "components name it (runtimeClassName: nvidia): they will not start without it",
                "create it with handler nvidia (kubectl apply -f runtimeclass.yaml), or set toolkit.owner: gpuplan"))
        found += [compat.Finding("warning", "driver", None, note, "plan again once GFD has labelled the nodes")
                  for note in self.driver_reports.notes if self.owners["driver"] == "external"]
        for api_version, kind in self.snapshot.unserved:
            found.append(compat.Finding("warning", None, None, f"the cluster does not serve {kind} ({api_version})",
                                        "install the CRD that defines it, or leave out the feature that renders it"))
        ordered = sorted(found, key=lambda f: (f.severity != "error", f.component or "", f.node or "", f.message))
        return [Finding(severity=f.severity, component=f.component, node=f.node, message=f.message, hint=f.hint)
                for f in ordered]

    def _runtime_class_missing(self, order: Sequence[ComponentName]) -> bool:
        if self.destroy or self.owners["toolkit"] != "external":
            return False
        if any(obj.key == refresh.RUNTIME_CLASS for obj in self.snapshot.foreign):
            return False
        if self._desired_of("toolkit"):
            return False  # gpuplan creates it
        return any(((obj.manifest.get("spec") or {}).get("template") or {}).get("spec", {}).get("runtimeClassName")
                   == "nvidia" for component in order for obj in self._desired_of(component))

    def _blockers(self, conflicts: Sequence[Conflict], findings: Sequence[Finding]) -> list[str]:
        blockers = [f"unresolved ownership conflict: {adopt.describe(c.kind, c.namespace, c.name)} "
                    f"({c.owner}) already runs {c.component}" for c in conflicts]
        blockers += [f"compatibility error{f' on node {f.node}' if f.node else ''}: {f.message}"
                     for f in findings if f.severity == "error"]
        return blockers

    def _components(self, order: Sequence[ComponentName], changes: Sequence[Change],
                    conflicts: Sequence[Conflict]) -> dict[str, ComponentStatus]:
        statuses: dict[str, ComponentStatus] = {}
        configs = self.spec.components()
        for component in self.graph.order():
            config = configs[component]
            owner = config.owner
            version = config.version
            base: _StatusBase = {"owner": owner, "version": version if owner != "none" else None,
                    "version_default": config.explicit_version() is None,
                    "image": refresh.component_image(config, self.stack) if owner == "gpuplan" else None}
            if component not in order:
                statuses[component] = ComponentStatus(status="not-targeted", detail="not planned (--target)", **base)
            elif owner == "external":
                statuses[component] = self._external_status(component, base, changes)
            else:
                statuses[component] = _managed_status(component, owner, changes, conflicts, base)
        return statuses

    def _external_status(self, component: str, base: _StatusBase, changes: Sequence[Change]) -> ComponentStatus:
        check = refresh.verify_external(component, self.spec.spec.driver.explicit_version(), self.facts,
                                        self.snapshot.foreign, self._runtime_class_note(component, changes))
        shown: _StatusBase = {**base, "version": base["version"] if component != "toolkit" else None}
        return ComponentStatus(status=check.verdict, detail=check.detail, problem_nodes=check.problem_nodes,
                               **shown)

    def _runtime_class_note(self, component: str, changes: Sequence[Change]) -> str | None:
        """An external toolkit's RuntimeClass when gpuplan manages it: created by this plan, or there."""
        if component != "toolkit":
            return None
        mine = [c for c in changes if c.component == "toolkit" and c.kind == "RuntimeClass"]
        if any(c.action in ("create", "replace") for c in mine):
            return "RuntimeClass nvidia is created by this plan"
        if mine and refresh.live_object(self.snapshot, refresh.RUNTIME_CLASS) is not None:
            return "RuntimeClass nvidia exists (managed by gpuplan)"
        return None


def _with_reported_driver(fact: NodeFacts, versions: Mapping[str, tuple[str, Any]]) -> NodeFacts:
    """GFD's label wins; a node without it takes what the DCGM exporter or NVML reported."""
    if fact.driver_version is not None or fact.name not in versions:
        return fact
    version, source = versions[fact.name]
    return dataclasses.replace(fact, driver_version=version, driver_version_source=source)


def _managed_status(component: str, owner: str, changes: Sequence[Change], conflicts: Sequence[Conflict],
                    base: _StatusBase) -> ComponentStatus:
    mine = Counter(c.action for c in changes if c.component == component and c.action != "no-op")
    pending = ", ".join(f"{count} to {action}" for action, count in sorted(mine.items()))
    clashing = [c for c in conflicts if c.component == component]
    if owner == "none":
        status = "to-delete" if mine else "absent"
        detail = pending or "no gpuplan objects (must be absent)"
    elif clashing:
        status, detail = "conflict", f"{len(clashing)} ownership conflict(s)" + (f"; {pending}" if pending else "")
    else:
        status, detail = ("changes", pending) if mine else ("in-sync", "matches the configuration")
    return ComponentStatus(status=status, detail=detail, **base)


def _delete_text(reason: Reason, component: str) -> str:
    return {Reason.DELETE_BECAUSE_DESTROY: "destroy plan: every object of the stack is removed",
            Reason.DELETE_BECAUSE_OWNER_NONE: f"{component} has owner none: it must be absent",
            Reason.DELETE_BECAUSE_OWNER_EXTERNAL: f"{component} is now owned outside gpuplan (owner external)",
            }.get(reason, "no longer in the configuration")


def _with_disruption(change: Change) -> Change:
    """A driver DaemonSet change restarts the driver. An update goes through the node-by-node rollout, which
    evicts the GPU pods of each node first; a delete or a replace removes the DaemonSet with all its pods at
    once and evicts nothing. The plan command lists those GPU pods per node."""
    if change.component != "driver" or change.kind != "DaemonSet" or change.action not in (
            "update", "replace", "delete"):
        return change
    nodes = f"{len(change.nodes)} node{'s' if len(change.nodes) != 1 else ''}"
    if change.action == "update":
        text = f"the driver restarts on {nodes}, node by node: all GPU pods on {nodes} are evicted first"
    elif change.action == "replace":
        text = (f"the driver DaemonSet is recreated: the driver restarts on {nodes} at once, not node by node, "
                "and no GPU pods are evicted first (a new driver pod cannot unload a driver GPU pods still use)")
    else:
        text = (f"the driver DaemonSet and its pods are deleted on {nodes} at once, not node by node; no GPU "
                "pods are evicted first")
    return change.model_copy(update={"disruptive": True, "disruption": text})


def _with_undo(change: Change) -> Change:
    """A delete (or a replace) of an object gpuplan did not create cannot be undone in place: rollback can
    only create it again from its recorded manifest, a new object."""
    labels = ((change.before or {}).get("metadata") or {}).get("labels") or {}
    foreign = (change.action == "replace" and change.replaces) or (
        change.action == "delete" and STACK_LABEL not in labels)
    if not foreign:
        return change
    what = change.replaces or change.object
    return change.model_copy(update={"undo": (
        f"deletes {what}, which gpuplan did not create: it cannot be undone in place; if the apply fails, "
        "rollback recreates it from its recorded manifest (a new object with a new uid; its pods restart)")})


def decide(obj: DesiredObject, record: ResourceRecord | None, live: LiveObject | None, *,
           nodes: Sequence[Mapping[str, Any]], labelled: bool) -> Change:
    """The change for one desired object, from its record (None: not in state) and the live object at the
    desired identity (None: absent). Also what ``gpuplan import`` previews."""
    key = _key(obj.manifest)
    desired = dict(obj.manifest)
    base: _ChangeBase = {"address": str(obj.address), "component": obj.address.component, "kind": key.kind,
            "object": key.ref, "after": _owned(key, desired),
            "nodes": tuple(refresh.scheduled_nodes(desired, nodes))}
    record_key = refresh.record_key(record.api_version, record.kind, record.namespace, record.name) \
        if record else None
    if record is not None and record_key != key:
        text = (f"the adopted {adopt.describe(record.kind, record.namespace, record.name)} is not where the "
                f"configuration wants it ({adopt.describe(key.kind, key.namespace, key.name)}): gpuplan's object "
                "replaces it")
        change = Change(action="replace", reason=Reason.REPLACE_BECAUSE_IDENTITY_CHANGED, reason_text=text,
                        before=_owned(record_key or key, record.owned), replaces=(record_key or key).ref, **base)
        return _with_disruption(change)
    if record is not None and record.status == "tainted":
        change = Change(action="replace", reason=Reason.REPLACE_BECAUSE_TAINTED,
                        reason_text="the record is tainted (a previous apply failed half-way): it is recreated",
                        before=_owned(key, record.owned), **base)
        return _with_disruption(change)
    if live is None:
        reason = Reason.CREATE_BECAUSE_DELETED_OUTSIDE if record else Reason.CREATE_BECAUSE_ABSENT
        text = ("recorded in the state but missing from the cluster (deleted outside gpuplan)" if record
                else "it does not exist in the cluster")
        return Change(action="create", reason=reason, reason_text=text, **base)
    if record is None and not labelled:
        return Change(action="create", reason=Reason.CREATE_OVER_FOREIGN_OBJECT,
                      reason_text="an object of another owner already has this name: import it or remove it "
                                  "first (see the conflicts)", before=_owned(key, diff.owned_view(live.manifest,
                                                                                                  desired)), **base)
    three = diff.three_way(desired, record.owned if record else None, live.manifest)
    before = _owned(key, diff.owned_view(live.manifest, desired))
    managers = {change.path: change.managers for change in three.drift}
    fields = tuple(_field(change, managers) for change in three.live_vs_desired)
    if record is None:
        text = ("it carries this stack's label but is missing from the state (an interrupted apply?): it is "
                "recorded" + (", and the fields below are set" if fields else " as it is"))
        return Change(action="adopt", reason=Reason.ADOPT_BECAUSE_UNRECORDED, reason_text=text, before=before,
                      fields=fields, **base)
    if three.is_noop:
        return Change(action="no-op", reason=Reason.NOOP_BECAUSE_IN_SYNC, reason_text="matches the configuration",
                      before=before, **base)
    immutable = [c.path for c in three.live_vs_desired if diff.requires_replace([c], obj.immutable_paths)]
    if immutable:
        change = Change(action="replace", reason=Reason.REPLACE_BECAUSE_IMMUTABLE_FIELD,
                        reason_text=f"{', '.join(immutable)} cannot change in place: the object is recreated",
                        before=before, fields=fields, replace_paths=tuple(immutable), **base)
    elif three.intent:
        change = Change(action="update", reason=Reason.UPDATE_BECAUSE_SPEC_CHANGED,
                        reason_text="the configuration changed", before=before, fields=fields, **base)
    else:
        who = sorted({m for c in three.drift for m in c.managers})
        text = "it was changed outside gpuplan" + (f" (by {', '.join(who)})" if who else "") + ": the change is reverted"
        change = Change(action="update", reason=Reason.UPDATE_BECAUSE_DRIFT, reason_text=text, before=before,
                        fields=fields, **base)
    return _with_disruption(change)

