"""SPDY/3.1 framing (``sim/api/spdy.py``) and the port-forward session on it (``sim/api/pod_portforward.py``),
with a second codec playing kubectl's side of the connection."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from gpuplan.sim.api import pod_portforward, spdy

POD: dict[str, Any] = {"metadata": {"name": "exporter", "uid": "0a1b"}}


def test_the_header_dictionary_is_the_spdy3_one() -> None:
    # length and Adler-32 (the DICTID in every header block's zlib header) of the draft's dictionary
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == 3821447106
    assert spdy.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")


def test_every_frame_type_round_trips() -> None:
    frames: list[spdy.Frame] = [
        spdy.SynStream(1, {"streamtype": ["error"], "port": ["9400"], "requestid": ["0"]}, spdy.FLAG_FIN),
        spdy.SynReply(1),
        spdy.HeadersFrame(3, {"x": ["a", "b"]}),
        spdy.RstStream(3, spdy.RST_CANCEL),
        spdy.Settings(((0, 7, 65536),)),
        spdy.Ping(1),
        spdy.GoAway(5, 0),
        spdy.WindowUpdate(3, 1000),
        spdy.Data(3, b"GET / HTTP/1.1\r\n\r\n", spdy.FLAG_FIN),
    ]
    sender, receiver = spdy.Codec(), spdy.Codec()
    wire = b"".join(sender.encode(f) for f in frames)
    assert receiver.feed(wire) == frames


def test_header_blocks_share_one_zlib_stream_per_direction() -> None:
    sender, receiver = spdy.Codec(), spdy.Codec()
    first = sender.encode(spdy.SynStream(1, {"port": ["9400"]}))
    second = sender.encode(spdy.SynStream(3, {"port": ["9400"]}))
    assert len(second) < len(first)  # the second block refers back to the first
    assert receiver.feed(first) == [spdy.SynStream(1, {"port": ["9400"]})]
    assert receiver.feed(second) == [spdy.SynStream(3, {"port": ["9400"]})]
    with pytest.raises(spdy.SpdyError):
        spdy.Codec().feed(second)  # out of its stream the block does not decompress


def test_frames_split_anywhere_are_reassembled() -> None:
    wire = spdy.Codec().encode(spdy.Data(5, b"x" * 1000)) + spdy.Codec().encode(spdy.Ping(7))
    receiver, frames = spdy.Codec(), []
    for i in range(0, len(wire), 7):
        frames += receiver.feed(wire[i : i + 7])
    assert frames == [spdy.Data(5, b"x" * 1000), spdy.Ping(7)]


def test_an_unknown_control_frame_is_skipped_and_a_wrong_version_refused() -> None:
    unknown = b"\x80\x03\x00\x0a\x00\x00\x00\x02ab"
    assert spdy.Codec().feed(unknown + spdy.Codec().encode(spdy.Ping(1))) == [spdy.Ping(1)]
    with pytest.raises(spdy.SpdyError):
        spdy.Codec().feed(b"\x80\x02\x00\x06\x00\x00\x00\x04\x00\x00\x00\x01")


class Client:
    """kubectl's end: encodes what it sends, decodes what the session wrote."""

    def __init__(self) -> None:
        self.out, self.back = spdy.Codec(), spdy.Codec()
        self.written = bytearray()

    def frames(self) -> list[spdy.Frame]:
        frames = self.back.feed(bytes(self.written))
        self.written.clear()
        return frames


def forward(port: int, request: bytes, proxy: Any, pod: Any = lambda: POD) -> list[spdy.Frame]:
    client = Client()
    session = pod_portforward.Session(pod, proxy, client.written.extend)
    headers = {"port": [str(port)], "requestid": ["0"]}
    chunks = [
        client.out.encode(spdy.SynStream(1, {"streamtype": ["error"], **headers})),
        client.out.encode(spdy.Data(1, b"", spdy.FLAG_FIN)),
        client.out.encode(spdy.SynStream(3, {"streamtype": ["data"], **headers})),
        client.out.encode(spdy.Data(3, request)),
        client.out.encode(spdy.Ping(1)),
    ]
    session.run(iter(chunks))
    return client.frames()


def test_a_request_on_the_data_stream_is_answered_by_the_pods_port() -> None:
    calls = []

    def proxy(pod: dict[str, Any], port: int, path: str, query: str) -> tuple[int, str, bytes]:
        calls.append((port, path, query))
        return 200, "text/plain", b"DCGM_FI_DEV_GPU_TEMP 40\n"

    frames = forward(9400, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", proxy)
    assert frames[:2] == [spdy.SynReply(1), spdy.SynReply(3)]
    answer = b"".join(f.data for f in frames if isinstance(f, spdy.Data) and f.stream_id == 3)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nDCGM_FI_DEV_GPU_TEMP 40\n")
    fins = {f.stream_id for f in frames if isinstance(f, spdy.Data) and f.fin}
    assert fins == {1, 3}  # Connection: close ends both streams
    assert frames[-1] == spdy.Ping(1)  # pings are echoed
    assert calls[-1] == (9400, "/metrics", "x=1")


def test_a_port_nothing_listens_on_gets_containerds_error() -> None:
    def proxy(pod: dict[str, Any], port: int, path: str, query: str) -> tuple[int, str, bytes]:
        return 503, "text/plain", b"dial tcp 10.128.0.2:1234: connect: connection refused"

    frames = forward(1234, b"GET / HTTP/1.1\r\n\r\n", proxy)
    error = b"".join(f.data for f in frames if isinstance(f, spdy.Data) and f.stream_id == 1).decode()
    assert error.startswith("error forwarding port 1234 to pod ") and ", uid : " in error
    assert "connect: connection refused" in error
    assert not any(isinstance(f, spdy.Data) and f.stream_id == 3 and f.data for f in frames)


def test_a_pod_gone_during_the_forward_refuses_the_next_request() -> None:
    reads = iter([POD, POD, None])  # the session's start, the port check, then the request

    def proxy(pod: dict[str, Any], port: int, path: str, query: str) -> tuple[int, str, bytes]:
        return 200, "text/plain", b"ok"

    frames = forward(9400, b"GET / HTTP/1.1\r\n\r\n", proxy, pod=lambda: next(reads))
    error = b"".join(f.data for f in frames if isinstance(f, spdy.Data) and f.stream_id == 1).decode()
    assert error.startswith("error forwarding port 9400 to pod ")
    assert {f.stream_id for f in frames if isinstance(f, spdy.Data) and f.fin} == {1, 3}
