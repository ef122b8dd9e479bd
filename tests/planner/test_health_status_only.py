"""Within an apply a rolling DaemonSet's gate reads its status alone while the rollout moves, as `kubectl
rollout status` does, and reads its pods and the nodes once the status says done or a Warning Event names
one of its pods, and once when its time runs out, to say why."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.follow import ApplyCaches
from gpuplan.planner.health.wait import GateView, WaitOptions, wait
from gpuplan.providers.protocols import Listing, WatchEvent
from gpuplan.providers.snapshot import LiveObject, ObjectKey

PLUGIN = "nvidia-device-plugin-daemonset"
ROLLOUT = HealthCheck("rollout", {"daemonset": PLUGIN, "namespace": "gpu-operator", "timeoutSeconds": 60})
ALLOCATABLE = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "daemonset": PLUGIN})


def daemonset(available: int, desired: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PLUGIN, "namespace": "gpu-operator", "generation": 1, "uid": "u1"},
        "spec": {"selector": {"matchLabels": {"app": PLUGIN}}},
        "status": {
            "observedGeneration": 1,
            "desiredNumberScheduled": desired,
            "updatedNumberScheduled": desired,
            "numberAvailable": available,
            "numberReady": available,
        },
    }


def pulling(name: str) -> dict[str, Any]:
    """A pod of the DaemonSet whose image tag does not exist."""
    waiting = {"reason": "ErrImagePull", "message": 'failed to pull "x:v9": not found'}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "uid": name,
            "labels": {"app": PLUGIN, "pod-template-generation": "1"},
            "ownerReferences": [{"uid": "u1", "controller": True}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "plugin", "image": "x:v9"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "plugin", "ready": False, "state": {"waiting": waiting}}],
        },
    }


def gpu_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "1"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def warning(pod_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod_name}.1", "namespace": "gpu-operator", "resourceVersion": "9"},
        "type": "Warning",
        "reason": "Failed",
        "involvedObject": {"kind": "Pod", "namespace": "gpu-operator", "name": pod_name},
    }


@dataclass
class Cluster:
    """Lists what it holds (counted by kind); a watch delivers the Events queued for it, then stays open
    until the test ends."""

    ds: dict[str, Any]
    pods: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    queued_warnings: list[dict[str, Any]] = field(default_factory=list)
    lists: list[str] = field(default_factory=list)
    delivered: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def read(self, key: ObjectKey) -> LiveObject | None:
        return LiveObject.from_manifest(self.ds)

    def list_objects(self, api_version: str, kind: str, **selectors: Any) -> Listing:
        self.lists.append(kind)
        held = {"Pod": self.pods, "Node": self.nodes, "DaemonSet": [self.ds]}.get(kind, [])
        return Listing(tuple(LiveObject.from_manifest(obj) for obj in held), "5")

    def watch(self, api_version: str, kind: str, **selectors: Any) -> Iterator[WatchEvent]:
        if kind == "Event":
            while self.queued_warnings:
                yield WatchEvent("ADDED", self.queued_warnings.pop(0))
            self.delivered.set()
        self.done.wait(5)


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


def view_of(cluster: Cluster, clock: list[float], *checks: HealthCheck) -> tuple[GateView, ApplyCaches]:
    caches = ApplyCaches(lambda: cluster)  # type: ignore[arg-type, return-value]
    options = WaitOptions(caches=caches, clock=lambda: clock[0], wall=lambda: 1_000_000.0)
    return GateView(checks or (ROLLOUT,), cluster, options), caches  # type: ignore[arg-type]


def test_a_moving_rollout_is_judged_by_its_status_alone(clock: list[float]) -> None:
    cluster = Cluster(daemonset(available=1), pods=[pulling("p-1")], nodes=[gpu_node("n1")])
    view, caches = view_of(cluster, clock, ROLLOUT, ALLOCATABLE)
    try:
        status = view.judge()
        assert (status.state, status.ready, status.desired) == ("progressing", 1, 3)
        cluster.ds = daemonset(available=2)
        clock[0] += 600  # however long the status takes to move
        assert view.judge().ready == 2
        assert "Pod" not in cluster.lists and "Node" not in cluster.lists
    finally:
        cluster.done.set()
        caches.close()


def test_a_rollout_that_runs_out_of_time_reads_its_pods_once_to_say_why() -> None:
    """No warning came (the status alone said "not yet" all along): the failure names the pod's cause."""
    cluster = Cluster(daemonset(available=1), pods=[pulling(f"{PLUGIN}-a")], nodes=[gpu_node("n1")])
    ticks = iter(range(0, 10_000))
    caches = ApplyCaches(lambda: cluster)  # type: ignore[arg-type, return-value]
    options = WaitOptions(caches=caches, clock=lambda: float(next(ticks)), poll_seconds=0.01)
    try:
        status = wait([ROLLOUT], cluster, 20, options=options)  # type: ignore[arg-type]
        assert status.state == "failed" and "not found" in status.message, status
        assert cluster.lists.count("Pod") == 1
    finally:
        cluster.done.set()
        caches.close()


