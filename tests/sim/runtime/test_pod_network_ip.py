"""A pod's listener is opened when the kubelet gives the pod its IP and kept until the pod goes, also while
the cache still holds the pod as it was before the status write naming that IP (a close and reopen of the
same address could fail: the close waits for the network's asyncio thread)."""

from __future__ import annotations

from typing import Any

from gpuplan.sim.cluster import Simulator

EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"


def exporter_pod(ip: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if ip is not None:
        status["podIP"] = ip
    return {
        "metadata": {"namespace": "gpu-operator", "name": "nvidia-dcgm-exporter-x1", "labels": {}},
        "spec": {"nodeName": "lab-node", "containers": [{"name": "exporter", "image": EXPORTER}]},
        "status": status,
    }


def test_a_pod_keeps_its_listener_while_the_cache_has_not_seen_its_ip_yet(lab_sim: Simulator) -> None:
    network, key = lab_sim.pod_network, ("gpu-operator", "nvidia-dcgm-exporter-x1")
    ip = "127.128.250.7"
    lab_sim.loop.run_sync(lambda: network._admitted(key, exporter_pod(), ip))
    lab_sim.loop.run_sync(lambda: network._sync(key, exporter_pod()))  # the cache's pod: no podIP yet
    assert (ip, 9400) in lab_sim.loop.run_sync(lambda: network.listening)
    lab_sim.loop.run_sync(lambda: network._sync(key, exporter_pod(ip)))
    assert (ip, 9400) in lab_sim.loop.run_sync(lambda: network.listening)
    lab_sim.loop.run_sync(lambda: network._sync(key, None))  # the pod is gone
    assert (ip, 9400) not in lab_sim.loop.run_sync(lambda: network.listening)
