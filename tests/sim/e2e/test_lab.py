"""The seed lab's own checks, through the real API with the real kubectl, after the NVIDIA objects are applied
with the same manifests a user would apply (GPU Operator v26.7 operands, tests/sim/e2e/manifests/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

MANIFESTS = Path(__file__).parent / "manifests"
DEPLOY = ["device-plugin", "gpu-feature-discovery", "dcgm-exporter", "operator-validator"]
DEFAULT_METRICS = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
}

pytestmark = pytest.mark.kubectl


def pods_ready(sim: Simulator, namespace: str, count: int) -> bool:
    rt = sim.store.registry.for_kind("v1", "Pod")
    pods = sim.store.list(rt, namespace=namespace).items
    return len(pods) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
        for p in pods
    )


@pytest.fixture
def operator_lab(lab_sim: Simulator, kubectl: Kubectl) -> Simulator:
    """The lab after a user replaced the hand-deployed plugin with the GPU Operator's operands."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    kubectl("label", "node", "lab-node", *[f"nvidia.com/gpu.deploy.{c}=true" for c in DEPLOY])
    kubectl("apply", "-f", str(MANIFESTS))
    assert lab_sim.wait_for(lambda: pods_ready(lab_sim, "gpu-operator", 4), 30)
    assert lab_sim.wait_idle(30)
    return lab_sim


def test_pods_wide(operator_lab: Simulator, kubectl: Kubectl) -> None:
    out = kubectl("get", "pods", "-n", "gpu-operator", "-o", "wide").stdout.splitlines()
    assert out[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    rows = [line.split() for line in out[1:]]
    names = sorted(row[0].rsplit("-", 1)[0] for row in rows)
    assert names == [
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
        "nvidia-device-plugin-daemonset",
        "nvidia-operator-validator",
    ]
    for row in rows:
        assert row[1:4] == ["1/1", "Running", "0"], row
        assert row[5].startswith("127.") and row[6] == "lab-node", row  # pod IPs the simulator serves


def test_gpu_capacity_jsonpath(operator_lab: Simulator, kubectl: Kubectl) -> None:
    out = kubectl("get", "node", "-o", r"jsonpath={.items[0].status.capacity.nvidia\.com/gpu}").stdout
    assert out == "1"


def test_gfd_labels_show(operator_lab: Simulator, kubectl: Kubectl) -> None:
    out = kubectl("get", "node", "lab-node", "--show-labels").stdout
    labels = dict(item.split("=", 1) for item in out.splitlines()[1].split()[-1].split(","))
    expected = {
        "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060",
        "nvidia.com/gpu.memory": "12288",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "6",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/cuda.driver-version.full": "580.105.08",
    }
    assert {k: labels.get(k) for k in expected} == expected


def test_dcgm_metrics_through_the_pod_proxy(operator_lab: Simulator, kubectl: Kubectl) -> None:
    pod = kubectl(
        "get",
        "pods",
        "-n",
        "gpu-operator",
        "-l",
        "app=nvidia-dcgm-exporter",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ).stdout
    text = kubectl("get", "--raw", f"/api/v1/namespaces/gpu-operator/pods/{pod}:9400/proxy/metrics").stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= DEFAULT_METRICS
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge" and len(util.samples) == 1
    labels = util.samples[0].labels
    assert labels["gpu"] == "0" and labels["modelName"] == "NVIDIA GeForce RTX 3060"
    assert labels["DCGM_FI_DRIVER_VERSION"] == "580.105.08" and labels["UUID"].startswith("GPU-")


def test_delete_daemonset_takes_its_pods(operator_lab: Simulator, kubectl: Kubectl) -> None:
    kubectl("delete", "ds", "-n", "gpu-operator", "nvidia-dcgm-exporter")
    assert operator_lab.wait_idle(10)
    out = kubectl("get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter")
    assert "No resources found" in out.stdout + out.stderr


def test_the_hand_deployed_plugin_before_the_takeover(lab_sim: Simulator, kubectl: Kubectl) -> None:
    out = kubectl("get", "ds", "-n", "kube-system").stdout.splitlines()
    assert out[0].split()[:6] == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE"]
    assert out[1].split()[:6] == ["nvidia-device-plugin-daemonset", "1", "1", "1", "1", "1"]
    node: dict[str, Any] = json.loads(kubectl("get", "node", "lab-node", "-o", "json").stdout)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"


def test_kubectl_rollout_status_returns_once_the_daemonset_is_rolled_out(
    lab_sim: Simulator, kubectl: Kubectl
) -> None:
    """kubectl 1.37 watches with the watch-list protocol and waits for the bookmark that ends the initial
    events; without it `rollout status` never returned (kubectl's own timeout ends it here if it hangs)."""
    result = kubectl(
        "rollout",
        "status",
        "daemonset/nvidia-device-plugin-daemonset",
        "-n",
        "kube-system",
        "--timeout=60s",
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert 'daemon set "nvidia-device-plugin-daemonset" successfully rolled out' in result.stdout


def test_the_in_cluster_drift_cronjob_applies_with_kubectl(
    lab_sim: Simulator, kubectl: Kubectl, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpuplan drift cronjob | kubectl apply -f -` with kubectl's default schema validation: every object is
    created, the CronJob among them (batch/v1 was not served: "no matches for kind CronJob")."""
    from lab_stack import LAB_HEADER

    from gpuplan.cli import run

    spec = tmp_path / "gpustack.yaml"
    spec.write_text(LAB_HEADER)
    kubectl("apply", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: gpu-operator}\n")
    assert run(["drift", "cronjob", "-f", str(spec)]) == 0
    applied = kubectl("apply", "-f", "-", input=capsys.readouterr().out)
    assert "cronjob.batch/" in applied.stdout and "created" in applied.stdout, applied.stdout
    [cronjob] = json.loads(kubectl("get", "cronjobs", "-n", "gpu-operator", "-o", "json").stdout)["items"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
