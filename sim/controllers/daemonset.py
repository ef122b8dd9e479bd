"""The DaemonSet controller: one pod per eligible node, rolling updates, and the status kubectl shows.

Behaves as kube-controller-manager's DaemonSet controller does (pkg/controller/daemon): placement by
``scheduling.placement``; pods named ``<ds>-<5 random chars>`` with the template's labels plus
``controller-revision-hash`` and ``pod-template-generation``, a controlling ownerReference, the automatic
tolerations, and an affinity pinning them to their node (``spec.nodeName`` is set directly: the simulator has
no scheduler, and a DaemonSet pod's placement is decided here anyway). A node that stops matching loses its pod
and a node that joins gets one; failed pods and surplus pods are deleted and replaced.

Updates: ``RollingUpdate`` with maxSurge 0 deletes old pods on at most ``maxUnavailable`` nodes at once (an int
or a percentage of the desired count, rounded up), counting nodes whose pod is missing or not yet available;
an unavailable old pod is replaced at once. ``OnDelete`` never replaces a pod until someone deletes it. As in
the real controller, the rolling step is skipped in a sync that created or deleted pods, so it always counts
what the previous step left.

Status (through the status subresource): desiredNumberScheduled, currentNumberScheduled, numberReady,
numberAvailable, numberUnavailable, updatedNumberScheduled, numberMisscheduled, observedGeneration.

Driven by the loop (``gpuplan.sim.controllers.loop``); writes with field manager ``kube-controller-manager``.
"""

from __future__ import annotations

import json
import logging
import math
import random
from datetime import datetime, timezone
from typing import Any

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers import scheduling
from gpuplan.sim.controllers.cache import Change, Key, Obj, controller_uid, key_of, resource_type
from gpuplan.sim.controllers.loop import Loop

log = logging.getLogger(__name__)

MANAGER = "kube-controller-manager"
HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
# k8s.io/apimachinery/pkg/util/rand: no vowels, no confusable characters
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MERGE = "application/merge-patch+json"
OMIT_WHEN_ZERO = frozenset({"updatedNumberScheduled", "numberAvailable", "numberUnavailable"})


def revision_hash(ds: Obj) -> str:
    """The ``controller-revision-hash`` of the DaemonSet's template: fnv-1a 32 of the revision data,
    safe-encoded, as controller.ComputeHash does (the data here is the template as canonical JSON)."""
    data = json.dumps(ds.get("spec", {}).get("template", {}), sort_keys=True, separators=(",", ":"))
    collisions = ds.get("status", {}).get("collisionCount")
    if collisions:
        data += str(collisions)
    h = 0x811C9DC5
    for byte in data.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in str(h))


def is_pod_ready(pod: Obj) -> bool:
    return bool(_condition(pod, "Ready").get("status") == "True")


