"""SPDY/3.1 framing (draft-mbelshe-httpbis-spdy-00 §2), as Go's ``moby/spdystream`` speaks it for kubectl.

Frames are 8-byte headers then payload. A control frame's first word is the control bit, version 3 and its
type; a data frame's is its stream ID; the second word is 8 bits of flags and a 24-bit length. Header blocks
(SYN_STREAM, SYN_REPLY, HEADERS) are ``count, (len, name, len, value)*`` with 32-bit lengths, compressed by
one zlib stream per direction for the whole connection, primed with the SPDY/3 dictionary (§2.6.10.1) and
flushed with Z_SYNC_FLUSH after each block. Header names are lower case; several values share one name,
NUL-separated. Stdlib only; :class:`Codec` keeps both zlib streams of one connection (not thread-safe: the
port-forward session serialises its writes).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
MAX_LENGTH = (1 << 24) - 1
RST_PROTOCOL_ERROR, RST_INVALID_STREAM, RST_REFUSED_STREAM, RST_CANCEL = 1, 2, 3, 5

_DICTIONARY_WORDS = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
]
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
# The SPDY/3 header-compression dictionary: each word with its 32-bit length, then the raw tail (1423 bytes).
DICTIONARY = (
    b"".join(struct.pack("!I", len(w)) + w.encode() for w in _DICTIONARY_WORDS) + _DICTIONARY_TAIL.encode()
)

Headers = dict[str, list[str]]


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    flags: int = 0
    associated_to: int = 0
    priority: int = 0


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers = field(default_factory=dict)
    flags: int = 0


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    flags: int = 0


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    entries: tuple[tuple[int, int, int], ...] = ()  # (flags, id, value)
    flags: int = 0


@dataclass(frozen=True)
class Ping:
    ping_id: int


@dataclass(frozen=True)
class GoAway:
    last_good_stream_id: int
    status: int = 0


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    flags: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


Frame = SynStream | SynReply | HeadersFrame | RstStream | Settings | Ping | GoAway | WindowUpdate | Data


class SpdyError(Exception):
    """A frame that cannot be parsed: the session ends (GOAWAY with a protocol error)."""


def header_block(headers: Headers) -> bytes:
    parts = [struct.pack("!I", len(headers))]
    for name, values in headers.items():
        key, value = name.lower().encode(), "\x00".join(values).encode()
        parts += [struct.pack("!I", len(key)), key, struct.pack("!I", len(value)), value]
    return b"".join(parts)


def parse_header_block(block: bytes) -> Headers:
    try:
        (count,), offset = struct.unpack_from("!I", block), 4
        headers: Headers = {}
        for _ in range(count):
            (size,) = struct.unpack_from("!I", block, offset)
            name = block[offset + 4 : offset + 4 + size].decode()
            offset += 4 + size
            (size,) = struct.unpack_from("!I", block, offset)
            value = block[offset + 4 : offset + 4 + size].decode()
            offset += 4 + size
            headers.setdefault(name.lower(), []).extend(value.split("\x00"))
    except (struct.error, UnicodeDecodeError) as exc:
        raise SpdyError(f"malformed header block: {exc}") from None
    return headers


class Codec:
    """Encodes frames to bytes and parses bytes (fed in any pieces) into frames, for one connection."""

    def __init__(self) -> None:
        self._compress = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zlib.DEFLATED, 15, 8, zdict=DICTIONARY)
        self._decompress = zlib.decompressobj(zdict=DICTIONARY)
        self._buffer = bytearray()

    # -- writing ----------------------------------------------------------------------------------------
    def encode(self, frame: Frame) -> bytes:
        if isinstance(frame, Data):
            return _frame_header(frame.stream_id & 0x7FFFFFFF, frame.flags, len(frame.data)) + frame.data
        kind, flags, payload = self._control_payload(frame)
        return _frame_header(0x80000000 | (VERSION << 16) | kind, flags, len(payload)) + payload

    def _headers(self, headers: Headers) -> bytes:
        return self._compress.compress(header_block(headers)) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def _control_payload(self, frame: Frame) -> tuple[int, int, bytes]:
        if isinstance(frame, SynStream):
            fixed = struct.pack("!IIBB", frame.stream_id, frame.associated_to, (frame.priority & 7) << 5, 0)
            return SYN_STREAM, frame.flags, fixed + self._headers(frame.headers)
        if isinstance(frame, SynReply):
            return SYN_REPLY, frame.flags, struct.pack("!I", frame.stream_id) + self._headers(frame.headers)
        if isinstance(frame, HeadersFrame):
            return HEADERS, frame.flags, struct.pack("!I", frame.stream_id) + self._headers(frame.headers)
        if isinstance(frame, RstStream):
            return RST_STREAM, 0, struct.pack("!II", frame.stream_id, frame.status)
        if isinstance(frame, Settings):
            body = struct.pack("!I", len(frame.entries)) + b"".join(
                struct.pack("!II", (flags << 24) | ident, value) for flags, ident, value in frame.entries
            )
            return SETTINGS, frame.flags, body
        if isinstance(frame, Ping):
            return PING, 0, struct.pack("!I", frame.ping_id)
        if isinstance(frame, GoAway):
            return GOAWAY, 0, struct.pack("!II", frame.last_good_stream_id, frame.status)
        assert isinstance(frame, WindowUpdate)
        return WINDOW_UPDATE, 0, struct.pack("!II", frame.stream_id, frame.delta)

    # -- reading ----------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Frame]:
        """The frames completed by ``data`` (a partial frame waits for the next call)."""
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 8:
            first, second = struct.unpack_from("!II", self._buffer)
            length = second & 0xFFFFFF
            if len(self._buffer) < 8 + length:
                break
            payload = bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            flags = second >> 24
            if first & 0x80000000:
                frame = self._control((first >> 16) & 0x7FFF, first & 0xFFFF, flags, payload)
                if frame is not None:
                    frames.append(frame)
            else:
                frames.append(Data(first & 0x7FFFFFFF, payload, flags))
        return frames

    def _decoded_headers(self, block: bytes) -> Headers:
        try:
            return parse_header_block(self._decompress.decompress(block))
        except zlib.error as exc:
            raise SpdyError(f"header block does not decompress: {exc}") from None

    def _control(self, version: int, kind: int, flags: int, payload: bytes) -> Frame | None:
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}")
        try:
            if kind == SYN_STREAM:
                stream_id, associated, priority, _ = struct.unpack_from("!IIBB", payload)
                headers = self._decoded_headers(payload[10:])
                return SynStream(
                    stream_id & 0x7FFFFFFF, headers, flags, associated & 0x7FFFFFFF, priority >> 5
                )
            if kind in (SYN_REPLY, HEADERS):
                (stream_id,) = struct.unpack_from("!I", payload)
                headers = self._decoded_headers(payload[4:])
                cls = SynReply if kind == SYN_REPLY else HeadersFrame
                return cls(stream_id & 0x7FFFFFFF, headers, flags)
            if kind == RST_STREAM:
                stream_id, status = struct.unpack_from("!II", payload)
                return RstStream(stream_id & 0x7FFFFFFF, status)
            if kind == SETTINGS:
                (count,) = struct.unpack_from("!I", payload)
                entries = tuple(
                    (word >> 24, word & 0xFFFFFF, value)
                    for word, value in (struct.unpack_from("!II", payload, 4 + 8 * i) for i in range(count))
                )
                return Settings(entries, flags)
            if kind == PING:
                return Ping(struct.unpack_from("!I", payload)[0])
            if kind == GOAWAY:
                last, status = struct.unpack_from("!II", payload)
                return GoAway(last & 0x7FFFFFFF, status)
            if kind == WINDOW_UPDATE:
                stream_id, delta = struct.unpack_from("!II", payload)
                return WindowUpdate(stream_id & 0x7FFFFFFF, delta & 0x7FFFFFFF)
        except struct.error as exc:
            raise SpdyError(f"short control frame of type {kind}: {exc}") from None
        return None  # an unknown control frame type is ignored (§2.2.1)


def _frame_header(first: int, flags: int, length: int) -> bytes:
    if length > MAX_LENGTH:
        raise ValueError("SPDY frame payload too long")
    return struct.pack("!II", first, (flags << 24) | length)
