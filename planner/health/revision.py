"""Which template revision a DaemonSet's pods run: the controller-revision-hash the health gates compare.

The health waiter (:mod:`gpuplan.planner.health.wait`) asks it to tell pods of the current template from
older ones, and the driver rollout (:mod:`gpuplan.planner.driver`) to know which driver pod to restart.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.planner.health.gates import GENERATION_LABEL, HASH_LABEL, Obj
from gpuplan.providers.protocols import Reader


def current_hash(writer: Reader, daemonset: Obj) -> str | None:
    """The controller-revision-hash of the DaemonSet's current template: from its newest ControllerRevision
    when the cluster serves them, else from a pod the controller created at the current generation."""
    metadata = daemonset.get("metadata") or {}
    namespace, uid = metadata.get("namespace"), metadata.get("uid")
    selector = match_labels(daemonset)
    revisions = [
        r.manifest
        for r in writer.list_objects(
            "apps/v1", "ControllerRevision", namespace=namespace, label_selector=selector
        )
        if any(ref.get("uid") == uid for ref in r.metadata.get("ownerReferences") or ())
    ]
    if revisions:
        newest = max(revisions, key=lambda r: int(r.get("revision") or 0))
        found = labels_of(newest).get(HASH_LABEL)
        if found:
            return str(found)
    generation = str(metadata.get("generation") or "")
    for pod in writer.list_pods(namespace=namespace, label_selector=selector):
        owned = any(ref.get("uid") == uid for ref in pod.metadata.get("ownerReferences") or ())
        if owned and pod.labels.get(GENERATION_LABEL) == generation and pod.labels.get(HASH_LABEL):
            return str(pod.labels[HASH_LABEL])
    return None


def match_labels(daemonset: Obj) -> str:
    """The DaemonSet's pod selector as a label selector string."""
    match: Mapping[str, str] = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(match.items()))


def labels_of(obj: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels
