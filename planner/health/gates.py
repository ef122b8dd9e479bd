"""Health gates: is a component healthy after a change? Pure evaluation of what the waiter observed.

A module names its gates as :class:`gpuplan.modules.base.HealthCheck` values (kinds ``rollout``,
``driver-version``, ``runtime-handler``, ``allocatable``, ``gfd-labels``, ``dcgm-metrics``,
``validator-ready``). :func:`evaluate` judges one of them against an :class:`Observation` (the DaemonSet, its
pods, the nodes and DCGM scrapes the waiter read) and answers a :class:`GateStatus`: ``passed``,
``progressing`` or ``failed``. Nothing here does I/O or reads a clock (``Observation.now`` is the time),
so every state is testable with hand-made objects. :mod:`gpuplan.planner.health.wait` drives it against a
cluster; the apply walker calls the waiter after each component's change.

Stricter than kubectl rollout status, Helm --wait or Argo CD health: a rollout passes only with no slack
(observedGeneration ≥ generation, updated = available = desired, no misscheduled pod; OnDelete: every pod of
the current template generation, Running and Ready), and a pod of the component that cannot start for a
permanent cause (an image tag that does not exist, a container that keeps crashing the same way, a pod no
node can take; :mod:`gpuplan.planner.health.causes` has the rule per gate) fails the gate at once instead of
"progressing" until the timeout; a transient one (a registry timeout) keeps it waiting. Effects are checked
on every node the DaemonSet targets (:mod:`gpuplan.planner.health.nodes`); a node that joins during the wait
is more work, not a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from gpuplan.modules.base import DEFAULT_NODE_SELECTOR, HealthCheck
from gpuplan.planner.pools import PlannedPools
from gpuplan.planner.spec.ignore import IgnoreRule, checks_on

GateState = Literal["passed", "progressing", "failed"]
Obj = Mapping[str, Any]

# Waiting reasons that mean the container will not start without a change (kubelet's names).
FAILING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "RunContainerError",
        "InvalidImageName",
    }
)
UNSCHEDULABLE_GRACE_SECONDS = 15.0  # kstatus's: a pod unschedulable for longer is Failed
GENERATION_LABEL = "pod-template-generation"
HASH_LABEL = "controller-revision-hash"


@dataclass(frozen=True)
class GateStatus:
    """The verdict of one gate (or of a component's gates together)."""

    state: GateState
    message: str
    gate: str = ""
    node: str | None = None
    pod: str | None = None
    container: str | None = None
    reason: str | None = None
    ready: int = 0
    """Nodes (or pods) where the gate holds, of ``desired``: the progress a display shows."""
    desired: int = 0
    notes: tuple[str, ...] = ()
    """What a passed gate did not judge as usual, for the apply to show (the DCGM metrics not scraped, or
    read through another path than the pod proxy)."""

    @property
    def done(self) -> bool:
        return self.state != "progressing"


@dataclass(frozen=True)
class Scrape:
    """One DCGM exporter scrape on a node: the pod scraped and its text, or why it could not be read, or
    that the node was left out of the scraped sample (its exporter pod is Ready; no pod named: its
    DaemonSet's status counts it available)."""

    pod: str | None
    text: str | None = None
    error: str | None = None
    sampled_out: bool = False


@dataclass(frozen=True)
class Observation:
    """What the waiter read for one component. Objects are plain dicts as the API server returns them."""

    daemonset: Obj | None = None
    pods: tuple[Obj, ...] = ()
    """Pods of the component (the DaemonSet's selector, or the validator-ready check's)."""
    nodes: tuple[Obj, ...] = ()
    """Every node; which of them are targeted is decided here."""
    metrics: Mapping[str, Scrape] = field(default_factory=dict)
    """node name -> the DCGM scrape there (dcgm-metrics gates only)."""
    now: float = 0.0
    """Seconds since the epoch, for the unschedulable grace period."""
    unschedulable_grace: float = UNSCHEDULABLE_GRACE_SECONDS
    expected_driver: str | None = None
    """The driver version the stack expects, when known: GFD's cuda.driver-version.full must equal it."""
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_SELECTOR))
    """Nodes a component without a DaemonSet of its own (an external owner) is checked on."""
    exits: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """``pod uid/container`` -> exit codes the waiter saw in earlier rounds (a crash loop is permanent only
    when it keeps ending the same way, :mod:`gpuplan.planner.health.causes`)."""
    pool_selector: Mapping[str, str] = field(default_factory=dict)
    """A node pool's gates (design §7.1): only nodes with these labels are targeted."""
    excluded: tuple[Mapping[str, str], ...] = ()
    """The stack's gates of a component some node pools run their own DaemonSet of: nodes of those pools
    (by their selectors) are not targeted."""
    pool_drivers: tuple[tuple[Mapping[str, str], str], ...] = ()
    """(pool selector, driver version) of the node pools that pin their own: on their nodes GFD's
    cuda.driver-version.full must equal the pool's version, not ``expected_driver``."""
    pools: PlannedPools = field(default_factory=PlannedPools)
    """The node pools as the plan placed the nodes: ``pool_selector``, ``excluded`` and ``pool_drivers``
    match a node's pool labels (:meth:`PlannedPools.labels`), and a node someone moved out of (or into) its
    planned pool fails a pool's gate at once (:meth:`PlannedPools.moved`)."""
    revision_hash: str | None = None
    """The controller-revision-hash of the DaemonSet's current template, when the waiter could tell
    (:func:`gpuplan.planner.health.revision.current_hash`); see :func:`in_sync`."""
    pods_read: bool = True
    """False when the waiter left the pods unread because the DaemonSet's status counts them (an apply's
    gates, once a rolling DaemonSet's status says every pod is updated and available)."""
    ignore: tuple[IgnoreRule, ...] = ()
    """The spec's ``spec.ignore``: a check its nodes rules name is not judged on the nodes they select (a
    node known to be broken does not hold the apply, as it is no drift in the report)."""

    def waives(self, kind: str, node: Obj) -> bool:
        """Whether ``spec.ignore`` declares check ``kind`` not judged on ``node``."""
        return bool(self.ignore) and kind in checks_on(
            self.ignore, (node.get("metadata") or {}).get("labels") or {}
        )


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def pool_labels(observation: Observation, node: Obj) -> dict[str, str]:
    """The labels of ``node`` that the node pools' selectors are matched against."""
    metadata = node.get("metadata") or {}
    return observation.pools.labels(str(metadata.get("name", "")), metadata.get("labels") or {})


