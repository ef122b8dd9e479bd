"""`gpuplan apply` on simulated fleets: what the health gates list does not grow with the nodes. The nodes are
listed a few times for the whole apply, whatever the fleet (every read of them shares one cache, kept by one
watch follower while a gate holds it, left to rest while the gates read their DaemonSets' status alone); a
gate follows its DaemonSet's status while the rollout moves and counts the pods by it once done, so only the
DCGM exporter's pods are read (its scrape sample, by node once the status counts every exporter); no pass is
confirmed by listing again (fleet-20 and fleet-120 fit every list in one page)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from gpuplan.cli import run
from gpuplan.sim.testing import SimFactory

if str(Path(__file__).parent) not in sys.path:  # importlib mode keeps tests/e2e off sys.path
    sys.path.insert(0, str(Path(__file__).parent))

from request_log import record_queries  # noqa: E402

pytestmark = pytest.mark.slow

FLEET_SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: fleet}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
"""
"""The benchmarks' stack: driver and toolkit on the hosts, the other four components owned by gpuplan."""


def apply_lists(
    sim_factory: SimFactory, nodes: int, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> Counter[str]:
    """The full lists (GETs of a collection that are not watches) of nodes and pods of one apply on
    ``fleet-<nodes>``, by path."""
    sim = sim_factory(f"fleet-{nodes}")
    assert sim.wait_idle(120)
    folder.mkdir()
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    spec = folder / "gpustack.yaml"
    spec.write_text(FLEET_SPEC)
    seen = record_queries(sim, monkeypatch)
    assert run(["--kubeconfig", str(kubeconfig), "apply", "-f", str(spec), "--auto-approve"]) == 0
    monkeypatch.undo()
    sim.stop()

    return Counter(
        path + (" by node" if "spec.nodeName" in str(query.get("fieldSelector")) else "")
        for method, path, query in seen
        if method == "GET" and path.endswith(("/nodes", "/pods")) and "watch" not in query
    )


def test_an_apply_lists_the_nodes_and_each_components_pods_once_whatever_the_fleet(
    sim_factory: SimFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    small = apply_lists(sim_factory, 20, tmp_path / "small", monkeypatch)
    big = apply_lists(sim_factory, 120, tmp_path / "big", monkeypatch)
    exporters, nodes = "/api/v1/namespaces/gpu-operator/pods", "/api/v1/nodes"
    for counted in (small, big):
        assert counted.pop(exporters, 0) <= 2, (
            "only the DCGM exporter's pods: the driver-version check's look for a DCGM source if it "
            "comes before the exporter's changes start, and the gate's own read if it starts before the "
            "status counts every exporter; the other gates count theirs by their DaemonSets' status, "
            "which they follow alone while the rollouts move"
        )
        assert 2 <= counted.pop(nodes) <= 5, (
            "the plan's list, the one the gates share, and one more each time a gate needs the nodes "
            "after gates that read their DaemonSets' status alone let the node cache rest (at most once "
            "per component whose gates judge nodes)"
        )
    assert small == big, (small, big)
    assert big[f"{exporters} by node"] == 10, (
        "the scrape sample's pods, once the exporter's status counts every exporter available"
    )
    assert big["/api/v1/pods"] == 1, "the plan's Pending pods, for pulls its new images would fail"
    assert sum(big.values()) == 11, big
