"""The lab's DCGM exporter, applied by gpuplan, answers through its Service as on a real cluster: the
service proxy reaches the exporter's pod through the Endpoints the endpoints controller keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
from apply_process import gpuplan
from lab_stack import lab_spec
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.testing import Kubectl

pytestmark = pytest.mark.kubectl

METRICS = "/api/v1/namespaces/gpu-operator/services/nvidia-dcgm-exporter:gpu-metrics/proxy/metrics"


def test_dcgm_metrics_through_the_exporters_service(
    lab_writer: KubernetesWriter, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(dcgmExporter="{version: 4.6.0-4.8.3-distroless}"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    text = kubectl("get", "--raw", METRICS).stdout
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED"} <= families
