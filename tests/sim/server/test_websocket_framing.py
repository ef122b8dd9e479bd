"""The RFC 6455 server endpoint (``sim/api/websocket.py``): handshake, masking, lengths, fragmentation,
ping/pong and the closing handshake, over an in-memory byte stream playing the client."""

from __future__ import annotations

import struct

import pytest

from gpuplan.sim.api import websocket
from gpuplan.sim.api.protocol import HttpError, Request

MASK = b"\x37\xfa\x21\x3d"


class Pipe:
    """The client's bytes to read (in small pieces, as a socket may hand them) and what the server wrote."""

    def __init__(self, incoming: bytes, piece: int = 3) -> None:
        self.incoming, self.piece, self.written = incoming, piece, bytearray()

    def read(self, size: int) -> bytes:
        chunk, self.incoming = self.incoming[: min(size, self.piece)], self.incoming[min(size, self.piece) :]
        return chunk

    def write(self, data: bytes) -> None:
        self.written += data


def client_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    return websocket.encode_frame(opcode, payload, fin=fin, mask=MASK)


def server_frames(data: bytes) -> list[websocket.Frame]:
    reader = websocket.FrameReader(Pipe(bytes(data), piece=1 << 20), require_mask=False)
    frames = []
    while (frame := reader.next()) is not None:
        frames.append(frame)
    return frames


def upgrade_request(**headers: str) -> Request:
    base = {
        "upgrade": "websocket",
        "connection": "Upgrade",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        "sec-websocket-version": "13",
        "sec-websocket-protocol": "v5.channel.k8s.io, v4.channel.k8s.io",
    }
    return Request("GET", "/x", {}, {**base, **headers})


def test_the_accept_key_of_the_rfc_example() -> None:
    assert websocket.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_the_handshake_picks_the_clients_first_supported_protocol() -> None:
    chosen, headers = websocket.handshake(upgrade_request(), ("v4.channel.k8s.io", "v5.channel.k8s.io"))
    assert chosen == "v5.channel.k8s.io"
    assert ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") in headers
    with pytest.raises(HttpError) as refused:
        websocket.handshake(upgrade_request(**{"sec-websocket-protocol": "base64.channel.k8s.io"}), ("v5",))
    assert refused.value.code == 400


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 70000])
def test_lengths_round_trip_masked(size: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    ws = websocket.WebSocket(Pipe(client_frame(websocket.BINARY, payload), piece=4096))
    message = ws.receive()
    assert message is not None and message.opcode == websocket.BINARY and message.data == payload


def test_masking_is_its_own_inverse() -> None:
    assert websocket.apply_mask(websocket.apply_mask(b"hello world", MASK), MASK) == b"hello world"
    assert websocket.encode_frame(websocket.TEXT, b"Hi")[:2] == b"\x81\x02"  # unmasked server frame


def test_a_fragmented_message_with_a_ping_inside_is_reassembled_and_the_ping_answered() -> None:
    stream = (
        client_frame(websocket.TEXT, b"Hel", fin=False)
        + client_frame(websocket.PING, b"are you there")
        + client_frame(websocket.CONTINUATION, b"lo", fin=False)
        + client_frame(websocket.CONTINUATION, b"!", fin=True)
    )
    pipe = Pipe(stream)
    ws = websocket.WebSocket(pipe)
    message = ws.receive()
    assert message == websocket.Message(websocket.TEXT, b"Hello!")
    assert server_frames(pipe.written) == [websocket.Frame(True, websocket.PONG, b"are you there")]


def test_the_closing_handshake_is_answered() -> None:
    pipe = Pipe(client_frame(websocket.CLOSE, struct.pack("!H", 1000) + b"bye"))
    ws = websocket.WebSocket(pipe)
    assert ws.receive() is None
    assert ws.close_received == 1000
    assert server_frames(pipe.written) == [websocket.Frame(True, websocket.CLOSE, struct.pack("!H", 1000))]


def test_close_then_drain_waits_for_the_peers_close() -> None:
    pipe = Pipe(client_frame(websocket.BINARY, b"late") + client_frame(websocket.CLOSE, b"\x03\xe8"))
    ws = websocket.WebSocket(pipe)
    ws.close()
    ws.drain()
    assert ws.close_received == 1000
    assert len(server_frames(pipe.written)) == 1  # our close, sent once


def test_an_unmasked_client_frame_is_a_protocol_error() -> None:
    pipe = Pipe(websocket.encode_frame(websocket.BINARY, b"no mask"))
    ws = websocket.WebSocket(pipe)
    assert ws.receive() is None
    (close,) = server_frames(pipe.written)
    assert close.opcode == websocket.CLOSE and close.payload[:2] == struct.pack("!H", 1002)


def test_eof_in_the_middle_of_a_frame_ends_the_connection() -> None:
    ws = websocket.WebSocket(Pipe(client_frame(websocket.BINARY, b"cut short")[:-3]))
    assert ws.receive() is None
