"""The simulated kubelets with the real GPU rules, driven through the store (no HTTP): pods come to life,
node effects land and go, faults show as a real cluster shows them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import ApiError, Store
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.kubelet import runtime

MANIFESTS = Path(__file__).parents[1] / "e2e" / "manifests"
DEPLOY_LABELS = {
    f"nvidia.com/gpu.deploy.{c}": "true"
    for c in (
        "device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
        "operator-validator",
        "container-toolkit",
    )
}
MERGE = "application/merge-patch+json"
# A real release (the registry has it), made to crash by the scenario's image fault.
BROKEN = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless"


def manifests(*names: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for name in names:
        docs += [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]
    return docs


def node_spec(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpu": {"model": "a100-80gb", "count": 2},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
        **extra,
    }


@pytest.fixture
def start() -> Iterator[Any]:
    sims: list[Simulator] = []

    def run(scenario: Any) -> Simulator:
        sim = Simulator(scenario, serve=False)
        sims.append(sim.start())
        return sim

    yield run
    for sim in sims:
        sim.stop()
        assert not sim.errors, sim.errors


class View:
    """Reads through the store, as tests of a cluster would."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        reg = sim.store.registry
        self.rts = {
            k: reg.for_kind(v, k) for k, v in (("Node", "v1"), ("Pod", "v1"), ("DaemonSet", "apps/v1"))
        }

    def create(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            rt = self.sim.store.registry.for_kind(obj["apiVersion"], obj["kind"])
            ns = obj["metadata"].get("namespace") if rt.namespaced else None
            self.sim.store.create(rt, obj, namespace=ns, manager="kubectl-client-side-apply")

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.sim.store.get(self.rts["Node"], None, name)
        return node

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        self.sim.store.patch(
            self.rts["Node"], None, name, {"metadata": {"labels": labels}}, MERGE, manager="kubectl-label"
        )

    def pods(self, namespace: str, app: str | None = None) -> list[dict[str, Any]]:
        selector = f"app={app}" if app else None
        pods: list[dict[str, Any]] = self.sim.store.list(
            self.rts["Pod"], namespace=namespace, label_selector=selector
        ).items
        return pods

    def pod(self, namespace: str, app: str) -> dict[str, Any]:
        pods = self.pods(namespace, app)
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]

    def maybe_pod(self, namespace: str, app: str) -> dict[str, Any] | None:
        """The pod, or None while the DaemonSet controller has not created it yet (for wait predicates)."""
        pods = self.pods(namespace, app)
        return pods[0] if pods else None

    def restarts(self, namespace: str, app: str) -> int:
        pod = self.maybe_pod(namespace, app)
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount", 0))

    def ds_status(self, namespace: str, name: str) -> dict[str, Any]:
        status: dict[str, Any] = self.sim.store.get(self.rts["DaemonSet"], namespace, name).get("status", {})
        return status

    def delete_ds(self, namespace: str, name: str) -> None:
        self.sim.store.delete(self.rts["DaemonSet"], namespace, name)


def ready(pod: dict[str, Any] | None) -> bool:
    if pod is None:
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def waiting_reason(pod: dict[str, Any], init: bool = False) -> str | None:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in pod["status"].get(key) or []:
        if "waiting" in status.get("state", {}):
            return str(status["state"]["waiting"].get("reason"))
    return None