def expected_driver_on(observation: Observation, node: Obj) -> str | None:
    """The driver version ``node`` must report: its pool's, else the stack's; None where ``spec.ignore``
    waives the driver-version check (GFD's driver label is then not compared either)."""
    if observation.waives("driver-version", node):
        return None
    labels = pool_labels(observation, node)
    pinned = (version for selector, version in observation.pool_drivers if matches(selector, labels))
    return next(pinned, observation.expected_driver)


def evaluate(check: HealthCheck, observation: Observation) -> GateStatus:
    """The verdict of ``check`` on ``observation``. Pure."""
    from gpuplan.planner.health import (
        nodes as health_nodes,  # the effect gates; imported here to keep the modules acyclic
    )

    moved = health_nodes.moved(check, observation)
    if moved is not None:
        status = moved
    elif check.kind == "rollout":
        status = rollout(check.params, observation)
    else:
        status = health_nodes.effect(check, observation)
    return replace(status, gate=check.kind)


def combine(statuses: Iterable[GateStatus]) -> GateStatus:
    """One verdict for a component: the first failure, else the first gate still progressing, else passed."""
    collected = list(statuses)
    for state in ("failed", "progressing"):
        found = next((status for status in collected if status.state == state), None)
        if found is not None:
            return found
    if not collected:
        return GateStatus("passed", "no health checks")
    last = collected[-1]
    return GateStatus(
        "passed",
        "healthy: " + "; ".join(s.message for s in collected),
        gate=last.gate,
        ready=last.ready,
        desired=last.desired,
        notes=tuple(dict.fromkeys(note for status in collected for note in status.notes)),
    )


# ----------------------------------------------------------------------------------------------- rollout


