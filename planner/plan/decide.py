"""The per-object decision of a plan: which action one desired object needs, why, and what it disrupts.

:func:`decide` compares three things per object, as Terraform does (design §5): desired vs recorded is intent,
recorded vs live is drift ("changed outside gpuplan", with the field managers that made it), live vs desired
is the work. It returns a :class:`~gpuplan.planner.plan.model.Change` with its reason code and sentence,
marked disruptive when it restarts the driver (:func:`with_disruption`) and with why it cannot be undone in
place when it cannot (:func:`with_undo`).

Callers: :func:`gpuplan.planner.plan.build.make_plan` (per desired object, and :func:`with_disruption`,
:func:`with_undo`, :func:`delete_text` for its deletions), the ``import`` command (its preview),
:mod:`gpuplan.planner.driver.evictions` (:func:`rolls_node_by_node`), and
:func:`gpuplan.planner.plan.planfile.loads` (:func:`with_undo`, for a plan saved before every delete and
replace carried its note). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from gpuplan.modules.base import DesiredObject
from gpuplan.modules.common import STACK_LABEL
from gpuplan.planner.diff import fields as diff
from gpuplan.planner.diff.fields import FieldChange
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.placement import placement_moves, placement_only
from gpuplan.planner.plan.model import ABSENT_TEXT, Change, FieldDiff, Reason
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.state import credentials
from gpuplan.state.model import ResourceRecord


class _ChangeBase(TypedDict):
    """The fields of a desired object's change that do not depend on the action chosen (see decide)."""

    address: str
    component: str
    kind: str
    object: str
    after: dict[str, Any]
    nodes: tuple[str, ...]


def field_diff(change: FieldChange, managers: Mapping[str, tuple[str, ...]] | None = None) -> FieldDiff:
    """One field of a change for the plan; its managers come from the drift when the diff itself has none."""
    return FieldDiff(
        path=change.path,
        before=change.before,
        after=change.after,
        managers=change.managers or (managers or {}).get(change.path, ()),
    )


