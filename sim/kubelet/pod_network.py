"""The pod network: every simulated pod's IP is a loopback address this process serves, so a client that
dials ``podIP:port`` (Prometheus scraping an exporter, as in a cluster) reaches the pod's process.

- Addresses: each simulator takes a /16 of 127.0.0.0/8 (Linux routes the whole block to ``lo``), the first
  free one from 127.128.0.0/16 upward; it holds it by binding ``127.X.0.1`` on :data:`RESERVE_PORT`, so two
  simulators on one machine never hand out the same pod IP. Pods get ``127.X.0.2`` onwards (the kubelet
  runtime's allocation, ``KubeletRuntime.pod_ips``, ``pod_ips.PodIps``), wrapping round after the /16 as
  host-local IPAM does. A node agent may pass another network (its cluster's pod CIDR): its pods get those
  addresses and no listener.
- Listeners: one listening socket per (pod IP, port) the pod's process listens on (``ports.listening``:
  the DCGM exporter's 9400, the node-status exporter's 8000, a scenario's declared ports), opened when the
  pod has its IP and closed when it goes. Linux cannot bind one socket to a whole /8 without
  ``IP_TRANSPARENT`` (root and policy routing), and a socket on 0.0.0.0 would listen on every interface;
  per-address sockets keep everything on loopback. A listening socket costs a file descriptor and no thread.
- Serving: one asyncio thread accepts and reads HTTP/1.1 (keep-alive, GET/HEAD); which pod's port a
  connection reached is the accepted socket's own address (``getsockname``). The answer is the one the pod
  proxy gives (``KubeletRuntime.serve_proxy``, on the loop thread), so both paths see the same process. A
  process that does not answer (not running, or refusing the port) closes the connection, as a refused or
  reset dial.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import socket
import threading
from http import HTTPStatus
from typing import TYPE_CHECKING

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers.cache import Change, Key
from gpuplan.sim.kubelet import ports
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.pod_ips import FIRST_BLOCK, LAST_BLOCK, PodIps

if TYPE_CHECKING:
    from gpuplan.sim.kubelet.runtime import KubeletRuntime

log = logging.getLogger(__name__)

RESERVE_PORT = 65535
MAX_HEAD = 64 * 1024
Address = tuple[str, int]


class PodNetwork:
    """A handler of the loop: keeps a listener per served (pod IP, port); see the module doc."""

    def __init__(self, runtime: KubeletRuntime, ips: PodIps | None = None, *, listen: bool = False) -> None:
        """``ips``: where pod IPs come from (a node agent's cluster CIDR); None: a loopback /16 of its own,
        reserved at ``start``. Loopback addresses get listeners; the addresses of ``ips`` too with
        ``listen`` (a network this process can bind, as the real control plane's private namespace routes
        its pod CIDR to its loopback)."""
        self.runtime = runtime
        self.loop = runtime.loop
        self._ips = ips
        self._listen_all = listen
        self._reservation: socket.socket | None = None
        self._aio: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._dirty: set[Key] = set()
        self._listeners: dict[Key, dict[Address, socket.socket]] = {}
        self._by_ip: dict[str, Key] = {}
        self._assigned: dict[Key, str] = {}
        """The IP the kubelet gave each live pod (:meth:`_admitted`)."""
        self._stopping = False
        self._closing: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Reserve a /16 (unless given a network), point the runtime's allocation at it, start the serving
        thread."""
        if self._ips is None:
            self._reservation, octet = _reserve_block()
            self.runtime.pod_ips = PodIps.loopback(octet)
        else:
            self.runtime.pod_ips = self._ips
        self.runtime.on_pod_ip = self._admitted
        self._aio = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._aio.run_forever, name="gpuplan-sim-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        aio, thread = self._aio, self._thread
        if aio is None or thread is None:
            return
        self.loop.run_sync(self._forget_all)  # on the loop thread: no flush opens a socket after this
        asyncio.run_coroutine_threadsafe(self._shutdown(), aio).result(timeout=10)
        aio.call_soon_threadsafe(aio.stop)
        thread.join(timeout=10)
        aio.close()
        for sock in self._closing:
            sock.close()
        if self._reservation is not None:
            self._reservation.close()
        self._aio, self._thread, self._reservation = None, None, None

    def _forget_all(self) -> None:
        self._stopping = True
        self._closing = [sock for sockets in self._listeners.values() for sock in sockets.values()]
        self._listeners.clear()
        self._by_ip.clear()
        self._assigned.clear()

    @property
    def listening(self) -> list[Address]:
        """Every (address, port) with a listener now (read on the loop thread)."""
        return sorted(address for sockets in self._listeners.values() for address in sockets)

    # -- the loop's handler --------------------------------------------------------------------------
    def on_change(self, change: Change) -> None:
        if change.kind == "pods" and self._aio is not None and not self._stopping:
            self._dirty.add(change.key)

    def flush(self) -> bool:
        dirty, self._dirty = self._dirty, set()
        if self._stopping:
            return False
        for key in dirty:
            self._sync(key, self.loop.cache.pods.get(key))
        return False  # opening sockets writes nothing to the store

    def _admitted(self, key: Key, pod: Obj, ip: str) -> None:
        """The kubelet gave ``pod`` its IP: listen now, before any status naming it can be read."""
        if not self._stopping:
            self._assigned[key] = ip
            status = {**(pod.get("status") or {}), "podIP": ip, "phase": "Pending"}
            self._sync(key, {**pod, "status": status})

    def _sync(self, key: Key, pod: Obj | None) -> None:
        """Listen on what ``pod`` serves. Until the kubelet's status write naming the IP is in the cache, the
        pod seen there has none: the IP it was given is kept (a pod keeps its IP for life), so its listener
        is not closed and reopened, which could fail while the close waits for the asyncio thread."""
        if pod is None:
            self._assigned.pop(key, None)
        elif not (pod.get("status") or {}).get("podIP") and key in self._assigned:
            pod = {**pod, "status": {**(pod.get("status") or {}), "podIP": self._assigned[key]}}
        wanted = _served(pod, self.runtime.declared_ports, self._listen_all) if pod is not None else set()
        current = self._listeners.get(key, {})
        for address in set(current) - wanted:
            self._close(key, address)
        for address in sorted(wanted - set(current)):
            self._open(key, address)

    def _open(self, key: Key, address: Address) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # rebinding past TIME_WAIT
        try:
            sock.bind(address)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            log.warning("pod %s/%s cannot listen on %s:%d: %s", *key[-2:], *address, exc)
            return
        sock.setblocking(False)
        self._listeners.setdefault(key, {})[address] = sock
        self._by_ip[address[0]] = key
        assert self._aio is not None
        self._aio.call_soon_threadsafe(self._aio.add_reader, sock.fileno(), self._accept, sock)

    def _close(self, key: Key, address: Address) -> None:
        sockets = self._listeners.get(key, {})
        sock = sockets.pop(address)
        if not sockets:
            self._listeners.pop(key, None)
            if self._by_ip.get(address[0]) == key:
                del self._by_ip[address[0]]
        assert self._aio is not None
        self._aio.call_soon_threadsafe(_unlisten, self._aio, sock)

    # -- serving (the asyncio thread) ----------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, OSError):
            return
        conn.setblocking(False)
        assert self._aio is not None
        task = self._aio.create_task(self._connection(conn))
        self._tasks.add(task)  # the loop keeps only a weak reference: an unheld task is collected mid-read
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, conn: socket.socket) -> None:
        ip, port = conn.getsockname()[:2]
        reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEAD)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, keep_alive, length = _parse_head(head)
                if length:
                    await reader.readexactly(length)
                answer = await asyncio.wrap_future(
                    self.loop.submit(functools.partial(self._answer, ip, port, path))
                )
                if answer is None:
                    return
                writer.write(_response(answer, head_only=method == "HEAD", keep_alive=keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            return
        finally:
            writer.close()

    async def _shutdown(self) -> None:
        """Stop accepting and end every connection still open."""
        for sock in self._closing:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(sock.fileno())
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _answer(self, ip: str, port: int, path: str) -> ports.Answer | None:
        """The pod's answer (on the loop thread), or None when nothing there answers."""
        key = self._by_ip.get(ip)
        pod = self.loop.cache.pods.get(key) if key is not None else None
        if pod is None:
            return None
        try:
            answer = self.runtime.serve_proxy(pod, port, path)
        except store_mod.ApiError:
            return None  # the pod is not running and ready: no process accepts
        return None if ports.refused(answer) else answer


def _served(pod: Obj, declared: tuple[ports.DeclaredPort, ...], any_ip: bool = False) -> set[Address]:
    """The (pod IP, port) pairs ``pod``'s process listens on; none before it has an IP or once it ended.
    Only a loopback IP is served unless ``any_ip`` says this process may bind every pod IP."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    ip = str(status.get("podIP") or "")
    if not ip or spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return set()
    if not (any_ip or ipaddress.IPv4Address(ip).is_loopback):
        return set()
    return {(ip, port) for port in ports.listening(pod, declared)}


def _reserve_block() -> tuple[socket.socket, int]:
    for octet in range(FIRST_BLOCK, LAST_BLOCK + 1):
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            holder.bind((f"127.{octet}.0.1", RESERVE_PORT))
        except OSError:
            holder.close()
            continue
        return holder, octet
    raise OSError("no free /16 left in 127.128.0.0-127.254.255.255 for the pod network")


def _unlisten(aio: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    with contextlib.suppress(ValueError, OSError):
        aio.remove_reader(sock.fileno())
    sock.close()


def _parse_head(head: bytes) -> tuple[str, str, bool, int]:
    """Method, path, keep-alive and body length of an HTTP/1.x request head (ValueError when malformed)."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip().lower()
    connection = headers.get("connection", "")
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    path = target.split("?", 1)[0]
    return method, path, keep_alive, int(headers.get("content-length", "0") or 0)


def _response(answer: ports.Answer, *, head_only: bool, keep_alive: bool) -> bytes:
    status, content_type, body = answer
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
