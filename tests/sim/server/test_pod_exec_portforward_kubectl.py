"""``kubectl exec`` (WebSocket, v5.channel.k8s.io) and ``kubectl port-forward`` (SPDY tunnelled in a
WebSocket) against the lab simulator, with the real kubectl 1.37.

The ``kubeconfig`` fixture here points the server tests' ``kubectl`` fixture at a whole simulator.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import json
import os
import re
import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory, kubectl_binary

pytestmark = pytest.mark.kubectl
Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]

MANIFESTS = Path(__file__).parents[1] / "e2e" / "manifests"
DEPLOY = ["device-plugin", "gpu-feature-discovery", "dcgm-exporter", "operator-validator"]
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"
NO_DRIVER_NODE = {"nodes": [{"name": "bare-node", "gpu": {"model": "rtx-3060", "count": 1}}]}


@pytest.fixture
def sim(lab_sim: Simulator) -> Simulator:
    return lab_sim


@pytest.fixture
def kubeconfig(sim: Simulator, tmp_path: Path) -> Path:
    return sim.write_kubeconfig(tmp_path / "kubeconfig")


def pod_names(sim: Simulator, namespace: str, prefix: str = "") -> list[str]:
    items = sim.store.list(sim.store.registry.for_kind("v1", "Pod"), namespace=namespace).items
    return [p["metadata"]["name"] for p in items if p["metadata"]["name"].startswith(prefix)]


def container_state(sim: Simulator, namespace: str, name: str) -> dict[str, Any]:
    pod = sim.store.get(sim.store.registry.for_kind("v1", "Pod"), namespace, name)
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]
    return state


def all_ready(sim: Simulator, namespace: str, count: int) -> bool:
    items = sim.store.list(sim.store.registry.for_kind("v1", "Pod"), namespace=namespace).items
    return len(items) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
        for p in items
    )


def create_pod(kubectl: Kubectl, name: str, image: str, node: str) -> None:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": image}]},
    }
    kubectl("create", "-f", "-", stdin=json.dumps(pod))


@pytest.fixture
def operator_lab(lab_sim: Simulator, kubectl: Kubectl) -> Simulator:
    """The lab with the GPU Operator's operands applied from the e2e manifests (a DCGM exporter runs)."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    kubectl("label", "node", "lab-node", *[f"nvidia.com/gpu.deploy.{c}=true" for c in DEPLOY])
    kubectl("apply", "-f", str(MANIFESTS))
    assert lab_sim.wait_for(lambda: all_ready(lab_sim, "gpu-operator", 4), 30)
    return lab_sim


# -- exec ---------------------------------------------------------------------------------------------------


def test_nvidia_smi_in_the_dcgm_exporter(operator_lab: Simulator, kubectl: Kubectl) -> None:
    pod = pod_names(operator_lab, "gpu-operator", "nvidia-dcgm-exporter")[0]
    out = kubectl("exec", "-n", "gpu-operator", pod, "--", "nvidia-smi").stdout
    assert "Driver Version: 580.105.08" in out and "CUDA Version: 13.0" in out
    assert "NVIDIA GeForce RTX 3060" in out and "12288MiB" in out
    query = kubectl(
        "exec", "-n", "gpu-operator", pod, "--",
        "nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader",
    ).stdout  # fmt: skip
    assert query == "NVIDIA GeForce RTX 3060, 580.105.08, 12288 MiB\n"
    listed = kubectl("exec", "-n", "gpu-operator", pod, "--", "nvidia-smi", "-L").stdout
    assert re.fullmatch(r"GPU 0: NVIDIA GeForce RTX 3060 \(UUID: GPU-[0-9a-f-]{36}\)\n", listed)


