"""The waiter against a scripted provider: it reads, judges, reports progress, and waits on the watch that
matters (pods while a rollout is pending, nodes while a node effect is) instead of sleeping; its deadline
comes from the checks and is measured on an injected clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.gates import parse_time
from gpuplan.planner.health.metrics_paths import NOT_SCRAPED
from gpuplan.planner.health.wait import Progress, WaitOptions, component_timeout, wait
from gpuplan.providers.kubernetes_live import Listing
from gpuplan.providers.protocols import PromSample, ProxyRefused
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
    """A cluster that moves while the waiter waits: each watch call first applies the next step of the
    script (object changes, each an event with the next resourceVersion), then delivers the events of the
    watched kind after the version asked for; with the script done, a watch is quiet and advances the clock
    by its timeout (as a real quiet watch would take). Lists are counted: a round after the first reads
    through watches."""

    daemonset: dict[str, Any] | None
    pods: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    steps: list[list[dict[str, Any]]] = field(default_factory=list)
    now: float = 0.0
    version: int = 1
    log: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    watches: list[tuple[str, str | None, str | None, float]] = field(default_factory=list)
    lists: list[str] = field(default_factory=list)
    scrapes: list[str] = field(default_factory=list)
    fail_reads: int = 0

    def clock(self) -> float:
        return self.now

    def read(self, key: ObjectKey) -> LiveObject | None:
        if self.fail_reads:
            self.fail_reads -= 1
            raise TransientProviderError("read DaemonSet: the cluster answered 503")
        return LiveObject.from_manifest(self.daemonset) if self.daemonset else None

    def list_objects(self, api_version: str, kind: str, **selectors: Any) -> Listing:
        assert kind == "Pod" and (selectors["namespace"], selectors["label_selector"]) == (
            "gpu-operator",
            "app=nvidia-dcgm-exporter",
        )
        self.lists.append(kind)
        return Listing(tuple(LiveObject.from_manifest(p) for p in self.pods), str(self.version))

    def list_nodes(self, *, label_selector: str | None = None) -> Listing:
        self.lists.append("Node")
        return Listing(tuple(LiveObject.from_manifest(n) for n in self.nodes), str(self.version))

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        self.scrapes.append(f"{namespace}/{pod}:{port}{path}")
        node = next(p["spec"]["nodeName"] for p in self.pods if p["metadata"]["name"] == pod)
        return f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="{node}"}} 3\n'.encode()

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
        if self.steps:
            for change in self.steps.pop(0):
                self._change(change)
        events = [(v, obj) for v, k, obj in self.log if k == kind and v > int(resource_version or 0)]
        if not events:
            self.now += timeout
        for version, obj in events:
            yield WatchEvent(
                "MODIFIED", {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(version)}}
            )

    def _change(self, obj: dict[str, Any]) -> None:
        self.version += 1
        if obj["kind"] == "DaemonSet":
            self.daemonset = obj
            return
        kept = self.pods if obj["kind"] == "Pod" else self.nodes
        kept[:] = [o for o in kept if o["metadata"]["name"] != obj["metadata"]["name"]] + [obj]
        self.log.append((self.version, obj["kind"], obj))


def test_waits_on_pods_then_nodes_and_reports_progress() -> None:
    cluster = Scripted(ds(0), [pod(False)], [node(None)], steps=[[ds(1), pod(True), node("1")]])
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
    # the node a pending effect gate names, for the display's "slowest"; the rollout gate names none
    assert [p.node for p in progress] == [None, "lab-node", None]
    assert {p.component for p in progress} == {"dcgmExporter"}
    # a pod watch from the pod list's version while the rollout was pending, then a node watch from the
    # node list's: the node changed during the pod watch, and that event is replayed, not missed
    assert [(kind, selector, version) for kind, selector, version, _ in cluster.watches] == [
        ("Pod", "app=nvidia-dcgm-exporter", "1"),
        ("Node", None, "1"),
    ]
    assert cluster.lists == ["Node", "Pod", "Node", "Pod"], (
        "listed at the start and once more to confirm the pass; every round between read through watches"
    )


def test_the_deadline_turns_the_last_message_into_the_failure() -> None:
    cluster = Scripted(ds(1), [pod(True)], [node("0")])
    status = wait([ROLLOUT, ALLOCATABLE], cluster, options=WaitOptions(clock=cluster.clock, poll_seconds=2))
    assert (status.state, status.reason, status.node) == ("failed", "Timeout", "lab-node")
    assert status.message == "not healthy after 5s: lab-node: allocatable nvidia.com/gpu is 0, expected 1"
    # quiet watches of at most poll_seconds, the last one cut to what was left of the 5 s
    assert [timeout for *_, timeout in cluster.watches] == [2, 2, 1]
    assert cluster.lists == ["Node", "Pod"]


def test_the_scrape_goes_through_the_ready_exporter_pod_only() -> None:
    cluster = Scripted(ds(0), [pod(False)], [node("1")], steps=[[ds(1), pod(True)]])
    progress: list[Progress] = []
    status = wait([ROLLOUT, METRICS], cluster, 30, progress.append, options=WaitOptions(clock=cluster.clock))
    assert status.state == "passed"
    assert cluster.scrapes == ["gpu-operator/exp-1:9400/metrics"]
    assert progress[0].state == "progressing"


def test_a_flaky_read_is_not_yet_healthy_rather_than_an_error() -> None:
    cluster = Scripted(ds(1), [pod(True)], [node("1")], fail_reads=1)
    progress: list[Progress] = []
    status = wait([ROLLOUT], cluster, 30, progress.append, options=WaitOptions(clock=cluster.clock))
    assert status.state == "passed"
    assert progress[0].message == "the cluster did not answer: read DaemonSet: the cluster answered 503"


def crash_looping(restarts: int, exit_code: int) -> dict[str, Any]:
    crashing = pod(False)
    crashing["status"]["containerStatuses"][0].update(
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
        restartCount=restarts,
        lastState={"terminated": {"exitCode": exit_code}},
    )
    return crashing


def test_a_crash_fails_without_waiting_for_the_deadline() -> None:
    cluster = Scripted(ds(0), [crash_looping(3, 1)], [node("1")])
    status = wait([ROLLOUT], cluster, options=WaitOptions(clock=cluster.clock))
    assert (status.state, status.reason, status.pod) == ("failed", "CrashLoopBackOff", "exp-1")
    assert status.message.endswith("; 3 restarts, each ended with exit code 1")
    assert cluster.watches == [] and cluster.now == 0.0


def test_a_crash_loop_that_ends_in_different_ways_waits() -> None:
    """The waiter keeps the exit codes it saw: a container that crashed with 1, then 2 (racing a dependency
    still starting) is not the same crash repeated, so the wait goes on to its deadline."""
    cluster = Scripted(ds(0), [crash_looping(2, 1)], [node("1")], steps=[[crash_looping(3, 2)]])
    status = wait([ROLLOUT], cluster, options=WaitOptions(clock=cluster.clock))
    assert (status.state, status.reason) == ("failed", "CrashLoopBackOff")
    assert status.message.startswith("not healthy after 5s: ") and "(exit codes 1, 2)" in status.message
    assert cluster.now >= 5.0


def test_a_crash_loop_fails_once_it_restarted_enough_the_same_way() -> None:
    cluster = Scripted(ds(0), [crash_looping(1, 1)], [node("1")], steps=[[crash_looping(3, 1)]])
    progress: list[Progress] = []
    status = wait([ROLLOUT], cluster, 300, progress.append, options=WaitOptions(clock=cluster.clock))
    assert progress[0].state == "progressing" and "restart 1 of 3" in progress[0].message
    assert (status.state, status.reason) == ("failed", "CrashLoopBackOff") and cluster.now < 300


def test_a_host_driver_other_than_asked_fails_on_its_second_sighting() -> None:
    check = HealthCheck("driver-version", {"version": "580.105.08", "timeoutSeconds": 300})
    other = node("1")
    other["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] = "570.195.03"
    cluster = Scripted(None, [], [other])
    progress: list[Progress] = []
    options = WaitOptions(clock=cluster.clock, node_selector={"gpu": "yes"})
    status = wait([check], cluster, None, progress.append, options=options)
    assert [p.state for p in progress] == ["progressing", "failed"]
    assert (status.state, status.reason, status.node) == ("failed", "DriverVersionMismatch", "lab-node")
    assert status.message == (
        "lab-node: driver 570.195.03, expected 580.105.08 (reported in two rounds in a row)"
    )
    assert cluster.now < 300


def test_a_host_without_the_runtime_handler_fails_at_once() -> None:
    """An external toolkit (no DaemonSet of gpuplan's): a node that reports its handlers without nvidia."""
    check = HealthCheck("runtime-handler", {"handler": "nvidia", "timeoutSeconds": 300})
    host = node("1")
    host["status"]["runtimeHandlers"] = [{"name": ""}, {"name": "runc"}]
    cluster = Scripted(None, [], [host])
    status = wait([check], cluster, options=WaitOptions(clock=cluster.clock, node_selector={"gpu": "yes"}))
    assert (status.state, status.reason) == ("failed", "RuntimeHandlerMissing")
    assert status.message == "lab-node: runtime handler nvidia missing (the node reports: runc)"
    assert cluster.now == 0.0


def fleet(count: int, *, restarted: int | None = None) -> Scripted:
    """``count`` nodes, each with a Ready exporter that became Ready one second after the previous one."""
    pods, nodes = [], []
    for index in range(count):
        name = f"node-{index:02d}"
        exporter = pod(True)
        exporter["metadata"] = {**exporter["metadata"], "name": f"exp-{index:02d}", "uid": f"uid-{index}"}
        exporter["spec"] = {"nodeName": name}
        exporter["status"]["conditions"][0]["lastTransitionTime"] = f"2026-01-01T00:00:{59 - index:02d}Z"
        if index == restarted:
            exporter["status"]["containerStatuses"][0]["restartCount"] = 2
        pods.append(exporter)
        machine = node("1")
        machine["metadata"] = {**machine["metadata"], "name": name}
        nodes.append(machine)
    daemonset = ds(count)
    daemonset["status"].update(desiredNumberScheduled=count, updatedNumberScheduled=count)
    return Scripted(daemonset, pods, nodes)


def scraped_nodes(cluster: Scripted) -> list[str]:
    return sorted(f"node-{scrape.split('/exp-')[1][:2]}" for scrape in cluster.scrapes)


def test_the_metrics_gate_scrapes_the_first_nodes_the_rollout_made_ready_and_every_restarted_one() -> None:
    cluster = fleet(14, restarted=1)
    status = wait([ROLLOUT, METRICS], cluster, 30, options=WaitOptions(clock=cluster.clock))
    assert status.state == "passed"
    # Ready times run backwards with the index: node-13 became Ready first
    assert scraped_nodes(cluster) == sorted({f"node-{i:02d}" for i in range(4, 14)} | {"node-01"})


def test_every_node_is_scraped_when_the_spec_asks_for_all() -> None:
    cluster = fleet(14)
    every = HealthCheck("dcgm-metrics", {**METRICS.params, "sampleNodes": "all"})
    assert wait([ROLLOUT, every], cluster, 30, options=WaitOptions(clock=cluster.clock)).state == "passed"
    assert scraped_nodes(cluster) == [f"node-{i:02d}" for i in range(14)]


def test_a_scrape_that_passed_is_not_repeated_while_its_pod_is_the_same() -> None:
    cluster = fleet(3)
    waiting = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 2, "timeoutSeconds": 5})
    # the exporter pods turned Ready a moment ago: the missing capacity is still to come, round after round
    moment = parse_time("2026-01-01T00:01:00Z")
    assert moment is not None
    options = WaitOptions(clock=cluster.clock, wall=lambda: moment)
    status = wait([ROLLOUT, METRICS, waiting], cluster, options=options)
    assert status.state == "failed" and len(cluster.watches) > 1, "several rounds"
    assert len(cluster.scrapes) == 3, "one scrape per node over all the rounds"


