"""One change of a plan carried out, and undone: the mutations, their journal entries, their records.

:func:`perform` does one :class:`~gpuplan.planner.plan.build.Change` through the writer and returns the
:class:`Step` that :func:`undo` needs to reverse it (the inverse of each action, CREATE -> delete,
DELETE -> create the recorded object, UPDATE -> apply the before-object, REPLACE -> delete the new one and
recreate the old). Each mutation is journaled through the :class:`~gpuplan.planner.apply.journal.Recorder`.


The write guard (re-read before write) is :mod:`gpuplan.planner.diff.guard`.

Replace of an object adopted from elsewhere (the lab's ``kube-system`` device plugin replaced by gpuplan's in
``gpu-operator``): the old object is deleted first, then the new one created. Both advertise
``nvidia.com/gpu`` through the same per-node kubelet socket and the kubelet keeps only the last registration
of a resource name, so the two must never run side by side; create-first would give two plugins racing for
one socket. The gap is the new plugin's start-up, and rollback recreates the old object from its record, so
the delete is not lost (the plan says so before confirmation).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.modules.base import Address
from gpuplan.planner.apply.journal import Recorder, key_of, record_for, refreshed
from gpuplan.planner.diff import normalize
from gpuplan.planner.diff.guard import guarded_write
from gpuplan.planner.driver.step import RollsDriver
from gpuplan.planner.plan.decide import hands_back
from gpuplan.planner.plan.model import Change, Reason
from gpuplan.providers.protocols import ANY_VERSION, ApplyClient
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.state.model import JournalEntry, ResourceRecord

# Within a component: identities and permissions first, then configuration, the workload, its Service.
KIND_ORDER = (
    "Namespace",
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "RuntimeClass",
    "DaemonSet",
    "Deployment",
    "Service",
)


def kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def ordered(changes: list[Change]) -> list[Change]:
    """A component's changes in apply order; deletes in the reverse (the workload before its RBAC). Of one
    kind, creates come first: a new node pool's DaemonSet exists before the stack's stops placing the pool's
    nodes, so the driver rollout can hand those nodes over to it. The mirror: a removed pool's driver
    DaemonSet whose nodes the stack's takes back (:func:`gpuplan.planner.plan.decide.hands_back`) is deleted
    before the stack's update, once its nodes are drained."""
    back = [c for c in changes if hands_back(c, changes)]
    steps = {"create": 0, "delete": 1}
    forward = sorted(
        (c for c in changes if c.action != "delete" or c in back),
        key=lambda c: (kind_rank(c.kind), steps.get(c.action, 2), c.address),
    )
    deletes = sorted(
        (c for c in changes if c.action == "delete" and c not in back),
        key=lambda c: (-kind_rank(c.kind), c.address),
    )
    return forward + deletes


@dataclass(frozen=True)
class Step:
    """A change this apply made, with what undoing it needs."""

    change: Change
    prior: ResourceRecord | None
    """The state's record at the change's address before the change (None: there was none)."""
    created: ObjectKey | None = None
    """An object this change created (undo deletes it)."""
    removed: ObjectKey | None = None
    """An object this change deleted (undo recreates it from ``restore``)."""
    removed_record: ResourceRecord | None = None
    """The record of the removed object when it lived at another address (an adopted object)."""
    restore: Mapping[str, Any] | None = None
    """The before-object: what undo applies (update) or creates (delete, replace)."""


@dataclass
class StepContext:
    writer: ApplyClient
    recorder: Recorder
    resource_versions: Mapping[str, str]
    delete_timeout: float
    driver_rollout: RollsDriver | None = None
    report: Callable[[str], None] | None = None
    handed_back: Collection[str] = ()
    """The addresses of the deletes that hand their nodes back (:func:`ordered`)."""


def perform(change: Change, ctx: StepContext) -> Step | None:
    """Carry out ``change``; None for a no-op. Raises DriftDetected or another GpuplanError on failure."""
    if change.action == "no-op":
        return None
    prior = ctx.recorder.state.resources.get(change.address)
    if change.action == "delete":
        return _delete(change, prior, ctx)
    assert change.after is not None, f"{change.action} of {change.address} without an after-object"
    if change.action == "replace":
        return _replace(change, prior, ctx)
    key = key_of(change.after)
    expected = _expected(ctx, key, absent_ok=change.action == "create")
    ctx.recorder.begin(change.address, change.action, before=change.before, after=change.after)
    live: LiveObject | None
    if change.action == "create":
        live = ctx.writer.create(change.after)
        step = Step(change, prior, created=key)
    elif change.action == "adopt" and not change.fields:
        live = ctx.writer.read(key)
        step = Step(change, prior)
    elif _rolled_driver(change, ctx) and ctx.driver_rollout is not None:
        live = ctx.driver_rollout(change, ctx.writer, ctx.report)
        step = Step(change, prior, restore=change.before)
    else:
        live = _guarded(
            ctx,
            key,
            expected,
            change.before,
            lambda version: ctx.writer.apply(change.after or {}, expected_rv=version),
        )
        step = Step(change, prior, restore=change.before)
    ctx.recorder.finish(change.address, records=[record_for(change.address, change.after, live, serial=0)])
    return step


