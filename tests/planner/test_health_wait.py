"""The waiter against a scripted provider: it reads, judges, reports progress, and waits on the watch that
matters (pods while a rollout is pending, nodes while a node effect is) instead of sleeping; its deadline
comes from the checks and is measured on an injected clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import TransientProviderError
from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.wait import Progress, WaitOptions, component_timeout, wait
from gpuplan.providers.kubernetes_live import Listing
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.providers.watch import WatchEvent

ROLLOUT = HealthCheck(
    "rollout", {"daemonset": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "timeoutSeconds": 5}
)
METRICS = HealthCheck(
    "dcgm-metrics",
    {
        "port": 9400,
        "path": "/metrics",
        "metric": "DCGM_FI_DEV_GPU_UTIL",
        "service": "nvidia-dcgm-exporter",
        "namespace": "gpu-operator",
        "timeoutSeconds": 5,
    },
)
ALLOCATABLE = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1, "timeoutSeconds": 5})
SAMPLE = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",hostname="lab-node"} 3\n'


def ds(available: int) -> dict[str, Any]:
    status = {
        "desiredNumberScheduled": 1,
        "updatedNumberScheduled": 1,
        "observedGeneration": 1,
        "numberMisscheduled": 0,
    }
    if available:
        status["numberAvailable"] = available
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator",
            "generation": 1,
            "uid": "u1",
        },
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
            "template": {"spec": {"nodeSelector": {"gpu": "yes"}}},
        },
        "status": status,
    }


def pod(ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "exp-1",
            "namespace": "gpu-operator",
            "labels": {"app": "nvidia-dcgm-exporter"},
            "ownerReferences": [{"uid": "u1"}],
        },
        "spec": {"nodeName": "lab-node"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": str(ready)}],
            "containerStatuses": [{"name": "exporter", "ready": ready, "state": {"running": {}}}],
        },
    }


def node(allocatable: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"allocatable": {"nvidia.com/gpu": allocatable} if allocatable else {}}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "lab-node", "labels": {"gpu": "yes", "nvidia.com/gpu.count": "1"}},
        "status": status,
    }


@dataclass
class Scripted:
    """Cluster states in order: each watch call delivers one event and moves to the next state; past the
    last, a watch is quiet and advances the clock by its timeout (as a real quiet watch would take)."""

    states: list[tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]]
    now: float = 0.0
    watches: list[tuple[str, str | None, str | None, float]] = field(default_factory=list)
    scrapes: list[str] = field(default_factory=list)
    fail_reads: int = 0

    def clock(self) -> float:
        return self.now

    def read(self, key: ObjectKey) -> LiveObject | None:
        if self.fail_reads:
            self.fail_reads -= 1
            raise TransientProviderError("read DaemonSet: the cluster answered 503")
        daemonset = self.states[0][0]
        return LiveObject.from_manifest(daemonset) if daemonset else None

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        assert (namespace, label_selector) == ("gpu-operator", "app=nvidia-dcgm-exporter")
        return Listing(tuple(LiveObject.from_manifest(p) for p in self.states[0][1]), "pods-rv")

    def list_nodes(self, *, label_selector: str | None = None) -> Listing:
        return Listing(tuple(LiveObject.from_manifest(n) for n in self.states[0][2]), "nodes-rv")

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        self.scrapes.append(f"{namespace}/{pod}:{port}{path}")
        return SAMPLE.encode()

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 30.0,
    ) -> Iterator[WatchEvent]:
        self.watches.append((kind, label_selector, resource_version, timeout))
        if len(self.states) > 1:
            self.states.pop(0)
            yield WatchEvent("MODIFIED", {"metadata": {"resourceVersion": "next"}})
        else:
            self.now += timeout


def test_waits_on_pods_then_nodes_and_reports_progress() -> None:
    cluster = Scripted(
        [
            (ds(0), [pod(False)], [node(None)]),
            (ds(1), [pod(True)], [node(None)]),
            (ds(1), [pod(True)], [node("1")]),
        ]
    )
    progress: list[Progress] = []
    status = wait(
        [ROLLOUT, ALLOCATABLE],
        cluster,
        None,
        progress.append,
        options=WaitOptions(component="dcgmExporter", clock=cluster.clock, wall=cluster.clock),
    )
    assert status.state == "passed"
    assert [(p.gate, p.state, p.ready, p.desired) for p in progress] == [
        ("rollout", "progressing", 0, 1),
        ("allocatable", "progressing", 0, 1),
        ("allocatable", "passed", 1, 1),
    ]
    assert progress[1].message == "lab-node: allocatable nvidia.com/gpu is 0, expected 1"
    assert {p.component for p in progress} == {"dcgmExporter"}
    # a pod watch from the pod list's version while the rollout was pending, then a node watch
    assert [(kind, selector, version) for kind, selector, version, _ in cluster.watches] == [
        ("Pod", "app=nvidia-dcgm-exporter", "pods-rv"),
        ("Node", None, "nodes-rv"),
    ]


def test_the_deadline_turns_the_last_message_into_the_failure() -> None:
    cluster = Scripted([(ds(1), [pod(True)], [node("0")])])
    status = wait([ROLLOUT, ALLOCATABLE], cluster, options=WaitOptions(clock=cluster.clock, poll_seconds=2))
    assert (status.state, status.reason, status.node) == ("failed", "Timeout", "lab-node")
    assert status.message == "not healthy after 5s: lab-node: allocatable nvidia.com/gpu is 0, expected 1"
    # quiet watches of at most poll_seconds, the last one cut to what was left of the 5 s
    assert [timeout for *_, timeout in cluster.watches] == [2, 2, 1]


def test_the_scrape_goes_through_the_ready_exporter_pod_only() -> None:
    cluster = Scripted([(ds(0), [pod(False)], [node("1")]), (ds(1), [pod(True)], [node("1")])])
    progress: list[Progress] = []
    status = wait([ROLLOUT, METRICS], cluster, 30, progress.append, options=WaitOptions(clock=cluster.clock))
    assert status.state == "passed"
    assert cluster.scrapes == ["gpu-operator/exp-1:9400/metrics"]
    assert progress[0].state == "progressing"


def test_a_flaky_read_is_not_yet_healthy_rather_than_an_error() -> None:
    cluster = Scripted([(ds(1), [pod(True)], [node("1")])], fail_reads=1)
    progress: list[Progress] = []
    status = wait([ROLLOUT], cluster, 30, progress.append, options=WaitOptions(clock=cluster.clock))
    assert status.state == "passed"
    assert progress[0].message == "the cluster did not answer: read DaemonSet: the cluster answered 503"


def test_a_crash_fails_without_waiting_for_the_deadline() -> None:
    crashing = pod(False)
    crashing["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}
    }
    cluster = Scripted([(ds(0), [crashing], [node("1")])])
    status = wait([ROLLOUT], cluster, options=WaitOptions(clock=cluster.clock))
    assert (status.state, status.reason, status.pod) == ("failed", "CrashLoopBackOff", "exp-1")
    assert cluster.watches == [] and cluster.now == 0.0


def test_the_component_timeout_comes_from_its_checks() -> None:
    assert component_timeout([ROLLOUT, HealthCheck("allocatable", {"timeoutSeconds": 600})]) == 600
    assert component_timeout([HealthCheck("gfd-labels", {})]) == 300