def test_the_component_timeout_comes_from_its_checks() -> None:
    assert component_timeout([ROLLOUT, HealthCheck("allocatable", {"timeoutSeconds": 600})]) == 600
    assert component_timeout([HealthCheck("gfd-labels", {})]) == 300


# ------------------------------------------------------------------ the metrics gate's paths to the exporters


@dataclass
class Proxied(Scripted):
    """A cluster whose pod proxy answers ``pod_answer`` when set (an error to raise), and whose service
    proxy answers ``service_answer`` (text, or an error to raise; None: it serves none)."""

    pod_answer: ProviderError | None = None
    service_answer: str | ProviderError | None = None
    service_scrapes: list[str] = field(default_factory=list)

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        if self.pod_answer is not None:
            self.scrapes.append(f"{namespace}/{pod}:{port}{path}")
            raise self.pod_answer
        return super().proxy_get(namespace, pod, port, path)

    def service_proxy_get(self, namespace: str, service: str, port: int, path: str) -> bytes:
        self.service_scrapes.append(f"{namespace}/{service}:{port}{path}")
        if isinstance(self.service_answer, ProviderError):
            raise self.service_answer
        assert self.service_answer is not None, "the service proxy is not asked"
        return self.service_answer.encode()


@dataclass
class Querier:
    """A Prometheus server answering every query with ``samples``."""

    samples: list[PromSample]
    url: str = "http://prometheus.monitoring:9090"
    request_count: int = 0
    queries: list[str] = field(default_factory=list)
    closed: bool = False

    def query(self, promql: str) -> list[PromSample]:
        self.queries.append(promql)
        self.request_count += 1
        return list(self.samples)

    def stream(self, promql: str) -> Iterator[PromSample]:
        return iter(self.query(promql))

    def close(self) -> None:
        self.closed = True


