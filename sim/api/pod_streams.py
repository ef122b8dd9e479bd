"""The pods' streaming subresources: ``log``, ``exec`` and ``portforward``, routed to their modules.

The apiserver checks what it checks (the pod exists, the container name, a node is assigned) and hands the
rest to the node's kubelet: here a :class:`KubeletStreams` (the Simulator's, whose calls reach the kubelets
on the loop thread) for logs and exec, and the pod-proxy function for the bytes a forwarded port carries.
Answers: a :class:`~gpuplan.sim.api.protocol.Response`, a followed
:class:`~gpuplan.sim.api.pod_logs.LogStream`, or an :class:`~gpuplan.sim.api.protocol.Upgrade` (exec over
WebSocket, port-forward over SPDY).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from gpuplan.sim.api import pod_exec, pod_portforward
from gpuplan.sim.api.pod_logs import LogSource, LogStream, choose_container, container_status, serve_log
from gpuplan.sim.api.protocol import HttpError, Request, Response, Upgrade, method_not_allowed
from gpuplan.sim.api.routing import Route
from gpuplan.sim.api.store import ApiError, Store

SUBRESOURCES = ("log", "exec", "portforward")
ProxyFn = Callable[[dict[str, Any], int, str, str], tuple[int, str, bytes]]


class KubeletStreams(Protocol):
    """What the kubelets serve for these subresources (thread-safe: called from connection threads)."""

    @property
    def logs(self) -> LogSource: ...

    def exec(self, pod: dict[str, Any], container: str, command: list[str]) -> pod_exec.ExecOutcome: ...

    def reachable(self, node: str) -> bool: ...


def addresses_stream(route: Route) -> bool:
    rt = route.rt
    return bool(
        rt is not None
        and rt.group == ""
        and rt.plural == "pods"
        and route.name is not None
        and route.subresource in SUBRESOURCES
    )


class PodStreams:
    def __init__(
        self,
        store: Store,
        stopping: threading.Event,
        kubelet: KubeletStreams | None,
        proxy: ProxyFn | None,
    ) -> None:
        self.store, self.stopping, self.kubelet, self.proxy = store, stopping, kubelet, proxy

    def handle(self, route: Route, request: Request) -> Response | LogStream | Upgrade:
        assert route.rt is not None and route.name is not None
        # The routes' methods first: a method the subresource has no route for is 405 whatever the pod.
        allowed = ("GET", "HEAD") if route.subresource == "log" else ("GET", "POST")
        if request.method not in allowed:
            raise method_not_allowed()
        pod = self.store.get(route.rt, route.namespace, route.name)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if route.subresource == "log":
            if self.kubelet is None:
                return Response(200, b"", "text/plain")
            if node and not self.kubelet.reachable(node):
                address = self._kubelet_address(node)
                container = choose_container(pod, request.param("container"))
                url = f"https://{address}/containerLogs/{route.namespace}/{route.name}/{container}"
                raise HttpError(500, "", f'Get "{url}": dial tcp {address}: connect: no route to host')
            return serve_log(pod, request, self.kubelet.logs, self.stopping)
        if not node:
            raise HttpError(400, "BadRequest", f"pod {route.name} does not have a host assigned")
        if self.kubelet is not None and not self.kubelet.reachable(node):
            address = self._kubelet_address(node)
            raise HttpError(500, "", f"error dialing backend: dial tcp {address}: connect: no route to host")
        if route.subresource == "exec":
            return self._exec(pod, request)
        rt, namespace, name = route.rt, route.namespace, route.name
        return pod_portforward.upgrade(request, lambda: self._pod_now(rt, namespace, name), self.proxy)

    def _kubelet_address(self, node: str) -> str:
        """``IP:10250``, where the apiserver dials a node's kubelet (its InternalIP)."""
        rt = self.store.registry.for_kind("v1", "Node")
        try:
            found = self.store.get(rt, None, node) if rt is not None else {}
        except ApiError:
            found = {}
        addresses = (found.get("status") or {}).get("addresses") or []
        ip = next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), node)
        return f"{ip}:10250"

    def _pod_now(self, rt: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.store.get(rt, namespace, name)
        except ApiError as error:
            if error.code == 404:
                return None
            raise
        return found

    def _exec(self, pod: dict[str, Any], request: Request) -> Upgrade:
        container = choose_container(pod, request.param("container"))
        # a container not running now (never started, crash-looping, exited) is not found by the
        # kubelet, as kubectl users of a CrashLoopBackOff pod see it
        running = "running" in (container_status(pod, container).get("state") or {})
        if self.kubelet is None or not running:
            raise HttpError(400, "BadRequest", f'container not found ("{container}")')
        kubelet = self.kubelet
        return pod_exec.upgrade(request, lambda command: kubelet.exec(pod, container, command))
