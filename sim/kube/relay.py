"""The API server's port, brought out of the private network namespace to the caller's loopback.

The listening socket is made before the process leaves the caller's network namespace (a socket stays in the
namespace it was made in), and each connection accepted on it is joined, byte for byte, to a new connection
to the API server made from inside the private namespace. TLS passes through untouched: clients verify the
API server itself. Two threads per connection (one per direction) block in ``recv``; kubectl's and gpuplan's
clients keep a few long-lived connections, so the count stays small.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading

log = logging.getLogger(__name__)
_CHUNK = 1 << 16


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port), in the calling thread's network namespace."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, port))
        server.listen(128)
    except OSError:
        server.close()
        raise
    return server


class Relay:
    """Accepts on ``listener`` and joins each connection to ``target`` (dialled from this namespace)."""

    def __init__(self, listener: socket.socket, target: tuple[str, int]) -> None:
        self.listener = listener
        self.target = target
        self._closing = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="gpuplan-kube-relay", daemon=True)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def start(self) -> Relay:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._lock:
            for conn in list(self._open):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # the listener was closed by stop()
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError as exc:
                log.warning("relay: cannot reach the API server at %s:%d: %s", *self.target, exc)
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                # stop() may have shut the open connections down while this one was being joined
                if self._closing.is_set():
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="gpuplan-kube-relay-conn", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # half-close: the other direction may still carry the rest of an answer
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
            self._forget(source, sink)

    def _forget(self, source: socket.socket, sink: socket.socket) -> None:
        with self._lock:
            if source in self._open and sink in self._open:
                self._open.discard(source)  # the first direction to end; the other closes both
                return
            self._open.discard(source)
            self._open.discard(sink)
        source.close()
        sink.close()
