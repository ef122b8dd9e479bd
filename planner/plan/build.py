"""The plan builder: :func:`make_plan` says what apply would do, on which objects and nodes, and why.

:func:`make_plan` is pure (no I/O): it takes the spec, the state (None before the first apply) and a refresh
snapshot (:func:`gpuplan.planner.observe.refresh.refresh`). Components are walked in graph order and each
desired object gets its change from :func:`gpuplan.planner.plan.decide.decide` (desired vs recorded is intent,
recorded vs live is drift, live vs desired is the work, design §5); deletions come last, in reverse graph
order. The builder also reports drift, ownership conflicts, compatibility findings and each component's
status.

Actions: ``create`` (absent), ``update`` (owned fields differ), ``replace`` (an immutable path changes, the
record is tainted, or the recorded object is not where the spec wants it, e.g. one adopted from another
namespace), ``delete`` (recorded or labelled but no longer desired, owner none or external, ``--destroy``),
``no-op``, and ``adopt`` (a live object with this stack's label that the state lacks, e.g. after a crashed
apply: recorded without touching the cluster beyond the listed fields). Every change has a reason code in
Terraform's style and a readable sentence.

The value types live in :mod:`gpuplan.planner.plan.model` and the per-object decision in
:mod:`gpuplan.planner.plan.decide`; this module re-exports both (``__all__``), so ``from
gpuplan.planner.plan.build import Change, Plan, make_plan`` stays the one import a caller needs.

Callers: :func:`gpuplan.planner.driver.live_plan.build`, the plan of ``plan``, ``apply`` and ``rollback``
(then views and saved plans; apply walks ``changes`` and checks freshness with
:func:`gpuplan.planner.plan.planfile.check_fresh`), :mod:`gpuplan.planner.plan.rollback` and drift.
Views render :meth:`Plan.document`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from gpuplan.errors import ConfigError
from gpuplan.modules.base import ComponentConfig, ComponentName, DesiredObject
from gpuplan.modules.common import COMPONENT_LABEL, STACK_LABEL
from gpuplan.modules.driver import DriverConfig
from gpuplan.planner import graph, pools
from gpuplan.planner.diff import fields as diff
from gpuplan.planner.diff import normalize
from gpuplan.planner.facts import NodeFacts, gpu_identity, pool_labels
from gpuplan.planner.observe import adopt, cluster_check, refresh
from gpuplan.planner.observe.adopt import Conflict
from gpuplan.planner.observe.driver_versions import DriverReports
from gpuplan.planner.plan import capacity
from gpuplan.planner.plan.decide import (
    decide,
    delete_text,
    field_diff,
    owned_fields,
    rolls_node_by_node,
    with_disruption,
    with_hand_back,
    with_undo,
)
from gpuplan.planner.plan.model import (
    ACTIONS,
    FORMAT_VERSION,
    Action,
    CapacityChange,
    Change,
    ComponentStatus,
    Drift,
    FieldDiff,
    Finding,
    Ignored,
    NodeGpu,
    NodeLabels,
    Plan,
    Reason,
    Summary,
    finding_order,
    has_changes,
)
from gpuplan.planner.spec import compat, ignore
from gpuplan.planner.spec.model import Spec, from_recorded, pool_driver
from gpuplan.providers.snapshot import ClusterSnapshot, LiveObject, ObjectKey
from gpuplan.state.model import ResourceRecord, StateFile, gpuplan_version, make_address, now_rfc3339

__all__ = [
    "ACTIONS",
    "EXTERNAL_RUNTIME_CLASS_WHY",
    "FORMAT_VERSION",
    "Action",
    "Change",
    "ComponentStatus",
    "Drift",
    "FieldDiff",
    "Finding",
    "Ignored",
    "NodeGpu",
    "Plan",
    "Reason",
    "Summary",
    "decide",
    "has_changes",
    "make_plan",
    "rolls_node_by_node",
    "spec_digest",
    "with_disruption",
    "with_undo",
]

EXTERNAL_RUNTIME_CLASS_WHY = (
    "; the toolkit is external: the host toolkit provides the handler, the RuntimeClass "
    "object is cluster configuration gpuplan manages (its operands name it)"
)


class _StatusBase(TypedDict):
    """The fields every component's status shares, whatever its owner decides about the rest."""

    owner: str
    version: str | None
    version_default: bool
    image: str | None


