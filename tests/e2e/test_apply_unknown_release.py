"""A device plugin version that was never released: `gpuplan validate` warns, and `gpuplan apply` fails at
the device plugin's health gate on the failed image pull, because the simulated registry does not have the
tag (before the registry catalog the simulator ran any tag, and this apply came out "healthy"). The gate
fails at the pod's first failed pull (ErrImagePull is one of its failing reasons, as ImagePullBackOff, which
the kubelet shows next); the message is the registry's NotFound."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from apply_process import gpuplan
from lab_stack import lab_spec

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

pytestmark = pytest.mark.kubectl

IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.99.0"


def test_an_unreleased_device_plugin_fails_its_gate_with_image_pull_back_off(
    lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(devicePlugin="{version: v0.99.0, healthTimeoutSeconds: 20}"))
    validated = gpuplan(kubeconfig, "validate", "-f", str(spec))
    assert validated.returncode == 0, validated.stderr
    assert "version v0.99.0 is not a known release of nvcr.io/nvidia/k8s-device-plugin" in validated.stdout

    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"devicePlugin at the rollout gate: (ErrImagePull|ImagePullBackOff) \(pod ", done.stderr)
    assert f'failed to pull and unpack image "{IMAGE}"' in done.stderr and "not found" in done.stderr
    assert "Rolled back" in done.stderr

    pods = json.loads(kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    images = [c["image"] for p in pods for c in p["spec"]["containers"]]
    assert IMAGE not in images, "the failed gate rolls the new device plugin back"
    events = kubectl("get", "events", "-A", "--field-selector", "reason=Failed").stdout
    assert f'Failed to pull image "{IMAGE}": rpc error: code = NotFound' in events
