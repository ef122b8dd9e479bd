"""The `mixed` scenario through the real API: GFD labels four GPU models as real GFD would, and a
crash-looping
image shows as CrashLoopBackOff in `kubectl get pods`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplan.sim.catalog import CATALOG
from gpuplan.sim.testing import Kubectl, SimFactory

MANIFESTS = Path(__file__).parent / "manifests"
BROKEN = "nvcr.io/nvidia/k8s/dcgm-exporter:9.9.9-broken"
MODELS = {"a100-node": "a100-80gb", "h100-node": "h100-80gb", "l40s-node": "l40s", "rtx-node": "rtx-3060"}

pytestmark = pytest.mark.kubectl


def test_gfd_labels_every_model_and_a_crash_loop_shows(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    sim = sim_factory("mixed")
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    sim.set_image_fault(BROKEN, "CrashLoopBackOff")
    kubectl(
        "label",
        "nodes",
        "--all",
        "nvidia.com/gpu.deploy.gpu-feature-discovery=true",
        "nvidia.com/gpu.deploy.dcgm-exporter=true",
        kubeconfig=config,
    )
    kubectl(
        "apply",
        "-f",
        str(MANIFESTS / "00-namespace.yaml"),
        "-f",
        str(MANIFESTS / "20-gfd.yaml"),
        kubeconfig=config,
    )
    exporter = [
        d
        for d in yaml.safe_load_all((MANIFESTS / "30-dcgm-exporter.yaml").read_text())
        if d["kind"] == "DaemonSet"
    ][0]
    exporter["spec"]["template"]["spec"]["containers"][0]["image"] = BROKEN
    kubectl("apply", "-f", "-", kubeconfig=config, input=yaml.safe_dump(exporter))
    assert sim.wait_idle(30)

    columns = [
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.family",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
        "nvidia.com/mig.capable",
    ]
    out = kubectl("get", "nodes", "-L", ",".join(columns), kubeconfig=config).stdout.splitlines()
    rows = {line.split()[0]: line.split()[-len(columns) :] for line in out[1:]}
    assert set(rows) == set(MODELS)
    for node, key in MODELS.items():
        model = CATALOG[key]
        count = {"a100-node": "8", "h100-node": "8", "l40s-node": "4", "rtx-node": "1"}[node]
        assert rows[node] == [
            model.product,
            model.family,
            count,
            str(model.memory_mib),
            str(model.mig_capable).lower(),
        ], node
    assert {row[1] for row in rows.values()} == {"ampere", "hopper", "ada-lovelace"}

    def restarts_everywhere() -> bool:
        pods = kubectl(
            "get",
            "pods",
            "-n",
            "gpu-operator",
            "-l",
            "app=nvidia-dcgm-exporter",
            "-o",
            "jsonpath={.items[*].status.containerStatuses[0].restartCount}",
            kubeconfig=config,
        ).stdout
        counts = [int(c) for c in pods.split()]
        return len(counts) == 4 and min(counts) >= 2

    assert sim.wait_for(restarts_everywhere, 30)
    table = kubectl(
        "get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter", kubeconfig=config
    ).stdout.splitlines()
    assert len(table) == 5
    for line in table[1:]:
        name, ready, status = line.split()[:3]
        assert (ready, status) == ("0/1", "CrashLoopBackOff"), line
    ds = kubectl(
        "get",
        "ds",
        "-n",
        "gpu-operator",
        "nvidia-dcgm-exporter",
        "-o",
        "jsonpath={.status.numberReady}/{.status.numberUnavailable}",
        kubeconfig=config,
    ).stdout
    assert ds == "0/4"
