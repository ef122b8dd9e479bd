"""`gpuplan sim start --control-plane kube`: a real kube-apiserver, etcd, kube-controller-manager and
kube-scheduler in a private network namespace, the scenario's GPU nodes registered through the API, kubectl
and the control API working through the caller's loopback, and `sim stop` leaving nothing running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuplan.sim.kube.process import KubeProcess, KubeProcessError
from gpuplan.sim.testing import Kubectl, kube_unavailable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(kube_unavailable() is not None, reason=f"real control plane: {kube_unavailable()}"),
]


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def test_lab_on_the_real_control_plane(tmp_path: Path, kubectl: Kubectl) -> None:
    cluster = KubeProcess("lab", tmp_path).start()
    try:
        config = cluster.kubeconfig
        record = json.loads(config.with_name(config.name + ".sim.json").read_text())
        assert record["controlPlane"] == "kube" and record["control"].startswith("http://127.0.0.1:")
        pid = int(record["pid"])
        programs = sorted(Path(f"/proc/{child}/comm").read_text().strip() for child in children_of(pid))
        assert programs == [
            "etcd",
            "kube-apiserver",
            "kube-controller",
            "kube-scheduler",
        ]  # comm: 15 characters

        version = json.loads(kubectl("version", "-o", "json", kubeconfig=config).stdout)
        assert version["serverVersion"]["gitVersion"] == "v1.37.2"
        nodes = json.loads(kubectl("get", "nodes", "-o", "json", kubeconfig=config).stdout)["items"]
        assert [n["metadata"]["name"] for n in nodes] == ["lab-node"]
        features = kubectl("get", "nodefeatures", "-A", "-o", "name", kubeconfig=config).stdout.split()
        assert features == ["nodefeature.nfd.k8s-sigs.io/lab-node"]
        # the hand-deployed device plugin was placed by the real DaemonSet controller and bound by the real
        # scheduler; the simulated kubelet ran it, and its pod IP is on the private pod network
        assert cluster.wait_idle(60)
        pods = json.loads(kubectl("get", "pods", "-n", "kube-system", "-o", "json", kubeconfig=config).stdout)
        plugin = pods["items"][0]
        assert plugin["status"]["phase"] == "Running" and plugin["status"]["podIP"].startswith("198.18.")
        capacity = json.loads(kubectl("get", "node", "lab-node", "-o", "json", kubeconfig=config).stdout)
        assert capacity["status"]["allocatable"]["nvidia.com/gpu"] == "1"
        # a real API server: its own RBAC and words
        denied = kubectl("auth", "can-i", "create", "pods", "--as=someone", kubeconfig=config, check=False)
        assert denied.stdout.strip() == "no"

        status = subprocess.run(
            [sys.executable, "-m", "gpuplan", "sim", "status", "--kubeconfig", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        assert "nodes: 1" in status.stdout and "kube-apiserver v1.37.2" in status.stdout
        assert cluster.status()["controlPlane"] == "kube"
        anonymous = urllib.request.Request(record["control"] + "/sim/v1/status")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(anonymous, timeout=30)
        with refused.value:
            assert refused.value.code == 401
        with pytest.raises(KubeProcessError, match="do not apply to the real control plane"):
            cluster._control("PATCH", "/sim/v1/faults", {"api": {"errorRate": 0.5}})
    finally:
        cluster.stop()
    assert not os.path.exists(f"/proc/{pid}") or not children_of(pid)
    assert not config.exists()
