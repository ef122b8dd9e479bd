"""The ``/sim/v1/`` control API of a cluster on the real control plane, on a port of its own.

On the built-in control plane the simulator's API server answers ``/sim/v1/`` itself. A real kube-apiserver
knows nothing of it, so the process that runs the cluster serves the same routes (``gpuplan.sim.control``)
on a second loopback port of the caller's network namespace, made before the process leaves it, behind the
cluster admin's bearer token. Plain HTTP: the port is on loopback only, as the built-in simulator is.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpuplan.sim.api.protocol import status_body

Handle = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, Any]]]
_MAX_BODY = 1 << 20


class ControlServer:
    """Serves ``handle`` on an already listening socket."""

    def __init__(self, listener: socket.socket, token: str, handle: Handle) -> None:
        self.listener = listener
        server = ThreadingHTTPServer(listener.getsockname(), _handler(token, handle), bind_and_activate=False)
        server.socket.close()
        server.socket = listener
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="gpuplan-kube-control", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self) -> ControlServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()


def _handler(token: str, handle: Handle) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            given = (self.headers.get("Authorization") or "").encode()
            if not hmac.compare_digest(given, expected):
                self._answer(401, status_body(401, "Unauthorized", "Unauthorized"))
                return
            try:
                body = self._body()
            except ValueError as exc:
                self._answer(400, status_body(400, "BadRequest", str(exc)))
                return
            code, answer = handle(method, self.path, body)
            self._answer(code, answer)

        def _body(self) -> dict[str, Any] | None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                raise ValueError("request body too large")
            if not length:
                return None
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            return body

        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the cluster's log is for the cluster."""

    return Handler
