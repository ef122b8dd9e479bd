"""``kubectl logs`` against the lab simulator: what the NVIDIA containers print, the options, the errors.

The ``kubeconfig`` fixture here points the server tests' ``kubectl`` fixture at the whole lab simulator.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import kubectl_binary

pytestmark = pytest.mark.kubectl
Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]

PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
SLOW_IMAGE = "busybox:1.37-slow"


@pytest.fixture
def kubeconfig(lab_sim: Simulator, tmp_path: Path) -> Path:
    return lab_sim.write_kubeconfig(tmp_path / "kubeconfig")


def pods(sim: Simulator, namespace: str) -> list[dict[str, Any]]:
    return sim.store.list(sim.store.registry.for_kind("v1", "Pod"), namespace=namespace).items


def plugin_pod(sim: Simulator) -> dict[str, Any]:
    return pods(sim, "kube-system")[0]


def restarts(sim: Simulator) -> int:
    statuses = plugin_pod(sim)["status"].get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def create_pod(kubectl: Kubectl, name: str, containers: list[dict[str, Any]], **spec: Any) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "lab-node", "containers": containers, **spec},
    }
    kubectl("create", "-f", "-", stdin=json.dumps(pod))


def test_the_device_plugin_logs_its_start(lab_sim: Simulator, kubectl: Kubectl) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    out = kubectl("logs", "-n", "kube-system", name).stdout
    assert '"Starting NVIDIA Device Plugin" version="v0.20.1"' in out
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in out
    assert out.splitlines()[0].startswith("I") and " main.go:235] " in out.splitlines()[0]


def test_tail_and_timestamps(lab_sim: Simulator, kubectl: Kubectl) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    lines = kubectl("logs", "-n", "kube-system", name, "--tail=2", "--timestamps").stdout.splitlines()
    assert len(lines) == 2
    stamp, _, text = lines[1].partition(" ")
    assert stamp.startswith("20") and stamp.endswith("Z") and "T" in stamp
    assert text.endswith("Registered device plugin for 'nvidia.com/gpu' with Kubelet")
    limited = kubectl("logs", "-n", "kube-system", name, "--limit-bytes=10").stdout
    assert len(limited) == 10


def test_previous_without_a_previous_run_is_refused(lab_sim: Simulator, kubectl: Kubectl) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    result = kubectl("logs", "-n", "kube-system", name, "--previous", check=False)
    assert result.returncode == 1
    assert (
        f'previous terminated container "nvidia-device-plugin-ctr" in pod "{name}" not found' in result.stderr
    )


def test_previous_after_a_crash_loop_restart(lab_sim: Simulator, kubectl: Kubectl) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    lab_sim.set_image_fault(PLUGIN_IMAGE, "CrashLoopBackOff")
    assert lab_sim.wait_for(lambda: restarts(lab_sim) >= 2, 30)
    previous = kubectl("logs", "-n", "kube-system", name, "--previous").stdout
    assert '"Starting NVIDIA Device Plugin"' in previous
    assert previous.splitlines()[-1].startswith("E")  # the run ended on its error line
    current = kubectl("logs", "-n", "kube-system", name).stdout
    assert current.splitlines()[-1].startswith("E")


def test_follow_ends_when_the_container_stops(lab_sim: Simulator, kubeconfig: Path, tmp_path: Path) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    command = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}"]
    with subprocess.Popen(
        [*command, "logs", "-f", "-n", "kube-system", name], stdout=subprocess.PIPE, text=True
    ) as follower:
        assert follower.stdout is not None
        first = follower.stdout.readline()
        assert '"Starting NVIDIA Device Plugin"' in first
        lab_sim.set_image_fault(PLUGIN_IMAGE, "CrashLoopBackOff")  # the container exits
        rest = follower.stdout.read()  # returns once kubectl ends: the stream ended
        assert follower.wait(30) == 0
    assert rest.splitlines()[-1].startswith("E")


def test_several_containers_need_a_name(lab_sim: Simulator, kubectl: Kubectl) -> None:
    echo = {"image": "busybox:1.37", "command": ["sh", "-c", "echo hello from a; sleep 3600"]}
    create_pod(
        kubectl,
        "two",
        [{"name": "a", **echo}, {"name": "b", "image": "busybox:1.37"}],
        initContainers=[{"name": "setup", "image": "busybox:1.37"}],
    )
    assert lab_sim.wait_idle(30)
    raw = kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log", check=False)
    assert raw.returncode == 1
    assert (
        "a container name must be specified for pod two, choose one of: [a b] "
        "or one of the init containers: [setup]" in raw.stderr
    )
    assert kubectl("logs", "two", "-c", "a").stdout == "hello from a\n"
    unknown = kubectl("logs", "two", "-c", "nope", check=False)
    assert "container nope is not valid for pod two" in unknown.stderr


def test_a_container_not_started_yet_is_waiting(lab_sim: Simulator, kubectl: Kubectl) -> None:
    lab_sim.set_slow_image(SLOW_IMAGE, 3600)
    create_pod(kubectl, "slow", [{"name": "c", "image": SLOW_IMAGE}])
    result = kubectl("logs", "slow", check=False)
    assert result.returncode == 1
    assert 'container "c" in pod "slow" is waiting to start: ContainerCreating' in result.stderr


def test_follow_ends_at_the_byte_limit(lab_sim: Simulator, kubectl: Kubectl) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    out = kubectl("logs", "-f", "--limit-bytes=15", "-n", "kube-system", name).stdout  # the container runs on
    assert out.startswith("I") and len(out) == 15


def test_a_node_whose_kubelet_is_down_cannot_be_reached(lab_sim: Simulator, kubectl: Kubectl) -> None:
    name = plugin_pod(lab_sim)["metadata"]["name"]
    lab_sim.set_node_ready("lab-node", False)
    result = kubectl("logs", "-n", "kube-system", name, check=False)
    assert result.returncode == 1
    assert re.search(
        r'Error from server: Get "https://[\d.]+:10250/containerLogs/kube-system/'
        + name
        + r'/nvidia-device-plugin-ctr": dial tcp [\d.]+:10250: connect: no route to host',
        result.stderr,
    ), result.stderr
    exec_result = kubectl("exec", "-n", "kube-system", name, "--", "nvidia-smi", check=False)
    assert "error dialing backend: dial tcp" in exec_result.stderr, exec_result.stderr
