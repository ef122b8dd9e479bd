"""``gpuplan takeover``: the GPU Operator's operands handed to gpuplan in place, and given back on rollback.

Never two owners at once, so the order is fixed (design §7.4):

1. the operator's Deployment is scaled to 0 (its reconcile stops; nothing rewrites the operands after this);
2. each operand is adopted in place: its ``ownerReferences`` to the ClusterPolicy and the operator's hash
   annotations removed (a JSON merge patch: server-side apply cannot remove fields another manager owns), and
   its record taken into the state as ``gpuplan import`` takes one (:func:`adopt.record_imported`);
3. the adopted objects are brought to the spec's rendering by the apply walker (guarded writes, journal,
   health gates, undo): a DaemonSet whose pod template changes restarts its pods, which the plan names with
   the fields (none for the spec ``init --from-clusterpolicy`` writes: ``daemonsets.podTemplate:
   gpu-operator`` renders the operator's templates, and the driver keeps the operator's digest);
4. the ClusterPolicy is deleted (its conflict is gone from the next plan; the operands no longer name it, so
   the garbage collector leaves them) and the operator's Deployment too, unless ``keep_operator``: then it
   stays at 0 replicas, as the Helm release left it otherwise. RBAC, CRD and the Helm release metadata stay.

What a rollback needs is written into the state (``operator_handover``) before the first mutation: the
Deployment and its replica count, the ClusterPolicies, each operand's manifest with its ownerReferences and
annotations. Each step is idempotent and reads the cluster before it acts, so a run killed at any point is
converged by the next ``gpuplan takeover`` (the walker's own journal is recovered as ``apply`` recovers it),
or undone by ``gpuplan rollback``: :func:`give_back` recreates the ClusterPolicy if it is gone, puts each
operand back as the operator left it (ownerReferences to the new ClusterPolicy's uid), drops their records
and scales the operator back to its replica count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.planner.apply import walker
from gpuplan.planner.apply.journal import Recorder
from gpuplan.planner.apply.model import ApplyHooks, ApplyOptions, ApplyResult, Operation
from gpuplan.planner.diff import normalize
from gpuplan.planner.observe import adopt
from gpuplan.planner.observe.operator import CLUSTER_POLICY, HASH_ANNOTATIONS, Operand, OperatorInstall
from gpuplan.planner.plan.model import Change, Plan
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.protocols import ANY_VERSION, FIELD_MANAGER, TakeoverClient
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.state.backend import StateBackend
from gpuplan.state.model import StateFile

TAKEOVER_OUTCOME = "took over from the GPU Operator"
"""The generation outcome of a takeover (``gpuplan state history``), as the walker writes it."""

PlanFor = Callable[[StateFile], Plan]
"""Makes the plan of the spec against a state and the live cluster (``live_plan.build`` bound by the
caller)."""


@dataclass(frozen=True)
class Restart:
    """A DaemonSet whose pods restart when gpuplan's rendering replaces the operator's pod template."""

    address: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class TakeoverPlan:
    install: OperatorInstall
    plan: Plan
    """The plan of changes as it is once the operands are adopted (their records in the state)."""
    keep_operator: bool

    @property
    def restarts(self) -> tuple[Restart, ...]:
        return tuple(restart for change in self.plan.changes if (restart := _restart(change)) is not None)


def _restart(change: Change) -> Restart | None:
    if change.kind != "DaemonSet" or change.action not in ("update", "adopt", "replace"):
        return None
    if change.action == "replace":
        return Restart(change.address, change.replace_paths or ("the object is recreated",))
    fields = tuple(f.path for f in change.fields if f.path.startswith("spec.template"))
    return Restart(change.address, fields) if fields else None


# ------------------------------------------------------------------------------------------------ planning


def stripped(live: LiveObject) -> dict[str, Any]:
    """The operand as gpuplan adopts it: without the operator's ownerReferences and hash annotations."""
    manifest = dict(live.manifest)
    metadata = dict(manifest.get("metadata") or {})
    metadata.pop("ownerReferences", None)
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in HASH_ANNOTATIONS}
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    manifest["metadata"] = metadata
    return manifest


