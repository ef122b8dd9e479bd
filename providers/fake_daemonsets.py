"""The DaemonSet controller and the kubelet for the in-memory fake, reduced to what the health gates read.

Opt-in (:class:`gpuplan.providers.fake.FakeKubernetes` ``controller=``, or ``reconcile()`` by hand): unit
tests of the apply walker and the driver rollout need DaemonSets whose pods appear and get Ready, which the
fake's store alone never does. One :meth:`DaemonSetController.reconcile` pass, run synchronously after each
write when enabled, does for every DaemonSet what kube-controller-manager and the kubelets would in the end:

- one pod per node the DaemonSet runs on (``runs_on``: by default the template's ``nodeName`` and
  ``nodeSelector``, no affinity nor taints; a test that needs the real predicate passes
  ``gpuplan.planner.placement.runs_on``), labelled with the template's labels, ``pod-template-generation``
  and ``controller-revision-hash``, owned by the DaemonSet;
- a RollingUpdate DaemonSet's pods of an older template replaced at once; an OnDelete one's left alone
  until someone deletes them (the driver's rollout does, node by node);
- pods on nodes the DaemonSet no longer runs on, and pods whose DaemonSet is gone, deleted;
- each pod Running and Ready, unless ``failing`` names a waiting reason for its template (a crash-looping or
  unpullable image): then not Ready, with that reason on its containers, as the kubelet reports it;
- the DaemonSet's ``status`` (desired, current, ready, available, updated, misscheduled, observedGeneration)
  as the controller writes it.

It writes through the ``Store`` it is given (the fake's own), so every change has a resourceVersion and a
watch event like any other write. Nothing else of a cluster happens: no node effects (a test sets a node's
allocatable or labels itself), no ControllerRevisions, no scheduling of other pods.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplan.providers.snapshot import ObjectKey

Obj = Mapping[str, Any]
GENERATION_LABEL = "pod-template-generation"
HASH_LABEL = "controller-revision-hash"


class Store(Protocol):
    """What the controller reads and writes: the fake's objects, with server bookkeeping on each write."""

    def objects(self, api_version: str, kind: str) -> list[dict[str, Any]]: ...

    def store(self, manifest: Mapping[str, Any]) -> dict[str, Any]: ...

    def discard(self, key: ObjectKey) -> None: ...


def selector_placement(pod_spec: Obj, node: Obj) -> bool:
    """The template's ``nodeName`` and ``nodeSelector`` hold for ``node`` (no affinity, no taints)."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if pod_spec.get("nodeName") and pod_spec.get("nodeName") != metadata.get("name"):
        return False
    return all(labels.get(key) == value for key, value in (pod_spec.get("nodeSelector") or {}).items())


def never_failing(pod_spec: Obj) -> str | None:
    return None


@dataclass
class DaemonSetController:
    """``runs_on(pod_spec, node)``: where the pods go; ``failing(pod_spec)``: the waiting reason of the
    containers of a template that cannot start (``CrashLoopBackOff``, ``ImagePullBackOff``), None when they
    start."""

    runs_on: Callable[[Obj, Obj], bool] = selector_placement
    failing: Callable[[Obj], str | None] = never_failing
    _made: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    def reconcile(self, store: Store) -> None:
        daemonsets = store.objects("apps/v1", "DaemonSet")
        nodes = store.objects("v1", "Node")
        pods = store.objects("v1", "Pod")
        owners = {str(ds["metadata"]["uid"]) for ds in daemonsets}
        for pod in pods:  # the garbage collector: a pod whose DaemonSet is gone goes too
            owner = _daemonset_owner(pod)
            if owner is not None and owner not in owners:
                store.discard(ObjectKey.of(pod))
        for daemonset in daemonsets:
            self._reconcile_one(store, daemonset, nodes, [p for p in pods if _owned_by(p, daemonset)])

    def _reconcile_one(
        self, store: Store, daemonset: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> None:
        template = (daemonset.get("spec") or {}).get("template") or {}
        pod_spec = template.get("spec") or {}
        targeted = [node for node in nodes if self.runs_on(pod_spec, node)]
        names = {str(node["metadata"]["name"]) for node in targeted}
        generation = str(daemonset["metadata"].get("generation") or 1)
        on_delete = ((daemonset.get("spec") or {}).get("updateStrategy") or {}).get("type") == "OnDelete"
        by_node: dict[str, dict[str, Any]] = {}
        for pod in pods:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            stale = _labels(pod).get(GENERATION_LABEL) != generation and not on_delete
            if node not in names or node in by_node or stale:
                store.discard(ObjectKey.of(pod))
            else:
                by_node[node] = pod
        for node in sorted(names - set(by_node)):
            by_node[node] = store.store(self._pod(daemonset, node, generation))
        self._write_status(store, daemonset, list(by_node.values()), generation)

    def _pod(self, daemonset: Obj, node: str, generation: str) -> dict[str, Any]:
        template = (daemonset.get("spec") or {}).get("template") or {}
        metadata = daemonset["metadata"]
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            GENERATION_LABEL: generation,
            HASH_LABEL: template_hash(template),
        }
        pod_spec = {**(template.get("spec") or {}), "nodeName": node}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{metadata['name']}-{_suffix(str(metadata['uid']), node, next(self._made))}",
                "namespace": metadata.get("namespace"),
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
            "status": self._pod_status(pod_spec),
        }

    def _pod_status(self, pod_spec: Obj) -> dict[str, Any]:
        reason = self.failing(pod_spec)
        ready = {"type": "Ready", "status": "False" if reason else "True"}
        containers = [
            {
                "name": str(container.get("name")),
                "image": container.get("image"),
                "ready": reason is None,
                "state": {"waiting": {"reason": reason}} if reason else {"running": {}},
            }
            for container in pod_spec.get("containers") or ()
        ]
        phase = "Pending" if reason == "ImagePullBackOff" else "Running"
        return {"phase": phase, "conditions": [ready], "containerStatuses": containers}

    @staticmethod
    def _write_status(
        store: Store, daemonset: dict[str, Any], pods: list[dict[str, Any]], generation: str
    ) -> None:
        ready = [pod for pod in pods if _ready(pod)]
        updated = [pod for pod in pods if _labels(pod).get(GENERATION_LABEL) == generation]
        status = {
            "currentNumberScheduled": len(pods),
            "desiredNumberScheduled": len(pods),
            "numberMisscheduled": 0,
            "numberReady": len(ready),
            "numberAvailable": len(ready),
            "numberUnavailable": len(pods) - len(ready),
            "updatedNumberScheduled": len(updated),
            "observedGeneration": int(generation),
        }
        if daemonset.get("status") != status:
            store.store({**daemonset, "status": status})


def template_hash(template: Obj) -> str:
    """A stable stand-in for the controller's revision hash: the same template, the same hash."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _suffix(uid: str, node: str, serial: int) -> str:
    # a new name for every pod made, as the controller's generateName gives one (a restarted pod is another)
    return hashlib.sha256(f"{uid}/{node}/{serial}".encode()).hexdigest()[:5]


def _labels(obj: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _daemonset_owner(pod: Obj) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return next((str(ref.get("uid")) for ref in refs if ref.get("kind") == "DaemonSet"), None)


def _owned_by(pod: Obj, daemonset: Obj) -> bool:
    return _daemonset_owner(pod) == str(daemonset["metadata"]["uid"])
