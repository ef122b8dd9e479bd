"""kube-controller-manager's disruption controller (``pkg/controller/disruption/disruption.go``): the status
of every policy/v1 PodDisruptionBudget, which the eviction API (:mod:`gpuplan.sim.api.eviction`) reads.

A budget is synced when it changes and when a pod its selector matches changes (``getPdbForPod``: the first
matching budget only; a pod matching several gets a ``MultiplePodDisruptionBudgets`` Warning). A sync
(``trySync``):

- the pods of the budget's namespace its selector matches (a null selector: none, an empty one: all);
- expectedPods and desiredHealthy (``getExpectedPodCount``): an integer minAvailable is desiredHealthy and the
  number of pods is expectedPods; a percentage minAvailable or any maxUnavailable takes expectedPods from the
  pods' controllers (``getExpectedScale``): each controller counted once, its scale's replicas (a
  Deployment's ``spec.replicas``, a custom resource's ``specReplicasPath``); percentages round up
  (``GetScaledValueFromIntOrPercent(..., true)``); desiredHealthy is expected - maxUnavailable, at least 0.
  A pod without a controller is unmanaged (an ``UnmanagedPods`` Warning, not an error). A controller of a kind
  without a scale subresource (a DaemonSet, a Job) is an error: ``daemonsets.apps does not implement the
  scale subresource``, as a real cluster answers for DaemonSet-owned pods; so is a controller that cannot be
  found (``found no controllers for pod "x"``). ReplicationControllers, ReplicaSets and StatefulSets are not
  served here: a pod naming one finds no controller;
- ``disruptedPods`` (``buildDisruptedPodMap``): the pods the eviction API entered that are neither gone nor
  terminating, until ``DeletionTimeout`` (2 minutes) after their entry (then a ``NotDeleted`` Warning on the
  pod, worded as the real one, namespace twice); the budget is synced again when the earliest entry
  expires (a background loop timer);
- currentHealthy: pods Ready, not terminating, not in disruptedPods; disruptionsAllowed = currentHealthy -
  desiredHealthy, 0 when negative or when no pod is expected;
- the status (observedGeneration, the counts, disruptedPods, the ``DisruptionAllowed`` condition:
  True/``SufficientPods`` or False/``InsufficientPods``) is written through the status subresource as
  ``kube-controller-manager`` when it differs.

An error of the sync (``failSafe``): disruptionsAllowed 0 and DisruptionAllowed False with reason
``SyncFailed`` and the error as message, the rest of the status kept, and a
``CalculateExpectedPodCountFailed`` Warning. As in the real controller, the budget is not retried until it
or one of its pods changes. A conflict on the status write (the eviction API wrote meanwhile) reads the
budget afresh and syncs again.
Events come from ``controllermanager``; ``NoPods`` (Normal) when the selector matches no pod.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuplan.sim.api import eviction
from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.objects import rfc3339
from gpuplan.sim.api.registry import BUILTIN, ResourceType
from gpuplan.sim.controllers.cache import Change, Key, Obj, key_of, resource_type
from gpuplan.sim.controllers.events import NORMAL, WARNING, Source
from gpuplan.sim.controllers.loop import Loop, Timer

KIND = "poddisruptionbudgets"
MANAGER = "kube-controller-manager"
SOURCE = Source("controllermanager")
DELETION_TIMEOUT = timedelta(minutes=2)
"""How long a pod the eviction API entered in disruptedPods is counted as going (DeletionTimeout)."""
# ReplicationController, ReplicaSet, StatefulSet: the typed finders' kinds, which this simulator does not
# serve; their listers would find nothing, and the scale finder's lookup of them answers NotFound
_TYPED_FINDERS = frozenset(
    {
        ("", "ReplicationController"),
        ("apps", "ReplicaSet"),
        ("extensions", "ReplicaSet"),
        ("apps", "StatefulSet"),
    }
)


class SyncError(Exception):
    """What makes a sync fail (the message is the SyncFailed condition's)."""


class DisruptionController:
    """Keeps every PodDisruptionBudget's status; a loop handler."""

    def __init__(self, loop: Loop, *, clock: Callable[[], datetime] | None = None) -> None:
        """``clock``: the wall time disruptedPods entries are compared with (the store's, which stamps them;
        the wall clock by default)."""
        self.loop = loop
        self.store = loop.store
        self.clock = clock or (lambda: datetime.now(UTC))
        self._rt = resource_type(loop.store.registry, "policy/v1", "PodDisruptionBudget")
        self._dirty: set[Key] = set()
        self._notes: list[tuple[Obj, str]] = []  # pods matching several budgets: their Warning, at the flush
        self._rechecks: dict[Key, tuple[datetime, Timer]] = {}

    # -- handler ------------------------------------------------------------------------------------------
    def on_change(self, change: Change) -> None:
        if change.kind == KIND:
            self._dirty.add(change.key)
            if change.new is None:
                self._forget(change.key)
        elif change.kind == "pods":
            # addPod/updatePod look at the pod as it is now, deletePod at its last state
            pod = change.new if change.new is not None else change.old
            if pod is not None:
                self._enqueue_for(pod)

    def flush(self) -> bool:
        if not self._dirty and not self._notes:
            return False
        notes, self._notes = self._notes, []
        for pod, message in notes:
            self.loop.events.record(pod, WARNING, "MultiplePodDisruptionBudgets", message, SOURCE)
        dirty, self._dirty = sorted(self._dirty), set()
        for key in dirty:
            pdb = self.loop.cache.objects[KIND].get(key)
            if pdb is not None:
                self._sync(pdb)
        return True

    # -- queueing -----------------------------------------------------------------------------------------
    def _enqueue_for(self, pod: Obj) -> None:
        """getPdbForPod: the first budget matching the pod (the lister's order: by name here)."""
        if not self.loop.cache.objects[KIND]:
            return  # a fleet's pod changes cost nothing while no budget exists
        namespace = (pod.get("metadata") or {}).get("namespace") or ""
        budgets = [pdb for key, pdb in sorted(self.loop.cache.objects[KIND].items()) if key[0] == namespace]
        matching = eviction.budgets_for(pod, budgets)
        if not matching:
            return
        if len(matching) > 1:
            chosen, name = matching[0]["metadata"]["name"], pod["metadata"]["name"]
            message = f'Pod "{namespace}"/"{name}" matches multiple PodDisruptionBudgets.  '
            self._notes.append((pod, message + f'Chose "{chosen}" arbitrarily.'))
        self._dirty.add(key_of(matching[0]))

    def _recheck_at(self, key: Key, due: datetime, now: datetime) -> None:
        """enqueuePdbForRecheck: one timer per budget, for its earliest due time."""
        known = self._rechecks.get(key)
        if known is not None:
            if known[0] <= due:
                return
            known[1].cancel()

        def fire() -> None:
            self._rechecks.pop(key, None)
            self._dirty.add(key)

        timer = self.loop.call_later((due - now).total_seconds(), fire, settling=False)
        self._rechecks[key] = (due, timer)

    def _forget(self, key: Key) -> None:
        known = self._rechecks.pop(key, None)
        if known is not None:
            known[1].cancel()

    # -- sync ---------------------------------------------------------------------------------------------
    def _sync(self, pdb: Obj) -> None:
        try:
            self._try_sync(pdb)
        except SyncError as error:
            self._write(pdb, _fail_safe(pdb, str(error), rfc3339(self.clock())))
        except store_mod.ApiError as error:
            if error.code != 409:
                raise

    def _try_sync(self, pdb: Obj) -> None:
        pods = self._pods_for(pdb)
        if not pods:
            self.loop.events.record(pdb, NORMAL, "NoPods", "No matching pods found", SOURCE)
        try:
            expected, desired, unmanaged = self._expected_pod_count(pdb, pods)
        except SyncError as error:
            message = f"Failed to calculate the number of expected pods: {error}"
            self.loop.events.record(pdb, WARNING, "CalculateExpectedPodCountFailed", message, SOURCE)
            raise
        if unmanaged:
            self.loop.events.record(pdb, WARNING, "UnmanagedPods", _unmanaged_message(pdb), SOURCE)
        now = self.clock()
        disrupted, recheck = self._disrupted_pod_map(pods, pdb, now)
        healthy = _count_healthy(pods, disrupted, now)
        self._write(pdb, _status(pdb, healthy, desired, expected, disrupted, rfc3339(now)))
        if recheck is not None:
            self._recheck_at(key_of(pdb), recheck, now)

    def _write(self, pdb: Obj, status: Obj | None) -> None:
        """The status through the status subresource (None: already current); on a conflict the budget is
        read afresh and synced again."""
        if status is None:
            return
        meta = pdb["metadata"]
        try:
            updated = self.store.update(
                self._rt,
                {**pdb, "status": status},
                namespace=meta["namespace"],
                name=meta["name"],
                manager=MANAGER,
                subresource="status",
            )
        except store_mod.ApiError as error:
            if error.code == 409:
                self.loop.observe(KIND, self.store.get(self._rt, meta["namespace"], meta["name"]))
                self._dirty.add(key_of(pdb))
                return
            if error.code == 404:
                return
            raise
        self.loop.observe(KIND, updated)

    def _pods_for(self, pdb: Obj) -> list[Obj]:
        namespace = pdb["metadata"]["namespace"]
        found = [
            (key, pod)
            for key, pod in self.loop.cache.pods.items()
            if key[0] == namespace and eviction.selects(pdb, pod)
        ]
        return [pod for _, pod in sorted(found, key=lambda item: item[0])]

    def _expected_pod_count(self, pdb: Obj, pods: list[Obj]) -> tuple[int, int, list[str]]:
        """getExpectedPodCount: (expectedPods, desiredHealthy, unmanaged pods)."""
        spec = pdb.get("spec") or {}
        if spec.get("maxUnavailable") is not None:
            expected, unmanaged = self._expected_scale(pods)
            unavailable = _scaled(spec["maxUnavailable"], expected)
            return expected, max(0, expected - unavailable), unmanaged
        minimum = spec.get("minAvailable")
        if isinstance(minimum, int):
            return len(pods), minimum, []
        if isinstance(minimum, str):
            expected, unmanaged = self._expected_scale(pods)
            return expected, _scaled(minimum, expected), unmanaged
        return 0, 0, []

    def _expected_scale(self, pods: list[Obj]) -> tuple[int, list[str]]:
        """getExpectedScale: the replicas of the pods' controllers, each counted once."""
        scales: dict[str, int] = {}
        unmanaged: list[str] = []
        for pod in pods:
            ref = _controller_ref(pod)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            if ref.get("uid") in scales:
                continue
            found = self._scale_of(ref, pod["metadata"]["namespace"])
            if found is None:
                raise SyncError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            scales[found[0]] = found[1]
        return sum(scales.values()), unmanaged

    def _scale_of(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        """The finders: (uid, replicas) of the controller ``ref`` names, None when there is none."""
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        group = api_version.rpartition("/")[0]
        if (group, kind) in _TYPED_FINDERS:
            return None
        rt = self.store.registry.for_kind(api_version, kind)
        if rt is None:
            raise SyncError(f'no matches for kind "{kind}" in version "{api_version}"')
        if "scale" not in rt.subresources:
            raise SyncError(f"{rt.group_resource} does not implement the scale subresource")
        try:
            owner = self.store.get(rt, namespace if rt.namespaced else None, str(ref.get("name") or ""))
        except store_mod.ApiError as error:
            if error.code == 404:
                return None
            raise
        uid = owner["metadata"]["uid"]
        if uid != ref.get("uid"):
            return None
        return uid, self._spec_replicas(rt, owner)

    def _spec_replicas(self, rt: ResourceType, owner: Obj) -> int:
        """What the scale subresource reads: ``spec.replicas``, or a custom resource's specReplicasPath."""
        path = ".spec.replicas"
        if rt not in BUILTIN:
            crds = resource_type(self.store.registry, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
            crd = self.store.get(crds, None, f"{rt.plural}.{rt.group}")
            for version in (crd.get("spec") or {}).get("versions") or []:
                if version.get("name") == rt.version:
                    scale = (version.get("subresources") or {}).get("scale") or {}
                    path = str(scale.get("specReplicasPath") or path)
        value: Any = owner
        for part in path.strip(".").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value if isinstance(value, int) else 0

    def _disrupted_pod_map(
        self, pods: list[Obj], pdb: Obj, now: datetime
    ) -> tuple[dict[str, str], datetime | None]:
        """buildDisruptedPodMap: the entries still pending, and when the earliest of them expires."""
        entered = (pdb.get("status") or {}).get("disruptedPods") or {}
        kept: dict[str, str] = {}
        recheck: datetime | None = None
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or name not in entered:
                continue
            expected = _parse(entered[name]) + DELETION_TIMEOUT
            if expected < now:
                namespace = pdb["metadata"]["namespace"]
                message = f"Pod was expected by PDB {namespace}/{namespace} to be deleted but it wasn't"
                self.loop.events.record(pod, WARNING, "NotDeleted", message, SOURCE)
            else:
                recheck = expected if recheck is None else min(recheck, expected)
                kept[name] = entered[name]
        return kept, recheck


def _count_healthy(pods: list[Obj], disrupted: dict[str, str], now: datetime) -> int:
    healthy = 0
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if name in disrupted and _parse(disrupted[name]) + DELETION_TIMEOUT > now:
            continue
        healthy += eviction.is_pod_ready(pod)
    return healthy


def _status(
    pdb: Obj, healthy: int, desired: int, expected: int, disrupted: dict[str, str], now: str
) -> Obj | None:
    """updatePdbStatus: the new status, or None when the stored one is current."""
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    old = pdb.get("status") or {}
    generation = int(pdb["metadata"].get("generation") or 0)
    counts = {
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if (
        all(old.get(k) == v for k, v in counts.items())
        and (old.get("disruptedPods") or {}) == disrupted
        and old.get("observedGeneration") == generation
        and _conditions_up_to_date(old, generation)
    ):
        return None
    status: Obj = {"observedGeneration": generation}
    if disrupted:
        status["disruptedPods"] = disrupted
    status.update(counts)
    if old.get("conditions"):
        status["conditions"] = old["conditions"]
    eviction.set_disruption_allowed(status, now)
    return status


def _conditions_up_to_date(status: Obj, generation: int) -> bool:
    """pdbhelper.ConditionsAreUpToDate."""
    found = next((c for c in status.get("conditions") or [] if c.get("type") == eviction.CONDITION), None)
    if found is None or status.get("observedGeneration") != generation:
        return False
    wanted = (
        ("True", "SufficientPods")
        if int(status.get("disruptionsAllowed") or 0) > 0
        else ("False", "InsufficientPods")
    )
    return (found.get("status"), found.get("reason")) == wanted


def _fail_safe(pdb: Obj, message: str, now: str) -> Obj:
    """failSafe: no disruption allowed, DisruptionAllowed False/SyncFailed, the rest of the status kept."""
    status = dict(pdb.get("status") or {})
    status["disruptionsAllowed"] = 0
    observed = int(status.get("observedGeneration") or 0)
    condition = {
        "type": eviction.CONDITION,
        "status": "False",
        "reason": "SyncFailed",
        "message": message,
        "observedGeneration": observed,
    }
    eviction.set_condition(status, condition, now)
    return status


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true) of a validated value."""
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def _controller_ref(pod: Obj) -> Obj | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _unmanaged_message(pdb: Obj) -> str:
    selector = _go_selector(pdb["spec"].get("selector"))
    return (
        f"Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. "
        "As a result, the status of the PDB cannot be calculated correctly, which may result in undefined "
        'behavior. To account for these pods please set ".spec.minAvailable" field of the PDB to an '
        "integer value."
    )


def _go_selector(selector: Obj | None) -> str:
    """``%v`` of a *metav1.LabelSelector (its generated String())."""
    if selector is None:
        return "nil"
    labels = "".join(f"{k}: {v}," for k, v in sorted((selector.get("matchLabels") or {}).items()))
    expressions = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[{' '.join(e.get('values') or [])}],}},"
        for e in selector.get("matchExpressions") or []
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