def test_a_warning_about_one_of_its_pods_reads_them_at_once(clock: list[float]) -> None:
    cluster = Cluster(daemonset(available=1), pods=[pulling(f"{PLUGIN}-a")], nodes=[gpu_node("n1")])
    view, caches = view_of(cluster, clock)
    try:
        cluster.queued_warnings.append(warning("nvidia-dcgm-exporter-x"))
        assert view.judge().state == "progressing"
        assert cluster.delivered.wait(5)
        assert view.judge().state == "progressing", "a warning about another DaemonSet's pod"
        assert "Pod" not in cluster.lists
        cluster.queued_warnings.append(warning(f"{PLUGIN}-a"))
        cluster.delivered.clear()
        cluster.done.set()  # the open window ends; the next one delivers the new warning
        assert cluster.delivered.wait(5)
        cluster.done.clear()
        status = view.judge()
        assert status.state == "failed" and "not found" in status.message, status
    finally:
        cluster.done.set()
        caches.close()


def test_a_finished_rollout_has_its_nodes_judged_without_reading_its_pods(clock: list[float]) -> None:
    cluster = Cluster(daemonset(available=1, desired=1), nodes=[gpu_node("n1")])
    view, caches = view_of(cluster, clock, ROLLOUT, ALLOCATABLE)
    try:
        status = view.judge()
        assert status.state == "passed", status
        assert "Node" in cluster.lists and "Pod" not in cluster.lists
    finally:
        cluster.done.set()
        caches.close()