def refused(status: int, reason: str, what: str = "scrape gpu-operator/exp-1:9400/metrics") -> ProxyRefused:
    return ProxyRefused(f"{what}: the API server answered {status}: {reason}", status=status, reason=reason)


ADDRESS = refused(400, "address not allowed")
FORBIDDEN = refused(403, 'pods "exp-1" is forbidden: User "u" cannot get resource "pods/proxy"')


def test_a_pod_proxy_refused_for_its_address_fails_at_once_naming_every_path_and_the_ways_on() -> None:
    cluster = Proxied(ds(1), [pod(True)], [node("1")], pod_answer=ADDRESS)
    status = wait([ROLLOUT, METRICS], cluster, 300, options=WaitOptions(clock=cluster.clock))
    assert (status.state, status.gate) == ("failed", "dcgm-metrics")
    assert status.message == (
        "DCGM metrics cannot be read: the pod proxy: answered 400: address not allowed; the Service proxy: "
        "not tried: a pod IP the API server will not proxy to is no Service endpoint either; Prometheus: "
        "the spec names none in spec.telemetry.prometheus; set spec.dcgmExporter.healthSampleNodes: 0 to "
        "gate on the exporters' rollout and Ready pods alone, or name a Prometheus that scrapes them in "
        "spec.telemetry.prometheus"
    )
    assert cluster.now == 0 and not cluster.watches, "at the first round, not at the 300 s timeout"
    assert cluster.service_scrapes == [] and len(cluster.scrapes) == 1