def owned_fields(key: ObjectKey, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The owned fields as a plan may show and save them: credentials redacted."""
    redacted: dict[str, Any] = credentials.redact_owned(key.api_version, key.kind, dict(fields))
    return redacted


def delete_text(reason: Reason, component: str) -> str:
    """The sentence a delete's reason code reads as."""
    return {
        Reason.DELETE_BECAUSE_DESTROY: "destroy plan: every object of the stack is removed",
        Reason.DELETE_BECAUSE_OWNER_NONE: f"{component} has owner none: it must be absent",
        Reason.DELETE_BECAUSE_OWNER_EXTERNAL: f"{component} is now owned outside gpuplan (owner external)",
    }.get(reason, "no longer in the configuration")


def rolls_node_by_node(change: Change) -> bool:
    """Whether apply writes ``change`` through the driver's node-by-node rollout: an update of the driver
    DaemonSet, or an adopt of it that sets fields (apply_steps writes both through the rollout; an adopt
    without fields only records the object and touches nothing)."""
    return (
        change.component == "driver"
        and change.kind == "DaemonSet"
        and (change.action == "update" or (change.action == "adopt" and bool(change.fields)))
    )


def with_disruption(change: Change) -> Change:
    """A driver DaemonSet change restarts the driver. An update, or an adopt that sets fields, goes through
    the node-by-node rollout, which evicts the GPU pods of each node first; a delete or a replace removes the
    DaemonSet with all its pods at once and evicts nothing. The plan command lists those GPU pods per node."""
    if change.component != "driver" or change.kind != "DaemonSet":
        return change
    nodes = f"{len(change.nodes)} node{'s' if len(change.nodes) != 1 else ''}"
    if (
        rolls_node_by_node(change)
        and change.before
        and change.after
        and placement_only(change.before, change.after)
    ):
        # no pod of the nodes it keeps changes; a node it leaves is the new pool DaemonSet's to start
        return change
    if rolls_node_by_node(change):
        text = f"the driver restarts on {nodes}, node by node: all GPU pods on {nodes} are evicted first"
    elif change.action == "replace":
        text = (
            f"the driver DaemonSet is recreated: the driver restarts on {nodes} at once, not node by node, "
            "and no GPU pods are evicted first (a new driver pod cannot unload a driver GPU pods still use)"
        )
    elif change.action == "delete":
        text = (
            f"the driver DaemonSet and its pods are deleted on {nodes} at once, not node by node; no GPU "
            "pods are evicted first"
        )
    else:
        return change
    return change.model_copy(update={"disruptive": True, "disruption": text})


def hands_back(change: Change, changes: Sequence[Change]) -> bool:
    """Whether ``change`` deletes a driver DaemonSet (a removed node pool's) whose nodes a driver DaemonSet
    updated by the same plan places again (the stack's, whose node affinity no longer leaves them out). Apply
    then takes those nodes through the driver upgrade's path before the update lands there: cordon, evict the
    GPU pods, delete this DaemonSet, the other's pod Ready and on its driver version, uncordon; deleting it
    afterwards, at once, would leave the other's new pods crash-looping on a driver still in use."""
    return (
        change.action == "delete"
        and change.component == "driver"
        and change.kind == "DaemonSet"
        and bool(change.nodes)
        and any(_takes_over(other) for other in changes)
    )


def _takes_over(change: Change) -> bool:
    return (
        rolls_node_by_node(change)
        and change.before is not None
        and change.after is not None
        and placement_moves(change.before, change.after)
    )


def with_hand_back(changes: Sequence[Change]) -> list[Change]:
    """``changes`` with each delete that :func:`hands_back` its nodes described as what apply does there: the
    driver restarts on those nodes, node by node, after their GPU pods were evicted."""
    found = []
    for change in changes:
        if hands_back(change, changes):
            taker = next(other for other in changes if _takes_over(other))
            count = len(change.nodes)
            nodes = f"{count} node{'s' if count != 1 else ''}"
            text = (
                f"the driver restarts on {nodes} ({', '.join(change.nodes)}), node by node, as "
                f"{taker.object.rsplit('/', 1)[-1]} takes {'it' if count == 1 else 'them'} back: all GPU "
                f"pods on {nodes} are evicted first, then this DaemonSet is deleted"
            )
            change = change.model_copy(update={"disruptive": True, "disruption": text})
        found.append(change)
    return found


def with_undo(change: Change) -> Change:
    """Every delete and every replace carries why it cannot be undone in place (said before the user
    confirms).

    Rollback undoes a delete, or a replace (immutable field, tainted record, identity change), by creating the
    old object again from its recorded manifest: a new object with a new uid, never the same one. The rule:

    - an object gpuplan did not create (no stack label on its before-object): "deletes X, which gpuplan did
      not create", since its owner may not expect it back as a new object;
    - gpuplan's own object: the note says what the new uid costs for its kind (:func:`recreation_effect`): a
      DaemonSet's pods restart, a Service gets a new cluster IP, a ServiceAccount's old tokens are refused;
      any other kind (RBAC, ConfigMap, RuntimeClass: referred to by name only) is said briefly to be harmless.

    Every such change is noted, the harmless ones too, so the plan never implies a delete is undone exactly.
    Other actions (create, update, adopt) are undone in place and get no note."""
    if change.action not in ("delete", "replace") or change.undo:
        return change
    before = change.before or {}
    effect = recreation_effect(change.kind, before)
    if not created_by_gpuplan(before):
        what = change.replaces or change.object
        note = (
            f"deletes {what}, which gpuplan did not create: it cannot be undone in place; if the apply "
            "fails, "
            f"rollback recreates it from its recorded manifest (a new object with a new uid"
            f"{'; ' + effect if effect else ''})"
        )
    else:
        old = "it" if change.action == "delete" else "the old object"
        consequence = effect or f"harmless for a {change.kind}, which is referred to by name only"
        note = (
            f"cannot be undone in place: if the apply fails, rollback recreates {old} from its recorded "
            f"manifest, a new object (new uid): {consequence}"
        )
    return change.model_copy(update={"undo": note})


def created_by_gpuplan(before: Mapping[str, Any]) -> bool:
    """Whether the object a change deletes or replaces is gpuplan's own: its before-object has the stack label
    (an object moved to a new identity keeps it; an imported hand-made one never had it)."""
    labels = (before.get("metadata") or {}).get("labels") or {}
    return STACK_LABEL in labels


def recreation_effect(kind: str, before: Mapping[str, Any]) -> str:
    """What a new uid costs for an object of ``kind`` recreated from ``before``; "" when nothing refers to it
    by uid (the kinds a stack holds besides these are referred to by name: RBAC, ConfigMap, RuntimeClass)."""
    if kind == "DaemonSet":
        return (
            "its pods restart"  # the new DaemonSet owns none of the old pods (ownerReferences name the uid)
        )
    if kind == "Service" and (before.get("spec") or {}).get("clusterIP") != "None":
        return (
            "it gets a new cluster IP"  # the apiserver allocates one per object; a headless Service has none
        )
    if kind == "ServiceAccount":
        return "tokens issued for the old one are refused"  # bound tokens carry the account's uid
    if kind == "CustomResourceDefinition":
        # deleting a CRD deletes its custom resources: here the stacks' GPUStack status objects
        return "its custom resources go with it (the stacks' GPUStack status, written again by the next run)"
    return ""


def decide(
    obj: DesiredObject,
    record: ResourceRecord | None,
    live: LiveObject | None,
    *,
    nodes: Sequence[Mapping[str, Any]],
    labelled: bool,
    relabels: Mapping[str, Mapping[str, str]] | None = None,
) -> Change:
    """The change for one desired object, from its record (None: not in state) and the live object at the
    desired identity (None: absent); ``relabels``: node -> the labels the plan writes on it before the
    object's gates. Also what ``gpuplan import`` previews."""
    key = ObjectKey.of(obj.manifest)
    desired = dict(obj.manifest)
    base: _ChangeBase = {
        "address": str(obj.address),
        "component": obj.address.component,
        "kind": key.kind,
        "object": key.ref,
        "after": owned_fields(key, desired),
        "nodes": tuple(refresh.scheduled_nodes(desired, nodes, relabels)),
    }
    record_key = (
        refresh.record_key(record.api_version, record.kind, record.namespace, record.name) if record else None
    )
    if record is not None and record_key != key:
        text = (
            f"the adopted {adopt.describe(record.kind, record.namespace, record.name)} is not where the "
            f"configuration wants it ({adopt.describe(key.kind, key.namespace, key.name)}): gpuplan's object "
            "replaces it"
        )
        change = Change(
            action="replace",
            reason=Reason.REPLACE_BECAUSE_IDENTITY_CHANGED,
            reason_text=text,
            before=owned_fields(record_key or key, record.owned),
            replaces=(record_key or key).ref,
            **base,
        )
        return with_disruption(change)
    if record is not None and record.status == "tainted":
        change = Change(
            action="replace",
            reason=Reason.REPLACE_BECAUSE_TAINTED,
            reason_text="the record is tainted (a previous apply failed half-way): it is recreated",
            before=owned_fields(key, record.owned),
            **base,
        )
        return with_disruption(change)
    if live is None:
        reason = Reason.CREATE_BECAUSE_DELETED_OUTSIDE if record else Reason.CREATE_BECAUSE_ABSENT
        text = (
            "recorded in the state but missing from the cluster (deleted outside gpuplan)"
            if record
            else ABSENT_TEXT
        )
        return Change(action="create", reason=reason, reason_text=text, **base)
    if record is None and not labelled:
        return Change(
            action="create",
            reason=Reason.CREATE_OVER_FOREIGN_OBJECT,
            reason_text="an object of another owner already has this name: import it or remove it "
            "first (see the conflicts)",
            before=owned_fields(key, diff.owned_view(live.manifest, desired)),
            **base,
        )
    three = diff.three_way(desired, record.owned if record else None, live.manifest)
    before = owned_fields(key, diff.owned_view(live.manifest, desired))
    managers = {change.path: change.managers for change in three.drift}
    fields = tuple(field_diff(change, managers) for change in three.live_vs_desired)
    if record is None:
        text = (
            "it carries this stack's label but is missing from the state (an interrupted apply?): it is "
            "recorded" + (", and the fields below are set" if fields else " as it is")
        )
        adopted = Change(
            action="adopt",
            reason=Reason.ADOPT_BECAUSE_UNRECORDED,
            reason_text=text,
            before=before,
            fields=fields,
            **base,
        )
        return with_disruption(adopted)
    if three.is_noop:
        return Change(
            action="no-op",
            reason=Reason.NOOP_BECAUSE_IN_SYNC,
            reason_text="matches the configuration",
            before=before,
            **base,
        )
    immutable = [c.path for c in three.live_vs_desired if diff.requires_replace([c], obj.immutable_paths)]
    if immutable:
        change = Change(
            action="replace",
            reason=Reason.REPLACE_BECAUSE_IMMUTABLE_FIELD,
            reason_text=f"{', '.join(immutable)} cannot change in place: the object is recreated",
            before=before,
            fields=fields,
            replace_paths=tuple(immutable),
            **base,
        )
    elif three.intent:
        change = Change(
            action="update",
            reason=Reason.UPDATE_BECAUSE_SPEC_CHANGED,
            reason_text="the configuration changed",
            before=before,
            fields=fields,
            **base,
        )
    else:
        who = sorted({m for c in three.drift for m in c.managers})
        by = f" (by {', '.join(who)})" if who else ""
        text = f"it was changed outside gpuplan{by}: the change is reverted"
        change = Change(
            action="update",
            reason=Reason.UPDATE_BECAUSE_DRIFT,
            reason_text=text,
            before=before,
            fields=fields,
            **base,
        )
    return with_disruption(change)
