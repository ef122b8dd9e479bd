"""The ``gpu-operator`` scenario: the lab as GPU Operator v26.7.0 leaves it (driver and toolkit on the
host). Its ClusterPolicy reads ready in kubectl, its operands run on the node, and they are owned by the
ClusterPolicy the way the operator's SetControllerReference makes them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from gpuplan.sim.cluster import Simulator, SimulatorError
from gpuplan.sim.testing import SimFactory

Kubectl = Callable[..., CompletedProcess[str]]
OPERANDS = {
    "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
}


def _started(sim_factory: SimFactory, tmp_path: Path) -> tuple[Simulator, Path]:
    sim = sim_factory("gpu-operator")
    assert sim.wait_idle(30), "the gpu-operator scenario did not settle"
    return sim, sim.write_kubeconfig(tmp_path / "kubeconfig")


def test_the_cluster_policy_reads_ready_and_its_operands_are_ready(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    _, config = _started(sim_factory, tmp_path)
    table = kubectl("get", "clusterpolicy", kubeconfig=config).stdout.split("\n")
    assert table[0].split() == ["NAME", "STATUS", "AGE"] and table[1].split()[:2] == [
        "cluster-policy",
        "ready",
    ]
    daemonsets = json.loads(
        kubectl("get", "ds", "-n", "gpu-operator", "-o", "json", kubeconfig=config).stdout
    )
    status = {ds["metadata"]["name"]: ds["status"] for ds in daemonsets["items"]}
    assert set(status) == OPERANDS
    for name, counts in status.items():
        assert counts["desiredNumberScheduled"] == counts["numberReady"] == 1, (name, counts)
    pods = json.loads(kubectl("get", "pods", "-n", "gpu-operator", "-o", "json", kubeconfig=config).stdout)
    assert {p["spec"]["nodeName"] for p in pods["items"]} == {"lab-node"}
    assert all(p["status"]["phase"] == "Running" for p in pods["items"])
    node = json.loads(kubectl("get", "node", "lab-node", "-o", "json", kubeconfig=config).stdout)
    assert (
        node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    )  # the operator's device plugin advertises it


def test_the_operands_are_owned_by_the_cluster_policy(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    _, config = _started(sim_factory, tmp_path)
    policy = json.loads(
        kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json", kubeconfig=config).stdout
    )
    daemonsets = json.loads(
        kubectl("get", "ds", "-n", "gpu-operator", "-o", "json", kubeconfig=config).stdout
    )
    for ds in daemonsets["items"]:
        [owner] = ds["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "ClusterPolicy",
            "cluster-policy",
            policy["metadata"]["uid"],
        )
        assert owner["controller"] is True
        assert ds["metadata"]["annotations"]["nvidia.com/last-applied-hash"].isdigit()
    deployment = json.loads(
        kubectl("get", "deploy", "gpu-operator", "-n", "gpu-operator", "-o", "json", kubeconfig=config).stdout
    )
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    )
    # deleting the ClusterPolicy takes its operands with it, as the garbage collector does
    kubectl("delete", "clusterpolicy", "cluster-policy", "--wait=true", kubeconfig=config)
    left = json.loads(kubectl("get", "ds", "-n", "gpu-operator", "-o", "json", kubeconfig=config).stdout)
    assert left["items"] == []


def test_an_owner_missing_from_the_scenario_is_named(sim_factory: SimFactory) -> None:
    orphan = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "orphan",
            "namespace": "default",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "nobody"}],
        },
    }
    scenario = {"nodes": [{"name": "n1"}], "objects": [orphan]}
    with pytest.raises(SimulatorError) as raised:
        sim_factory(scenario)
    error = raised.value
    assert "ownerReference to ConfigMap nobody" in str(error)
    assert "objects[0] (ConfigMap default/orphan)" in error.where


def test_the_bare_fleet_variant_runs_every_operand_on_every_node(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    """gpu-operator-bare: nothing NVIDIA on the hosts, the operator's driver and toolkit DaemonSets too."""
    sim = sim_factory("gpu-operator-bare")
    assert sim.wait_idle(60), "the gpu-operator-bare scenario did not settle"
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    state = kubectl(
        "get", "clusterpolicy", "cluster-policy", "-o", "jsonpath={.status.state}", kubeconfig=config
    )
    assert state.stdout == "ready"
    daemonsets = json.loads(
        kubectl("get", "ds", "-n", "gpu-operator", "-o", "json", kubeconfig=config).stdout
    )
    status = {ds["metadata"]["name"]: ds["status"] for ds in daemonsets["items"]}
    assert set(status) == OPERANDS | {"nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset"}
    for name, counts in status.items():
        assert counts["desiredNumberScheduled"] == counts["numberReady"] == 2, (name, counts)
    nodes = json.loads(kubectl("get", "nodes", "-o", "json", kubeconfig=config).stdout)["items"]
    assert [n["status"]["allocatable"].get("nvidia.com/gpu") for n in nodes] == ["1", "1"]