def make_plan(
    spec: Spec,
    state: StateFile | None,
    snapshot: ClusterSnapshot,
    *,
    targets: Sequence[str] = (),
    refresh_only: bool = False,
    destroy: bool = False,
    spec_file: str = "gpustack.yaml",
    created_at: str | None = None,
    desired: Sequence[DesiredObject] | None = None,
    driver_reports: DriverReports | None = None,
    dependency_graph: graph.Graph | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    node_facts: Sequence[NodeFacts] | None = None,
) -> Plan:
    """The plan for ``spec`` against ``state`` and the cluster as ``snapshot`` saw it (pure).

    ``desired``: the objects to plan for, when the caller has them already: what ``spec`` rendered for the
    refresh (:func:`gpuplan.planner.observe.refresh.observe`), or a recorded generation's objects
    (``gpuplan rollback`` plans the return to them; the spec still gives owners, the stack and the gates);
    None: what ``spec`` renders. ``dependency_graph``: ``graph.build(spec)``, when the caller built it.
    ``driver_reports``: driver versions the DCGM exporters or NVML reported for nodes without GFD's label
    (:func:`gpuplan.planner.observe.driver_versions.gather`); their requests count in the plan's, their notes
    are findings. ``node_labels``: node -> the node-pool labels to have (a generation's, for a rollback);
    None: what ``spec``'s pools want. ``node_facts``: the snapshot's node facts, when the caller made them
    (:func:`gpuplan.planner.observe.refresh.node_facts`, without a driver DaemonSet)."""
    return _Planner(
        spec,
        state,
        snapshot,
        targets=targets,
        refresh_only=refresh_only,
        destroy=destroy,
        spec_file=spec_file,
        desired=desired,
        driver_reports=driver_reports or DriverReports(),
        dependency_graph=dependency_graph,
        node_labels=node_labels,
        node_facts=node_facts,
    ).plan(created_at or now_rfc3339())


def spec_digest(spec: Spec) -> str:
    return "sha256:" + hashlib.sha256(spec.model_dump_json(by_alias=True).encode("utf-8")).hexdigest()