def test_an_on_delete_rollout_is_judged_by_its_pods_whatever_its_status_says(clock: list[float]) -> None:
    """The driver's DaemonSet replaces no pod itself: its status counts the old template's pods too."""
    driver = {**daemonset(available=1, desired=1), "spec": {"updateStrategy": {"type": "OnDelete"}}}
    driver["spec"]["selector"] = {"matchLabels": {"app": PLUGIN}}
    old = pulling(f"{PLUGIN}-old")
    old["metadata"]["labels"]["pod-template-generation"] = "0"
    old["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cluster = Cluster(driver, pods=[old], nodes=[gpu_node("n1")])
    rollout = HealthCheck("rollout", {**ROLLOUT.params, "strategy": "OnDelete"})
    view, caches = view_of(cluster, clock, rollout)
    try:
        status = view.judge()
        assert (status.state, status.ready, status.desired) == ("progressing", 0, 1), status
        assert "Pod" in cluster.lists
    finally:
        cluster.done.set()
        caches.close()


READY = HealthCheck("validator-ready", {"selector": f"app={PLUGIN}", "namespace": "gpu-operator"})


def test_the_validators_are_counted_by_their_status_when_it_counts_one_per_node(clock: list[float]) -> None:
    cluster = Cluster(daemonset(available=2, desired=2), nodes=[gpu_node("n1"), gpu_node("n2")])
    view, caches = view_of(cluster, clock, ROLLOUT, READY)
    try:
        status = view.judge()
        assert (status.state, status.ready, status.desired) == ("passed", 2, 2), status
        assert "(the DaemonSet's status)" in status.message
        assert "Pod" not in cluster.lists
    finally:
        cluster.done.set()
        caches.close()


def test_a_status_that_counts_other_nodes_than_the_gate_targets_has_the_pods_read(clock: list[float]) -> None:
    """The status says done for one node, the gate targets two: a node without a validator is named."""
    cluster = Cluster(daemonset(available=1, desired=1), nodes=[gpu_node("n1"), gpu_node("n2")])
    view, caches = view_of(cluster, clock, ROLLOUT, READY)
    try:
        status = view.judge()
        assert status.state == "progressing" and "no validator pod runs there" in status.message, status
        assert "Pod" in cluster.lists
    finally:
        cluster.done.set()
        caches.close()


METRICS = HealthCheck(
    "dcgm-metrics",
    {"metric": "DCGM_FI_DEV_GPU_TEMP", "port": 9400, "namespace": "gpu-operator", "sampleNodes": 3},
)


def exporter(node: str) -> dict[str, Any]:
    pod = pulling(f"{PLUGIN}-{node}")
    pod["spec"]["nodeName"] = node
    pod["status"] = {
        "phase": "Running",
        "podIP": "10.0.0.1",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "containerStatuses": [{"name": "plugin", "ready": True, "restartCount": 0, "state": {"running": {}}}],
    }
    return pod


@dataclass
class ExporterCluster(Cluster):
    """Lists pods by the ``spec.nodeName`` field selector as an API server does, and serves each exporter's
    metrics through the pod proxy: one GPU sample each, none on the nodes of ``silent``."""

    silent: set[str] = field(default_factory=set)
    scraped: list[str] = field(default_factory=list)

    def list_objects(self, api_version: str, kind: str, **selectors: Any) -> Listing:
        fields = selectors.get("field_selector") or ""
        if kind != "Pod" or not fields.startswith("spec.nodeName="):
            return super().list_objects(api_version, kind, **selectors)
        node = fields.removeprefix("spec.nodeName=")
        self.lists.append(f"Pod on {node}")
        held = [pod for pod in self.pods if pod["spec"]["nodeName"] == node]
        return Listing(tuple(LiveObject.from_manifest(obj) for obj in held), "5")

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        node = pod.removeprefix(f"{PLUGIN}-")
        self.scraped.append(node)
        return b"" if node in self.silent else b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n'


def exporter_fleet(silent: set[str]) -> ExporterCluster:
    names = [f"n{index:02d}" for index in range(1, 13)]
    return ExporterCluster(
        daemonset(available=12, desired=12),
        pods=[exporter(name) for name in names],
        nodes=[gpu_node(name) for name in names],
        silent=silent,
    )


def test_a_counted_exporter_rollout_scrapes_its_sample_without_listing_every_pod(clock: list[float]) -> None:
    cluster = exporter_fleet(silent=set())
    view, caches = view_of(cluster, clock, ROLLOUT, METRICS)
    try:
        status = view.judge()
        assert (status.state, status.ready, status.desired) == ("passed", 12, 12), status
        assert sorted(cluster.scraped) == ["n01", "n02", "n03"]
        assert sorted(entry for entry in cluster.lists if entry.startswith("Pod")) == [
            "Pod on n01",
            "Pod on n02",
            "Pod on n03",
        ], "only the sample's pods are read: the status counts every other exporter"
    finally:
        cluster.done.set()
        caches.close()


def test_a_sampled_exporter_without_samples_keeps_the_gate_waiting(clock: list[float]) -> None:
    cluster = exporter_fleet(silent={"n02"})
    view, caches = view_of(cluster, clock, ROLLOUT, METRICS)
    try:
        status = view.judge()
        assert status.state == "progressing" and status.node == "n02", status
        assert "0 samples of DCGM_FI_DEV_GPU_TEMP" in status.message
    finally:
        cluster.done.set()
        caches.close()


def test_an_exporter_rollout_the_status_does_not_count_yet_has_every_pod_read(clock: list[float]) -> None:
    cluster = exporter_fleet(silent=set())
    cluster.ds = daemonset(available=11, desired=12)
    view, caches = view_of(cluster, clock, ROLLOUT, METRICS)
    try:
        cluster.queued_warnings.append(warning(f"{PLUGIN}-n05"))  # a warning has the pods read at once
        view.judge()
        assert cluster.delivered.wait(5)
        view.judge()
        assert "Pod" in cluster.lists and not any(entry.startswith("Pod on") for entry in cluster.lists)
    finally:
        cluster.done.set()
        caches.close()
