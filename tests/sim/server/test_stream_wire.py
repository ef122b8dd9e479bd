"""The streaming subresources on the wire, with a raw TLS socket as the client: the plain SPDY/3.1 upgrade of
port-forward (kubectl's fallback), exec with the v4 protocol, and the 101 hand-over itself."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from server_kit import TOKEN, ProxyCalls

from gpuplan.sim.api import spdy, websocket
from gpuplan.sim.api.server import ApiServer
from gpuplan.sim.api.store import Store
from gpuplan.sim.kubelet.logs import ContainerLogs

POD = "/api/v1/namespaces/default/pods/exporter"


@dataclass(frozen=True)
class Outcome:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    error: str | None = None


class StubKubelet:
    def __init__(self) -> None:
        self.logs = ContainerLogs()
        self.commands: list[list[str]] = []

    def exec(self, pod: dict[str, Any], container: str, command: list[str]) -> Outcome:
        self.commands.append(command)
        if command == ["false"]:
            return Outcome(exit_code=3, stderr="nope\n")
        return Outcome(stdout=" ".join(command[1:]) + "\n")

    def reachable(self, node: str) -> bool:
        return True


@pytest.fixture
def server(store: Store, proxy_calls: ProxyCalls) -> Iterator[ApiServer]:
    rt = store.registry.for_kind("v1", "Pod")
    assert rt is not None
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "exporter", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "dcgm-exporter"}]},
    }
    store.create(rt, pod, namespace="default", manager="test")
    store.patch(
        rt,
        "default",
        "exporter",
        {"status": {"phase": "Running", "containerStatuses": [{"name": "c", "state": {"running": {}}}]}},
        "application/merge-patch+json",
        manager="kubelet",
        subresource="status",
    )
    api = ApiServer(store, token=TOKEN, proxy=proxy_calls, kubelet=StubKubelet())
    api.start()
    yield api
    api.stop()


def connect(api: ApiServer, head: str) -> tuple[ssl.SSLSocket, bytes]:
    """Send ``head`` (request line and headers), return the socket and the answer's head."""
    context = ssl.create_default_context(cadata=api.ca_pem.decode())
    sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", api.port), timeout=30), server_hostname="127.0.0.1"
    )
    sock.sendall(head.encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    head_bytes, _, rest = answer.partition(b"\r\n\r\n")
    if head_bytes.startswith(b"HTTP/1.1 101"):
        assert not rest  # an upgraded stream: nothing before the client speaks
    return sock, head_bytes


def request_head(method: str, path: str, **headers: str) -> str:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return "\r\n".join(lines) + "\r\n\r\n"


def test_port_forward_on_a_plain_spdy_upgrade(server: ApiServer, proxy_calls: ProxyCalls) -> None:
    head = request_head(
        "POST",
        f"{POD}/portforward",
        Connection="Upgrade",
        Upgrade="SPDY/3.1",
        X_Stream_Protocol_Version="portforward.k8s.io",
    )
    sock, answer = connect(server, head)
    assert answer.startswith(b"HTTP/1.1 101 ")
    assert b"X-Stream-Protocol-Version: portforward.k8s.io" in answer
    client, back = spdy.Codec(), spdy.Codec()
    ids = {"port": ["9400"], "requestid": ["0"]}
    sock.sendall(
        client.encode(spdy.SynStream(1, {"streamtype": ["error"], **ids}))
        + client.encode(spdy.SynStream(3, {"streamtype": ["data"], **ids}))
        + client.encode(spdy.Data(3, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    )
    frames: list[spdy.Frame] = []
    while {1, 3} - {f.stream_id for f in frames if isinstance(f, spdy.Data) and f.fin}:
        chunk = sock.recv(65536)
        assert chunk
        frames += back.feed(chunk)
    body = b"".join(f.data for f in frames if isinstance(f, spdy.Data) and f.stream_id == 3)
    assert body.startswith(b"HTTP/1.1 200 OK") and b'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="exporter"} 42' in body
    assert ("exporter", 9400, "/metrics", "") in proxy_calls.calls
    sock.close()


def websocket_head(path: str, protocol: str) -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    return request_head(
        "GET",
        path,
        Connection="Upgrade",
        Upgrade="websocket",
        Sec_WebSocket_Key=key,
        Sec_WebSocket_Version="13",
        Sec_WebSocket_Protocol=protocol,
    )


class SocketStream:
    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock

    def read(self, size: int) -> bytes:
        return self.sock.recv(size)

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)


def exec_channels(server: ApiServer, command: str) -> dict[int, bytes]:
    sock, answer = connect(
        server, websocket_head(f"{POD}/exec?{command}&stdout=true&stderr=true", "v4.channel.k8s.io")
    )
    assert answer.startswith(b"HTTP/1.1 101 ") and b"Sec-WebSocket-Protocol: v4.channel.k8s.io" in answer
    reader = websocket.FrameReader(SocketStream(sock), require_mask=False)
    channels: dict[int, bytes] = {}
    while (frame := reader.next()) is not None and frame.opcode != websocket.CLOSE:
        channels[frame.payload[0]] = channels.get(frame.payload[0], b"") + frame.payload[1:]
    sock.sendall(websocket.encode_frame(websocket.CLOSE, b"\x03\xe8", mask=b"abcd"))
    sock.close()
    return channels


def test_exec_with_the_v4_protocol(server: ApiServer) -> None:
    channels = exec_channels(server, "command=echo&command=hello")
    assert channels[1] == b"hello\n"
    assert json.loads(channels[3]) == {"metadata": {}, "status": "Success"}
    failed = exec_channels(server, "command=false")
    assert failed[2] == b"nope\n"
    status = json.loads(failed[3])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]


def test_exec_without_an_upgrade_or_a_command_is_refused(server: ApiServer) -> None:
    sock, answer = connect(server, request_head("POST", f"{POD}/exec?command=ls", Content_Length="0"))
    assert answer.startswith(b"HTTP/1.1 400 ")
    sock.close()
    sock, answer = connect(server, websocket_head(f"{POD}/exec", "v5.channel.k8s.io"))
    assert answer.startswith(b"HTTP/1.1 400 ")
    sock.close()