def test_nvidia_smi_without_a_driver_fails_as_the_real_one(sim_factory: SimFactory, tmp_path: Path) -> None:
    bare = sim_factory(NO_DRIVER_NODE)
    config = bare.write_kubeconfig(tmp_path / "bare-kubeconfig")
    command = [kubectl_binary(), f"--kubeconfig={config}", f"--cache-dir={tmp_path / 'cache'}"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda", "namespace": "default"},
        "spec": {"nodeName": "bare-node", "containers": [{"name": "c", "image": CUDA_IMAGE}]},
    }
    subprocess.run([*command, "create", "-f", "-"], input=json.dumps(pod), text=True, check=True)
    assert bare.wait_idle(30)
    result = subprocess.run(
        [*command, "exec", "cuda", "--", "nvidia-smi"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 9
    assert result.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA")
    assert "command terminated with exit code 9" in result.stderr


def test_an_unknown_command_is_not_found(sim: Simulator, kubectl: Kubectl) -> None:
    pod = pod_names(sim, "kube-system")[0]
    result = kubectl("exec", "-n", "kube-system", pod, "--", "nvidia-bug-report", check=False)
    assert result.returncode == 1
    assert 'exec: "nvidia-bug-report": executable file not found in $PATH' in result.stderr
    assert kubectl("exec", "-n", "kube-system", pod, "--", "echo", "hi").stdout == "hi\n"


def test_exec_in_a_container_that_is_not_running(sim: Simulator, kubectl: Kubectl) -> None:
    sim.set_slow_image("busybox:1.37-slow", 3600)
    create_pod(kubectl, "slow", "busybox:1.37-slow", "lab-node")
    result = kubectl("exec", "slow", "--", "true", check=False)
    assert result.returncode == 1
    assert 'unable to upgrade connection: container not found ("c")' in result.stderr
    pod = pod_names(sim, "kube-system")[0]
    sim.set_image_fault("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", "CrashLoopBackOff")
    assert sim.wait_for(lambda: "running" not in container_state(sim, "kube-system", pod), 30)
    crashing = kubectl("exec", "-n", "kube-system", pod, "--", "nvidia-smi", check=False)
    assert 'container not found ("nvidia-device-plugin-ctr")' in crashing.stderr


# -- port-forward --------------------------------------------------------------------------------------------


@pytest.fixture
def forward(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[str], int]]]:
    """Start ``kubectl port-forward ARGS``; returns the process and the local port it printed."""
    started: list[subprocess.Popen[str]] = []
    command = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}"]

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
        process = subprocess.Popen(
            [*command, "port-forward", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 9400"
        match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+) ->", line)
        assert match, line
        return process, int(match.group(1))

    yield start
    for process in started:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=30)


def gpu_temperature_lines(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]


@pytest.mark.parametrize("target", ["pod", "svc"])
def test_port_forward_reaches_the_dcgm_exporter(operator_lab: Simulator, forward: Any, target: str) -> None:
    name = (
        f"pod/{pod_names(operator_lab, 'gpu-operator', 'nvidia-dcgm-exporter')[0]}"
        if target == "pod"
        else "svc/nvidia-dcgm-exporter"
    )
    _, port = forward("-n", "gpu-operator", name, "0:9400")
    lines = gpu_temperature_lines(port)
    assert len(lines) == 1
    assert 'modelName="NVIDIA GeForce RTX 3060"' in lines[0] and 'gpu="0"' in lines[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as answer:
        assert answer.read() == b"OK"
    assert len(gpu_temperature_lines(port)) == 1  # a second connection through the same forward


def test_port_forward_to_a_port_nothing_serves(operator_lab: Simulator, forward: Any) -> None:
    pod = pod_names(operator_lab, "gpu-operator", "nvidia-dcgm-exporter")[0]
    process, port = forward("-n", "gpu-operator", f"pod/{pod}", "0:1234")
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    _, stderr = process.communicate(timeout=30)
    assert "error forwarding port 1234 to pod" in stderr and "connect: connection refused" in stderr


# -- kubectl's SPDY fallbacks -----------------------------------------------------------------------

NO_WEBSOCKETS = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}


def test_exec_over_plain_spdy(sim: Simulator, kubeconfig: Path, tmp_path: Path) -> None:
    pod = pod_names(sim, "kube-system")[0]
    command = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}"]
    env = {**os.environ, **NO_WEBSOCKETS}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "exec", "-n", "kube-system", pod, "--", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    listed = run("nvidia-smi", "-L")
    assert listed.returncode == 0 and listed.stdout.startswith("GPU 0: NVIDIA GeForce RTX 3060 (UUID: GPU-")
    failed = run("false")
    assert failed.returncode == 1 and "command terminated with exit code 1" in failed.stderr


def test_port_forward_over_plain_spdy(operator_lab: Simulator, forward: Any) -> None:
    _, port = forward("-n", "gpu-operator", "svc/nvidia-dcgm-exporter", "0:9400", env=NO_WEBSOCKETS)
    assert len(gpu_temperature_lines(port)) == 1


