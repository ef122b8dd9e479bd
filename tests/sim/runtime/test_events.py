"""core/v1 Events of the simulated cluster: the DaemonSet controller's FailedCreate (aggregated by count,
retried with back-off, status still consistent) and SuccessfulCreate/SuccessfulDelete, the scheduler's and
kubelets' pod events (Scheduled, Pulling/Pulled/Created/Started, image pull failures, crash-loop BackOff
counted), the recorder's aggregation and spam filter, and what the real kubectl shows of them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import Store
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers import events, pod_events

MERGE = "application/merge-patch+json"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
DEADLINE = 10.0
Obj = dict[str, Any]


def daemonset(name: str, image: str, **pod_spec: Any) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "ctr", "image": image}], **pod_spec},
            },
        },
    }


def rt(sim: Simulator, api_version: str, kind: str) -> Any:
    return sim.store.registry.for_kind(api_version, kind)


def start(sim: Simulator, *objects: Obj) -> None:
    sim.store.create(rt(sim, "v1", "Namespace"), {"metadata": {"name": "gpu-operator"}}, manager="test")
    for obj in objects:
        sim.store.create(rt(sim, "apps/v1", "DaemonSet"), obj, namespace="gpu-operator", manager="test")


def events_of(sim: Simulator, name: str, reason: str | None = None) -> list[Obj]:
    found = sim.store.list(rt(sim, "v1", "Event"), namespace="gpu-operator").items
    return [e for e in found if e["involvedObject"]["name"] == name and reason in (None, e["reason"])]


def one_pod(sim: Simulator, app: str) -> Obj:
    pods = sim.store.list(rt(sim, "v1", "Pod"), namespace="gpu-operator", label_selector=f"app={app}").items
    assert len(pods) == 1
    return pods[0]


def reasons(sim: Simulator, name: str) -> list[str]:
    return [e["reason"] for e in sorted(events_of(sim, name), key=lambda e: e["metadata"]["name"])]


# ------------------------------------------------------------------------------------ DaemonSet controller


@pytest.mark.parametrize(
    ("pod_spec", "why"),
    [
        ({"runtimeClassName": "nvidia"}, 'pod rejected: RuntimeClass "nvidia" not found'),
        (
            {"runtimeClassName": "nvidia", "priorityClassName": "gpu-critical"},
            "no PriorityClass with name gpu-critical was found",
        ),
    ],
)
def test_a_refused_pod_is_a_failed_create_event_counted_on_each_retry(
    sim_factory: Any, pod_spec: Obj, why: str
) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    start(sim, daemonset("plugin", PLUGIN_IMAGE, **pod_spec))
    assert sim.wait_for(
        lambda: any(e["count"] >= 3 for e in events_of(sim, "plugin", "FailedCreate")), DEADLINE
    )
    [failed] = events_of(sim, "plugin", "FailedCreate")
    assert failed["type"] == "Warning" and failed["source"] == {"component": "daemonset-controller"}
    assert failed["message"] == f'Error creating: pods "plugin-" is forbidden: {why}'
    assert failed["involvedObject"]["kind"] == "DaemonSet" and failed["involvedObject"]["name"] == "plugin"
    assert failed["firstTimestamp"] <= failed["lastTimestamp"]
    ds = sim.store.get(rt(sim, "apps/v1", "DaemonSet"), "gpu-operator", "plugin")
    assert ds["status"]["desiredNumberScheduled"] == 1 and ds["status"]["currentNumberScheduled"] == 0
    assert sim.loop.errors == []

    # the back-off retry picks up what was missing once it exists
    sim.store.create(
        rt(sim, "node.k8s.io/v1", "RuntimeClass"),
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        manager="test",
    )
    sim.store.create(
        rt(sim, "scheduling.k8s.io/v1", "PriorityClass"),
        {"metadata": {"name": "gpu-critical"}, "value": 1000},
        manager="test",
    )
    assert sim.wait_for(lambda: bool(events_of(sim, "plugin", "SuccessfulCreate")), DEADLINE)
    [created] = events_of(sim, "plugin", "SuccessfulCreate")
    assert created["message"] == f"Created pod: {one_pod(sim, 'plugin')['metadata']['name']}"


def test_a_pod_taken_off_a_tainted_node_is_a_successful_delete_event(sim_factory: Any) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    start(sim, daemonset("exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"))
    assert sim.wait_for(lambda: bool(events_of(sim, "exporter", "SuccessfulCreate")), DEADLINE)
    first = one_pod(sim, "exporter")["metadata"]["name"]
    sim.store.patch(
        rt(sim, "v1", "Node"),
        None,
        "lab-node",
        {"spec": {"taints": [{"key": "evict", "effect": "NoExecute"}]}},
        MERGE,
        manager="test",
    )
    assert sim.wait_for(lambda: bool(events_of(sim, "exporter", "SuccessfulDelete")), DEADLINE)
    assert [e["message"] for e in events_of(sim, "exporter", "SuccessfulDelete")] == [f"Deleted pod: {first}"]


# ------------------------------------------------------------------------------------ scheduler and kubelet


def test_a_started_pod_has_the_scheduler_and_kubelet_events(sim_factory: Any) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    start(sim, daemonset("exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"))
    assert sim.wait_for(lambda: "Started" in [e["reason"] for e in _pod_events(sim, "exporter")], DEADLINE)
    pod = one_pod(sim, "exporter")
    found = {e["reason"]: e for e in _pod_events(sim, "exporter")}
    assert set(found) >= {"Scheduled", "Pulling", "Pulled", "Created", "Started"}
    name = pod["metadata"]["name"]
    assert found["Scheduled"]["message"] == f"Successfully assigned gpu-operator/{name} to lab-node"
    assert found["Scheduled"]["source"] == {"component": "default-scheduler"}
    image = pod["spec"]["containers"][0]["image"]
    assert found["Pulling"]["message"] == f'Pulling image "{image}"'
    assert re.fullmatch(
        rf'Successfully pulled image "{re.escape(image)}" in ([0-9.]+[mµn]?s) '
        r"\(\1 including waiting\)",
        found["Pulled"]["message"],
    )
    assert found["Started"]["message"] == "Started container ctr"
    for reason in ("Pulling", "Pulled", "Created", "Started"):
        assert found[reason]["source"] == {"component": "kubelet", "host": "lab-node"}
        assert found[reason]["involvedObject"]["fieldPath"] == "spec.containers{ctr}"
        assert found[reason]["involvedObject"]["uid"] == pod["metadata"]["uid"]
        assert found[reason]["count"] == 1 and found[reason]["type"] == "Normal"


def test_an_image_already_on_the_node_is_not_pulled_again_unless_the_policy_is_always(
    sim_factory: Any,
) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    image = "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"
    start(sim, daemonset("exporter", image))
    assert sim.wait_for(lambda: "Started" in [e["reason"] for e in _pod_events(sim, "exporter")], DEADLINE)
    again, always = daemonset("again", image), daemonset("always", image)
    always["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    start_more(sim, again, always)
    for app in ("again", "always"):
        assert sim.wait_for(
            lambda app=app: "Started" in [e["reason"] for e in _pod_events(sim, app)], DEADLINE
        )
    present = f'Container image "{image}" already present on machine'
    assert [e["message"] for e in _pod_events(sim, "again", "Pulled")] == [present]
    assert _pod_events(sim, "again", "Pulling") == []
    assert [e["message"] for e in _pod_events(sim, "always", "Pulling")] == [f'Pulling image "{image}"']
    assert _pod_events(sim, "always", "Pulled")[0]["message"].startswith("Successfully pulled")


def start_more(sim: Simulator, *objects: Obj) -> None:
    for obj in objects:
        sim.store.create(rt(sim, "apps/v1", "DaemonSet"), obj, namespace="gpu-operator", manager="test")


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("ErrImagePull", [("Warning", "Failed", "Error: ErrImagePull")]),
        (
            "ImagePullBackOff",
            [
                ("Normal", "BackOff", 'Back-off pulling image "{image}"'),
                ("Warning", "Failed", "Error: ImagePullBackOff"),
            ],
        ),
    ],
)
def test_an_unpullable_image_has_the_kubelet_failure_events(
    sim_factory: Any, fault: str, expected: list[tuple[str, str, str]]
) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    image = "nvcr.io/nvidia/k8s/dcgm-exporter:0.0.0-missing"
    sim.set_image_fault(image, fault)
    start(sim, daemonset("exporter", image))
    wanted = [(t, r, m.format(image=image)) for t, r, m in expected]
    assert sim.wait_for(lambda: set(wanted) <= _triples(sim, "exporter"), DEADLINE)
    assert "Started" not in {r for _, r, _ in _triples(sim, "exporter")}


def test_a_crash_loop_is_one_back_off_event_with_a_growing_count(sim_factory: Any) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    sim.loop.run_sync(lambda: setattr(sim.runtime.timing, "crash_loop_backoff_seconds", 0.02))
    image = "nvcr.io/nvidia/k8s/dcgm-exporter:9.9.9-crashing"
    sim.set_image_fault(image, "CrashLoopBackOff")
    start(sim, daemonset("exporter", image))
    assert sim.wait_for(
        lambda: any(e["count"] >= 3 for e in _pod_events(sim, "exporter", "BackOff")), DEADLINE
    )
    [backoff] = _pod_events(sim, "exporter", "BackOff")
    pod = one_pod(sim, "exporter")
    meta = pod["metadata"]
    assert backoff["type"] == "Warning" and backoff["message"] == (
        f"Back-off restarting failed container ctr in pod {meta['name']}_gpu-operator({meta['uid']})"
    )
    assert pod["status"]["containerStatuses"][0]["restartCount"] >= 2
    # the spam filter bounds what one pod writes, however long it crash-loops
    assert sum(e["count"] for e in _pod_events(sim, "exporter")) <= events.SPAM_BURST


def _pod_events(sim: Simulator, app: str, reason: str | None = None) -> list[Obj]:
    found = sim.store.list(rt(sim, "v1", "Pod"), namespace="gpu-operator", label_selector=f"app={app}").items
    names = {p["metadata"]["name"] for p in found}
    return [e for name in names for e in events_of(sim, name, reason)]


def _triples(sim: Simulator, app: str) -> set[tuple[str, str, str]]:
    return {(e["type"], e["reason"], e["message"]) for e in _pod_events(sim, app)}


def test_a_container_behind_init_containers_is_pulled_when_its_turn_comes() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}

    def waiting(reason: str) -> Obj:
        return {"name": "c", "image": "img:1", "restartCount": 0, "state": {"waiting": {"reason": reason}}}

    running = {
        "name": "c",
        "image": "img:1",
        "restartCount": 0,
        "containerID": "containerd://x",
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }

    def reasons_of(before: Obj | None, after: Obj) -> list[str]:
        return [reason for _, reason, _ in pod_events.container_events(pod, before, after)]

    assert reasons_of(None, waiting("PodInitializing")) == []
    assert reasons_of(waiting("PodInitializing"), running) == ["Pulling", "Pulled", "Created", "Started"]
    assert reasons_of(None, waiting("ContainerCreating")) == ["Pulling"]
    assert reasons_of(waiting("ContainerCreating"), running) == ["Pulled", "Created", "Started"]
    assert reasons_of(waiting("PodInitializing"), waiting("ErrImagePull")) == ["Pulling", "Failed", "Failed"]
    assert reasons_of(waiting("ErrImagePull"), waiting("ImagePullBackOff")) == ["BackOff", "Failed"]
    assert reasons_of(running, running) == []
    present = pod_events.container_events(pod, waiting("PodInitializing"), running, present=True)
    assert [message for _, _, message in present][:1] == [
        'Container image "img:1" already present on machine'
    ]
    assert [reason for _, reason, _ in present] == ["Pulled", "Created", "Started"]


# ------------------------------------------------------------------------------------ the recorder itself


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_recorder_aggregates_repeats_and_drops_spam_until_tokens_refill() -> None:
    store = Store(Registry.builtin())
    clock = Clock()
    recorder = events.EventRecorder(store, clock=clock, wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    involved = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}
    source = events.Source("kubelet", "n1")
    for _ in range(3):
        recorder.record(involved, events.NORMAL, "NodeReady", "Node n1 status is now: NodeReady", source)
    recorder.record(involved, events.WARNING, "Rebooted", "Node n1 has been rebooted", source)
    stored = store.list(store.registry.for_kind("v1", "Event"), namespace="default").items
    assert sorted((e["reason"], e["count"]) for e in stored) == [("NodeReady", 3), ("Rebooted", 1)]
    assert all(
        e["involvedObject"] == {"kind": "Node", "name": "n1", "uid": "u1", "apiVersion": "v1"} for e in stored
    )
    for _ in range(events.SPAM_BURST):
        recorder.record(involved, events.NORMAL, "NodeReady", "Node n1 status is now: NodeReady", source)
    assert recorder.dropped == 4
    clock.now += events.SPAM_REFILL_SECONDS
    recorder.record(involved, events.NORMAL, "NodeReady", "Node n1 status is now: NodeReady", source)
    stored = store.list(store.registry.for_kind("v1", "Event"), namespace="default").items
    assert sorted((e["reason"], e["count"]) for e in stored) == [("NodeReady", 3 + 21 + 1), ("Rebooted", 1)]
    store.close()


def test_events_of_many_pods_with_one_message_hold_one_string() -> None:
    store = Store(Registry.builtin())
    recorder = events.EventRecorder(store, clock=Clock(), wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    source = events.Source("kubelet", "n1")
    for index in range(2):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}", "uid": f"u{index}"}}
        recorder.record(pod, events.NORMAL, "Started", "".join(["Started container ", "c"]), source)
    rt = store.registry.for_kind("v1", "Event")
    first, second = (e for e in store._table.bucket(rt).values())
    assert first["message"] is second["message"]
    store.close()


def test_the_events_of_one_container_hold_one_involved_object_and_one_source_from_the_first() -> None:
    store = Store(Registry.builtin())
    recorder = events.EventRecorder(store, clock=Clock(), wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    source = events.Source("kubelet", "n1")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    for reason in ("Pulled", "Created", "Started"):
        recorder.record(
            pod, events.NORMAL, reason, f"{reason} container c", source, field_path="spec.containers{c}"
        )
    recorder.record(
        pod, events.NORMAL, "Started", "Started container d", source, field_path="spec.containers{d}"
    )
    rt = store.registry.for_kind("v1", "Event")
    pulled, created, started, other = sorted(
        store._table.bucket(rt).values(), key=lambda e: e["metadata"]["name"]
    )
    assert pulled["involvedObject"] is created["involvedObject"] is started["involvedObject"]
    assert pulled["source"] is other["source"]
    assert other["involvedObject"]["fieldPath"] == "spec.containers{d}"
    assert started["involvedObject"] == {
        "kind": "Pod",
        "name": "p",
        "namespace": "default",
        "uid": "u",
        "apiVersion": "v1",
        "fieldPath": "spec.containers{c}",
    }
    # the recorder's instances as they are: the store does not search its pool for what it already shares
    assert not store._pool.pooled(pulled["involvedObject"]) and not store._pool.pooled(pulled["source"])
    store.close()


# ------------------------------------------------------------------------------------ kubectl


@pytest.mark.kubectl
def test_kubectl_shows_the_events_and_describe_lists_them(lab_sim: Simulator, kubectl: Any) -> None:
    start(lab_sim, daemonset("plugin", PLUGIN_IMAGE, runtimeClassName="nvidia"))
    assert lab_sim.wait_for(lambda: bool(events_of(lab_sim, "plugin", "FailedCreate")), DEADLINE)
    listed = kubectl("get", "events", "-n", "gpu-operator").stdout
    assert "FailedCreate" in listed and "daemonset/plugin" in listed
    assert 'pods "plugin-" is forbidden: pod rejected: RuntimeClass "nvidia" not found' in listed
    described = kubectl("describe", "ds", "plugin", "-n", "gpu-operator").stdout
    events_part = described.split("Events:", 1)[1]
    assert (
        "Warning" in events_part and "FailedCreate" in events_part and "daemonset-controller" in events_part
    )
    as_json = json.loads(kubectl("get", "events", "-n", "gpu-operator", "-o", "json").stdout)
    assert {e["reason"] for e in as_json["items"]} == {"FailedCreate"}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (0.0000005, "500ns"),
        (0.0000025, "2.5µs"),
        (0.0025, "2.5ms"),
        (0.85, "850ms"),
        (1.5, "1.5s"),
        (62.25, "1m2.25s"),
    ],
)
def test_pull_durations_read_as_go_prints_them(seconds: float, text: str) -> None:
    assert pod_events.go_duration(seconds) == text