def _rolled_driver(change: Change, ctx: StepContext) -> bool:
    """An update of the driver DaemonSet goes through the node-by-node rollout when the caller gave one."""
    return (
        ctx.driver_rollout is not None
        and change.component == "driver"
        and change.kind == "DaemonSet"
        and change.action in ("update", "adopt")
    )


def _delete(change: Change, prior: ResourceRecord | None, ctx: StepContext) -> Step:
    key = _object_key(change)
    ctx.recorder.begin(change.address, "delete", before=change.before, after=None)

    def remove() -> LiveObject | None:
        return _guarded(
            ctx,
            key,
            _expected(ctx, key),
            change.before,
            lambda version: ctx.writer.delete(key, expected_rv=version),
        )

    if change.address in ctx.handed_back and ctx.driver_rollout is not None:
        old = ctx.driver_rollout.hand_back(change, ctx.writer, remove, ctx.report)
    else:
        old = remove()
    if old is not None:
        ctx.writer.wait_gone(key, uid=old.uid, timeout=ctx.delete_timeout)
    ctx.recorder.finish(change.address, remove=[change.address])
    restore = normalize.normalize(old.manifest) if old is not None else None
    return Step(change, prior, removed=key if old is not None else None, restore=restore)


def _replace(change: Change, prior: ResourceRecord | None, ctx: StepContext) -> Step:
    """Delete the old object (the recorded one elsewhere, or this one), wait until gone, create the new."""
    assert change.after is not None
    new_key = key_of(change.after)
    old_key = key_of(change.before) if change.replaces and change.before else new_key
    old_record = _record_at(ctx, old_key) if old_key != new_key else None
    ctx.recorder.begin(change.address, "replace", before=change.before, after=change.after)
    old = _guarded(
        ctx,
        old_key,
        _expected(ctx, old_key),
        change.before,
        lambda version: ctx.writer.delete(old_key, expected_rv=version),
    )
    if old is not None:
        ctx.writer.wait_gone(old_key, uid=old.uid, timeout=ctx.delete_timeout)
    live = ctx.writer.create(change.after)
    remove = [old_record.address] if old_record is not None and old_record.address != change.address else []
    ctx.recorder.finish(
        change.address, records=[record_for(change.address, change.after, live, serial=0)], remove=remove
    )
    restore = normalize.normalize(old.manifest) if old is not None else None
    return Step(
        change,
        prior,
        created=new_key,
        removed=old_key if old is not None else None,
        removed_record=old_record,
        restore=restore,
    )


def step_of_entry(entry: JournalEntry, writer: ApplyClient) -> Step:
    """The :class:`Step` that undoes a done journal entry of an interrupted apply: its ``before`` manifest is
    what comes back. The prior record is rebuilt from ``before`` and the live object (the state of the
    interrupted apply no longer holds it); a replace's old object is recorded at the entry's address."""
    manifest = entry.after or entry.before or {}
    key = key_of(manifest)
    change = Change(
        address=entry.address,
        component=Address.parse(entry.address).component,
        kind=key.kind,
        object=key.ref,
        action=entry.action,
        reason=Reason.RESUME_OF_INTERRUPTED_APPLY,
        reason_text=f"{entry.action} made by an interrupted apply (started {entry.started_at})",
        before=dict(entry.before) if entry.before is not None else None,
        after=dict(entry.after) if entry.after is not None else None,
    )
    prior = None
    if entry.before is not None and entry.action != "create":
        prior = record_for(entry.address, entry.before, writer.read(key_of(entry.before)), serial=0)
    if entry.action == "create":
        return Step(change, None, created=key)
    if entry.action == "delete":
        removed = key_of(entry.before) if entry.before else None
        return Step(change, prior, removed=removed, restore=entry.before)
    if entry.action == "replace":
        removed = key_of(entry.before) if entry.before else None
        return Step(change, prior, created=key, removed=removed, restore=entry.before)
    return Step(change, prior, restore=entry.before)


