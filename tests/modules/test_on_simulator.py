"""The rendered objects do their job: created on the simulated lab cluster, the operands become Ready and
have their real effects (allocatable GPUs, GFD labels), and the node facts and compatibility rules read the
result. A test of the modules' output against the simulator's kubelet rules, not of an apply engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from lab_stack import LAB_HEADER as LAB
from lab_stack import STACK_HEADER as HEADER

from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.spec import compat
from gpuplan.planner.spec import model as spec
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.cluster import Simulator

Start = Callable[[str], tuple[Simulator, spec.Spec]]


@pytest.fixture
def lab_with() -> Iterator[Start]:
    """Start the lab scenario, without its hand-deployed device plugin, with a spec's objects in it."""
    started: list[Simulator] = []

    def start(text: str) -> tuple[Simulator, spec.Spec]:
        stack = spec.parse_spec(text, filename="gpustack.yaml")
        data = yaml.safe_load(scenario_mod.load_scenario("lab").model_dump_json(exclude_none=True))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stack.spec.namespace}}
        data["objects"] = [namespace, *(dict(o.manifest) for o in stack.desired_objects())]
        sim = Simulator(data, tls=False)
        started.append(sim)
        sim.start()
        assert sim.wait_idle(30), "the simulated cluster did not settle"
        return sim, stack

    yield start
    for sim in started:
        sim.stop()
        assert sim.errors == []


def _list(sim: Simulator, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    resource = sim.store.registry.for_kind("v1", kind)
    assert resource is not None
    return sim.store.list(resource, namespace=namespace).items


def _ready_pods(sim: Simulator) -> dict[str, bool]:
    return {
        pod["metadata"]["name"].rsplit("-", 1)[0]: all(
            c.get("ready") for c in pod["status"]["containerStatuses"]
        )
        for pod in _list(sim, "Pod", "gpu-operator")
    }


def test_lab_stack_runs_and_advertises_the_gpu(lab_with: Start) -> None:
    sim, stack = lab_with(LAB)
    assert _ready_pods(sim) == {
        "nvidia-device-plugin-daemonset": True,
        "gpu-feature-discovery": True,
        "nvidia-dcgm-exporter": True,
        "nvidia-operator-validator": True,
    }
    node = NodeFacts.from_node(_list(sim, "Node")[0])
    assert node.allocatable_gpus == 1
    assert (node.gpu_product, node.cc, node.driver_version, node.driver_version_source) == (
        "NVIDIA-GeForce-RTX-3060",
        (8, 6),
        "580.105.08",
        "gfd-label",
    )
    assert compat.check_nodes(stack, [node]) == []


def test_time_slicing_config_reaches_the_node(lab_with: Start) -> None:
    sim, _ = lab_with(LAB + "  devicePlugin: {config: {timeSlicing: {replicas: 4}}}\n")
    node = NodeFacts.from_node(_list(sim, "Node")[0])
    assert node.allocatable_gpus == 4
    assert node.gpu_product == "NVIDIA-GeForce-RTX-3060-SHARED"


def test_a_gpuplan_driver_backs_off_a_host_driver(lab_with: Start) -> None:
    """k8s-driver-manager labels the node pre-installed; the deploy-label affinity then removes the driver
    pod, as the operator's nodeSelector would; compat reports the conflict."""
    sim, stack = lab_with(HEADER + "  {}\n")
    pods = _ready_pods(sim)
    assert "nvidia-driver-daemonset" not in pods and pods["nvidia-device-plugin-daemonset"] is True
    node = NodeFacts.from_node(_list(sim, "Node")[0])
    assert node.preinstalled_driver
    assert [f.message for f in compat.blocking(compat.check_nodes(stack, [node]))] == [
        "the node already runs a host driver (driver 580.105.08); a containerised driver cannot replace it"
    ]


def test_mps_config_runs_the_control_daemon_and_shares_the_gpu(lab_with: Start) -> None:
    """GFD labels the node MPS-capable, the daemon lands there, and the plugin, which waited for it,
    advertises 4 replicas of the GPU."""
    sim, stack = lab_with(LAB + "  devicePlugin: {config: {mps: {replicas: 4}}}\n")
    assert _ready_pods(sim)["nvidia-device-plugin-mps-control-daemon"] is True
    raw = _list(sim, "Node")[0]
    labels = raw["metadata"]["labels"]
    assert (labels["nvidia.com/mps.capable"], labels["nvidia.com/gpu.sharing-strategy"]) == ("true", "mps")
    assert labels["nvidia.com/gpu.replicas"] == "4"
    node = NodeFacts.from_node(raw)
    assert (node.allocatable_gpus, node.gpu_product) == (4, "NVIDIA-GeForce-RTX-3060-SHARED")
    assert compat.check_nodes(stack, [node]) == []
