"""``pods/portforward``: SPDY/3.1 port-forward streams, tunnelled in a WebSocket or on a plain SPDY upgrade.

What kubectl 1.37 sends (seen against this server with ``-v=9``): first a GET with ``Sec-WebSocket-Protocol:
SPDY/3.1+portforward.k8s.io`` (client-go ``tools/portforward/tunneling_dialer.go``: SPDY frames carried in
binary WebSocket messages, as one byte stream); only if that upgrade fails, a POST with ``Upgrade:
SPDY/3.1`` and ``X-Stream-Protocol-Version: portforward.k8s.io``. Both are served. Then the port-forward
protocol (``portforward.k8s.io``, kubelet ``cri/streaming/portforward/httpstream.go``): for each local
connection the client opens an *error* stream then a *data* stream, both with ``streamType``, ``port`` and
``requestID`` headers; the server answers each SYN_STREAM with a SYN_REPLY. The bytes written on the data
stream reach the pod's port: here HTTP/1.1 requests, each answered by the pod-proxy function (what the
simulated process serves: the DCGM exporter's ``/metrics`` and ``/health``). A port nothing listens on gets
containerd's message on the error stream ("error forwarding port 9400 to pod <sandbox>, uid : ... connection
refused") and both streams are closed; kubectl prints it. Pings are echoed; GOAWAY or EOF ends the session.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from gpuplan.sim.api import spdy, websocket
from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.protocol import Connection, HttpError, Request, Upgrade

PROTOCOL = "portforward.k8s.io"
TUNNEL_PROTOCOL = f"SPDY/3.1+{PROTOCOL}"
DATA_CHUNK = 32 * 1024
ProxyFn = Callable[[dict[str, Any], int, str, str], tuple[int, str, bytes]]


PodFn = Callable[[], dict[str, Any] | None]


def upgrade(request: Request, pod: PodFn, proxy: ProxyFn | None) -> Upgrade:
    """The 101 answer for either transport; the session runs on the connection's thread. ``pod()`` reads
    the pod as it is now (None once it is gone): a forward lasts, the pod may not."""
    if websocket.is_upgrade(request):
        _, headers = websocket.handshake(request, (TUNNEL_PROTOCOL,))

        def serve_tunnel(conn: Connection) -> None:
            ws = websocket.WebSocket(conn)
            Session(pod, proxy, lambda data: ws.send(data)).run(_messages(ws))
            ws.close()

        return Upgrade(headers, serve_tunnel)
    if request.header("Upgrade").lower() != "spdy/3.1":
        raise HttpError(400, "BadRequest", "Upgrade request required")
    offered = [p.strip() for p in request.header("X-Stream-Protocol-Version").split(",")]
    if offered != [""] and PROTOCOL not in offered:
        raise HttpError(403, "Forbidden", f"unable to upgrade: unable to negotiate protocol: {offered}")
    headers = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"), ("X-Stream-Protocol-Version", PROTOCOL)]

    def serve_spdy(conn: Connection) -> None:
        Session(pod, proxy, conn.write).run(_reads(conn))

    return Upgrade(headers, serve_spdy)


def _messages(ws: websocket.WebSocket) -> Iterator[bytes]:
    while (message := ws.receive()) is not None:
        yield message.data


def _reads(conn: Connection) -> Iterator[bytes]:
    while chunk := conn.read(65536):
        yield chunk


@dataclass
class _Pair:
    """The two streams of one forwarded connection (by ``requestID``)."""

    port: int
    error_stream: int | None = None
    data_stream: int | None = None
    buffer: bytearray = field(default_factory=bytearray)
    closed: bool = False


def refused_message(pod: dict[str, Any], port: int) -> str:
    """containerd's error for a port nothing listens on in the pod's network namespace."""
    uid = str(pod["metadata"].get("uid", ""))
    sandbox = hashlib.sha256(f"sandbox/{uid}".encode()).hexdigest()
    netns = f"/var/run/netns/cni-{uuid.uuid5(uuid.NAMESPACE_URL, uid)}"
    return (
        f"error forwarding port {port} to pod {sandbox}, uid : failed to execute portforward in network "
        f'namespace "{netns}": failed to connect to localhost:{port} inside namespace "{sandbox}", IPv4: '
        f"dial tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 [::1]:{port}: connect: "
        "connection refused "
    )


class Session:
    """One SPDY port-forward connection: reads frames from ``chunks``, writes with ``send``."""

    def __init__(self, pod: PodFn, proxy: ProxyFn | None, send: Callable[[bytes], None]) -> None:
        self.pod, self.proxy, self._send = pod, proxy, send
        self._last_pod = pod() or {"metadata": {}}  # names the sandbox in the refusal once the pod is gone
        self.codec = spdy.Codec()
        self._lock = threading.Lock()
        self._pairs: dict[str, _Pair] = {}
        self._by_stream: dict[int, _Pair] = {}

    def run(self, chunks: Iterable[bytes]) -> None:
        try:
            for chunk in chunks:
                for frame in self.codec.feed(chunk):
                    if not self._handle(frame):
                        return
        except spdy.SpdyError:
            self._write(spdy.GoAway(0, 1))

    def _write(self, *frames: spdy.Frame) -> None:
        with self._lock:
            data = b"".join(self.codec.encode(f) for f in frames)
            try:
                self._send(data)
            except OSError:
                pass

    def _handle(self, frame: spdy.Frame) -> bool:
        if isinstance(frame, spdy.SynStream):
            self._open(frame)
        elif isinstance(frame, spdy.Data):
            self._data(frame)
        elif isinstance(frame, spdy.Ping):
            self._write(frame)
        elif isinstance(frame, spdy.RstStream):
            pair = self._by_stream.get(frame.stream_id)
            if pair is not None:
                pair.closed = True
        elif isinstance(frame, spdy.GoAway):
            return False
        return True

    def _open(self, frame: spdy.SynStream) -> None:
        headers = {k.lower(): v[0] for k, v in frame.headers.items() if v}
        kind, request_id = headers.get("streamtype", ""), headers.get("requestid", "")
        try:
            port = int(headers.get("port", ""))
        except ValueError:
            self._write(spdy.RstStream(frame.stream_id, spdy.RST_PROTOCOL_ERROR))
            return
        self._write(spdy.SynReply(frame.stream_id))
        pair = self._pairs.setdefault(request_id, _Pair(port))
        self._by_stream[frame.stream_id] = pair
        if kind == "error":
            pair.error_stream = frame.stream_id
        elif kind == "data":
            pair.data_stream = frame.stream_id
            if not self._listening(port):
                self._refuse(pair)
        if frame.flags & spdy.FLAG_FIN and kind == "data":
            self._finish(pair)

    def _current(self) -> dict[str, Any] | None:
        pod = self.pod()
        if pod is not None:
            self._last_pod = pod
        return pod

    def _listening(self, port: int) -> bool:
        pod = self._current()
        if self.proxy is None or pod is None:
            return False
        try:
            code, _, body = self.proxy(pod, port, "/", "")
        except ApiError:
            return False
        return not (code == 503 and b"connection refused" in body)

    def _refuse(self, pair: _Pair) -> None:
        if pair.error_stream is not None:
            message = refused_message(self._last_pod, pair.port).encode()
            self._write(spdy.Data(pair.error_stream, message))
        self._finish(pair)

    def _finish(self, pair: _Pair) -> None:
        """Close our side of both streams: kubectl then closes the local connection."""
        if pair.closed:
            return
        pair.closed = True
        frames = [spdy.Data(s, b"", spdy.FLAG_FIN) for s in (pair.data_stream, pair.error_stream) if s]
        self._write(*frames)

    def _data(self, frame: spdy.Data) -> None:
        pair = self._by_stream.get(frame.stream_id)
        if pair is None or frame.stream_id != pair.data_stream or pair.closed:
            return
        pair.buffer += frame.data
        while not pair.closed:
            request = _take_request(pair.buffer)
            if request is None:
                break
            method, target, close = request
            self._answer(pair, method, target)
            if close:
                self._finish(pair)
        if frame.fin:
            self._finish(pair)

    def _answer(self, pair: _Pair, method: str, target: str) -> None:
        assert pair.data_stream is not None and self.proxy is not None
        path, _, query = target.partition("?")
        pod = self._current()
        if pod is None:  # the pod went away: its process with it
            self._refuse(pair)
            return
        try:
            code, content_type, body = self.proxy(pod, pair.port, path, query)
        except ApiError as error:
            code, content_type, body = error.code, "text/plain; charset=utf-8", error.message.encode()
        reason = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
        head = (
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Date: {formatdate(usegmt=True)}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        answer = head + (b"" if method == "HEAD" else body)
        frames = [
            spdy.Data(pair.data_stream, answer[i : i + DATA_CHUNK]) for i in range(0, len(answer), DATA_CHUNK)
        ]
        self._write(*frames)


def _take_request(buffer: bytearray) -> tuple[str, str, bool] | None:
    """The first complete HTTP/1.1 request in ``buffer`` (removed from it): method, target, whether the
    client asked to close; None until its head (and Content-Length body) arrived."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    fields = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    length = int(fields.get("content-length", "0") or 0)
    if len(buffer) < end + 4 + length:
        return None
    del buffer[: end + 4 + length]
    parts = head[0].split()
    method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("GET", "/")
    close = fields.get("connection", "").lower() == "close" or (len(parts) > 2 and parts[2] == "HTTP/1.0")
    return method, target, close
