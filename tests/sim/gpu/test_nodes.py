"""Node objects carry what kubelet and NFD register on a GPU node, and nothing the NVIDIA stack adds later."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from typing import Any

from gpuplan.sim import nodes
from gpuplan.sim.scenario import expand_nodes, load_scenario, parse_scenario

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NFD = "feature.node.kubernetes.io/"


def _lab_node() -> dict[str, Any]:
    return nodes.node_object(expand_nodes(load_scenario("lab"))[0], now=NOW)


def test_kubelet_and_nfd_labels_of_the_lab_node() -> None:
    labels = _lab_node()["metadata"]["labels"]
    assert labels == {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": "lab-node",
        "kubernetes.io/os": "linux",
        f"{NFD}kernel-version.full": "6.8.0-101-generic",
        f"{NFD}kernel-version.major": "6",
        f"{NFD}kernel-version.minor": "8",
        f"{NFD}kernel-version.revision": "0",
        f"{NFD}system-os_release.ID": "ubuntu",
        f"{NFD}system-os_release.VERSION_ID": "24.04",
        f"{NFD}system-os_release.VERSION_ID.major": "24",
        f"{NFD}system-os_release.VERSION_ID.minor": "04",
        f"{NFD}pci-10de.present": "true",
    }


def test_no_gpu_capacity_nor_gfd_labels_at_start() -> None:
    node = _lab_node()
    assert not any(key.startswith("nvidia.com/") for key in node["metadata"]["labels"])
    assert not any(key.startswith("nvidia.com/") for key in node["status"]["capacity"])
    assert not any(key.startswith("nvidia.com/") for key in node["status"]["allocatable"])


def test_status_conditions_addresses_and_endpoints() -> None:
    status = _lab_node()["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert [c["type"] for c in status["conditions"]] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"], conditions["Ready"]["message"]) == (
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )
    assert all(conditions[t]["status"] == "False" for t in ("MemoryPressure", "DiskPressure", "PIDPressure"))
    assert conditions["Ready"]["lastHeartbeatTime"] == "2026-11-29T12:00:00Z"
    internal, hostname = status["addresses"]
    assert internal["type"] == "InternalIP" and ipaddress.ip_address(
        internal["address"]
    ) in ipaddress.ip_network("10.0.0.0/8")
    assert hostname == {"type": "Hostname", "address": "lab-node"}
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}


def test_node_info_is_realistic_and_stable() -> None:
    info = _lab_node()["status"]["nodeInfo"]
    assert info["osImage"] == "Ubuntu 24.04.3 LTS"
    assert info["kernelVersion"] == "6.8.0-101-generic"
    assert info["containerRuntimeVersion"].startswith("containerd://2.1.")
    assert info["kubeletVersion"].startswith("v1.37.")
    assert (info["operatingSystem"], info["architecture"]) == ("linux", "amd64")
    assert len(info["machineID"]) == 32 and len(info["systemUUID"]) == 36 and len(info["bootID"]) == 36
    assert "kubeProxyVersion" in info
    assert _lab_node()["status"]["nodeInfo"] == info


def test_runtime_handlers_follow_the_host_toolkit() -> None:
    lab = _lab_node()["status"]["runtimeHandlers"]
    assert [h["name"] for h in lab] == ["", "nvidia", "runc"]
    assert all(h["features"] == {"recursiveReadOnlyMounts": True, "userNamespaces": True} for h in lab)
    bare = nodes.node_object(expand_nodes(load_scenario("upgrade4"))[0], now=NOW)["status"]["runtimeHandlers"]
    assert [h["name"] for h in bare] == ["", "runc"]


def test_capacity_and_allocatable_scale_with_the_machine() -> None:
    lab = _lab_node()["status"]
    dgx = nodes.node_object(expand_nodes(load_scenario("upgrade4"))[0], now=NOW)["status"]
    for status in (lab, dgx):
        capacity, allocatable = status["capacity"], status["allocatable"]
        assert (
            set(capacity)
            == set(allocatable)
            == {"cpu", "ephemeral-storage", "hugepages-1Gi", "hugepages-2Mi", "memory", "pods"}
        )
        assert capacity["pods"] == "110"
        memory = int(capacity["memory"].removesuffix("Ki"))
        assert int(allocatable["memory"].removesuffix("Ki")) == memory - 100 * 1024  # eviction threshold
        disk = int(capacity["ephemeral-storage"].removesuffix("Ki")) * 1024
        assert int(allocatable["ephemeral-storage"]) == int(disk * 0.9)  # nodefs.available<10%
    assert int(dgx["capacity"]["cpu"]) > int(lab["capacity"]["cpu"])
    assert int(dgx["capacity"]["memory"][:-2]) > 16 * int(lab["capacity"]["memory"][:-2])


def test_scenario_labels_taints_and_cordon_and_cpu_nodes() -> None:
    scenario = parse_scenario("""