def is_pod_available(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = _parse_time(_condition(pod, "Ready").get("lastTransitionTime"))
    return since is not None and (now - since).total_seconds() >= min_ready_seconds


def is_pod_updated(pod: Obj, hash_: str, generation: int | None) -> bool:
    labels = pod.get("metadata", {}).get("labels") or {}
    return labels.get(HASH_LABEL) == hash_ or (
        generation is not None and labels.get(GENERATION_LABEL) == str(generation))


def max_unavailable(ds: Obj, desired: int) -> int:
    """``rollingUpdate.maxUnavailable`` resolved against the desired count (percentages round up)."""
    rolling = ds.get("spec", {}).get("updateStrategy", {}).get("rollingUpdate") or {}
    value = rolling.get("maxUnavailable", 1)
    if isinstance(value, str) and value.endswith("%"):
        resolved = math.ceil(int(value[:-1]) * desired / 100)
    else:
        resolved = int(value)
    return max(resolved, 0)


class DaemonSetController:
    """Keeps every DaemonSet's pods and status in line with its spec and the nodes."""

    def __init__(self, loop: Loop, *, rng: random.Random | None = None) -> None:
        self.loop = loop
        self.store = loop.store
        self.rng = rng or random.Random()
        self._dirty: set[Key] = set()
        self._by_uid: dict[str, Key] = {}
        reg = loop.store.registry
        self._pods_rt = resource_type(reg, "v1", "Pod")
        self._ds_rt = resource_type(reg, "apps/v1", "DaemonSet")

    # -- events --------------------------------------------------------------------------------------
    def on_change(self, change: Change) -> None:
        if change.kind == "daemonsets":
            self._note_daemonset(change)
        elif change.kind == "pods":
            for obj in (change.old, change.new):
                owner = controller_uid(obj) if obj is not None else None
                if owner in self._by_uid:
                    self._dirty.add(self._by_uid[owner])
        elif change.kind == "nodes" and _placement_inputs(change.old) != _placement_inputs(change.new):
            self._dirty.update(self._by_uid.values())

    def _note_daemonset(self, change: Change) -> None:
        if change.new is None:
            assert change.old is not None
            self._by_uid.pop(change.old["metadata"]["uid"], None)
            self._dirty.discard(change.key)
            return
        self._by_uid[change.new["metadata"]["uid"]] = change.key
        self._dirty.add(change.key)

    def flush(self) -> bool:
        if not self._dirty:
            return False
        dirty, self._dirty = sorted(self._dirty), set()
        for key in dirty:
            ds = self.loop.cache.daemonsets.get(key)
            if ds is not None and not ds["metadata"].get("deletionTimestamp"):
                self.sync(ds)
        return True

    # -- one DaemonSet -------------------------------------------------------------------------------
    def sync(self, ds: Obj) -> None:
        nodes = sorted(self.loop.cache.nodes.values(), key=lambda n: n["metadata"]["name"])
        spec = ds.get("spec", {}).get("template", {}).get("spec", {})
        places = {n["metadata"]["name"]: scheduling.placement(spec, n) for n in nodes}
        by_node = self._pods_by_node(ds)
        creates, deletes = self._manage(places, by_node)
        for name in set(by_node) - set(places):  # pods of nodes that are gone: what PodGC would do
            deletes.extend(by_node[name])
        for node_name in creates:
            self._create_pod(ds, node_name)
        for pod in deletes:
            self._delete_pod(pod)
        if not creates and not deletes and _strategy(ds) == "RollingUpdate":
            for pod in self._rolling_update(ds, places, by_node):
                self._delete_pod(pod)
        self._update_status(ds, places, self._pods_by_node(ds))

    def _pods_by_node(self, ds: Obj) -> dict[str, list[Obj]]:
        by_node: dict[str, list[Obj]] = {}
        for pod in self.loop.cache.pods_of(ds["metadata"]["uid"]):
            node = pod.get("spec", {}).get("nodeName")
            if node and not pod["metadata"].get("deletionTimestamp"):
                by_node.setdefault(node, []).append(pod)
        for pods in by_node.values():
            pods.sort(key=_age_key)
        return by_node

    @staticmethod
    def _manage(places: dict[str, scheduling.Placement],
                by_node: dict[str, list[Obj]]) -> tuple[list[str], list[Obj]]:
        creates: list[str] = []
        deletes: list[Obj] = []
        for name, place in places.items():
            pods = by_node.get(name, [])
            if not place.should_continue:
                deletes.extend(pods)
                continue
            failed = [p for p in pods if p.get("status", {}).get("phase") == "Failed"]
            deletes.extend(failed)
            alive = [p for p in pods if p not in failed]
            deletes.extend(alive[1:])  # surplus pods: keep the oldest
            if place.should_run and not alive:
                creates.append(name)
        return creates, deletes

    def _rolling_update(self, ds: Obj, places: dict[str, scheduling.Placement],
                        by_node: dict[str, list[Obj]]) -> list[Obj]:
        hash_, generation = revision_hash(ds), ds["metadata"].get("generation")
        min_ready = int(ds.get("spec", {}).get("minReadySeconds") or 0)
        now = datetime.now(timezone.utc)
        desired = sum(1 for p in places.values() if p.should_run)
        limit = max_unavailable(ds, desired)
        unavailable = 0
        replace_now: list[Obj] = []
        candidates: list[Obj] = []
        for name, place in places.items():
            if not place.should_run:
                continue
            pods = by_node.get(name, [])
            if len(pods) != 1:
                unavailable += 1  # missing, or an old and a new pod at once
                continue
            pod = pods[0]
            available = is_pod_available(pod, min_ready, now)
            if is_pod_updated(pod, hash_, generation):
                unavailable += 0 if available else 1
            elif not available:
                replace_now.append(pod)
            elif unavailable < limit:
                candidates.append(pod)
        remaining = min(max(limit - unavailable, 0), len(candidates))
        return replace_now + candidates[:remaining]

    def _update_status(self, ds: Obj, places: dict[str, scheduling.Placement],
                       by_node: dict[str, list[Obj]]) -> None:
        hash_, generation = revision_hash(ds), ds["metadata"].get("generation")
        min_ready = int(ds.get("spec", {}).get("minReadySeconds") or 0)
        now = datetime.now(timezone.utc)
        counts = dict.fromkeys(("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                                "numberAvailable", "updatedNumberScheduled", "numberMisscheduled"), 0)
        waiting_for_min_ready = False
        for name, place in places.items():
            pods = by_node.get(name, [])
            if not place.should_run:
                counts["numberMisscheduled"] += 1 if pods else 0
                continue
            counts["desiredNumberScheduled"] += 1
            if not pods:
                continue
            pod = pods[0]
            counts["currentNumberScheduled"] += 1
            if is_pod_ready(pod):
                counts["numberReady"] += 1
                if is_pod_available(pod, min_ready, now):
                    counts["numberAvailable"] += 1
                else:
                    waiting_for_min_ready = True
            if is_pod_updated(pod, hash_, generation):
                counts["updatedNumberScheduled"] += 1
        status: dict[str, Any] = {
            **counts, "observedGeneration": generation,
            "numberUnavailable": counts["desiredNumberScheduled"] - counts["numberAvailable"]}
        if waiting_for_min_ready:  # availability changes with time alone: look again then
            key = key_of(ds)
            self.loop.call_later(min_ready, lambda: self._dirty.add(key))
        self._write_status(ds, status)

    def _write_status(self, ds: Obj, status: dict[str, Any]) -> None:
        current = ds.get("status") or {}
        if all(current.get(k, 0 if k != "observedGeneration" else None) == v for k, v in status.items()):
            return
        # as the real API serialises DaemonSetStatus: these three are omitempty, the other counters always shown
        status = {k: (None if k in OMIT_WHEN_ZERO and v == 0 else v) for k, v in status.items()}
        meta = ds["metadata"]
        try:
            updated = self.store.patch(self._ds_rt, meta["namespace"], meta["name"], {"status": status},
                                       MERGE, manager=MANAGER, subresource="status")
        except store_mod.ApiError as exc:
            if exc.code != 404:
                raise
            return
        self.loop.observe("daemonsets", updated)

    # -- writes --------------------------------------------------------------------------------------
    def _create_pod(self, ds: Obj, node_name: str) -> None:
        pod = new_pod(ds, node_name, revision_hash(ds), self._suffix())
        try:
            created = self.store.create(self._pods_rt, pod, namespace=ds["metadata"]["namespace"],
                                        manager=MANAGER)
        except store_mod.ApiError as exc:
            if exc.code in (404, 409):  # namespace going away, or a name collision: next sync retries
                log.info("daemonset %s: pod not created on %s: %s", ds["metadata"]["name"], node_name, exc)
                return
            raise
        self.loop.observe("pods", created)

    def _delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            deleted = self.store.delete(self._pods_rt, meta["namespace"], meta["name"])
        except store_mod.ApiError as exc:
            if exc.code != 404:
                raise
            deleted = pod
        if deleted.get("kind") == "Status":
            deleted = pod
        self.loop.observe("pods", deleted, deleted=True)

    def _suffix(self) -> str:
        return "".join(self.rng.choice(SAFE_ALPHABET) for _ in range(5))


def new_pod(ds: Obj, node_name: str, hash_: str, suffix: str) -> Obj:
    """The pod the controller creates for ``ds`` on ``node_name`` (controller.GetPodFromTemplate +
    the DaemonSet additions)."""
    meta = ds["metadata"]
    template = ds.get("spec", {}).get("template", {})
    tmeta = template.get("metadata") or {}
    spec = json.loads(json.dumps(template.get("spec") or {}))
    spec["nodeName"] = node_name
    spec["affinity"] = scheduling.pin_to_node(spec, node_name)
    spec["tolerations"] = scheduling.daemon_tolerations(spec)
    for field, default in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"),
                           ("schedulerName", "default-scheduler"), ("terminationGracePeriodSeconds", 30)):
        spec.setdefault(field, default)
    base = meta["name"][:58]  # generateName bases are cut so the name stays within 63 characters
    labels = {**(tmeta.get("labels") or {}), HASH_LABEL: hash_,
              GENERATION_LABEL: str(meta.get("generation", 1))}
    pod_meta: Obj = {
        "name": f"{base}-{suffix}", "generateName": f"{base}-", "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]}
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec,
            "status": {"phase": "Pending"}}


def _strategy(ds: Obj) -> str:
    return str(ds.get("spec", {}).get("updateStrategy", {}).get("type") or "RollingUpdate")


def _placement_inputs(node: Obj | None) -> Any:
    if node is None:
        return None
    return (node["metadata"].get("labels"), node.get("spec", {}).get("taints"),
            node.get("spec", {}).get("unschedulable"))


def _age_key(pod: Obj) -> tuple[str, str]:
    meta = pod["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


def _condition(pod: Obj, type_: str) -> Obj:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