class _Planner:
    """The state of one make_plan call; each method decides one part of the plan."""

    def __init__(
        self,
        spec: Spec,
        state: StateFile | None,
        snapshot: ClusterSnapshot,
        *,
        targets: Sequence[str],
        refresh_only: bool,
        destroy: bool,
        spec_file: str,
        desired: Sequence[DesiredObject] | None = None,
        driver_reports: DriverReports | None = None,
        dependency_graph: graph.Graph | None = None,
        node_labels: Mapping[str, Mapping[str, str]] | None = None,
        node_facts: Sequence[NodeFacts] | None = None,
    ) -> None:
        self.spec, self.state, self.snapshot = spec, state, snapshot
        self.driver_reports = driver_reports = driver_reports or DriverReports()
        self.refresh_only, self.destroy, self.spec_file = refresh_only, destroy, spec_file
        self.graph = dependency_graph or graph.build(spec)
        self.wanted_labels = node_labels
        self.targets = tuple(dict.fromkeys(targets))
        self.selected = (
            self.graph.with_dependencies(self.targets) if self.targets else set(self.graph.order())
        )
        self.owners = {name: config.owner for name, config in spec.components().items()}
        self.records: dict[str, ResourceRecord] = dict(state.resources) if state else {}
        stack_objects = [
            obj for obj in snapshot.managed.values() if obj.labels.get(STACK_LABEL) == spec.metadata.name
        ]
        self.labelled = {obj.key: obj for obj in stack_objects}
        drivers = [
            obj.manifest
            for obj in stack_objects
            if obj.key.kind == "DaemonSet" and obj.labels.get(COMPONENT_LABEL) == "driver"
        ] or _recorded_drivers(snapshot, self.records.values())
        self.facts = tuple(
            _with_reported_driver(fact, driver_reports.versions)
            for fact in refresh.node_facts(snapshot, driver_daemonsets=drivers, base=node_facts)
        )
        self.stack = spec.context_for(self.facts)
        self.members = pools.membership(spec.pool_selectors(), ((f.name, pool_labels(f)) for f in self.facts))
        self.rules = spec.label_rules()
        self.label_work = [] if refresh_only else self._label_work()
        self.relabels = _relabels(self.label_work)
        rendered = spec.desired_objects(self.stack) if desired is None else tuple(desired)
        self.desired = () if destroy else rendered
        self.consumed: set[str] = set()
        self.ignored: dict[str, tuple[str, str, dict[str, FieldDiff]]] = {}
        """address -> (component, object, path -> the difference ``spec.ignore`` keeps)"""

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
            changes = [with_undo(change) for change in with_hand_back(changes)]
        drift = [item for component in order for item in self._drift(component)]
        conflicts = (
            []
            if (self.destroy or self.refresh_only)
            else [
                conflict
                for component in order
                if self._desired_of(component)
                for conflict in adopt.conflicts(
                    component,
                    self.snapshot.foreign,
                    self._desired_of(component),
                    adopted=self._recorded_keys(),
                    spec_file=self.spec_file,
                    owner=self.owners[component],
                    managed=frozenset(self.records),
                )
                # an external owner's own objects are expected; only one squatting a desired name conflicts
                if self.owners[component] == "gpuplan"
                or conflict.object in {ObjectKey.of(obj.manifest).ref for obj in self._desired_of(component)}
            ]
        )
        findings = self._findings(order)
        summary = Summary.model_validate(
            {action: sum(1 for c in changes if c.action == action) for action in ACTIONS}
        )
        blockers = self._blockers(conflicts, findings)
        return Plan(
            gpuplan_version=gpuplan_version(),
            created_at=created_at,
            stack=self.spec.metadata.name,
            namespace=self.spec.spec.namespace,
            namespace_exists=self.snapshot.namespace is not None,
            spec_file=self.spec_file,
            spec_digest=spec_digest(self.spec),
            state_lineage=self.state.lineage if self.state else None,
            state_serial=self.state.serial if self.state else 0,
            resource_versions=self.snapshot.resource_versions(),
            fingerprints=self.snapshot.content_fingerprints(),
            server_version=self.snapshot.server_version,
            api_requests=self.snapshot.requests + self.driver_reports.requests,
            nodes_total=len(self.facts),
            gpu_nodes=sum(1 for fact in self.facts if fact.has_nvidia_gpu),
            targets=self.targets,
            complete=not self.targets,
            refresh_only=self.refresh_only,
            destroy=self.destroy,
            changes=tuple(changes),
            drift=tuple(drift),
            ignored=tuple(self._ignored()),
            conflicts=tuple(conflicts),
            findings=tuple(findings),
            node_gpus=node_gpus(self.facts),
            nfd_node_features=self.snapshot.node_features.status,
            components=self._components(order, changes, conflicts),
            summary=summary,
            applicable=not blockers,
            blockers=tuple(blockers),
            node_labels=tuple(self.label_work),
            pools={pool.name: self.members.nodes_of(pool.name) for pool in self.spec.spec.node_pools},
            pool_identity=(
                {fact.name: gpu_identity(fact) for fact in self.facts} if self.spec.spec.node_pools else {}
            ),
            capacity=tuple(self._capacity()),
        )

    # -- node pools -------------------------------------------------------------------------------------
    def _pinned_drivers(self) -> dict[str, str]:
        """node -> the driver version its node pool pins (an external driver's may differ per pool)."""
        versions = {
            pool.name: pool_driver(self.spec.spec, pool).version
            for pool in self.spec.spec.node_pools
            if pool.driver is not None and "version" in pool.driver.model_fields_set
        }
        return {node: versions[pool] for node, pool in self.members.pool_of.items() if pool in versions}

    def _label_work(self) -> list[NodeLabels]:
        nodes = [(fact.name, fact.labels) for fact in self.facts]
        unjudged: dict[str, frozenset[str]] = {}
        if self.destroy:
            wanted: Mapping[str, Mapping[str, str]] = {}
        elif self.wanted_labels is not None:
            wanted = self.wanted_labels
        else:
            wanted = pools.wanted_labels(self.rules, self.members, nodes)
            unjudged = pools.unjudged_labels(self.rules, self.members, nodes)
        written = self.state.node_labels if self.state else {}
        if_absent = pools.if_absent_labels(self.rules)
        work = pools.label_work(wanted, self.members, nodes, written, if_absent, unjudged)
        return [NodeLabels(pool=w.pool, label=w.label, value=w.value, before=dict(w.before)) for w in work]

    def _relabelled(self, component: str) -> list[NodeLabels]:
        """The label writes of the plan that ``component`` reads once GFD has labelled its nodes (apply
        writes them just before its gates)."""
        rules = [rule for rule in self.rules if rule.component == component and rule.follows_gfd]
        labels = {label for rule in rules for label in rule.wanted.written()}
        return [item for item in self.label_work if item.label in labels and item.value is not None]

    def _capacity(self) -> list[CapacityChange]:
        """Each pool's devices per resource, from the last applied generation's spec to this one."""
        if self.destroy or self.refresh_only:
            return []
        newest = self.state.history[-1] if self.state and self.state.history else None
        before = capacity.unshared(self.facts)
        if newest is not None and newest.spec is not None:
            try:
                before = capacity.of_spec(from_recorded(newest.spec), self.facts)
            except ConfigError:
                pass  # a recorded spec this gpuplan no longer reads: compare with the GPUs unshared
        members: dict[str | None, list[str]] = {
            pool.name: self.members.nodes_of(pool.name) for pool in self.spec.spec.node_pools
        }
        members[None] = [f.name for f in self.facts if f.name not in self.members.pool_of]
        return capacity.changes(before, capacity.of_spec(self.spec, self.facts), members)

    def _desired_of(self, component: ComponentName) -> list[DesiredObject]:
        # an external toolkit still renders the RuntimeClass nvidia that gpuplan's operands need
        # (modules/toolkit)
        if self.owners[component] != "gpuplan" and not (
            component == "toolkit" and self.owners[component] == "external"
        ):
            return []
        return [obj for obj in self.desired if obj.address.component == component]

    def _recorded_keys(self) -> set[ObjectKey]:
        return {refresh.record_key(r.api_version, r.kind, r.namespace, r.name) for r in self.records.values()}

    # -- one desired object -----------------------------------------------------------------------------
    def _decide(self, obj: DesiredObject) -> Change:
        address = str(obj.address)
        key = ObjectKey.of(obj.manifest)
        record = self.records.get(address)
        if record is not None:
            self.consumed.add(address)
        else:
            record = self._adopted_elsewhere(obj)
        live = refresh.live_object(self.snapshot, key)
        obj, record = self._keep_ignored(obj, record, live)
        change = decide(
            obj,
            record,
            live,
            nodes=self.snapshot.nodes,
            labelled=key in self.labelled,
            relabels=self.relabels,
        )
        change = _with_node_labels(change, obj, self._relabelled(obj.address.component))
        if (
            obj.address.component == "toolkit"
            and self.owners["toolkit"] == "external"
            and change.action != "no-op"
        ):
            change = change.model_copy(
                update={"reason_text": change.reason_text + EXTERNAL_RUNTIME_CLASS_WHY}
            )
        return change

    def _keep_ignored(
        self, obj: DesiredObject, record: ResourceRecord | None, live: LiveObject | None
    ) -> tuple[DesiredObject, ResourceRecord | None]:
        """``obj`` and ``record`` with the live values of the fields ``spec.ignore`` declares for it, so the
        decision neither plans nor reverts them (Terraform's ignore_changes); what is kept is noted for the
        plan's ``ignored``."""
        paths = ignore.paths_of(self.spec.spec.ignore, str(obj.address))
        if not paths or live is None:
            return obj, record
        three = diff.three_way(obj.manifest, record.owned if record else None, live.manifest)
        work = [c for c in three.live_vs_desired if ignore.covered(paths, c.path)]
        drifted = [c for c in three.drift if ignore.covered(paths, c.path)]
        if not work and not drifted:
            return obj, record
        managers = diff.attribute(live.manifest, [c.path for c in work])
        self._note_ignored(
            str(obj.address),
            obj.address.component,
            live.key.ref,
            [
                FieldDiff(path=c.path, before=c.after, after=c.before, managers=tuple(managers[c.path]))
                for c in work
            ],
        )
        kept = [(c.path, c.before) for c in work]
        obj = dataclasses.replace(obj, manifest=diff.with_values(obj.manifest, kept))
        if record is not None:
            owned = diff.with_values(record.owned, [*((c.path, c.after) for c in drifted), *kept])
            record = record.model_copy(update={"owned": owned})
        return obj, record

    def _note_ignored(self, address: str, component: str, ref: str, fields: Sequence[FieldDiff]) -> None:
        if fields:
            noted = self.ignored.setdefault(address, (component, ref, {}))[2]
            for item in fields:
                noted.setdefault(item.path, item)

    def _ignored(self) -> list[Ignored]:
        return [
            Ignored(
                address=address,
                component=component,
                object=ref,
                paths=ignore.paths_of(self.spec.spec.ignore, address),
                fields=tuple(sorted(fields.values(), key=lambda f: f.path)),
            )
            for address, (component, ref, fields) in sorted(self.ignored.items())
        ]

    def _adopted_elsewhere(self, obj: DesiredObject) -> ResourceRecord | None:
        """A record of the same component and kind that no desired object claims: an object adopted with
        ``gpuplan import`` from where it lived (its address follows its live identity)."""
        desired_addresses = {str(o.address) for o in self.desired}
        candidates = [
            r
            for r in self.records.values()
            if r.component == obj.address.component
            and r.kind == obj.address.kind
            and r.address not in desired_addresses
            and r.address not in self.consumed
        ]
        candidates.sort(key=lambda r: (r.name != obj.address.name, r.address))
        if not candidates:
            return None
        self.consumed.add(candidates[0].address)
        return candidates[0]

    # -- deletions ----------------------------------------------------------------------------------------
    def _delete_reason(self, component: ComponentName) -> Reason:
        if self.destroy:
            return Reason.DELETE_BECAUSE_DESTROY
        return {
            "none": Reason.DELETE_BECAUSE_OWNER_NONE,
            "external": Reason.DELETE_BECAUSE_OWNER_EXTERNAL,
        }.get(self.owners[component], Reason.DELETE_BECAUSE_NOT_IN_CONFIG)

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
            text = delete_text(reason, component) + (
                "" if live else "; it is already gone, so apply only removes its record"
            )
            found.append(self._delete(record.address, component, key, record.owned, reason, text))
        desired_keys = {ObjectKey.of(obj.manifest) for obj in self._desired_of(component)}
        for key, live in sorted(self.labelled.items()):
            if live.labels.get(COMPONENT_LABEL) != component or key in recorded or key in desired_keys:
                continue
            address = make_address(component, key.kind, key.namespace, key.name)
            text = delete_text(reason, component) + "; it carries this stack's label but is not in the state"
            found.append(
                self._delete(address, component, key, normalize.normalize(live.manifest), reason, text)
            )
        # the workload goes before the ServiceAccount and RBAC its pods use (the reverse of render order)
        return sorted(found, key=lambda change: (change.kind != "DaemonSet", change.address))

    def _delete(
        self,
        address: str,
        component: str,
        key: ObjectKey,
        before: Mapping[str, Any],
        reason: Reason,
        text: str,
    ) -> Change:
        nodes = refresh.scheduled_nodes(before, self.snapshot.nodes)
        change = Change(
            address=address,
            component=component,
            kind=key.kind,
            object=key.ref,
            action="delete",
            reason=reason,
            reason_text=text,
            before=owned_fields(key, before),
            nodes=tuple(nodes),
        )
        return with_disruption(change)

    # -- drift, findings, components ------------------------------------------------------------------------
    def _drift(self, component: str) -> list[Drift]:
        items = []
        for record in self.records.values():
            if record.component != component:
                continue
            key = refresh.record_key(record.api_version, record.kind, record.namespace, record.name)
            live = refresh.live_object(self.snapshot, key)
            if live is None:
                items.append(
                    Drift(address=record.address, component=component, object=key.ref, status="deleted")
                )
                continue
            fields = diff.three_way(None, record.owned, live.manifest).drift
            paths = ignore.paths_of(self.spec.spec.ignore, record.address)
            self._note_ignored(
                record.address,
                component,
                key.ref,
                [field_diff(f) for f in fields if ignore.covered(paths, f.path)],
            )
            fields = tuple(f for f in fields if not ignore.covered(paths, f.path))
            if fields:
                items.append(
                    Drift(
                        address=record.address,
                        component=component,
                        object=key.ref,
                        status="changed",
                        fields=tuple(field_diff(f) for f in fields),
                    )
                )
        return items

    def _findings(self, order: Sequence[ComponentName]) -> list[Finding]:
        found: list[compat.Finding] = []
        if not self.destroy:
            found += compat.check_spec(self.spec) + compat.check_nodes(self.spec, self.facts)
            found += compat.check_fleet(self.spec, self.facts)
        for component in order:
            if self.owners[component] == "none":
                for other in self.snapshot.foreign:
                    if component in other.components:
                        found.append(
                            compat.Finding(
                                "warning",
                                component,
                                None,
                                f"{component} has owner none, but "
                                f"{adopt.describe(other.key.kind, other.key.namespace, other.key.name)} "
                                f"runs it ({other.describe_owner()})",
                                "gpuplan never removes another owner's objects",
                            )
                        )
        if self._runtime_class_missing(order):
            # an error: the refresh read that the RuntimeClass is absent, and nothing in this plan makes it,
            # so the operands' pods cannot start and their gates could only time out
            found.append(
                compat.Finding(
                    "error",
                    "toolkit",
                    None,
                    "RuntimeClass nvidia does not exist, and the pods of gpuplan's "
                    "components name it (runtimeClassName: nvidia): they will not start without it",
                    "create it with handler nvidia (kubectl apply -f runtimeclass.yaml), or set "
                    "toolkit.owner: gpuplan",
                )
            )
        found += [
            compat.Finding("warning", "driver", None, note, "plan again once GFD has labelled the nodes")
            for note in self.driver_reports.notes
            if self.owners["driver"] == "external"
        ]
        found += cluster_check.nfd_findings(self.snapshot)
        for api_version, kind in self.snapshot.unserved:
            found.append(
                compat.Finding(
                    "warning",
                    None,
                    None,
                    f"the cluster does not serve {kind} ({api_version})",
                    "install the CRD that defines it, or leave out the feature that renders it",
                )
            )
        ordered = sorted(found, key=finding_order)
        return [
            Finding(
                severity=f.severity,
                component=f.component,
                node=f.node,
                message=f.message,
                hint=f.hint,
                gpu=f.gpu,
            )
            for f in ordered
        ]

    def _runtime_class_missing(self, order: Sequence[ComponentName]) -> bool:
        if self.destroy or self.owners["toolkit"] != "external":
            return False
        if any(obj.key == refresh.RUNTIME_CLASS for obj in self.snapshot.foreign):
            return False
        if self._desired_of("toolkit"):
            return False  # gpuplan creates it
        return any(
            ((obj.manifest.get("spec") or {}).get("template") or {}).get("spec", {}).get("runtimeClassName")
            == "nvidia"
            for component in order
            for obj in self._desired_of(component)
        )

    def _blockers(self, conflicts: Sequence[Conflict], findings: Sequence[Finding]) -> list[str]:
        blockers = [
            f"unresolved ownership conflict: {adopt.describe(c.kind, c.namespace, c.name)} "
            f"({c.owner}) already runs {c.component}"
            for c in conflicts
        ]
        blockers += [
            f"compatibility error{f' on node {f.node}' if f.node else ''}: {f.message}"
            for f in findings
            if f.severity == "error"
        ]
        return blockers

    def _components(
        self, order: Sequence[ComponentName], changes: Sequence[Change], conflicts: Sequence[Conflict]
    ) -> dict[str, ComponentStatus]:
        statuses: dict[str, ComponentStatus] = {}
        configs = self.spec.components()
        for component in self.graph.order():
            config = configs[component]
            owner = config.owner
            if _off_by_default(component, config, changes):
                continue  # a component the spec never asked for, with nothing of it to remove (migManager)
            version = config.version
            base: _StatusBase = {
                "owner": owner,
                "version": version if owner != "none" and not _host_as_is(config) else None,
                "version_default": config.explicit_version() is None,
                "image": refresh.component_image(config, self.stack) if owner == "gpuplan" else None,
            }
            if component not in order:
                statuses[component] = ComponentStatus(
                    status="not-targeted", detail="not planned (--target)", **base
                )
            elif owner == "external":
                statuses[component] = self._external_status(component, base, changes)
            else:
                statuses[component] = _managed_status(component, owner, changes, conflicts, base)
        return statuses

    def _external_status(
        self, component: str, base: _StatusBase, changes: Sequence[Change]
    ) -> ComponentStatus:
        check = refresh.verify_external(
            component,
            self.spec.spec.driver.explicit_version(),
            self.facts,
            self.snapshot.foreign,
            self._runtime_class_note(component, changes),
            recorded_drivers=self.state.host_drivers if self.state else None,
            pinned_drivers=self._pinned_drivers(),
        )
        shown: _StatusBase = {**base, "version": base["version"] if component != "toolkit" else None}
        return ComponentStatus(
            status=check.verdict, detail=check.detail, problem_nodes=check.problem_nodes, **shown
        )

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


