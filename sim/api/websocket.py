"""A WebSocket server endpoint (RFC 6455) over a connection the HTTP server handed over after its 101 answer.

Used by the pods' ``exec`` and ``portforward`` subresources (:mod:`gpuplan.sim.api.pod_exec`,
:mod:`gpuplan.sim.api.pod_portforward`), which kubectl 1.37 opens as WebSockets. Stdlib only. Covers what a
server needs: the opening handshake (``Sec-WebSocket-Accept``, subprotocol choice), reading masked client
frames (a client must mask; an unmasked frame is a protocol error, close code 1002), reassembling fragmented
messages, answering pings with pongs while a message is being read, and the closing handshake. Frames the
server sends are never masked and never fragmented.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuplan.sim.api.protocol import HttpError, Request

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CONTROL_OPCODES = (CLOSE, PING, PONG)
NORMAL_CLOSURE, PROTOCOL_ERROR, MESSAGE_TOO_BIG = 1000, 1002, 1009
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class ByteStream(Protocol):
    """The raw connection after the upgrade: ``read`` returns at most ``size`` bytes, b"" at EOF."""

    def read(self, size: int) -> bytes: ...

    def write(self, data: bytes) -> None: ...


class WebSocketError(Exception):
    """The peer broke the protocol; ``code`` is the close code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Frame:
    fin: bool
    opcode: int
    payload: bytes


@dataclass(frozen=True)
class Message:
    opcode: int  # TEXT or BINARY
    data: bytes


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key`` (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.strip().encode() + GUID).digest()).decode()


def is_upgrade(request: Request) -> bool:
    """A WebSocket opening handshake: ``Upgrade: websocket`` on a GET."""
    return request.method == "GET" and request.header("Upgrade").lower() == "websocket"


def requested_protocols(request: Request) -> list[str]:
    return [p.strip() for p in request.header("Sec-WebSocket-Protocol").split(",") if p.strip()]


def handshake(request: Request, supported: Sequence[str]) -> tuple[str, list[tuple[str, str]]]:
    """The subprotocol chosen (the client's first that ``supported`` has) and the 101 answer's headers.

    Refuses, as a 400, what a server cannot accept: no key, a version other than 13, no common subprotocol.
    """
    key = request.header("Sec-WebSocket-Key")
    if not key or request.header("Sec-WebSocket-Version") not in ("13", ""):
        raise HttpError(400, "BadRequest", "invalid WebSocket handshake: missing key or unsupported version")
    offered = requested_protocols(request)
    chosen = next((p for p in offered if p in supported), None)
    if chosen is None:
        raise HttpError(
            400,
            "BadRequest",
            f"unable to upgrade: no supported protocol in {offered}; supported: {list(supported)}",
        )
    headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", accept_key(key)),
        ("Sec-WebSocket-Protocol", chosen),
    ]
    return chosen, headers


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None) -> bytes:
    """One frame; ``mask`` (4 bytes) only for a client's frames (tests play the client)."""
    first = (0x80 if fin else 0) | opcode
    length = len(payload)
    mask_bit = 0x80 if mask is not None else 0
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if mask is None:
        return header + payload
    return header + mask + apply_mask(payload, mask)


def apply_mask(data: bytes, mask: bytes) -> bytes:
    """XOR with the 4-byte masking key (its own inverse)."""
    if not data:
        return b""
    repeated = (mask * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(data), "big")


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode()[:123]


