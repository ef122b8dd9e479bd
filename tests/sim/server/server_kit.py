"""Helpers for the API server tests: constants, recorders, a raw HTTPS client and plain-dict objects.

A plain module (pytest runs with --import-mode=importlib, so test modules cannot import conftest);
``conftest.py`` puts this folder on sys.path and builds the fixtures from it.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.server import ApiServer
from gpuplan.sim.api.store import Store

TOKEN = "test-token-0123456789"
KUBECTL = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "kubectl"
RT = Registry.builtin()
NODES = RT.get("", "v1", "nodes")
PODS = RT.get("", "v1", "pods")
NAMESPACES = RT.get("", "v1", "namespaces")
DAEMONSETS = RT.get("apps", "v1", "daemonsets")
CONFIGMAPS = RT.get("", "v1", "configmaps")


@dataclass
class Recorder:
    """A stand-in for time.sleep that records what the server asked for instead of sleeping."""

    calls: list[float]

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@dataclass
class ProxyCalls:
    """A pod proxy that records its calls and answers a DCGM-style metric line naming the pod."""

    calls: list[tuple[str, int, str, str]]

    def __call__(self, pod: dict[str, Any], port: int, path: str, query: str) -> tuple[int, str, bytes]:
        name = pod["metadata"]["name"]
        self.calls.append((name, port, path, query))
        text = (
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",pod="{name}"}} 42\n'
        )
        return 200, "text/plain; version=0.0.4", text.encode()


@dataclass
class ControlCalls:
    """A /sim/ control callable that records its calls."""

    calls: list[tuple[str, str, dict[str, Any] | None]]

    def __call__(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        self.calls.append((method, path, body))
        return 200, {"ok": True, "path": path}


class Raw:
    """Plain HTTP(S) requests to the server with the CA from the server, for the wire-level checks."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.context = ssl.create_default_context(cadata=server.ca_pem.decode())

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.server.port, context=self.context, timeout=30)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | None = None,
        *,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = self.connection()
        try:
            sent = dict(headers or {})
            if token is not None:
                sent["Authorization"] = f"Bearer {token}"
            if isinstance(body, str):
                body = body.encode()
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        headers = kwargs.pop("headers", {}) or {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        code, _, payload = self.request(method, path, data, headers=headers, **kwargs)
        return code, json.loads(payload) if payload else None


# ---- plain-dict objects ------------------------------------------------------------------------------------


def node(
    name: str,
    *,
    ready: bool = True,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
    ip: str = "10.0.0.1",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": ip}],
            # Every field: the Python client's models reject a NodeSystemInfo missing one.
            "nodeInfo": {
                "kubeletVersion": "v1.37.1",
                "osImage": "Ubuntu 24.04.1 LTS",
                "kernelVersion": "6.8.0-101-generic",
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://2.1.4",
                "bootID": f"boot-{name}",
                "kubeProxyVersion": "",
                "machineID": f"machine-{name}",
                "operatingSystem": "linux",
                "systemUUID": f"uuid-{name}",
            },
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str = "gpu-1",
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool = True,
    waiting: str | None = None,
    ip: str = "10.244.0.5",
    port: int | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0"}
    if port is not None:
        container["ports"] = [{"containerPort": port, "name": "metrics"}]
    state: dict[str, Any] = (
        {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node_name, "containers": [container]},
        "status": {
            "phase": phase,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": ready,
                    "restartCount": 0,
                    "image": container["image"],
                    "imageID": "",
                    "state": state,
                }
            ],
        },
    }


def daemonset(
    name: str,
    *,
    namespace: str = "default",
    image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "nodeSelector": node_selector or {},
                    "containers": [{"name": "ctr", "image": image}],
                },
            },
        },
    }


def put(store: Store, rt: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Create ``obj`` in the store, status included (the store keeps status on create as a kubelet would
    write it afterwards through the status subresource)."""
    status = obj.get("status")
    namespace = obj["metadata"].get("namespace")
    created = store.create(rt, obj, namespace=namespace, manager="test")
    if status:
        created["status"] = status
        created = store.update(
            rt,
            created,
            namespace=namespace,
            name=obj["metadata"]["name"],
            manager="test",
            subresource="status",
        )
    return dict(created)
