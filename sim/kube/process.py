"""A cluster on the real control plane in a process of its own, driven from this one: what tests and
benchmarks use, since the cluster's process leaves its network namespace for good (``netns``).

``KubeProcess(scenario, folder).start()`` runs ``gpuplan sim start --control-plane kube --detach`` with a
kubeconfig in ``folder`` and returns once the API server and the nodes answer; the methods tests call on a
``Simulator`` that make sense for a real control plane (``write_kubeconfig``, ``wait_idle``, the node fault
controls) go to the cluster's ``/sim/v1/`` control API; ``stop()`` is ``gpuplan sim stop``.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

START_TIMEOUT = 300.0


class KubeProcessError(RuntimeError):
    """The cluster's process failed to start, or its control API refused a call."""


class KubeProcess:
    """A ``gpuplan sim start --control-plane kube`` process and its control API."""

    control_plane = "kube"

    def __init__(self, scenario: str | Path, folder: Path, *, kube_bin: str | Path | None = None) -> None:
        self.scenario = str(scenario)
        self.folder = folder
        self.kube_bin = kube_bin
        self.kubeconfig = folder / "kube.kubeconfig"
        self._record: dict[str, Any] | None = None

    def start(self) -> KubeProcess:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [*_gpuplan(), "sim", "start", "--control-plane", "kube", "--scenario", self.scenario]
        argv += ["--kubeconfig", str(self.kubeconfig), "--detach"]
        if self.kube_bin:
            argv += ["--kube-bin", str(self.kube_bin)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT, check=False)
        if done.returncode != 0:
            raise KubeProcessError(
                f"gpuplan sim start --control-plane kube failed:\n{done.stdout}{done.stderr}"
            )
        self._record = json.loads(self.kubeconfig.with_name(self.kubeconfig.name + ".sim.json").read_text())
        return self

    def stop(self) -> None:
        if self._record is None:
            return
        subprocess.run(
            [*_gpuplan(), "sim", "stop", "--kubeconfig", str(self.kubeconfig)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        self._record = None

    def __enter__(self) -> KubeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests ask of a cluster --------------------------------------------------------------------
    @property
    def url(self) -> str:
        return str(self._config()["clusters"][0]["cluster"]["server"])

    @property
    def ca_pem(self) -> bytes:
        return base64.b64decode(self._config()["clusters"][0]["cluster"]["certificate-authority-data"])

    @property
    def errors(self) -> list[BaseException]:
        """Failures inside the cluster's process are in its log, not here."""
        return []

    def write_kubeconfig(self, path: str | Path) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.kubeconfig, target)
        target.chmod(0o600)
        return target

    def wait_idle(self, timeout: float = 10.0) -> bool:
        return bool(self._control("POST", "/sim/v1/idle", {"timeoutSeconds": timeout})["idle"])

    def status(self) -> dict[str, Any]:
        return self._control("GET", "/sim/v1/status")

    def faults(self) -> dict[str, Any]:
        return self._control("GET", "/sim/v1/faults")

    def set_image_fault(self, image: str, kind: str | None) -> None:
        self._control("PATCH", "/sim/v1/faults", {"images": {image: kind}})

    def set_slow_image(self, image: str, seconds: float | None) -> None:
        self._control("PATCH", "/sim/v1/faults", {"slowImages": {image: seconds}})

    def set_gpu_fault(self, node: str, gpu: int, **fault: Any) -> None:
        self._control("PATCH", "/sim/v1/faults", {"gpus": [{"node": node, "gpu": gpu, **fault}]})

    def set_node_ready(self, name: str, ready: bool, *, unreachable: bool = True) -> None:
        reason = "unreachable" if unreachable else "not-ready"
        self._control("POST", f"/sim/v1/nodes/{name}/{'ready' if ready else 'notready'}", {"reason": reason})

    def set_host_driver(self, node: str, version: str) -> None:
        self._control("PUT", f"/sim/v1/nodes/{node}/hostdriver", {"version": version})

    # -- plumbing ---------------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = yaml.safe_load(self.kubeconfig.read_text())
        return config

    def _control(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._record is None or not self._record.get("control"):
            raise KubeProcessError("the cluster is not running, or runs without a control API")
        token = self._config()["users"][0]["user"]["token"]
        request = urllib.request.Request(
            str(self._record["control"]) + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=660) as answer:
                result: dict[str, Any] = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise KubeProcessError(
                f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}"
            ) from None
        return result


def _gpuplan() -> list[str]:
    return [sys.executable, "-m", "gpuplan"]
