"""The node agent against the built-in API server: the scenario's nodes register over HTTPS, the server's
controllers place the pods, the agent's kubelets run them, as against a real control plane."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable
from typing import Any

from gpuplan.sim.agent import NodeAgent
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers.cache import resource_type
from gpuplan.sim.nfd import API_VERSION, NAMESPACE

ControlPlane = Callable[..., Simulator]
AgentFactory = Callable[..., NodeAgent]
MISSING_TAG = "nvcr.io/nvidia/k8s-device-plugin:v0.0.1-missing"


def _rt(sim: Simulator, api_version: str, kind: str) -> Any:
    return resource_type(sim.store.registry, api_version, kind)


def _pods(sim: Simulator, namespace: str | None = None) -> list[dict[str, Any]]:
    return sim.store.list(_rt(sim, "v1", "Pod"), namespace=namespace).items


def _node(sim: Simulator, name: str = "lab-node") -> dict[str, Any]:
    return sim.store.get(_rt(sim, "v1", "Node"), None, name)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _events(sim: Simulator, pod: dict[str, Any]) -> list[dict[str, Any]]:
    meta = pod["metadata"]
    return [
        e
        for e in sim.store.list(_rt(sim, "v1", "Event"), namespace=meta["namespace"]).items
        if e["involvedObject"].get("uid") == meta["uid"]
    ]


def test_the_control_plane_alone_registers_no_node_and_creates_no_object(control_plane: ControlPlane) -> None:
    sim = control_plane("lab")
    assert sim.wait_idle(10)
    assert sim.store.list(_rt(sim, "v1", "Node")).items == []
    assert sim.store.list(_rt(sim, "apps/v1", "DaemonSet")).items == []


def test_the_lab_node_registers_with_its_gpu_labels_and_node_feature(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane()
    agent_factory(sim, "lab")
    node = _node(sim)
    assert node["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert node["status"]["nodeInfo"]["kubeletVersion"]
    feature = sim.store.get(_rt(sim, API_VERSION, "NodeFeature"), NAMESPACE, "lab-node")
    devices = feature["spec"]["features"]["instances"]["pci.device"]["elements"]
    assert any(d["attributes"]["vendor"] == "10de" for d in devices)  # the RTX 3060


def _lab_with_plugin_ready(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> tuple[Simulator, NodeAgent]:
    """The lab's node run by an agent, its hand-deployed device plugin Ready."""
    sim = control_plane()
    agent = agent_factory(sim, "lab")
    assert sim.wait_for(lambda: any(_ready(p) for p in _pods(sim, "kube-system")), 15)
    return sim, agent


def test_the_device_plugin_is_placed_by_the_server_and_run_by_the_agent(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim, agent = _lab_with_plugin_ready(control_plane, agent_factory)
    assert agent.wait_idle(10)
    (pod,) = _pods(sim, "kube-system")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"].startswith("127.")
    assert _node(sim)["status"]["capacity"]["nvidia.com/gpu"] == "1"
    reasons = sorted((e["reason"], e["source"]["component"], e["count"]) for e in _events(sim, pod))
    # each component records its own part once: the scheduler's from the server, the kubelet's from the agent
    assert reasons == [
        ("Created", "kubelet", 1),
        ("Pulled", "kubelet", 1),
        ("Pulling", "kubelet", 1),
        ("Scheduled", "default-scheduler", 1),
        ("Started", "kubelet", 1),
    ]


def test_gfd_labels_the_node_and_the_dcgm_exporter_answers_on_its_pod_ip(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane("gpu-operator")
    agent = agent_factory(sim, "gpu-operator")
    assert sim.wait_for(lambda: sum(_ready(p) for p in _pods(sim, "gpu-operator")) == 4, 20)
    assert _node(sim)["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060"
    (exporter,) = [p for p in _pods(sim, "gpu-operator") if "dcgm-exporter" in p["metadata"]["name"]]
    agent.set_gpu_fault("lab-node", 0, temperature=97)
    url = f"http://{exporter['status']['podIP']}:9400/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        metrics = answer.read().decode()
    temperature = [line for line in metrics.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert temperature and temperature[0].endswith(" 97")


def test_an_image_the_registry_lacks_fails_its_pull_with_events(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane()
    agent_factory(sim, "lab")
    daemonsets = _rt(sim, "apps/v1", "DaemonSet")
    sim.store.patch(
        daemonsets,
        "kube-system",
        "nvidia-device-plugin-daemonset",
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "nvidia-device-plugin-ctr", "image": MISSING_TAG}]}
                }
            }
        },
        "application/strategic-merge-patch+json",
        manager="kubectl",
    )

    def waiting() -> str:
        pods = [p for p in _pods(sim, "kube-system") if p["spec"]["containers"][0]["image"] == MISSING_TAG]
        statuses = pods[0]["status"].get("containerStatuses") or [] if pods else []
        return str(((statuses[0].get("state") or {}).get("waiting") or {}).get("reason")) if statuses else ""

    assert sim.wait_for(lambda: waiting() == "ImagePullBackOff", 15)
    (pod,) = [p for p in _pods(sim, "kube-system") if p["spec"]["containers"][0]["image"] == MISSING_TAG]
    wanted = [
        ("Failed", f'Failed to pull image "{MISSING_TAG}": rpc error: code = NotFound'),
        ("Failed", "Error: ErrImagePull"),
        ("BackOff", f'Back-off pulling image "{MISSING_TAG}"'),
        ("Failed", "Error: ImagePullBackOff"),
    ]

    def recorded() -> bool:
        events = [(e["reason"], e["message"], e["source"]) for e in _events(sim, pod)]
        return all(
            any(
                r == reason and m.startswith(text) and s == {"component": "kubelet", "host": "lab-node"}
                for r, m, s in events
            )
            for reason, text in wanted
        )

    assert sim.wait_for(recorded, 10)