class FrameReader:
    """Frames from a byte stream; ``require_mask`` as a server (client frames must be masked)."""

    def __init__(self, stream: ByteStream, *, require_mask: bool = True) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._require_mask = require_mask

    def _exactly(self, size: int) -> bytes | None:
        while len(self._buffer) < size:
            chunk = self._stream.read(max(size - len(self._buffer), 65536))
            if not chunk:
                return None
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def next(self) -> Frame | None:
        """The next frame, or None at EOF (also in the middle of a frame: the peer went away)."""
        head = self._exactly(2)
        if head is None:
            return None
        fin, opcode = bool(head[0] & 0x80), head[0] & 0x0F
        if head[0] & 0x70:
            raise WebSocketError(PROTOCOL_ERROR, "reserved bits set without a negotiated extension")
        masked, length = bool(head[1] & 0x80), head[1] & 0x7F
        if masked != self._require_mask:
            raise WebSocketError(PROTOCOL_ERROR, "client frames must be masked, server frames must not")
        if length >= 126:
            extended = self._exactly(2 if length == 126 else 8)
            if extended is None:
                return None
            length = int.from_bytes(extended, "big")
        if opcode in CONTROL_OPCODES and (length > 125 or not fin):
            raise WebSocketError(PROTOCOL_ERROR, "control frames are short and never fragmented")
        if length > MAX_MESSAGE_BYTES:
            raise WebSocketError(MESSAGE_TOO_BIG, "frame too large")
        mask = self._exactly(4) if masked else b""
        payload = self._exactly(length) if length else b""
        if mask is None or payload is None:
            return None
        return Frame(fin, opcode, apply_mask(payload, mask) if masked else payload)


class WebSocket:
    """The server end of one WebSocket: ``receive`` messages, ``send`` binary or text, ``close``.

    ``send`` may be called from any thread (writes are serialised); ``receive`` from one reader thread.
    """

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._reader = FrameReader(stream)
        self._write_lock = threading.Lock()
        self.close_sent = False
        self.close_received: int | None = None  # the peer's close code, once it sent one

    def send(self, data: bytes, opcode: int = BINARY) -> None:
        self._write(encode_frame(opcode, data))

    def _write(self, frame: bytes) -> None:
        with self._write_lock:
            self._stream.write(frame)

    def close(self, code: int = NORMAL_CLOSURE, reason: str = "") -> None:
        """Send our close frame (once); the peer's answer is read by ``receive`` or ``drain``."""
        with self._write_lock:
            if self.close_sent:
                return
            self.close_sent = True
            try:
                self._stream.write(encode_frame(CLOSE, close_payload(code, reason)))
            except OSError:
                pass

    def receive(self) -> Message | None:
        """The next whole message; None once the peer closed (its close frame is answered) or went away."""
        parts: list[bytes] = []
        first_opcode: int | None = None
        try:
            while True:
                frame = self._reader.next()
                if frame is None:
                    return None
                if frame.opcode in CONTROL_OPCODES:
                    if self._control(frame):
                        return None
                    continue
                if frame.opcode == CONTINUATION:
                    if first_opcode is None:
                        raise WebSocketError(PROTOCOL_ERROR, "continuation frame without a message")
                elif first_opcode is not None:
                    raise WebSocketError(PROTOCOL_ERROR, "new message inside a fragmented one")
                else:
                    first_opcode = frame.opcode
                parts.append(frame.payload)
                if sum(len(p) for p in parts) > MAX_MESSAGE_BYTES:
                    raise WebSocketError(MESSAGE_TOO_BIG, "message too large")
                if frame.fin:
                    return Message(first_opcode, b"".join(parts))
        except WebSocketError as error:
            self.close(error.code, str(error))
            return None

    def _control(self, frame: Frame) -> bool:
        """Answer a ping, note a close (answering it); True when the connection is closing."""
        if frame.opcode == PING:
            self._write(encode_frame(PONG, frame.payload))
            return False
        if frame.opcode == PONG:
            return False
        code = int.from_bytes(frame.payload[:2], "big") if len(frame.payload) >= 2 else NORMAL_CLOSURE
        self.close_received = code
        self.close(code if code != 1005 else NORMAL_CLOSURE)
        return True

    def drain(self) -> None:
        """After our close: read (and drop) until the peer's close frame or EOF."""
        while self.close_received is None and self.receive() is not None:
            pass