def test_a_pod_proxy_refused_by_rbac_falls_back_to_the_service_and_says_so() -> None:
    answer = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="lab-node"} 3\n'
    cluster = Proxied(ds(1), [pod(True)], [node("1")], pod_answer=FORBIDDEN, service_answer=answer)
    opened: list[Querier] = []
    options = WaitOptions(clock=cluster.clock, prometheus=lambda: opened.append(Querier([])) or opened[-1])
    status = wait([ROLLOUT, METRICS], cluster, 300, options=options)
    assert status.state == "passed"
    assert cluster.service_scrapes == ["gpu-operator/nvidia-dcgm-exporter:9400/metrics"]
    assert status.notes == (
        "GPU metrics read through Service gpu-operator/nvidia-dcgm-exporter (the pod proxy: answered 403: "
        f"{FORBIDDEN.reason}): the service proxy picks the exporter that answers, so the metrics were "
        "judged on lab-node, whose exporter answered; the other exporters count by their Ready pods",
    )
    assert opened == [], "Prometheus is not asked while a path before it answers"


def test_the_services_answer_is_judged_on_the_node_whose_exporter_answered() -> None:
    two_gpus = node("2")
    two_gpus["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    answer = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="lab-node"} 3\n'
    cluster = Proxied(ds(1), [pod(True)], [two_gpus], pod_answer=FORBIDDEN, service_answer=answer)
    status = wait([ROLLOUT, METRICS], cluster, 5, options=WaitOptions(clock=cluster.clock))
    assert status.state == "failed"
    assert status.message.endswith(
        "lab-node: DCGM metrics have 1 samples of DCGM_FI_DEV_GPU_UTIL, expected 2"
    )


def test_with_the_pod_and_the_service_proxy_refused_the_gate_fails_at_once_quoting_both() -> None:
    service = refused(403, 'services "nvidia-dcgm-exporter" is forbidden', "scrape Service")
    cluster = Proxied(ds(1), [pod(True)], [node("1")], pod_answer=FORBIDDEN, service_answer=service)
    status = wait([ROLLOUT, METRICS], cluster, 300, options=WaitOptions(clock=cluster.clock))
    assert status.state == "failed" and cluster.now == 0
    assert f"the pod proxy: answered 403: {FORBIDDEN.reason}" in status.message
    assert f"the Service proxy: answered 403: {service.reason}" in status.message


def test_a_proxy_answer_that_waiting_can_change_keeps_the_gate_waiting() -> None:
    starting = TransientProviderError("scrape gpu-operator/exp-1:9400/metrics: the cluster answered 503")
    cluster = Proxied(ds(1), [pod(True)], [node("1")], pod_answer=starting)
    status = wait([ROLLOUT, METRICS], cluster, 5, options=WaitOptions(clock=cluster.clock))
    assert (status.state, status.reason) == ("failed", "Timeout")
    assert status.message.startswith(
        "not healthy after 5s: lab-node: DCGM metrics of exp-1 could not be read"
    )
    assert cluster.service_scrapes == [] and len(cluster.scrapes) > 1, "the pod proxy, round after round"


def test_prometheus_stands_in_with_the_series_newer_than_the_exporter() -> None:
    ready = pod(True)
    ready["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"  # 1767225600
    fresh = PromSample({"Hostname": "lab-node", "gpu": "0"}, 1767225610.0)
    stale = PromSample({"Hostname": "lab-node", "gpu": "1"}, 1767225590.0)  # the previous exporter's
    querier = Querier([fresh, stale])
    cluster = Proxied(ds(1), [ready], [node("1")], pod_answer=ADDRESS)
    status = wait(
        [ROLLOUT, METRICS], cluster, 300, options=WaitOptions(clock=cluster.clock, prometheus=lambda: querier)
    )
    assert status.state == "passed", status.message
    assert querier.queries[0] == "max by (node, Hostname, hostname, gpu) (timestamp(DCGM_FI_DEV_GPU_UTIL))"
    assert status.notes == (
        "GPU metrics read from Prometheus http://prometheus.monitoring:9090 (the pod proxy: answered 400: "
        "address not allowed; the Service proxy: not tried: a pod IP the API server will not proxy to is no "
        "Service endpoint either)",
    )
    assert querier.closed, "closed with the wait"


def test_a_prometheus_without_the_new_exporters_series_is_not_yet() -> None:
    ready = pod(True)
    ready["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    querier = Querier([PromSample({"node": "lab-node", "gpu": "0"}, 1767225590.0)])
    cluster = Proxied(ds(1), [ready], [node("1")], pod_answer=ADDRESS)
    status = wait(
        [ROLLOUT, METRICS], cluster, 5, options=WaitOptions(clock=cluster.clock, prometheus=lambda: querier)
    )
    assert (status.state, status.reason) == ("failed", "Timeout")
    assert (
        "Prometheus has no DCGM_FI_DEV_GPU_UTIL series of the node since its exporter started"
        in status.message
    )


def test_a_prometheus_that_cannot_be_asked_is_a_refused_path() -> None:
    def unreachable() -> Querier:
        raise ProviderError(
            "cannot reach Prometheus at http://prometheus.monitoring:9090: connection refused"
        )

    cluster = Proxied(ds(1), [pod(True)], [node("1")], pod_answer=ADDRESS)
    status = wait(
        [ROLLOUT, METRICS], cluster, 300, options=WaitOptions(clock=cluster.clock, prometheus=unreachable)
    )
    assert status.state == "failed" and cluster.now == 0
    assert "Prometheus: cannot reach Prometheus at http://prometheus.monitoring:9090" in status.message


def test_a_sample_of_zero_nodes_scrapes_nothing_and_passes_on_the_ready_pods_with_a_note() -> None:
    restarted = pod(True)
    restarted["status"]["containerStatuses"][0]["restartCount"] = 2
    cluster = Proxied(ds(1), [restarted], [node("1")], pod_answer=ADDRESS)
    unscraped = HealthCheck("dcgm-metrics", {**METRICS.params, "sampleNodes": 0})
    status = wait([ROLLOUT, unscraped], cluster, 300, options=WaitOptions(clock=cluster.clock))
    assert status.state == "passed" and status.notes == (NOT_SCRAPED,)
    assert (
        NOT_SCRAPED
        == "GPU metrics not scraped: healthSampleNodes is 0 (the exporters count by their Ready pods)"
    )
    assert cluster.scrapes == [] and cluster.service_scrapes == []


def test_a_sample_of_zero_nodes_still_waits_for_the_exporter_pods_to_be_ready() -> None:
    cluster = Proxied(ds(0), [pod(False)], [node("1")])
    unscraped = HealthCheck("dcgm-metrics", {**METRICS.params, "sampleNodes": 0})
    status = wait([ROLLOUT, unscraped], cluster, 5, options=WaitOptions(clock=cluster.clock))
    assert (status.state, status.reason) == ("failed", "Timeout")


@dataclass
class NoServiceProxy(Scripted):
    """A client whose pod proxy refuses, and which has no service proxy at all."""

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        raise FORBIDDEN


@pytest.mark.parametrize(
    "cluster, params, why",
    [
        (NoServiceProxy, METRICS.params, "the client has no service proxy"),
        (
            Proxied,
            {k: v for k, v in METRICS.params.items() if k != "service"},
            "the Service of an external exporter is not known",
        ),
    ],
)
def test_a_service_path_that_cannot_be_asked_is_refused_without_a_request(
    cluster: type[Scripted], params: dict[str, Any], why: str
) -> None:
    found = cluster(ds(1), [pod(True)], [node("1")])
    if isinstance(found, Proxied):
        found.pod_answer = FORBIDDEN
    status = wait(
        [ROLLOUT, HealthCheck("dcgm-metrics", params)], found, 300, options=WaitOptions(clock=found.clock)
    )
    assert status.state == "failed" and f"the Service proxy: not tried: {why}; Prometheus" in status.message