def rollout(params: Mapping[str, Any], observation: Observation) -> GateStatus:
    """A DaemonSet rollout, complete with no slack; a pod that cannot start for a permanent cause fails it at
    once (:mod:`gpuplan.planner.health.causes`), one that cannot start yet keeps it progressing."""
    from gpuplan.planner.health import causes  # which failures are permanent; it builds on this module

    ds = observation.daemonset
    name = f"{params.get('namespace')}/{params.get('daemonset')}"
    if ds is None:
        return GateStatus("progressing", f"DaemonSet {name} does not exist yet")
    pods = current_pods(ds, observation.pods)
    failure = causes.pod_verdict(
        latest_pods(ds, pods, observation.revision_hash),
        observation.now,
        observation.unschedulable_grace,
        observation.exits,
    )
    if failure is not None:
        return failure
    status: Obj = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    generation = int((ds.get("metadata") or {}).get("generation") or 0)
    observed = int(status.get("observedGeneration") or 0)
    if observed < generation:
        return GateStatus(
            "progressing",
            f"DaemonSet {name}: generation {generation} not yet observed (observed {observed})",
            desired=desired,
        )
    return (
        _on_delete_rollout(name, ds, pods, desired, observation.revision_hash)
        if on_delete(params, ds)
        else _rolling(name, status, desired)
    )


def on_delete(params: Mapping[str, Any], ds: Obj) -> bool:
    """Whether the DaemonSet replaces its pods only when they are deleted (the driver's): its status then
    does not say which pods run the current template."""
    strategy = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type")
    return params.get("strategy") == "OnDelete" or strategy == "OnDelete"


def rolled_out(ds: Obj) -> bool:
    """Whether a rolling DaemonSet's status says its rollout is done, by the rule of :func:`rollout` (an
    OnDelete DaemonSet's status does not tell which pods run the current template: see :func:`on_delete`)."""
    status: Obj = ds.get("status") or {}
    generation = int((ds.get("metadata") or {}).get("generation") or 0)
    desired, updated, available, misscheduled = (
        int(status.get(key) or 0)
        for key in (
            "desiredNumberScheduled",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberMisscheduled",
        )
    )
    observed = int(status.get("observedGeneration") or 0)
    return observed >= generation and updated == available == desired and not misscheduled


def _rolling(name: str, status: Obj, desired: int) -> GateStatus:
    updated = int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    misscheduled = int(status.get("numberMisscheduled") or 0)
    ready = min(updated, available)
    if misscheduled:
        return GateStatus(
            "progressing",
            f"DaemonSet {name}: {misscheduled} pod(s) on nodes it no longer targets",
            ready=ready,
            desired=desired,
        )
    if updated == available == desired:
        return GateStatus(
            "passed",
            f"DaemonSet {name}: {desired}/{desired} pods updated and available",
            ready=desired,
            desired=desired,
        )
    return GateStatus(
        "progressing",
        f"DaemonSet {name}: {updated}/{desired} pods updated, {available}/{desired} available",
        ready=ready,
        desired=desired,
    )


def _on_delete_rollout(
    name: str, ds: Obj, pods: Sequence[Obj], desired: int, revision_hash: str | None
) -> GateStatus:
    """OnDelete (the driver): the controller replaces nothing itself, so look at the pods (facts §1.2). A pod
    is current by :func:`in_sync`, the test the driver rollout uses: after a restore the pods that never left
    the old template carry an older generation but the current revision hash."""
    generation = str((ds.get("metadata") or {}).get("generation") or "")
    current = [pod for pod in pods if in_sync(pod, ds, revision_hash)]
    good = [pod for pod in current if _phase(pod) == "Running" and pod_ready(pod)]
    if len(good) == desired and len(current) == len(pods):
        return GateStatus(
            "passed",
            f"DaemonSet {name}: {desired}/{desired} pods of the current template "
            f"(generation {generation}) ready",
            ready=desired,
            desired=desired,
        )
    stale = [pod_name(pod) for pod in pods if pod not in current]
    detail = f"; still on an older template: {', '.join(sorted(stale))}" if stale else ""
    return GateStatus(
        "progressing",
        f"DaemonSet {name}: {len(good)}/{desired} pods of the current template "
        f"(generation {generation}) ready{detail}",
        ready=len(good),
        desired=desired,
    )