def undo(step: Step, ctx: StepContext) -> ObjectKey | None:
    """Reverse ``step`` and put the state's records back as they were; the key of an object that was
    restored (and so needs its health waited for), or None when undo only removed what the apply created."""
    change = step.change
    if step.created is not None:
        created = step.created
        ctx.recorder.begin(change.address, "delete", before=change.after, after=None)
        gone = ctx.writer.delete(created, expected_rv=ANY_VERSION)
        if gone is not None:
            ctx.writer.wait_gone(created, uid=gone.uid, timeout=ctx.delete_timeout)
        ctx.recorder.finish(change.address, remove=[change.address])
    if step.removed is not None and step.restore is not None:
        return _recreate(step, step.removed, step.restore, ctx)
    if change.action in ("update", "adopt") and step.restore is not None:
        ctx.recorder.begin(change.address, "update", before=change.after, after=step.restore)
        if _rolled_driver(change, ctx) and ctx.driver_rollout is not None:
            # the old spec alone changes no node (OnDelete): roll the old driver back onto them
            back = change.model_copy(update={"before": change.after, "after": dict(step.restore)})
            ctx.driver_rollout(back, ctx.writer, ctx.report)
        else:
            ctx.writer.apply(step.restore, expected_rv=ANY_VERSION)
        restored = [step.prior] if step.prior is not None else []
        ctx.recorder.finish(change.address, records=restored, remove=[] if restored else [change.address])
        return key_of(step.restore)
    if step.created is None:
        _put_back(step.prior, change.address, ctx)
    return None


def _recreate(step: Step, key: ObjectKey, body: Mapping[str, Any], ctx: StepContext) -> ObjectKey:
    record = step.removed_record or step.prior
    address = record.address if record is not None else step.change.address
    ctx.recorder.begin(address, "create", before=None, after=body)
    live = ctx.writer.create(body) if ctx.writer.read(key) is None else ctx.writer.apply(body)
    if record is not None:
        ctx.recorder.finish(address, records=[refreshed(record, live, serial=0)])
    else:  # a labelled object the state did not record: recreated, and recorded as what it is now
        ctx.recorder.finish(address, records=[record_for(address, body, live, serial=0)])
    return key


def _put_back(prior: ResourceRecord | None, address: str, ctx: StepContext) -> None:
    if prior is not None:
        ctx.recorder.update(records=[prior])
    elif address in ctx.recorder.state.resources:
        ctx.recorder.update(remove=[address])


def _guarded(
    ctx: StepContext,
    key: ObjectKey,
    expected: str | None,
    before: Mapping[str, Any] | None,
    write: Callable[[str | None], LiveObject | None],
) -> LiveObject | None:
    return guarded_write(ctx.writer, key, expected, before, write)


def _expected(ctx: StepContext, key: ObjectKey, *, absent_ok: bool = False) -> str | None:
    """The resourceVersion the plan read for ``key``; None (absent) for a create; any when the plan did not
    read it (a saved plan of an older gpuplan)."""
    if absent_ok:
        return None
    return ctx.resource_versions.get(key.ref) or ANY_VERSION


def _object_key(change: Change) -> ObjectKey:
    if change.before and change.before.get("metadata"):
        return key_of(change.before)
    return parse_ref(change.object)


def parse_ref(ref: str) -> ObjectKey:
    """``apps/v1/DaemonSet/ns/name``, ``v1/Service/ns/name`` or ``node.k8s.io/v1/RuntimeClass/name``."""
    parts = ref.split("/")
    kind_at = next(i for i, part in enumerate(parts) if part[:1].isupper())
    api_version, kind, rest = "/".join(parts[:kind_at]), parts[kind_at], parts[kind_at + 1 :]
    if len(rest) == 2:
        return ObjectKey(api_version, kind, rest[0], rest[1])
    return ObjectKey(api_version, kind, None, rest[-1])


def _record_at(ctx: StepContext, key: ObjectKey) -> ResourceRecord | None:
    for record in ctx.recorder.state.resources.values():
        if (record.api_version, record.kind, record.namespace, record.name) == (
            key.api_version,
            key.kind,
            key.namespace,
            key.name,
        ):
            return record
    return None


def describe_error(exc: GpuplanError) -> str:
    return exc.summary + (f" ({exc.detail})" if exc.detail else "")


@contextmanager
def no_interrupts() -> Iterator[None]:
    """Rollback runs to its end: a second Ctrl-C during it is noted, not obeyed (the journal covers kill
    -9)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