# -- the pod network ----------------------------------------------------------------------------------------


def exporter_ip(sim: Simulator) -> str:
    (name,) = pod_names(sim, "gpu-operator", "nvidia-dcgm-exporter")
    ip = str(sim.store.get(sim.store.registry.for_kind("v1", "Pod"), "gpu-operator", name)["status"]["podIP"])
    assert ipaddress.IPv4Address(ip).is_loopback and not ip.startswith("127.0.")
    return ip


def test_a_pod_ip_answers_metrics_over_plain_http(operator_lab: Simulator) -> None:
    ip = exporter_ip(operator_lab)
    with urllib.request.urlopen(f"http://{ip}:9400/metrics", timeout=30) as answer:
        text = answer.read().decode()
    assert any(line.startswith("DCGM_FI_DEV_GPU_TEMP{") for line in text.splitlines())
    with urllib.request.urlopen(f"http://{ip}:9400/health", timeout=30) as answer:
        assert answer.read() == b"OK"
    with pytest.raises(OSError):  # nothing listens on another port of the pod
        urllib.request.urlopen(f"http://{ip}:1234/metrics", timeout=30).read()


def test_the_endpoints_hold_the_pod_ips_that_answer(operator_lab: Simulator, kubectl: Kubectl) -> None:
    ip = exporter_ip(operator_lab)
    endpoints = json.loads(kubectl("get", "endpoints", "-n", "gpu-operator", "-o", "json").stdout)
    addresses = {
        address["ip"]
        for item in endpoints["items"]
        if item["metadata"]["name"] == "nvidia-dcgm-exporter"
        for subset in item.get("subsets") or []
        for address in subset.get("addresses") or []
    }
    assert addresses == {ip}
    with urllib.request.urlopen(f"http://{ip}:9400/metrics", timeout=30) as answer:
        assert answer.status == 200


def test_a_deleted_pod_ip_stops_answering(operator_lab: Simulator, kubectl: Kubectl) -> None:
    ip = exporter_ip(operator_lab)
    kubectl("delete", "daemonset", "-n", "gpu-operator", "nvidia-dcgm-exporter")
    assert operator_lab.wait_for(
        lambda: not pod_names(operator_lab, "gpu-operator", "nvidia-dcgm-exporter"), 30
    )
    assert operator_lab.wait_idle(30)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{ip}:9400/metrics", timeout=30).read()


def listening_addresses() -> list[ipaddress.IPv4Address]:
    """The local addresses of this process's listening TCP sockets (/proc/net/tcp, state 0A)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                hex_ip = fields[1].split(":")[0]
                raw = bytes.fromhex(hex_ip)
                packed = raw[::-1] if len(raw) == 4 else b"".join(raw[i : i + 4][::-1] for i in (0, 4, 8, 12))
                found.append(ipaddress.ip_address(packed))
    return found


def test_the_simulator_listens_only_on_loopback(operator_lab: Simulator) -> None:
    exporter = ipaddress.IPv4Address(exporter_ip(operator_lab))
    addresses = listening_addresses()
    assert exporter in addresses  # the pod's own listener is among them
    assert addresses and all(address.is_loopback for address in addresses), addresses


def test_two_simulators_hand_out_pod_ips_from_different_blocks(
    operator_lab: Simulator, sim_factory: SimFactory
) -> None:
    other = sim_factory("lab")
    assert other.wait_idle(30)
    (name,) = pod_names(other, "kube-system", "nvidia-device-plugin")
    pod = other.store.get(other.store.registry.for_kind("v1", "Pod"), "kube-system", name)
    theirs, ours = (
        ipaddress.IPv4Address(pod["status"]["podIP"]),
        ipaddress.IPv4Address(exporter_ip(operator_lab)),
    )
    assert theirs.is_loopback and theirs.packed[1] != ours.packed[1]


def test_a_kept_alive_connection_survives_a_garbage_collection(operator_lab: Simulator) -> None:
    """Prometheus holds one connection per target between scrapes; a collection while it idles must not end
    the server's side of it."""
    ip = exporter_ip(operator_lab)
    with socket.create_connection((ip, 9400), timeout=30) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(4096).endswith(b"\r\n\r\nOK")
        gc.collect()
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert conn.recv(4096).endswith(b"\r\n\r\nOK")
