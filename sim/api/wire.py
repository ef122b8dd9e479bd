"""The sockets side of the API server: a threading HTTP/1.1 server and its per-connection request handler.

Used only by :class:`gpuplan.sim.api.server.ApiServer`, which owns the routing and the answers (an
:class:`Answerer`). This module reads requests (Content-Length or chunked bodies), checks the bearer token,
writes answers (with Content-Length, or chunked for watch streams), turns every failure into a Status, and
tracks open connections so that the server can close them all on stop.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from gpuplan.sim.api.protocol import (
    HttpError,
    Request,
    Response,
    Stream,
    Upgrade,
    error_response,
    method_not_allowed,
)
from gpuplan.sim.api.store import ApiError

log = logging.getLogger(__name__)

# An idle keep-alive connection is closed after this long; its thread then ends.
IDLE_SECONDS = 120


class Answerer(Protocol):
    """What the connection handler needs from the API server."""

    def authorised(self, header: str) -> bool: ...

    def answer(self, request: Request, conn: socket.socket) -> Response | Stream | Upgrade | None: ...


class HttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that remembers its connections, so stop() can close them and join their threads."""

    # Connection threads are daemons, so a process that never calls stop() still exits; stop() joins them
    # itself (join_threads) instead of relying on ThreadingMixIn's block_on_close, which skips daemons.
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, api: Answerer, address: tuple[str, int]) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.threads: set[threading.Thread] = set()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            daemon=True,
            name=f"sim-apiserver-conn-{client_address[1]}",
        )
        with self.connections_lock:
            self.threads.add(thread)
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.threads.discard(threading.current_thread())

    def join_threads(self, timeout: float) -> None:
        with self.connections_lock:
            running = list(self.threads)
        for thread in running:
            thread.join(timeout)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that vanishes mid-request (or fails the TLS handshake) is routine, not a server error.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            try:
                # The plain socket's shutdown: SSLSocket.shutdown would race with the thread reading it.
                socket.socket.shutdown(conn, socket.SHUT_RDWR)
            except OSError:
                pass


def peer_closed(conn: socket.socket) -> bool:
    """True when the client closed its end: a watch client sends nothing while it reads the stream, so a
    readable socket means EOF (or a TLS close_notify) and the watch can end. Asked with ``poll``, not
    ``select``: a simulator of thousands of nodes holds thousands of sockets (each pod's listener), and
    ``select`` refuses a descriptor past FD_SETSIZE (1024), which would end every watch on such a
    connection at its first quiet moment."""
    try:
        poller = select.poll()
        poller.register(conn, select.POLLIN | select.POLLPRI)
        ready = poller.poll(0)
    except (OSError, ValueError):
        return True
    if not ready:
        return False
    if any(flags & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, flags in ready):
        return True
    if isinstance(conn, ssl.SSLSocket):
        return True
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Handler(BaseHTTPRequestHandler):
    """One connection: parses requests, checks the token, writes answers (Status on every failure)."""

    protocol_version = "HTTP/1.1"
    server_version = "gpuplan-sim"
    sys_version = ""
    timeout = IDLE_SECONDS
    # An answer is one write (headers and body, _end_headers_with); a watch stream's headers and each of its
    # chunks are writes of their own, which with Nagle's algorithm on would wait for the client's delayed ACK
    # (about 40 ms each); the real apiserver (Go) sets TCP_NODELAY too.
    disable_nagle_algorithm = True
    server: HttpServer

    def setup(self) -> None:
        with self.server.connections_lock:
            self.server.connections.add(self.request)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.request)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (malformed request line, unknown method) as Status JSON, not HTML."""
        reason = {
            400: "BadRequest",
            408: "Timeout",
            414: "RequestURITooLong",
            431: "RequestHeaderFieldsTooLarge",
        }.get(code, "BadRequest")
        # 501 is a method http.server has no do_X for: go-restful's 405, as for any method without a route.
        error = method_not_allowed() if code == 501 else HttpError(code, reason, message or reason)
        self.close_connection = True
        # An unparsable request line leaves http.server assuming HTTP/0.9, which has no status line.
        self.request_version = self.protocol_version
        body = error_response(error)
        try:
            self._send(body)
        except OSError:
            pass

    def do_GET(self) -> None:
        self._serve()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _serve(self) -> None:
        api = self.server.api
        split = urlsplit(self.path)
        body = self._read_body()
        request = Request(
            self.command,
            split.path,
            parse_qs(split.query, keep_blank_values=True),
            _combined(self.headers.items()),
            body,
            split.query,
        )
        try:
            if not api.authorised(self.headers.get("Authorization") or ""):
                raise HttpError(401, "Unauthorized", "Unauthorized")
            answer = api.answer(request, self.connection)
        except (ApiError, HttpError) as error:
            answer = error_response(error)
        except Exception as error:  # a bug: one line on the wire, the traceback in the log
            log.exception("internal error serving %s %s", self.command, self.path)
            first = str(error).splitlines()[0] if str(error) else ""
            answer = error_response(
                HttpError(
                    500,
                    "InternalError",
                    f"an error on the server "
                    f"({type(error).__name__}: {first}) has "
                    "prevented the request from succeeding",
                )
            )
        if answer is None:
            self._drop()
        elif isinstance(answer, Response):
            self._send(answer)
        elif isinstance(answer, Upgrade):
            self._upgrade(answer)
        else:
            self._stream(answer)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            socket.socket.shutdown(self.connection, socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, answer: Response) -> None:
        self.send_response(answer.code)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in answer.headers:
            self.send_header(name, value)
        self._end_headers_with(answer.body if self.command != "HEAD" else b"")

    def _end_headers_with(self, body: bytes) -> None:
        """``end_headers`` and the body in ONE write: one TLS record (and TCP segment) for a small answer,
        as the real apiserver writes it, instead of a headers write the body then follows."""
        buffered: list[bytes] = self._headers_buffer  # type: ignore[attr-defined]  # send_header fills it
        self.wfile.write(b"".join(buffered) + b"\r\n" + body)
        buffered.clear()

    def _upgrade(self, upgrade: Upgrade) -> None:
        """101, then the connection belongs to ``upgrade.serve`` (buffered request bytes included)."""
        self.close_connection = True
        self.send_response(101, "Switching Protocols")
        for name, value in upgrade.headers:
            self.send_header(name, value)
        self.end_headers()
        # a forwarded port or an exec session may idle for long (the kubelet's streamIdleTimeout is 4 h);
        # stop() still ends it by shutting the socket down
        self.connection.settimeout(None)
        try:
            upgrade.serve(_RawConnection(self))
        except OSError:
            pass  # the client went away

    def _stream(self, stream: Stream) -> None:
        try:
            self.send_response(stream.code)
            self.send_header("Content-Type", stream.content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            for chunk in stream.chunks():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the client went away mid-stream
        finally:
            stream.close()


def _combined(fields: Any) -> dict[str, str]:
    """Header fields by lower-case name; a repeated field is one comma-separated value (RFC 9110 §5.3), as
    clients send ``X-Stream-Protocol-Version`` once per protocol they speak."""
    headers: dict[str, str] = {}
    for key, value in fields:
        name = key.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


class _RawConnection:
    """The upgraded connection: reads go through the handler's buffered reader (bytes the client sent right
    after its request are not lost), writes straight to the socket."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    def read(self, size: int) -> bytes:
        try:
            return self._handler.rfile.read1(size)
        except (OSError, ValueError):
            return b""

    def write(self, data: bytes) -> None:
        self._handler.connection.sendall(data)