def adopted_state(state: StateFile, operands: Sequence[Operand]) -> StateFile:
    """``state`` with every operand not recorded yet recorded as ``gpuplan import`` records it."""
    for operand in operands:
        if str(operand.desired.address) in state.resources:
            continue
        live = replace(operand.live, manifest=stripped(operand.live))
        record = adopt.record_imported(operand.desired.address.component, live, serial=state.serial + 1)
        state = state.with_record(record)
    return state


def make(
    install: OperatorInstall, state: StateFile, plan_for: PlanFor, *, keep_operator: bool
) -> TakeoverPlan:
    """The takeover of ``install``: what is adopted, the changes that follow, which pods restart. Pure but
    for the plan ``plan_for`` reads."""
    plan = plan_for(adopted_state(state, install.operands))
    check_plan(plan)
    return TakeoverPlan(install, plan, keep_operator)


def check_plan(plan: Plan) -> None:
    """The plan may be walked once the operands are adopted: the ClusterPolicy's conflicts go with it at
    the end; any other blocker (a compatibility error, another owner) refuses the takeover."""
    others = [
        c
        for c in plan.conflicts
        if not (c.owner_kind == "gpu-operator" and (c.kind == CLUSTER_POLICY[1] or c.address is None))
    ]
    errors = [f for f in plan.findings if f.severity == "error"]
    if others or errors:
        first = others[0].object if others else errors[0].message
        raise ConfigError(
            f"the takeover cannot be planned: {first}",
            detail="\n".join([*(c.object for c in others), *(f.message for f in errors)]),
            hint="run gpuplan plan -f SPEC and resolve what it reports besides the GPU Operator",
        )


def handover(install: OperatorInstall, *, keep_operator: bool) -> dict[str, Any]:
    """What the state keeps so that a rollback gives the operator back what it had."""
    return {
        "namespace": install.namespace,
        "deployment": _kept(install.deployment),
        "replicas": install.replicas,
        "cluster_policies": [_kept(policy) for policy in install.policies],
        "operands": [
            {
                "address": str(operand.desired.address),
                "manifest": _kept(operand.live),
                "ownerReferences": list(operand.live.metadata.get("ownerReferences") or ()),
                "annotations": dict(operand.live.metadata.get("annotations") or {}),
            }
            for operand in install.operands
        ],
        "keep_operator": keep_operator,
        "complete": False,
    }


def _kept(live: LiveObject) -> dict[str, Any]:
    manifest = normalize.normalize(live.manifest)
    manifest.pop("status", None)
    metadata = manifest.get("metadata") or {}
    metadata.pop("ownerReferences", None)  # kept apart: a recreated owner has a new uid
    return manifest


# ---------------------------------------------------------------------------------------------- the apply


def apply(
    takeover: TakeoverPlan,
    *,
    spec: Spec,
    backend: StateBackend,
    writer: TakeoverClient,
    plan_for: PlanFor,
    hooks: ApplyHooks,
    options: ApplyOptions,
    report: Callable[[str], None],
) -> ApplyResult:
    """Carry out ``takeover`` (see the module doc); on a failed walk the cluster goes back to the operator.
    The caller holds the state lock and has recovered any interrupted apply's journal."""
    install = takeover.install
    recorder = Recorder(backend, backend.read() or StateFile.new())
    if recorder.state.operator_handover is None:
        recorder.remember(handover(install, keep_operator=takeover.keep_operator))
    elif recorder.state.operator_handover.get("complete"):
        raise ConfigError(
            "the state holds a takeover that is complete",
            hint="gpuplan rollback gives the cluster back to the GPU Operator first",
        )
    memory = recorder.state.operator_handover
    assert memory is not None
    deployment = install.deployment.key
    if writer.read(deployment) is not None:  # a takeover killed after deleting it: nothing to stop
        writer.merge_patch(deployment, {"spec": {"replicas": 0}})
    report(
        f"Scaled Deployment {deployment.namespace}/{deployment.name} to 0 replicas "
        f"(was {memory['replicas']})."
    )
    for operand in install.operands:
        _adopt(operand, writer, recorder)
    report(f"Adopted {len(install.operands)} object(s) of the GPU Operator in place.")
    plan = plan_for(recorder.state)
    check_plan(plan)
    result = walker.apply(
        plan, spec=spec, backend=backend, writer=writer, hooks=hooks,
        options=replace(options, operation=Operation.TAKEOVER),
    )  # fmt: skip
    if not result.ok:
        if options.rollback:
            give_back(backend, writer, report)
        return result
    _remove_operator(install, writer, keep=takeover.keep_operator, timeout=options.delete_timeout)
    recorder = Recorder(backend, backend.read() or StateFile.new())
    recorder.remember({**memory, "complete": True})
    report(_removed_words(install, keep=takeover.keep_operator))
    result.serial = recorder.serial
    return result


