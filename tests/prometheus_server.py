"""A real Prometheus server (Debian's ``prometheus`` package) scraping a simulator's DCGM exporters, for the
tests of the drift report's Prometheus source.

It scrapes each exporter as a real cluster's Prometheus does: at the pod's IP (``__address__``
``<podIP>:9400``, plain HTTP), which the simulator serves on loopback (``gpuplan.sim.kubelet.pod_network``),
and it keeps the pod's node as a ``node`` label: the relabelling docs/drift.md documents for
``kubernetes_sd_configs`` role pod. Debian builds Prometheus without Kubernetes SD (its NEWS.Debian,
1.5.0+ds-1: "Kubernetes support has been completely removed"), so :meth:`PrometheusServer.discover` stands in
for it: it lists the exporter pods through the API and writes them to a ``file_sd_configs`` file with the
target and the ``__meta_kubernetes_*`` labels Kubernetes SD gives a pod, and the same relabelling turns them
into targets.

The server runs as a child process on a free 127.0.0.1 port, its TSDB in the test's temp folder; no fixed
sleeps: :meth:`PrometheusServer.wait_for` polls the HTTP API until a condition holds, with a deadline.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuplan.providers.kubernetes_write import KubernetesWriter

EXPORTER_SELECTOR = "app=nvidia-dcgm-exporter"
SKIP_REASON = "prometheus is not installed (Debian's prometheus package; .ci/run installs it)"

CONFIG = """\
global: {{scrape_interval: {interval}, scrape_timeout: {timeout}}}
scrape_configs:
  - job_name: dcgm-exporter
    file_sd_configs: [{{files: [{targets}], refresh_interval: 1s}}]
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_app]
        regex: nvidia-dcgm-exporter
        action: keep
      - source_labels: [__meta_kubernetes_pod_node_name]
        target_label: node
"""


def binary() -> str | None:
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PrometheusServer:
    """One Prometheus process scraping the pods of the cluster ``kubeconfig`` names (see the module doc)."""

    def __init__(
        self,
        folder: Path,
        *,
        kubeconfig: Path,
        interval: str = "1s",
        timeout: str = "1s",
    ) -> None:
        self.folder = folder
        self.kubeconfig = kubeconfig
        folder.mkdir(parents=True, exist_ok=True)
        self.targets = folder / "targets.json"
        self.targets.write_text("[]")
        (folder / "prometheus.yml").write_text(
            CONFIG.format(
                targets=self.targets,
                interval=interval,
                timeout=timeout,
            )
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        path = binary()
        assert path is not None, SKIP_REASON
        log = (self.folder / "prometheus.log").open("wb")
        self._process = subprocess.Popen(
            [
                path,
                f"--config.file={self.folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.wait_for(lambda: self._get("/-/ready") is not None, what="Prometheus to be ready")
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def reload(self) -> None:
        """Read the configuration file again (SIGHUP, as ``systemctl reload`` sends it)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGHUP)

    def discover(self) -> int:
        """The exporter pods, listed through the API, as Kubernetes SD's target groups; returns how many."""
        with KubernetesWriter(kubeconfig=str(self.kubeconfig)) as client:
            pods = [pod.manifest for pod in client.list_pods(label_selector=EXPORTER_SELECTOR)]
        groups = [_target_group(pod) for pod in pods if (pod.get("status") or {}).get("podIP")]
        staged = self.targets.with_suffix(".tmp")
        staged.write_text(json.dumps(groups))
        staged.replace(self.targets)  # file SD must never read half a file
        return len(groups)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector of ``promql`` ([] while the server cannot answer)."""
        answer = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        result: list[dict[str, Any]] = (answer or {}).get("data", {}).get("result", [])
        return result

    def wait_for(self, condition: Callable[[], bool], *, what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self._process is not None and self._process.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.log_tail()}")
            time.sleep(0.2)  # polling the server's HTTP API: there is nothing to wait on but its answers

    def wait_for_nodes(
        self, nodes: int, *, metric: str = "DCGM_FI_DEV_GPU_TEMP", timeout: float = 90.0
    ) -> None:
        """Until ``metric`` has series from ``nodes`` distinct nodes (the first scrapes have landed)."""
        self.wait_for(
            lambda: len({s["metric"].get("node") for s in self.query(metric)}) >= nodes,
            what=f"{metric} from {nodes} node(s)",
            timeout=timeout,
        )

    def log_tail(self) -> str:
        log = self.folder / "prometheus.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                body = response.read()
        except OSError:
            return None
        try:
            document: dict[str, Any] = json.loads(body)
        except ValueError:
            return {}
        return document


def _target_group(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = pod["metadata"]
    labels = {
        f"__meta_kubernetes_pod_label_{_label_name(key)}": str(value)
        for key, value in (metadata.get("labels") or {}).items()
    }
    return {
        "targets": [f"{pod['status']['podIP']}:9400"],
        "labels": {
            **labels,
            "__meta_kubernetes_namespace": metadata["namespace"],
            "__meta_kubernetes_pod_name": metadata["name"],
            "__meta_kubernetes_pod_node_name": pod["spec"]["nodeName"],
        },
    }


def _label_name(key: str) -> str:
    """Kubernetes SD's sanitising of a label key into a label name (``/``, ``.``, ``-`` become ``_``)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in key)
