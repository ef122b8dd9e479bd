"""The plan's value types: what apply would do (:class:`Plan`), one action on one object (:class:`Change`),
and why.

Terraform's ``plans`` package in Python: types only, no planning logic.
:func:`gpuplan.planner.plan.build.make_plan`
builds a :class:`Plan` (the per-object decision is :func:`gpuplan.planner.plan.decide.decide`); apply walks
its ``changes``, views render :meth:`Plan.document`, saved plans are that document
(:mod:`gpuplan.planner.plan.planfile`). Everything here is frozen pydantic, so a plan is immutable once made;
tools that add to one (the GPU pods of :mod:`gpuplan.planner.driver.evictions`) make a copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from gpuplan.planner.observe.adopt import Conflict
from gpuplan.providers.snapshot import Fingerprint

FORMAT_VERSION = "1"
Action = Literal["create", "update", "replace", "delete", "no-op", "adopt"]
ACTIONS: tuple[Action, ...] = ("create", "update", "replace", "delete", "no-op", "adopt")


ABSENT_TEXT = (
    "it does not exist in the cluster"  # the reason of a plain create, which the human plan leaves unsaid
)


class Reason(StrEnum):
    """Why a change is planned (Terraform's action_reason, spelled out). For display only: apply acts on
    ``action``."""

    CREATE_BECAUSE_ABSENT = "CREATE_BECAUSE_ABSENT"
    CREATE_BECAUSE_DELETED_OUTSIDE = "CREATE_BECAUSE_DELETED_OUTSIDE"
    CREATE_OVER_FOREIGN_OBJECT = "CREATE_OVER_FOREIGN_OBJECT"
    UPDATE_BECAUSE_SPEC_CHANGED = "UPDATE_BECAUSE_SPEC_CHANGED"
    UPDATE_BECAUSE_DRIFT = "UPDATE_BECAUSE_DRIFT"
    UPDATE_BECAUSE_NODE_LABELS = "UPDATE_BECAUSE_NODE_LABELS"
    """The DaemonSet is in sync, but nodes lack labels its component reads once GFD has labelled them (the
    plan's ``node_labels``, written just before its gates, which then wait for it to act on them)."""
    REPLACE_BECAUSE_IMMUTABLE_FIELD = "REPLACE_BECAUSE_IMMUTABLE_FIELD"
    REPLACE_BECAUSE_IDENTITY_CHANGED = "REPLACE_BECAUSE_IDENTITY_CHANGED"
    REPLACE_BECAUSE_TAINTED = "REPLACE_BECAUSE_TAINTED"
    DELETE_BECAUSE_NOT_IN_CONFIG = "DELETE_BECAUSE_NOT_IN_CONFIG"
    DELETE_BECAUSE_OWNER_NONE = "DELETE_BECAUSE_OWNER_NONE"
    DELETE_BECAUSE_OWNER_EXTERNAL = "DELETE_BECAUSE_OWNER_EXTERNAL"
    DELETE_BECAUSE_DESTROY = "DELETE_BECAUSE_DESTROY"
    ADOPT_BECAUSE_UNRECORDED = "ADOPT_BECAUSE_UNRECORDED"
    NOOP_BECAUSE_IN_SYNC = "NOOP_BECAUSE_IN_SYNC"
    RESUME_OF_INTERRUPTED_APPLY = "RESUME_OF_INTERRUPTED_APPLY"
    """A change an interrupted apply made, read back from its journal to be verified or undone."""


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
    order (:func:`gpuplan.planner.driver.evictions.with_gpu_pods`); None when not read (make_plan, older
    plans)."""
    gpu_pods_note: str = ""
    gpu_pods_blocked: dict[str, str] = Field(default_factory=dict)
    """Of ``gpu_pods``: ``namespace/name`` -> why the rollout's podDeletion rules refuse to delete the pod
    (apply stops there) and the key that lets it go."""
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


class Ignored(_Value):
    """A difference on fields ``spec.ignore`` declares (design §8.3): shown, never planned, never reverted.
    ``fields``: ``before`` is what gpuplan would set (the spec's value, or the recorded one in a refresh-only
    plan), ``after`` the live value that is kept."""

    address: str
    component: str
    object: str
    paths: tuple[str, ...]
    """The rule's paths for this object."""
    fields: tuple[FieldDiff, ...]


class Finding(_Value):
    severity: Literal["error", "warning"]
    component: str | None = None
    node: str | None = None
    message: str
    hint: str = ""
    gpu: str | None = None
    """The node's GPU, when the rule read it (from GFD's labels or NFD's NodeFeature)."""


class _Judged(Protocol):
    @property
    def severity(self) -> str: ...
    @property
    def component(self) -> str | None: ...
    @property
    def node(self) -> str | None: ...
    @property
    def message(self) -> str: ...


def finding_order(finding: _Judged) -> tuple[bool, str, str, str]:
    """How a plan lists its findings: errors first, then by component, node and message."""
    return (finding.severity != "error", finding.component or "", finding.node or "", finding.message)


class NodeGpu(_Value):
    """One GPU node's GPU as the plan knows it, and which source identified it: ``gfd-label`` (GFD's labels),
    ``nfd`` (NFD's NodeFeature, before GFD has run) or None (none did; ``unidentified`` says why)."""

    node: str
    gpu: str | None = None
    family: str | None = None
    count: int | None = None
    source: str | None = None
    pci_device: str | None = None
    unidentified: str | None = None


class ComponentStatus(_Value):
    owner: str
    status: str
    detail: str
    version: str | None = None
    version_default: bool = False
    """True when the spec left the version out and the default was used (views show "(default)")."""
    image: str | None = None
    problem_nodes: tuple[str, ...] = ()


class NodeLabels(_Value):
    """A node label gpuplan writes on one node pool's nodes (or removes, ``value`` None, where it wrote it
    before and no pool wants it now): ``before`` is each node's value now (None: absent)."""

    pool: str | None
    label: str
    value: str | None
    before: dict[str, str | None]

    @property
    def nodes(self) -> list[str]:
        return sorted(self.before)

    def describe(self) -> str:
        count = len(self.before)
        what = f"{self.label}={self.value}" if self.value is not None else f"remove {self.label} from"
        verb = "label" if self.value is not None else ""
        nodes = f"{count} node{'s' if count != 1 else ''}"
        return f"{verb} {nodes} {what}".strip() if self.value is not None else f"{what} {nodes}"


class CapacityTotal(_Value):
    """The devices of one resource over a pool's nodes whose GPUs are counted."""

    before: int
    after: int
    gpus: int
    """The GPUs counted (GFD's ``nvidia.com/gpu.count`` of the pool's nodes)."""
    uncounted: list[str] = Field(default_factory=list)
    """The pool's nodes whose GPU count no source gave yet (left out of both sums)."""


class CapacityChange(_Value):
    """A pool's capacity of one resource that the plan changes (:mod:`gpuplan.planner.plan.capacity`):
    ``before``/``after`` per GPU, ``total`` over the pool's nodes; ``pool`` None: the nodes of no pool."""

    pool: str | None
    resource: str
    before: int
    after: int
    how: str
    nodes: int
    total: CapacityTotal | None = None
    """None in plans saved by an older gpuplan."""

    def describe(self) -> str:
        return capacity_line(self.model_dump(mode="json"))


def capacity_line(change: Mapping[str, Any], *, pool: bool = True) -> str:
    """``inference: nvidia.com/gpu 8 -> 32 (time-slicing x4)`` (without ``inference: `` unless ``pool``),
    per GPU where no GPU of the pool is counted yet. From the JSON document's ``capacity[]`` item, so the
    views and :class:`CapacityChange` say the same."""
    total = change.get("total")
    notes = [str(change["how"])]
    if total is None or not total.get("gpus"):
        numbers = f"{change['before']} -> {change['after']} per GPU"
        uncounted = len(total.get("uncounted") or []) if total else 0
        if uncounted:
            notes.append(f"the GPUs of {_nodes(uncounted)} are not known yet")
    else:
        numbers = f"{total['before']} -> {total['after']}"
        if total.get("uncounted"):
            notes.append(f"{_nodes(len(total['uncounted']))} not counted: GPUs not known yet")
    line = f"{change['resource']} {numbers} ({'; '.join(notes)})"
    return f"{change.get('pool') or '(no pool)'}: {line}" if pool else line


def _nodes(count: int) -> str:
    return f"{count} node{'s' if count != 1 else ''}"


class Summary(_Value):
    create: int = 0
    update: int = 0
    replace: int = 0
    delete: int = 0
    no_op: int = Field(default=0, alias="no-op")
    adopt: int = 0


class Plan(_Value):
    """What apply would do. Decision-bearing: the state binding, resource_versions, fingerprints, changes,
    applicable. Cosmetic: reason_text, components' details, summary (derived from changes)."""

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
    none of them): :func:`gpuplan.planner.plan.planfile.check_fresh`. None in plans saved by an older
    gpuplan."""
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
    ignored: tuple[Ignored, ...] = ()
    """Differences ``spec.ignore`` declares, left out of ``changes`` and ``drift``."""
    conflicts: tuple[Conflict, ...] = ()
    findings: tuple[Finding, ...] = ()
    node_gpus: tuple[NodeGpu, ...] = ()
    """Every GPU node, and every node no source could tell about, with the source of its GPU's identity."""
    nfd_node_features: str = "not-served"
    """NFD's NodeFeature API as the refresh found it: ``read``, ``not-served`` or ``forbidden``."""
    components: dict[str, ComponentStatus] = Field(default_factory=dict)
    summary: Summary = Field(default_factory=Summary)
    applicable: bool = True
    blockers: tuple[str, ...] = ()
    node_labels: tuple[NodeLabels, ...] = ()
    """The node labels of the node pools (design §7.1) apply writes before the components' changes."""
    pools: dict[str, list[str]] = Field(default_factory=dict)
    """Node pool -> its nodes (the nodes of no pool are not listed)."""
    pool_identity: dict[str, dict[str, str]] = Field(default_factory=dict)
    """With node pools: node -> the GPU identity labels its pool was decided by (design §8.3; empty: none
    known), so that apply judges each node's pool as the plan did, whatever GFD labels meanwhile."""
    capacity: tuple[CapacityChange, ...] = ()

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
    if any(labels.get("before") for labels in document.get("node_labels") or ()):
        return True
    return any(change.get("action") != "no-op" for change in document.get("changes") or ())