nodes:
  - name: gpu
    gpu: {model: a100-80gb, count: 4}
    os: rhel9.4
    kernel: 5.14.0-427.13.1.el9_4.x86_64
    instanceType: p4d.24xlarge
    labels: {nvidia.com/gpu.product: hand-set, team: ml}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
    unschedulable: true
  - name: cpu
""")
    gpu, cpu = (nodes.node_object(n, now=NOW) for n in expand_nodes(scenario))
    labels = gpu["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "hand-set" and labels["team"] == "ml"
    assert labels["node.kubernetes.io/instance-type"] == "p4d.24xlarge"
    assert (
        labels[f"{NFD}system-os_release.ID"] == "rhel"
        and labels[f"{NFD}system-os_release.VERSION_ID"] == "9.4"
    )
    assert labels[f"{NFD}kernel-version.full"] == "5.14.0-427.13.1.el9_4.x86_64"
    assert (labels[f"{NFD}kernel-version.major"], labels[f"{NFD}kernel-version.minor"]) == ("5", "14")
    assert gpu["status"]["nodeInfo"]["osImage"] == "Red Hat Enterprise Linux 9.4"
    assert gpu["spec"]["unschedulable"] is True
    assert gpu["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ]
    assert f"{NFD}pci-10de.present" not in cpu["metadata"]["labels"]
    assert "taints" not in cpu["spec"]


def test_not_ready_conditions_are_unknown() -> None:
    conditions = nodes.node_conditions(NOW, ready=False)
    assert {c["status"] for c in conditions} == {"Unknown"}
    assert conditions[-1]["type"] == "Ready" and conditions[-1]["reason"] == "NodeStatusUnknown"


def test_fleet_nodes_have_distinct_addresses() -> None:
    objects = [nodes.node_object(node, now=NOW) for node in expand_nodes(load_scenario("fleet-5000"))]
    assert len({o["status"]["addresses"][0]["address"] for o in objects}) == 5000
    assert len({o["spec"]["podCIDR"] for o in objects}) == 5000
    assert len({o["status"]["nodeInfo"]["machineID"] for o in objects}) == 5000


def test_machine_name_is_the_dmi_product_name() -> None:
    (lab,) = expand_nodes(load_scenario("lab"))
    assert nodes.machine_name(lab) == "MS-7C56"
    dgx = expand_nodes(load_scenario("upgrade4"))[0]
    assert nodes.machine_name(dgx) == "DGXH100"


def test_scenario_capacity_and_allocatable_win_over_the_machine() -> None:
    scenario = parse_scenario(
        "nodes:\n  - name: n\n    gpu: {model: t4}\n"
        "    capacity: {cpu: '48', memory: 196608000Ki}\n    allocatable: {memory: 190000000Ki}\n"
    )
    status = nodes.node_object(expand_nodes(scenario)[0], now=NOW)["status"]
    assert status["capacity"]["cpu"] == status["allocatable"]["cpu"] == "48", "capacity is allocatable too"
    assert (status["capacity"]["memory"], status["allocatable"]["memory"]) == ("196608000Ki", "190000000Ki")
    assert status["capacity"]["pods"] == "110", "what the scenario leaves out stays the machine's"