def _adopt(operand: Operand, writer: TakeoverClient, recorder: Recorder) -> None:
    key = operand.live.key
    live = writer.read(key)
    if live is None:
        raise GpuplanError(f"{key.ref} disappeared during the takeover")
    owned = live.metadata.get("ownerReferences") or ()
    hashes = [k for k in live.metadata.get("annotations") or {} if k in HASH_ANNOTATIONS]
    if owned or hashes or _others_own(live):
        patch: dict[str, Any] = {"ownerReferences": None, "managedFields": taken_fields(live)}
        if hashes:
            patch["annotations"] = dict.fromkeys(hashes)
        live = writer.merge_patch(key, {"metadata": patch})
    address = str(operand.desired.address)
    if address not in recorder.state.resources:
        recorder.update(records=[adopt.record_imported(operand.desired.address.component, live, serial=0)])


def _others_own(live: LiveObject) -> bool:
    return any(
        not entry.get("subresource") and entry.get("manager") != FIELD_MANAGER
        for entry in live.metadata.get("managedFields") or ()
    )


def taken_fields(live: LiveObject) -> list[dict[str, Any]]:
    """``live``'s managedFields with every manager's fields of the object itself (not of its status) given
    to gpuplan as one Apply entry: gpuplan is then their only owner, so its next server-side apply removes
    what its rendering leaves out (the operator's nvidia.com/gpu.deploy.* nodeSelector, its chart labels)
    instead of keeping them as another manager's (the server honours managedFields a write sets:
    https://kubernetes.io/docs/reference/using-api/server-side-apply/#transferring-ownership)."""
    kept: list[dict[str, Any]] = []
    taken: dict[str, Any] = {}
    version = live.key.api_version
    for entry in live.metadata.get("managedFields") or ():
        if entry.get("subresource"):
            kept.append(dict(entry))
            continue
        taken = _union(taken, entry.get("fieldsV1") or {})
        version = str(entry.get("apiVersion") or version)
    entry = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": version, "fieldsType": "FieldsV1"}
    return [*kept, {**entry, "fieldsV1": taken}] if taken else kept


