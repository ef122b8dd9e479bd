"""The stack's pods, found through its DaemonSets (planner.drift.pods.stack_pods): a pod of the operator's
pod-template shape carries no gpuplan label, so its DaemonSet's ``app`` selector lists it and its owner uid
names the component."""

from __future__ import annotations

from typing import Any

from gpuplan.planner.drift import pods
from gpuplan.providers.snapshot import ClusterSnapshot, LiveObject, ObjectKey


def daemonset(name: str, component: str, uid: str, stack: str = "lab") -> LiveObject:
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "uid": uid,
            "labels": {"gpuplan.io/component": component, "gpuplan.io/stack": stack},
        },
        "spec": {"selector": {"matchLabels": {"app": name}}},
    }
    return LiveObject(ObjectKey.of(manifest), manifest)


def pod(name: str, owner: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "labels": labels,
            "ownerReferences": [{"uid": owner}],
        },
        "spec": {"nodeName": "lab-node", "containers": [{"name": "c", "image": "i"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def snapshot(*objects: LiveObject) -> ClusterSnapshot:
    return ClusterSnapshot({o.key: o for o in objects}, (), (), "v1.34.1", 0)


def test_the_daemonsets_app_selectors_list_and_their_uids_name_the_pods() -> None:
    found = pods.stack_pods(
        snapshot(
            daemonset("nvidia-device-plugin-daemonset", "devicePlugin", "u1"),
            daemonset("gpu-feature-discovery", "gfd", "u2"),
            daemonset("nvidia-dcgm-exporter", "dcgmExporter", "u3", stack="other"),
        ),
        "lab",
    )
    assert found.selector == "app in (gpu-feature-discovery,nvidia-device-plugin-daemonset)"
    theirs = pod("p", "u1", {"app": "nvidia-device-plugin-daemonset"})  # no gpuplan label
    facts = pods.pod_facts(theirs, now=0.0, components=found.components)
    assert facts is not None and facts.component == "devicePlugin"
    # a same-named pod another DaemonSet owns (the operator's, another stack's) is not the stack's
    other = pod("q", "u3", {"app": "nvidia-dcgm-exporter", "gpuplan.io/component": "dcgmExporter"})
    assert pods.pod_facts(other, now=0.0, components=found.components) is None


def test_without_a_daemonset_the_stack_label_lists_them() -> None:
    assert pods.stack_pods(snapshot(), "lab").selector == "gpuplan.io/stack=lab"