def in_sync(pod: Obj, daemonset: Obj, revision_hash: str | None = None) -> bool:
    """The pod runs the DaemonSet's current template, as the DaemonSet controller decides (IsPodUpdated):
    its pod-template-generation label is the DaemonSet's generation, or its controller-revision-hash is the
    current revision's. The hash matters after a rollback: restoring the old template makes a new
    generation, but the pods that never left the old template are up to date by their hash. When the hash
    is unknown (no ControllerRevisions served, no pod of the current generation yet), the pod's containers
    are compared with the template's: what the driver container runs is what an upgrade changes.

    The one test of "current template" for the health gate and the driver rollout
    (:mod:`gpuplan.planner.driver.node` re-exports it)."""
    generation = str((daemonset.get("metadata") or {}).get("generation") or "")
    labels = _labels(pod)
    if labels.get(GENERATION_LABEL) == generation:
        return True
    if revision_hash is not None:
        return labels.get(HASH_LABEL) == revision_hash
    template = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return _containers(pod.get("spec") or {}) == _containers(template)


def _containers(pod_spec: Obj) -> list[tuple[str, ...]]:
    """What each container runs, as comparable values (the API server defaults pods and templates alike)."""
    return [
        (
            str(c.get("name")),
            str(c.get("image")),
            repr(c.get("command")),
            repr(c.get("args")),
            repr(c.get("env")),
        )
        for key in ("initContainers", "containers")
        for c in pod_spec.get(key) or ()
    ]


def current_pods(ds: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """Pods the DaemonSet owns that are not being deleted (an old owner's or terminating pods do not
    count)."""
    uid = (ds.get("metadata") or {}).get("uid")
    owned = [
        pod
        for pod in pods
        if uid is None
        or any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or ())
    ]
    return [pod for pod in owned if not (pod.get("metadata") or {}).get("deletionTimestamp")]


def latest_pods(ds: Obj, pods: Iterable[Obj], revision_hash: str | None = None) -> list[Obj]:
    """Pods of the DaemonSet's current pod template (its generation, or the current revision hash when known,
    as :func:`in_sync` judges; a pod without a generation label counts). Only these can fail the gate: an
    older template's crash-looping pod, which the controller is
    about to replace (a rollback from a broken version), is history, not the verdict on this change."""
    generation = str((ds.get("metadata") or {}).get("generation") or "")
    return [
        pod
        for pod in pods
        if _labels(pod).get(GENERATION_LABEL, generation) == generation
        or (revision_hash is not None and _labels(pod).get(HASH_LABEL) == revision_hash)
    ]


# ------------------------------------------------------------------------------------------ pod failures


def pod_failure(pods: Iterable[Obj], now: float, grace: float) -> GateStatus | None:
    """The first pod that cannot start (by pod name, so the answer is stable), as a failed status."""
    for pod in sorted(pods, key=pod_name):
        failed = container_failure(pod) or unschedulable(pod, now, grace)
        if failed is not None:
            return failed
    return None


def container_failure(pod: Obj) -> GateStatus | None:
    status: Obj = pod.get("status") or {}
    for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
        for container in status.get(key) or ():
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason in FAILING_REASONS:
                shown = f"Init:{reason}" if init else str(reason)
                node = node_of(pod)
                message = " ".join(str(waiting.get("message") or "").split())
                where = f"{pod_name(pod)} on {node}" if node else pod_name(pod)
                text = f"{where}: {shown} ({message})" if message else f"{where}: {shown}"
                return GateStatus(
                    "failed",
                    text,
                    node=node,
                    pod=pod_name(pod),
                    container=container.get("name"),
                    reason=shown,
                )
    return None


def unschedulable(pod: Obj, now: float, grace: float) -> GateStatus | None:
    condition = condition_of(pod, "PodScheduled")
    if condition is None or condition.get("status") != "False":
        return None
    since = parse_time(condition.get("lastTransitionTime"))
    if since is None or now - since <= grace:
        return None
    reason = str(condition.get("reason") or "Unschedulable")
    message = " ".join(str(condition.get("message") or "").split())
    return GateStatus(
        "failed",
        f"{pod_name(pod)}: {reason} for {now - since:.0f}s ({message})",
        pod=pod_name(pod),
        node=node_of(pod),
        reason=reason,
    )


# --------------------------------------------------------------------------------------- object helpers


def pod_name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def node_of(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def _labels(obj: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _phase(pod: Obj) -> str | None:
    phase = (pod.get("status") or {}).get("phase")
    return str(phase) if phase else None


def condition_of(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == kind), None)


def pod_ready(pod: Obj) -> bool:
    condition = condition_of(pod, "Ready")
    return condition is not None and condition.get("status") == "True"


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (``2026-11-29T18:00:42Z``) as seconds since the epoch; None if unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