def _union(one: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """Two fieldsV1 tries as the set of both, the fields only: without the ``"."`` members that own a map
    or list item itself, which an Apply owns only while it applies it (gpuplan's rendering applies the maps
    it keeps; a map it gives up empties instead of going with the fields another manager still sets)."""
    merged = dict(one)
    for key, value in other.items():
        if key == ".":
            continue
        merged[key] = _union(merged.get(key) or {}, value)
    return merged


def _remove_operator(install: OperatorInstall, writer: TakeoverClient, *, keep: bool, timeout: float) -> None:
    keys = [policy.key for policy in install.policies]
    if not keep:
        keys.append(install.deployment.key)
    for key in keys:
        gone = writer.delete(key, expected_rv=ANY_VERSION)
        if gone is not None:
            writer.wait_gone(key, uid=gone.uid, timeout=timeout)


def _removed_words(install: OperatorInstall, *, keep: bool) -> str:
    policies = ", ".join(p.key.name for p in install.policies)
    deployment = f"{install.deployment.key.namespace}/{install.deployment.key.name}"
    if keep:
        return (
            f"Deleted ClusterPolicy {policies}; Deployment {deployment} is kept at 0 replicas "
            "(--keep-operator)."
        )
    return f"Deleted ClusterPolicy {policies} and Deployment {deployment}."


# ---------------------------------------------------------------------------------------------- give back


def unfinished(state: StateFile | None) -> Mapping[str, Any] | None:
    """The handover of a takeover that did not finish (killed, or its rollback was): the next takeover
    resumes it."""
    handover = state.operator_handover if state is not None else None
    return handover if handover is not None and not handover.get("complete") else None


def rolls_back(state: StateFile | None) -> bool:
    """Whether ``gpuplan rollback`` (without ``--to``) means giving the cluster back to the operator: the
    takeover did not finish, or it is the newest generation (after later applies, rollback returns to the
    generation before as always)."""
    if state is None or state.operator_handover is None:
        return False
    newest = state.history[-1].outcome if state.history else None
    return unfinished(state) is not None or newest == TAKEOVER_OUTCOME


def give_back(backend: StateBackend, writer: TakeoverClient, report: Callable[[str], None]) -> int:
    """Return the cluster to the GPU Operator from the state's ``operator_handover`` (see the module doc);
    the new state serial. Idempotent: a run killed half-way is finished by the next."""
    recorder = Recorder(backend, backend.read() or StateFile.new())
    memory = recorder.state.operator_handover
    if memory is None:
        raise ConfigError("the state holds no GPU Operator takeover to roll back")
    uids = {policy["metadata"]["name"]: _recreated(policy, writer) for policy in memory["cluster_policies"]}
    deployment = ObjectKey.of(memory["deployment"])
    if writer.read(deployment) is None:
        body = {**memory["deployment"], "spec": {**memory["deployment"]["spec"], "replicas": 0}}
        writer.create(body)
    for operand in memory["operands"]:
        _restore_operand(operand, uids, writer)
    recorder.update(remove=[o["address"] for o in memory["operands"]])
    writer.merge_patch(deployment, {"spec": {"replicas": memory["replicas"]}})
    recorder.remember(None)
    recorder.close(spec_digest=_last_digest(recorder.state), outcome="returned to the GPU Operator")
    report(
        f"Returned to the GPU Operator: ClusterPolicy {', '.join(uids)}, {len(memory['operands'])} "
        f"operand(s) owned by it again, Deployment {deployment.namespace}/{deployment.name} at "
        f"{memory['replicas']} replica(s)."
    )
    return recorder.serial


def _last_digest(state: StateFile) -> str:
    return state.history[-1].spec_digest if state.history and state.history[-1].spec_digest else "none"


def _recreated(policy: Mapping[str, Any], writer: TakeoverClient) -> str:
    key = ObjectKey.of(policy)
    live = writer.read(key) or writer.create(policy)
    return live.uid or ""


def _restore_operand(operand: Mapping[str, Any], uids: Mapping[str, str], writer: TakeoverClient) -> None:
    """The operand as the operator left it: its spec, labels and annotations (gpuplan's own removed) and
    ownerReferences naming the ClusterPolicy by its uid now."""
    manifest: dict[str, Any] = dict(operand["manifest"])
    key = ObjectKey.of(manifest)
    live = writer.read(key)
    if live is None:
        return  # deleted by hand since: the operator recreates it once it runs again
    refs = [
        {**ref, "uid": uids.get(ref.get("name", ""), ref.get("uid"))} for ref in operand["ownerReferences"]
    ]
    metadata = manifest.get("metadata") or {}
    target = {
        "labels": metadata.get("labels") or {},
        "annotations": dict(operand["annotations"]),
        "ownerReferences": refs,
    }
    patch = {
        "metadata": merge_patch_between(_pick(live.metadata, target), target),
        "spec": merge_patch_between(live.manifest.get("spec") or {}, manifest.get("spec") or {}),
    }
    writer.merge_patch(key, patch)


def _pick(metadata: Mapping[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    return {key: metadata.get(key) or ({} if isinstance(like[key], dict) else []) for key in like}


def merge_patch_between(live: Any, target: Any) -> Any:
    """The RFC 7386 merge patch that turns ``live`` into ``target``: a key ``target`` lacks is removed
    (null), maps are patched key by key, anything else (lists included) replaced whole. Server defaults
    ``target`` lacks are removed too and the server puts them back."""
    if not isinstance(live, Mapping) or not isinstance(target, Mapping):
        return target
    patch: dict[str, Any] = {key: None for key in live if key not in target}
    for key, value in target.items():
        if key not in live:
            patch[key] = value
        elif live[key] != value:
            patch[key] = merge_patch_between(live[key], value)
    return patch