def test_an_image_fault_set_on_the_agent_fails_its_pods(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim, agent = _lab_with_plugin_ready(control_plane, agent_factory)
    agent.set_image_fault("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", "CrashLoopBackOff")

    def reason() -> str:
        (pod,) = _pods(sim, "kube-system")
        state = (pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}
        return str((state.get("waiting") or {}).get("reason"))

    assert sim.wait_for(lambda: reason() == "CrashLoopBackOff", 15)


def test_pod_ips_come_from_the_cidr_given_and_nothing_listens_there(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane("gpu-operator")
    agent = agent_factory(sim, "gpu-operator", pod_ips="198.18.0.0/15")
    assert sim.wait_for(lambda: sum(_ready(p) for p in _pods(sim, "gpu-operator")) == 4, 20)
    ips = sorted(p["status"]["podIP"] for p in _pods(sim, "gpu-operator"))
    assert ips == ["198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5"]
    assert agent.loop.run_sync(lambda: agent.pod_network.listening) == []


def test_a_node_whose_kubelet_stops_loses_its_lease_renewals_and_comes_back(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane()
    agent = agent_factory(sim, "lab", lease_renew_seconds=0.05)
    leases = _rt(sim, "coordination.k8s.io/v1", "Lease")
    uid = _node(sim)["metadata"]["uid"]
    assert sim.wait_for(lambda: agent.leases.renewals >= 3, 10)
    lease = sim.store.get(leases, "kube-node-lease", "lab-node")
    assert lease["spec"]["holderIdentity"] == "lab-node"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "lab-node", "uid": uid}
    ]

    agent.set_node_ready("lab-node", False)
    node = _node(sim)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown"
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert agent.leases.scheduled == []  # a real node lifecycle controller would see it go quiet
    stopped_at = agent.leases.renewals

    agent.set_node_ready("lab-node", True)
    assert agent.leases.scheduled == ["lab-node"]
    assert sim.wait_for(lambda: agent.leases.renewals >= stopped_at + 3, 10)
    assert "taints" not in _node(sim)["spec"]


def test_each_node_reports_its_status_with_a_new_heartbeat(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane()
    agent_factory(sim, "lab", status_report_seconds=0.2)

    def heartbeat() -> str:
        ready = next(c for c in _node(sim)["status"]["conditions"] if c["type"] == "Ready")
        return str(ready["lastHeartbeatTime"])

    first = heartbeat()
    assert sim.wait_for(lambda: heartbeat() > first, 10)  # RFC 3339 seconds: a later one sorts after


def test_stop_ends_every_thread_the_agent_started(control_plane: ControlPlane) -> None:
    sim = control_plane("gpu-operator")
    before = set(threading.enumerate())
    agent = NodeAgent("gpu-operator", sim.url, sim.token, sim.ca_pem).start()
    assert sim.wait_for(lambda: sum(_ready(p) for p in _pods(sim, "gpu-operator")) == 4, 20)
    assert set(threading.enumerate()) - before  # the loop, the watches, the leases, the pod network
    agent.stop()
    assert not agent.errors
    left = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("gpuplan-")]
    assert left == []


def test_a_pod_deleted_through_the_api_is_stopped_and_removed_by_the_agent(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim, agent = _lab_with_plugin_ready(control_plane, agent_factory)
    (pod,) = _pods(sim, "kube-system")
    marked = sim.store.delete(_rt(sim, "v1", "Pod"), "kube-system", pod["metadata"]["name"])
    assert marked["metadata"]["deletionTimestamp"]  # graceful: only the node's kubelet removes it
    assert sim.wait_for(lambda: all(p["metadata"]["uid"] != pod["metadata"]["uid"] for p in _pods(sim)), 10)
    assert agent.wait_idle(10)  # the kubelet's Events are written by a thread of their own
    assert any(e["reason"] == "Killing" for e in _events(sim, pod))


def test_an_agent_started_again_keeps_the_nodes_and_objects_and_runs_their_pods(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim, first = _lab_with_plugin_ready(control_plane, agent_factory)
    (pod,) = _pods(sim, "kube-system")
    first.stop()
    second = agent_factory(sim, "lab")
    assert second.nodes == ["lab-node"]
    assert second.wait_idle(10)
    (again,) = _pods(sim, "kube-system")
    assert again["metadata"]["uid"] == pod["metadata"]["uid"] and _ready(again)
    key = ("kube-system", pod["metadata"]["name"])
    assert second.loop.run_sync(lambda: key in second.runtime.records)  # its kubelet runs the pod
    assert len(sim.store.list(_rt(sim, "apps/v1", "DaemonSet")).items) == 1


KUBERNETES_SLICE = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["198.18.0.1"], "conditions": {"ready": True}}],
    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
}
"""What a real API server keeps for its ``kubernetes`` Service (advertised address, secure port)."""


def test_pod_processes_reach_the_api_at_the_kubernetes_service_s_endpoint_or_where_the_agent_does(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    real_like, builtin = control_plane(), control_plane()  # both before an agent: its threads are counted
    real_like.store.create(
        _rt(real_like, "discovery.k8s.io/v1", "EndpointSlice"),
        KUBERNETES_SLICE,
        namespace="default",
        manager="t",
    )
    processes = agent_factory(real_like, "lab").runtime.processes
    # no kube-proxy routes the ClusterIP a kubelet would give: the process is given the Service's endpoint
    assert (processes.api_host, processes.api_port) == ("198.18.0.1", 6443)

    processes = agent_factory(builtin, "lab").runtime.processes
    assert (processes.api_host, processes.api_port) == ("127.0.0.1", int(builtin.url.rsplit(":", 1)[1]))
