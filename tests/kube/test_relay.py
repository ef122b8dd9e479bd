"""The relay that brings the real API server's port out of its private network namespace: bytes pass both
ways unchanged, a half-closed direction lets the other finish, and stop() ends every connection."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from gpuplan.sim.kube import relay


@pytest.fixture
def upstream() -> Iterator[tuple[socket.socket, list[bytes]]]:
    """A server that reads a request to its end, then answers it reversed and closes."""
    server = relay.listen("127.0.0.1", 0)
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                seen.append(data)
                conn.sendall(data[::-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server, seen
    server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close() alone does not)
    server.close()
    thread.join(5)
    assert not thread.is_alive()


def exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(payload)
        client.shutdown(socket.SHUT_WR)  # the server answers once the request ended
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    return answer


def test_bytes_pass_both_ways_and_a_half_close_lets_the_answer_finish(
    upstream: tuple[socket.socket, list[bytes]],
) -> None:
    server, seen = upstream
    joined = relay.Relay(relay.listen("127.0.0.1", 0), server.getsockname()).start()
    try:
        payload = bytes(range(256)) * 4096  # 1 MiB: many reads and writes on each side
        assert exchange(joined.port, payload) == payload[::-1]
        assert exchange(joined.port, b"second") == b"dnoces"
        assert seen == [payload, b"second"]
    finally:
        joined.stop()


def test_stop_closes_the_listener_and_open_connections(upstream: tuple[socket.socket, list[bytes]]) -> None:
    server, _ = upstream
    joined = relay.Relay(relay.listen("127.0.0.1", 0), server.getsockname()).start()
    port = joined.port
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    client.sendall(b"unfinished")
    joined.stop()
    with client:
        try:
            ended = client.recv(1024) == b""
        except ConnectionResetError:  # the relay closed with the request unread: the kernel resets
            ended = True
        assert ended
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_an_unreachable_target_drops_the_client_and_keeps_serving(
    upstream: tuple[socket.socket, list[bytes]],
) -> None:
    free = relay.listen("127.0.0.1", 0)
    dead_address = free.getsockname()
    free.close()  # nothing listens there any more
    joined = relay.Relay(relay.listen("127.0.0.1", 0), dead_address).start()
    try:
        with socket.create_connection(("127.0.0.1", joined.port), timeout=10) as client:
            assert client.recv(1024) == b""
        joined.target = upstream[0].getsockname()
        assert exchange(joined.port, b"ab") == b"ba"
    finally:
        joined.stop()


def test_a_connection_joined_while_stop_runs_is_closed_too(
    upstream: tuple[socket.socket, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The accept thread may still be dialling the API server for a client when stop() shuts the open
    connections down: that client must not be joined afterwards and left open."""
    server, _ = upstream
    dialling, release = threading.Event(), threading.Event()
    dial = socket.create_connection

    def slow_dial(*args: object, **kwargs: object) -> socket.socket:
        dialling.set()
        assert release.wait(10)
        return dial(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(relay.socket, "create_connection", slow_dial)
    joined = relay.Relay(relay.listen("127.0.0.1", 0), server.getsockname()).start()
    client = dial(("127.0.0.1", joined.port), timeout=10)  # the module's function is patched for all
    assert dialling.wait(10)
    stopping = threading.Thread(target=joined.stop)
    stopping.start()
    while not joined._closing.is_set():  # stop() has begun: the listener is closing
        threading.Event().wait(0.01)
    release.set()
    stopping.join(10)
    with client:
        try:
            ended = client.recv(1024) == b""
        except ConnectionResetError:
            ended = True
        assert ended