def test_hand_deployed_device_plugin_runs_and_its_removal_takes_the_capacity(start: Any) -> None:
    sim = start("lab")
    view = View(sim)
    assert sim.wait_idle(10)
    pod = view.pods("kube-system")[0]
    assert pod["status"]["phase"] == "Running" and ready(pod)
    assert pod["status"]["containerStatuses"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    node = view.node("lab-node")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    status = view.ds_status("kube-system", "nvidia-device-plugin-daemonset")
    assert (status["numberReady"], status["numberAvailable"], status.get("numberUnavailable")) == (1, 1, None)
    managers = {e["manager"] for e in pod["metadata"]["managedFields"]}
    assert {"kube-controller-manager", "kubelet"} <= managers
    view.delete_ds("kube-system", "nvidia-device-plugin-daemonset")
    assert sim.wait_idle(10)
    assert view.pods("kube-system") == []
    assert view.node("lab-node")["status"]["capacity"].get("nvidia.com/gpu", "0") == "0"


def test_gpu_operator_stack_on_the_lab(start: Any) -> None:
    """Device plugin, GFD, DCGM exporter and validator all get Ready; GFD's labels land as its own manager."""
    sim = start("lab")
    view = View(sim)
    view.delete_ds("kube-system", "nvidia-device-plugin-daemonset")
    view.label_node("lab-node", DEPLOY_LABELS)
    view.create(
        *manifests(
            "00-namespace.yaml",
            "10-device-plugin.yaml",
            "20-gfd.yaml",
            "30-dcgm-exporter.yaml",
            "40-validator.yaml",
        )
    )
    assert sim.wait_idle(20)
    pods = view.pods("gpu-operator")
    assert len(pods) == 4 and all(ready(p) and p["status"]["phase"] == "Running" for p in pods), [
        (p["metadata"]["name"], p["status"].get("phase")) for p in pods
    ]
    node = view.node("lab-node")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060"
    assert labels["nvidia.com/gpu.family"] == "ampere"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    gfd_entries = [e for e in node["metadata"]["managedFields"] if e["manager"] == "gpu-feature-discovery"]
    assert gfd_entries and "f:nvidia.com/gpu.product" in str(gfd_entries[0]["fieldsV1"])
    # the validator's init containers all completed
    validator = view.pod("gpu-operator", "nvidia-operator-validator")
    assert [
        s["state"].get("terminated", {}).get("reason") for s in validator["status"]["initContainerStatuses"]
    ] == ["Completed"] * 4
    # removing GFD removes its labels
    view.delete_ds("gpu-operator", "gpu-feature-discovery")
    assert sim.wait_idle(10)
    assert "nvidia.com/gpu.product" not in view.node("lab-node")["metadata"]["labels"]


def test_device_plugin_waits_for_the_toolkit_then_gets_ready(start: Any) -> None:
    """A node without a host toolkit: the plugin sits in Init:0/1 until a toolkit pod adds the nvidia
    runtime."""
    sim = start({"nodes": [node_spec("n1", toolkit=None)], "timing": {"podReadySeconds": 0.01}})
    view = View(sim)
    view.label_node("n1", DEPLOY_LABELS)
    view.create(*manifests("00-namespace.yaml", "10-device-plugin.yaml"))
    assert sim.wait_idle(10)
    plugin = view.pod("gpu-operator", "nvidia-device-plugin-daemonset")
    # no nvidia runtime handler yet: the sandbox (runtimeClassName nvidia) or toolkit-validation holds it
    assert plugin["status"]["phase"] == "Pending" and not ready(plugin)
    assert waiting_reason(plugin) in ("ContainerCreating", "PodInitializing")
    assert "nvidia.com/gpu" not in view.node("n1")["status"].get("capacity", {})
    handlers = {h["name"] for h in view.node("n1")["status"].get("runtimeHandlers", [])}
    assert "nvidia" not in handlers
    view.create(toolkit_daemonset())
    assert sim.wait_for(lambda: ready(view.maybe_pod("gpu-operator", "nvidia-device-plugin-daemonset")), 10)
    node = view.node("n1")
    assert "nvidia" in {h["name"] for h in node["status"]["runtimeHandlers"]}
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "2"


def toolkit_daemonset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-container-toolkit-daemonset", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-container-toolkit-daemonset"}},
            "template": {
                "metadata": {"labels": {"app": "nvidia-container-toolkit-daemonset"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.deploy.container-toolkit": "true"},
                    "initContainers": [
                        {
                            "name": "driver-validation",
                            "image": "nvcr.io/nvidia/gpu-operator:v26.7.0",
                            "command": ["sh", "-c"],
                            "args": ["nvidia-validator"],
                            "env": [{"name": "COMPONENT", "value": "driver"}],
                        }
                    ],
                    "containers": [
                        {
                            "name": "nvidia-container-toolkit-ctr",
                            "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",
                        }
                    ],
                },
            },
        },
    }


def exporter_with(image: str) -> dict[str, Any]:
    ds = manifests("30-dcgm-exporter.yaml")[0]
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return ds


def test_crash_loop_fault_grows_restarts_and_heals(start: Any) -> None:
    sim = start(
        {
            "nodes": [node_spec("n1")],
            "faults": {"images": {BROKEN: "CrashLoopBackOff"}},
            "timing": {"podReadySeconds": 0.01, "crashLoopBackoffSeconds": 0.02},
        }
    )
    view = View(sim)
    view.label_node("n1", DEPLOY_LABELS)
    view.create(*manifests("00-namespace.yaml"), exporter_with(BROKEN))
    assert sim.wait_for(lambda: view.restarts("gpu-operator", "nvidia-dcgm-exporter") >= 3, 10)
    pod = view.pod("gpu-operator", "nvidia-dcgm-exporter")
    assert (
        waiting_reason(pod) == "CrashLoopBackOff" and pod["status"]["phase"] == "Running" and not ready(pod)
    )
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "Error"
    assert sim.wait_idle(10), "a crash loop must not keep wait_idle from returning"
    status = view.ds_status("gpu-operator", "nvidia-dcgm-exporter")
    assert status["numberReady"] == 0 and status["numberUnavailable"] == 1
    sim.set_image_fault(BROKEN, None)
    assert sim.wait_for(lambda: ready(view.maybe_pod("gpu-operator", "nvidia-dcgm-exporter")), 10)


