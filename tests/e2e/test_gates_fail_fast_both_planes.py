"""A gate whose effect will not come fails at once on both control planes, not at its health timeout: a
device plugin whose config (the user's ConfigMap, which gpuplan does not read) renames the GPUs to
``nvidia.com/gpu.shared`` runs Running and Ready and leaves ``nvidia.com/gpu`` out of the node's capacity.
Timings come from the apply's own progress events, never the wall clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from lab_stack import lab_spec
from test_sharing_both_planes import scenario

from gpuplan.sim.testing import ClusterFactory, Kubectl

pytestmark = pytest.mark.kubectl

HOUR = 3600
RENAMED = """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_a_plugin_config_that_advertises_no_gpus_fails_the_capacity_gate_once_the_plugin_settled(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    cluster = cluster_factory(scenario(tmp_path, {"name": "l40s", "gpu": {"model": "l40s", "count": 2}}))
    assert cluster.wait_idle(60)
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(devicePlugin="{version: v0.20.1}"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert done.returncode == 0, done.stderr
    assert cluster.wait_idle(60)
    assert gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode").returncode == 0

    kubectl(
        "create",
        "configmap",
        "plugin-configs",
        "-n",
        "gpu-operator",
        f"--from-literal=shared={RENAMED}",
        kubeconfig=kubeconfig,
    )
    spec.write_text(
        lab_spec(
            devicePlugin="{version: v0.20.1, config: {name: plugin-configs, default: shared}, "
            f"healthTimeoutSeconds: {HOUR}}}"
        )
    )
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json")
    assert done.returncode == 1, done.stderr
    found = events(done.stdout)
    failed = [e for e in found if e["type"] == "progress" and e["state"] == "failed"]
    # GFD's gates judge the same capacity once GFD counted the GPUs; on a busy machine they may fail on it too
    assert {e["message"].split(";")[0] for e in failed} == {
        "l40s: allocatable nvidia.com/gpu is 0, expected 2"
    }, failed
    [gate] = [e for e in failed if e["component"] == "devicePlugin"]
    assert gate["component"] == "devicePlugin" and gate["gate"] == "allocatable" and gate["node"] == "l40s"
    assert gate["message"].startswith(
        "l40s: allocatable nvidia.com/gpu is 0, expected 2; nvidia-device-plugin-"
    )
    assert "without the kubelet reporting it" in gate["message"]
    assert gate["elapsed"] < HOUR / 30, "failed once the plugin settled, not at the health timeout"
    [errored] = [e for e in found if e["type"] == "change_errored" and e["reason"] != "Stopped"]
    assert errored["reason"] == "CapacityNotAdvertised"
    assert "Rolled back" in done.stderr
    assert cluster.wait_idle(60)

    spec.write_text(lab_spec(devicePlugin="{version: v0.20.1}"))
    assert gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode").returncode == 0, (
        "the rollback restored what the last good spec asks for"
    )
