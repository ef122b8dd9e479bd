"""Simulator start-up from scenarios: objects in dependency order, clear errors naming the bad object, clean
stop (no thread left), ports in use."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.sim.cluster import Simulator, SimulatorError
from gpuplan.sim.testing import SimFactory

NODE = {"name": "n1", "gpu": {"model": "t4", "count": 1}, "driver": "580.105.08", "toolkit": "1.18.1"}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {
        "group": "nvidia.com",
        "scope": "Cluster",
        "names": {
            "plural": "clusterpolicies",
            "singular": "clusterpolicy",
            "kind": "ClusterPolicy",
            "listKind": "ClusterPolicyList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
                "subresources": {"status": {}},
            }
        ],
    },
}
POLICY = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy"},
    "spec": {"driver": {"enabled": False}},
}
CONFIG = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "cfg", "namespace": "gpu-operator"},
    "data": {"a": "b"},
}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}


def sim_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("gpuplan-sim", "sim-"))]


def test_objects_are_created_crds_and_namespaces_first(sim_factory: SimFactory) -> None:
    """A custom resource and a namespaced object listed before their CRD and Namespace still work."""
    sim = sim_factory({"nodes": [NODE], "objects": [POLICY, CONFIG, CRD, NAMESPACE]})
    policy_rt = sim.store.registry.for_kind("nvidia.com/v1", "ClusterPolicy")
    assert policy_rt is not None
    policy = sim.store.get(policy_rt, None, "cluster-policy")
    assert policy["spec"] == {"driver": {"enabled": False}}
    assert policy["metadata"]["managedFields"][0]["manager"] == "kubectl-create"


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([CONFIG], "objects[0] (ConfigMap gpu-operator/cfg)"),
        ([POLICY], "the simulator serves no nvidia.com/v1 ClusterPolicy"),
    ],
)
def test_a_bad_scenario_object_is_named(objects: list[dict[str, Any]], message: str) -> None:
    before = sim_threads()
    with pytest.raises(SimulatorError) as exc:
        Simulator({"nodes": [NODE], "objects": objects}).start()
    assert message in exc.value.render()
    assert isinstance(exc.value, GpuplanError)
    assert sim_threads() == before, "a failed start leaves no thread behind"


def test_invalid_scenario_dict() -> None:
    with pytest.raises(SimulatorError) as exc:
        Simulator({"nodes": [{"name": "n1", "gpu": {"model": "no-such"}}]})
    assert "no-such" in exc.value.render()


def test_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SimulatorError, match=f"port {port} is already in use"):
            Simulator("lab", port=port).start()


def test_stop_joins_every_thread() -> None:
    before = sim_threads()
    with Simulator("lab") as sim:
        assert sim.wait_idle(10)
        assert len(sim_threads()) > len(before)
    assert sim_threads() == before


def test_wait_for_gives_up_at_its_timeout(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab")
    assert not sim.wait_for(lambda: False, 0.1)
    assert sim.wait_for(lambda: True, 0.1)


def test_the_rollout_step_delay_comes_from_the_scenarios_timing(sim_factory: SimFactory) -> None:
    paced = sim_factory({"nodes": [NODE], "timing": {"daemonSetRolloutStepSeconds": 12.5}}, serve=False)
    assert paced.daemonsets.rollout_step_seconds == 12.5
    assert sim_factory({"nodes": [NODE]}, serve=False).daemonsets.rollout_step_seconds == 0.0