def _host_as_is(config: ComponentConfig) -> bool:
    """The status of a host driver taken as it is names what the nodes run, not a version of gpuplan's."""
    return isinstance(config, DriverConfig) and config.host_as_is()


def node_gpus(facts: Sequence[NodeFacts]) -> tuple[NodeGpu, ...]:
    """The plan's ``node_gpus``: each GPU node, or node no source told about, and what identified its GPU."""
    return tuple(
        NodeGpu(
            node=fact.name,
            gpu=fact.gpu_product,
            family=fact.gpu_family,
            count=fact.gpu_count,
            source=fact.gpu_source,
            pci_device=fact.pci_device,
            unidentified=None if fact.gpu_known else fact.unidentified,
        )
        for fact in facts
        if fact.has_nvidia_gpu or fact.unidentified
    )


def _recorded_drivers(
    snapshot: ClusterSnapshot, records: Iterable[ResourceRecord]
) -> list[Mapping[str, Any]]:
    """The driver DaemonSets the state records but that do not carry gpuplan's labels yet (an operand
    adopted from the GPU Operator, its metadata not rewritten): their pods' driver is containerised too."""
    found = []
    for record in records:
        if record.kind == "DaemonSet" and record.component == "driver":
            key = ObjectKey(record.api_version, record.kind, record.namespace, record.name)
            live = refresh.live_object(snapshot, key)
            if live is not None:
                found.append(live.manifest)
    return found