def test_crash_loop_restarts_back_off_exponentially_up_to_thirty_times_the_first_delay(start: Any) -> None:
    """The kubelet's 10 s, 20 s, 40 s ... 300 s, scaled to crashLoopBackoffSeconds: the delays the runtime
    asks the loop for, restart after restart (read from the timers it schedules, not from a clock)."""
    base = 0.005
    sim = start(
        {
            "nodes": [node_spec("n1")],
            "faults": {"images": {BROKEN: "CrashLoopBackOff"}},
            "timing": {"podReadySeconds": 0.01, "crashLoopBackoffSeconds": base},
        }
    )
    restart_delays: list[float] = []
    call_later = sim.loop.call_later

    def recording(delay: float, callback: Any, *, settling: bool = True) -> Any:
        if not settling:  # the runtime's only background timer: a crash-looping container's next restart
            restart_delays.append(delay)
        return call_later(delay, callback, settling=settling)

    sim.loop.call_later = recording
    view = View(sim)
    view.label_node("n1", DEPLOY_LABELS)
    view.create(*manifests("00-namespace.yaml"), exporter_with(BROKEN))
    assert sim.wait_for(lambda: view.restarts("gpu-operator", "nvidia-dcgm-exporter") >= 6, 10)
    assert restart_delays[:7] == [base * f for f in (1, 2, 4, 8, 16, 30, 30)]
    assert [runtime.crash_loop_delay(0.2, n) for n in (1, 2, 3, 5, 6, 7, 50)] == [
        0.2,
        0.4,
        0.8,
        3.2,
        6.0,
        6.0,
        6.0,
    ]


@pytest.mark.parametrize("kind", ["ImagePullBackOff", "ErrImagePull"])
def test_image_pull_faults(start: Any, kind: str) -> None:
    sim = start({"nodes": [node_spec("n1")], "timing": {"podReadySeconds": 0.01}})
    sim.set_image_fault(BROKEN, kind)
    view = View(sim)
    view.label_node("n1", DEPLOY_LABELS)
    view.create(*manifests("00-namespace.yaml"), exporter_with(BROKEN))
    assert sim.wait_idle(10)
    pod = view.pod("gpu-operator", "nvidia-dcgm-exporter")
    assert pod["status"]["phase"] == "Pending" and waiting_reason(pod) == kind
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_slow_image_gets_ready_after_the_others(start: Any) -> None:
    slow = "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    sim = start(
        {
            "nodes": [node_spec("n1")],
            "faults": {"slowImages": {slow: 0.4}},
            "timing": {"podReadySeconds": 0.01},
        }
    )
    view = View(sim)
    view.label_node("n1", DEPLOY_LABELS)
    view.create(*manifests("00-namespace.yaml", "10-device-plugin.yaml", "30-dcgm-exporter.yaml"))
    assert sim.wait_for(lambda: ready(view.maybe_pod("gpu-operator", "nvidia-device-plugin-daemonset")), 10)
    exporter = view.pod("gpu-operator", "nvidia-dcgm-exporter")
    assert not ready(exporter) and waiting_reason(exporter, init=True) == "PodInitializing"
    assert sim.wait_idle(10)
    assert ready(view.pod("gpu-operator", "nvidia-dcgm-exporter"))


