"""`gpuplan plan` on the four-node ``upgrade4`` scenario names the GPU pods a driver version change evicts:
the stack runs the old driver (applied and recorded), a GPU pod runs on one node, and the plan for the new
version lists it under the driver change in the text, the JSON, a saved plan and `gpuplan show`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apply_process import upgrade4_running

from gpuplan.cli import run
from gpuplan.planner.apply.model import ApplyOptions, NullHooks
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.state.local import LocalFileBackend

OLD, NEW = "580.105.08", "595.91.07"
DRIVER = "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset"
NODES = [f"gpu-node-{i}" for i in range(1, 5)]


def spec_text(version: str) -> str:
    return (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: upgrade}\nspec:\n"
        f'  driver:\n    version: "{version}"\n    healthTimeoutSeconds: 60\n'
    )


@dataclass
class Cluster:
    sim: Simulator
    kubeconfig: Path
    folder: Path

    def create_pod(self, name: str, node: str, resources: dict[str, str]) -> None:
        rt = self.sim.store.registry.for_kind("v1", "Pod")
        assert rt is not None
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "main",
                        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                        "resources": {"limits": resources},
                    }
                ],
            },
        }
        self.sim.store.create(rt, pod, manager="kubectl")

    def record_requests(self, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
        """(path, field selector) of every request the API server answers from now on."""
        seen: list[tuple[str, str | None]] = []
        server = self.sim._server
        assert server is not None
        answer = server.answer

        def recording(request: Any, conn: Any) -> Any:
            seen.append((request.path, request.param("fieldSelector")))
            return answer(request, conn)

        monkeypatch.setattr(server, "answer", recording)
        return seen

    def plan(self, capsys: pytest.CaptureFixture[str], *args: str) -> str:
        spec = self.folder / "gpustack.yaml"  # beside gpuplan.state.json, where the CLI looks for the state
        spec.write_text(spec_text(NEW))
        capsys.readouterr()
        assert run(["--kubeconfig", str(self.kubeconfig), "plan", "-f", str(spec), *args]) == 0
        return capsys.readouterr().out


@pytest.fixture
def cluster(sim_factory: SimFactory, tmp_path: Path) -> Iterator[Cluster]:
    """upgrade4 running the stack at the OLD driver, recorded in the state by a first apply (which adopts the
    running objects and restarts nothing)."""
    spec = parse_spec(spec_text(OLD), filename="gpustack.yaml")
    sim = upgrade4_running(sim_factory, spec)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    try:
        with backend.locked("apply"):
            state = backend.read()
            plan = make_plan(spec, state, refresh.refresh(writer, spec, state))
            result = apply(
                plan,
                spec=spec,
                backend=backend,
                writer=writer,
                hooks=NullHooks(),
                options=ApplyOptions(poll_seconds=0.5),
            )
        assert result.ok, result.message
    finally:
        writer.close()
        backend.close()
    yield Cluster(sim, kubeconfig, tmp_path)


def driver_change(document: dict[str, Any]) -> dict[str, Any]:
    return next(change for change in document["changes"] if change["address"] == DRIVER)


@pytest.mark.slow
def test_the_plan_of_a_driver_change_names_the_gpu_pods_it_evicts(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.create_pod("train", "gpu-node-2", {"nvidia.com/gpu": "1"})
    cluster.create_pod("web", "gpu-node-3", {"cpu": "1"})  # no GPU: the rollout leaves it running

    text = cluster.plan(capsys)
    assert "! disruptive: the driver restarts on 4 nodes, node by node" in text
    assert "        evicts on gpu-node-2: default/train\n" in text
    assert "        no GPU pods on gpu-node-1, gpu-node-3, gpu-node-4\n" in text
    assert "web" not in text

    seen = cluster.record_requests(monkeypatch)
    document = json.loads(cluster.plan(capsys, "--json"))
    pod_reads = [selector for path, selector in seen if path == "/api/v1/pods"]
    assert pod_reads == ["status.phase=Pending"] + [f"spec.nodeName={node}" for node in NODES], (
        "the pending pods (a pull the network fails), then one list per node, in rollout order"
    )
    assert document["api_requests"] == len(seen), "the plan counts every request it made, the pod reads too"
    change = driver_change(document)
    assert change["action"] == "update" and change["disruptive"]
    assert change["gpu_pods"] == {node: (["default/train"] if node == "gpu-node-2" else []) for node in NODES}
    assert change["gpu_pods_note"] == ""

    saved = cluster.folder / "driver.plan"
    cluster.plan(capsys, "--out", str(saved))
    assert driver_change(json.loads(saved.read_text()))["gpu_pods"] == change["gpu_pods"]
    assert run(["show", str(saved)]) == 0
    assert "        evicts on gpu-node-2: default/train\n" in capsys.readouterr().out


@pytest.mark.slow
def test_the_plan_apply_shows_before_it_asks_names_the_gpu_pods_too(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpuplan apply` without --auto-approve shows the plan it would apply, then (no terminal here) refuses:
    the plan the user would confirm names the evicted pods as `gpuplan plan` does, and nothing changed."""
    cluster.create_pod("train", "gpu-node-2", {"nvidia.com/gpu": "1"})
    spec = cluster.folder / "gpustack.yaml"
    spec.write_text(spec_text(NEW))
    capsys.readouterr()
    assert run(["--kubeconfig", str(cluster.kubeconfig), "apply", "-f", str(spec)]) == 1
    captured = capsys.readouterr()
    assert "        evicts on gpu-node-2: default/train\n" in captured.out
    assert "apply needs confirmation" in captured.err
    nodes_rt = cluster.sim.store.registry.for_kind("v1", "Node")
    assert nodes_rt is not None
    assert not any(
        (node.get("spec") or {}).get("unschedulable") for node in cluster.sim.store.list(nodes_rt).items
    )