def _with_reported_driver(fact: NodeFacts, versions: Mapping[str, tuple[str, Any]]) -> NodeFacts:
    """GFD's label wins; a node without it takes what the DCGM exporter or NVML reported."""
    if fact.driver_version is not None or fact.name not in versions:
        return fact
    version, source = versions[fact.name]
    return dataclasses.replace(fact, driver_version=version, driver_version_source=source)


def _relabels(work: Sequence[NodeLabels]) -> dict[str, dict[str, str]]:
    """node -> the labels the plan writes on it (before the gates of the components that read them)."""
    found: dict[str, dict[str, str]] = {}
    for item in work:
        if item.value is not None:
            for node in item.nodes:
                found.setdefault(node, {})[item.label] = item.value
    return found


def _with_node_labels(change: Change, obj: DesiredObject, relabelled: Sequence[NodeLabels]) -> Change:
    """A DaemonSet in sync whose nodes lack the labels its component reads (a node joined, a label was
    edited, an apply stopped before it labelled them) is applied again: apply labels the nodes before its
    gates, which then wait for the component to act on them."""
    if change.action != "no-op" or obj.manifest.get("kind") != "DaemonSet" or not relabelled:
        return change
    names = sorted({node for item in relabelled for node in item.nodes})
    labels = ", ".join(sorted({f"{item.label}={item.value}" for item in relabelled}))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    text = f"{len(names)} node(s) ({shown}) lack {labels}: apply labels them"
    return change.model_copy(
        update={"action": "update", "reason": Reason.UPDATE_BECAUSE_NODE_LABELS, "reason_text": text}
    )


def _off_by_default(component: str, config: ComponentConfig, changes: Sequence[Change]) -> bool:
    """Owner none by default (not written in the spec) and no change of it: not worth a line of the plan."""
    return (
        config.owner == "none"
        and "owner" not in config.model_fields_set
        and not any(c.component == component and c.action != "no-op" for c in changes)
    )


def _managed_status(
    component: str, owner: str, changes: Sequence[Change], conflicts: Sequence[Conflict], base: _StatusBase
) -> ComponentStatus:
    mine = Counter(c.action for c in changes if c.component == component and c.action != "no-op")
    pending = ", ".join(f"{count} to {action}" for action, count in sorted(mine.items()))
    clashing = [c for c in conflicts if c.component == component]
    if owner == "none":
        status = "to-delete" if mine else "absent"
        detail = pending or "no gpuplan objects (must be absent)"
    elif clashing:
        status, detail = (
            "conflict",
            f"{len(clashing)} ownership conflict(s)" + (f"; {pending}" if pending else ""),
        )
    else:
        status, detail = ("changes", pending) if mine else ("in-sync", "matches the configuration")
    return ComponentStatus(status=status, detail=detail, **base)