def test_node_not_ready_and_back(start: Any) -> None:
    sim = start("lab")
    view = View(sim)
    assert sim.wait_idle(10)
    sim.set_node_ready("lab-node", False)
    assert sim.wait_idle(10)
    node = view.node("lab-node")
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (cond["status"], cond["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {(t["key"], t["effect"]) for t in node["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    pod = view.pods("kube-system")[0]
    assert not ready(pod), "MarkPodsNotReady"
    assert view.ds_status("kube-system", "nvidia-device-plugin-daemonset")["numberReady"] == 0
    sim.set_node_ready("lab-node", True)
    assert sim.wait_for(lambda: ready(view.pods("kube-system")[0]), 10)
    node = view.node("lab-node")
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (cond["status"], cond["reason"]) == ("True", "KubeletReady")
    assert not node["spec"].get("taints")
    assert pod["metadata"]["name"] == view.pods("kube-system")[0]["metadata"]["name"], "the pod was kept"


def test_kubelet_not_ready_variant(start: Any) -> None:
    sim = start("lab")
    sim.set_node_ready("lab-node", False, unreachable=False)
    node = View(sim).node("lab-node")
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (cond["status"], cond["reason"]) == ("False", "KubeletNotReady")
    assert {t["key"] for t in node["spec"]["taints"]} == {"node.kubernetes.io/not-ready"}


def test_nodes_joining_and_leaving(start: Any) -> None:
    sim = start("lab")
    view = View(sim)
    assert sim.wait_idle(10)
    names = sim.add_node(node_spec("late-node", gpu={"model": "h100-80gb", "count": 8}))
    assert names == ["late-node"]
    assert sim.wait_idle(10)
    by_node = {p["spec"]["nodeName"]: p for p in view.pods("kube-system")}
    assert ready(by_node["late-node"])
    assert view.node("late-node")["status"]["capacity"]["nvidia.com/gpu"] == "8"
    with pytest.raises(ApiError) as exc:
        sim.add_node(node_spec("late-node"))
    assert exc.value.code == 409
    sim.remove_node("late-node")
    assert sim.wait_idle(10)
    assert [p["spec"]["nodeName"] for p in view.pods("kube-system")] == ["lab-node"]
    assert sim.status()["nodes"] == 1


def test_a_pod_started_after_its_node_changed_its_address_reports_the_new_host_ip(start: Any) -> None:
    sim = start("lab")
    view = View(sim)
    assert sim.wait_idle(10)
    old_pod = view.pods("kube-system")[0]
    assert old_pod["status"]["hostIP"] == view.node("lab-node")["status"]["addresses"][0]["address"]
    addresses = [{"type": "InternalIP", "address": "10.9.9.9"}, {"type": "Hostname", "address": "lab-node"}]
    body = {"status": {"addresses": addresses}}
    sim.store.patch(view.rts["Node"], None, "lab-node", body, MERGE, manager="test", subresource="status")
    sim.store.delete(view.rts["Pod"], "kube-system", old_pod["metadata"]["name"], grace_period_seconds=0)

    def replaced() -> bool:
        pods = view.pods("kube-system")
        return bool(pods) and pods[0]["metadata"]["uid"] != old_pod["metadata"]["uid"] and ready(pods[0])

    assert sim.wait_for(replaced, 10)
    assert view.pods("kube-system")[0]["status"]["hostIP"] == "10.9.9.9"


def test_pod_proxy_serves_metrics_only_from_a_ready_exporter(start: Any) -> None:
    sim = start(
        {
            "nodes": [node_spec("n1")],
            "timing": {"podReadySeconds": 0.01},
            "faults": {"gpus": [{"node": "n1", "gpu": 1, "temperature": 97, "xid": 79}]},
        }
    )
    view = View(sim)
    view.label_node("n1", DEPLOY_LABELS)
    view.create(*manifests("00-namespace.yaml", "30-dcgm-exporter.yaml"))
    assert sim.wait_idle(10)
    pod = view.pod("gpu-operator", "nvidia-dcgm-exporter")
    code, content_type, body = sim._proxy(pod, 9400, "/metrics", "")
    text = body.decode()
    assert code == 200 and content_type.startswith("text/plain")
    assert text.count("DCGM_FI_DEV_GPU_UTIL{") == 2
    assert 'gpu="1"' in text and "} 97" in text.split('DCGM_FI_DEV_GPU_TEMP{gpu="1"')[1].splitlines()[0]
    sim.set_node_ready("n1", False)
    with pytest.raises(ApiError) as exc:
        sim._proxy(view.pod("gpu-operator", "nvidia-dcgm-exporter"), 9400, "/metrics", "")
    assert exc.value.code == 503


def test_scenario_faults_apply_at_start(start: Any) -> None:
    """faults.nodes and faults.gpus of the scenario file: a GPU fault without an index hits every GPU."""
    sim = start(
        {
            "nodes": [node_spec("n1"), node_spec("n2")],
            "faults": {
                "nodes": [{"node": "n2", "notReady": True}],
                "gpus": [{"node": "n1", "temperature": 91}],
            },
        }
    )
    faults = sim.faults()
    assert faults["nodes"] == [{"node": "n2", "notReady": True}]
    assert faults["gpus"] == [
        {"node": "n1", "gpu": 0, "temperature": 91},
        {"node": "n1", "gpu": 1, "temperature": 91},
    ]
    ready_condition = next(c for c in View(sim).node("n2")["status"]["conditions"] if c["type"] == "Ready")
    assert ready_condition["status"] == "Unknown"


def test_status_times_of_one_second_are_one_string() -> None:
    store = Store(Registry.builtin())
    try:
        kubelets = runtime.KubeletRuntime(
            Loop(store), wall_clock=lambda: datetime(2026, 1, 1, 8, 0, 0, 5, UTC)
        )
        first, second = kubelets._now(), kubelets._now()
        assert first == "2026-01-01T08:00:00Z" and first is second
    finally:
        store.close()
