"""Stories that must converge on the built-in control plane and on a real one (kube-apiserver, etcd, the real
DaemonSet controller and scheduler, the GPU nodes simulated through the API): after each apply, `plan
--detailed-exitcode` exits 0 and `drift report` exits 0. A real API server stores what it is sent the way Go
serialises it (no empty env value, canonical quantities), which a plan must compare as equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from lab_stack import LAB_SPEC, STACK_HEADER

from gpuplan.sim.testing import ClusterFactory

pytestmark = pytest.mark.slow

PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"

OWNED_DRIVER_SHARED = STACK_HEADER + (
    '  driver: {version: "580.105.08"}\n'
    "  toolkit: {}\n"
    "  devicePlugin: {version: v0.20.1, config: {timeSlicing: {replicas: 4}}}\n"
    "  gfd: {version: v0.20.1}\n"
    "  dcgmExporter: {version: 4.6.0-4.8.3-distroless}\n"
    "  validator: {}\n"
)
"""A stack that owns the driver and time-slices the GPUs: the device plugin's and GFD's config-manager and
the driver manager are where an empty env value once kept a real cluster from converging."""


def converged(kubeconfig: Path, spec: Path) -> None:
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "No changes. The cluster matches the configuration." in plan.stdout
    drift = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json")
    assert drift.returncode == 0, drift.stdout + drift.stderr


def applied(kubeconfig: Path, spec: Path) -> str:
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every changed component healthy" in done.stdout
    return done.stdout


def test_the_lab_imports_its_plugin_applies_and_converges(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster: Any = cluster_factory("lab")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(LAB_SPEC)

    first = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert first.returncode == 2 and f"gpuplan import -f {spec} {PLUGIN} {HAND}" in first.stdout
    adopted = gpuplan(kubeconfig, "import", "-f", str(spec), PLUGIN, HAND)
    assert adopted.returncode == 0, adopted.stderr
    applied(kubeconfig, spec)
    converged(kubeconfig, spec)


def test_an_owned_driver_with_time_slicing_converges_on_upgrade4(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(OWNED_DRIVER_SHARED)

    applied(kubeconfig, spec)
    converged(kubeconfig, spec)
    # a second apply of the same spec changes nothing: no "fix" of a value the server dropped
    again = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout + again.stderr
