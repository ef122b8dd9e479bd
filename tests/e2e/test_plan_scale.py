"""The plan's API requests do not grow with nodes (design §5): fleet-50 and fleet-500 cost the same requests,
and only each further page of 500 nodes adds one, and one of 500 NFD NodeFeatures (one per node)."""

from __future__ import annotations

from pathlib import Path

from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.sim.testing import SimFactory

SPEC = parse_spec(
    "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: fleet}\n"
    "spec:\n  driver: {owner: external}\n  toolkit: {owner: external}\n",
    filename="gpustack.yaml",
)


def requests_for(sim_factory: SimFactory, tmp_path: Path, nodes: int) -> tuple[int, int]:
    sim = sim_factory(f"fleet-{nodes}")
    assert sim.wait_idle(120)
    kubeconfig = sim.write_kubeconfig(tmp_path / f"kubeconfig-{nodes}")
    with KubernetesProvider(kubeconfig=str(kubeconfig)) as provider:
        snapshot = refresh.refresh(provider, SPEC, None)
        assert provider.request_count == snapshot.requests
    plan = make_plan(SPEC, None, snapshot)
    [plugin] = [
        c for c in plan.changes if c.address.endswith("DaemonSet/gpu-operator/nvidia-device-plugin-daemonset")
    ]
    sim.stop()
    return plan.api_requests, len(plugin.nodes)


def test_requests_do_not_grow_with_nodes(sim_factory: SimFactory, tmp_path: Path) -> None:
    small, small_nodes = requests_for(sim_factory, tmp_path, 50)
    large, large_nodes = requests_for(sim_factory, tmp_path, 500)
    assert (small_nodes, large_nodes) == (50, 500), "every GPU node is touched by the device plugin"
    assert small == large
    one_more_page, _ = requests_for(sim_factory, tmp_path, 501)
    assert one_more_page == large + 2, "a page more of nodes, and one of their NodeFeatures"
