"""`kubectl wait` and `kubectl rollout status` started while a pod cannot start return once it does, as on
a real cluster: kubectl 1.37 watches with the watch-list protocol (initial events, then the bookmark that
ends them) and returns when the condition holds."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, kubectl_binary

pytestmark = pytest.mark.kubectl

IMAGE = "busybox:1.36.1"
DAEMONSET = f"""\
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: sleeper, namespace: default}}
spec:
  selector: {{matchLabels: {{app: sleeper}}}}
  template:
    metadata: {{labels: {{app: sleeper}}}}
    spec:
      tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: sleep, image: "{IMAGE}", command: [sleep, infinity]}}]
"""


@pytest.fixture
def stuck_pod(lab_sim: Simulator, kubectl: Kubectl) -> str:
    """A DaemonSet whose one pod cannot pull its image yet; its name."""
    lab_sim.set_image_fault(IMAGE, "ImagePullBackOff")
    kubectl("apply", "-f", "-", input=DAEMONSET)
    assert lab_sim.wait_idle(10)
    name = kubectl("get", "pods", "-l", "app=sleeper", "-o", "jsonpath={.items[0].metadata.name}").stdout
    assert name
    return name


@pytest.fixture
def background(kubeconfig: Path, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """kubectl commands run in the background, killed at teardown if one still runs."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def start(background: list[subprocess.Popen[str]], kubeconfig: Path, tmp: Path, *args: str) -> int:
    command = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp / 'cache'}", *args]
    background.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return len(background) - 1


def test_wait_and_rollout_status_return_once_the_pod_is_ready(
    lab_sim: Simulator,
    stuck_pod: str,
    background: list[subprocess.Popen[str]],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    commands = [
        ("wait", "--for=condition=Ready", f"pod/{stuck_pod}", "--timeout=60s"),
        ("wait", "--for=jsonpath={.status.phase}=Running", f"pod/{stuck_pod}", "--timeout=60s"),
        ("wait", "--for=jsonpath={.status.numberReady}=1", "daemonset/sleeper", "--timeout=60s"),
        ("rollout", "status", "daemonset/sleeper", "--timeout=60s"),
    ]
    for args in commands:
        start(background, kubeconfig, tmp_path, *args)
    assert all(process.poll() is None for process in background), "returned before the pod could start"
    lab_sim.set_image_fault(IMAGE, None)
    outputs = [process.communicate(timeout=90) for process in background]
    assert [process.returncode for process in background] == [0, 0, 0, 0], outputs
    assert outputs[0][0] == outputs[1][0] == f"pod/{stuck_pod} condition met\n"
    assert outputs[2][0] == "daemonset.apps/sleeper condition met\n"
    assert 'daemon set "sleeper" successfully rolled out' in outputs[3][0]


def test_wait_returns_at_once_when_the_condition_already_holds(
    lab_sim: Simulator, stuck_pod: str, kubectl: Kubectl
) -> None:
    lab_sim.set_image_fault(IMAGE, None)
    assert lab_sim.wait_idle(10)
    out = kubectl("wait", "--for=condition=Ready", f"pod/{stuck_pod}", "--timeout=30s").stdout
    assert out == f"pod/{stuck_pod} condition met\n"
    out = kubectl("wait", "--for=delete", "pod/no-such-pod", "--timeout=30s", check=False)
    assert out.returncode == 0, out.stderr
