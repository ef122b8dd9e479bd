"""The write side against the simulated lab cluster (design §6): the lab stack applied through a flaky API
(10% 500/429, dropped connections) with every object created exactly once, the drift guard against a real
edit, replace of an immutable selector, dry runs, cordon seen through a watch, evictions and pod deletion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_stack import LAB_HEADER as LAB_SPEC

from gpuplan.planner.spec import model as spec
from gpuplan.providers.k8s_errors import RetryPolicy
from gpuplan.providers.kubernetes_write import FIELD_MANAGER, DriftDetected, KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory, sim_factory  # noqa: F401  (fixture)

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
HAND_DEPLOYED = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
EXPORTER = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")


class Lab:
    """A settled lab simulator and a writer for it whose retries record their delays instead of sleeping."""

    def __init__(self, sim: Simulator, folder: Path) -> None:
        self.sim = sim
        self.sleeps: list[float] = []
        self.writer = KubernetesWriter(
            kubeconfig=str(sim.write_kubeconfig(folder / "kubeconfig")),
            sleep=self.sleeps.append,
            retry=RetryPolicy(attempts=6),
        )
        self.objects = [
            dict(obj.manifest)
            for obj in spec.parse_spec(LAB_SPEC, filename="gpustack.yaml").desired_objects()
        ]

    def store_objects(self, api_version: str, kind: str, **selectors: Any) -> list[dict[str, Any]]:
        rt = self.sim.store.registry.for_kind(api_version, kind)
        assert rt is not None
        items: list[dict[str, Any]] = self.sim.store.list(rt, **selectors).items
        return items

    def install(self) -> None:
        self.writer.delete(HAND_DEPLOYED)
        self.writer.apply(NAMESPACE)
        for obj in self.objects:
            self.writer.apply(obj)


@pytest.fixture
def lab(sim_factory: SimFactory, tmp_path: Path) -> Iterator[Lab]:  # noqa: F811
    sim = sim_factory("lab", tls=False)
    assert sim.wait_idle(30), "the lab scenario did not settle"
    made = Lab(sim, tmp_path)
    yield made
    made.writer.close()


def test_the_lab_stack_applies_through_api_faults_without_duplicates(lab: Lab) -> None:
    lab.sim.set_api_faults(error_rate=0.1, codes=[500, 429], drop_rate=0.03, seed=4)
    lab.install()
    lab.sim.clear_api_faults()
    assert lab.sleeps, "the faults were injected and retried"
    managed = [
        obj
        for kind in {(o["apiVersion"], o["kind"]) for o in lab.objects}
        for obj in lab.store_objects(*kind, label_selector="gpuplan.io/stack=lab")
    ]
    names = sorted(f"{o['kind']}/{o['metadata'].get('namespace')}/{o['metadata']['name']}" for o in managed)
    wanted = sorted(
        f"{o['kind']}/{o['metadata'].get('namespace')}/{o['metadata']['name']}" for o in lab.objects
    )
    assert names == wanted  # each exactly once
    [exporter] = [o for o in managed if o["kind"] == "DaemonSet" and o["metadata"]["name"] == EXPORTER.name]
    assert {(m["manager"], m["operation"]) for m in exporter["metadata"]["managedFields"]} >= {
        (FIELD_MANAGER, "Apply")
    }
    assert lab.store_objects("apps/v1", "DaemonSet", namespace="kube-system") == []


def test_an_edit_after_the_plan_is_drift_and_is_not_overwritten(lab: Lab) -> None:
    lab.install()
    planned = lab.writer.read(EXPORTER)
    assert planned is not None
    rt = lab.sim.store.registry.for_kind("apps/v1", "DaemonSet")
    assert rt is not None
    lab.sim.store.patch(
        rt,
        "gpu-operator",
        EXPORTER.name,
        {"metadata": {"labels": {"team": "ml"}}},
        "application/merge-patch+json",
        manager="kubectl-edit",
    )
    desired = next(
        o for o in lab.objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == EXPORTER.name
    )
    with pytest.raises(DriftDetected) as caught:
        lab.writer.apply(desired, expected_rv=planned.resource_version)
    assert "kubectl-edit" in caught.value.detail
    live = lab.writer.read(EXPORTER)
    assert live is not None and live.labels["team"] == "ml"


def test_dry_run_returns_the_servers_object_without_storing_it(lab: Lab) -> None:
    lab.install()
    desired = next(
        o for o in lab.objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == EXPORTER.name
    )
    changed = {
        **desired,
        "metadata": {**desired["metadata"], "labels": {**desired["metadata"]["labels"], "tier": "gpu"}},
    }
    answer = lab.writer.apply(changed, dry_run=True)
    assert answer.labels["tier"] == "gpu"
    live = lab.writer.read(EXPORTER)
    assert live is not None and "tier" not in live.labels


def test_replace_recreates_an_object_with_a_new_selector(lab: Lab) -> None:
    lab.install()
    old = lab.writer.read(EXPORTER)
    assert old is not None
    desired = next(
        o for o in lab.objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == EXPORTER.name
    )
    spec_ = dict(desired["spec"])
    spec_["selector"] = {"matchLabels": {"app": "nvidia-dcgm-exporter", "tier": "gpu"}}
    template = dict(spec_["template"])
    template["metadata"] = {
        **template["metadata"],
        "labels": {**template["metadata"]["labels"], "tier": "gpu"},
    }
    spec_["template"] = template
    new = lab.writer.replace({**desired, "spec": spec_}, expected_rv=old.resource_version, timeout=30)
    assert new.uid != old.uid
    assert new.manifest["spec"]["selector"]["matchLabels"]["tier"] == "gpu"
    assert lab.sim.wait_for(
        lambda: all(
            pod["metadata"]["labels"].get("tier") == "gpu"
            for pod in lab.store_objects(
                "v1", "Pod", namespace="gpu-operator", label_selector="app=nvidia-dcgm-exporter"
            )
        ),
        30,
    )


def test_a_cordon_is_seen_by_a_watch_from_the_list(lab: Lab) -> None:
    nodes = lab.writer.list_nodes()
    assert [node.key.name for node in nodes] == ["lab-node"]
    lab.writer.cordon("lab-node")
    event = next(iter(lab.writer.watch("v1", "Node", resource_version=nodes.resource_version, timeout=5)))
    assert (event.type, event.object["metadata"]["name"]) == ("MODIFIED", "lab-node")
    assert event.object["spec"]["unschedulable"] is True
    uncordoned = lab.writer.cordon("lab-node", on=False)
    assert "unschedulable" not in uncordoned.manifest["spec"]


def test_evicted_and_deleted_pods_are_replaced_by_their_daemonset(lab: Lab) -> None:
    lab.install()
    assert lab.sim.wait_idle(30)
    [first] = lab.writer.list_pods(namespace="gpu-operator", label_selector="app=nvidia-dcgm-exporter")
    assert lab.writer.evict(first.key) is True
    assert lab.sim.wait_for(lambda: _exporter_pods(lab) not in ([], [first.key.name]), 30)
    [second] = lab.writer.list_pods(
        namespace="gpu-operator",
        label_selector="app=nvidia-dcgm-exporter",
        field_selector="spec.nodeName=lab-node",
    )
    assert second.key.name != first.key.name
    assert lab.writer.delete_pod(second.key) is True
    # a graceful delete leaves the pod Terminating until its kubelet removes it; only then is it gone
    assert lab.sim.wait_for(lambda: lab.writer.read(second.key) is None, 30)
    assert lab.writer.delete_pod(second.key) is False
    assert lab.sim.wait_for(lambda: _exporter_pods(lab) not in ([], [second.key.name]), 30)


def _exporter_pods(lab: Lab) -> list[str]:
    return [
        pod["metadata"]["name"]
        for pod in lab.store_objects(
            "v1", "Pod", namespace="gpu-operator", label_selector="app=nvidia-dcgm-exporter"
        )
    ]
