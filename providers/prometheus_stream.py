"""The Prometheus HTTP API's answer read as it arrives: the envelope's small fields, and each item of
``data.result`` handed on one at a time, so a fleet's answer (40,000 series of a few hundred bytes at 5,000
nodes) is never held whole, neither as bytes nor decoded.

The envelope is fleet facts §8 (``docs/querying/api.md`` of prometheus/prometheus): ``{status, data:
{resultType, result}, errorType, error, warnings, infos}``. Prometheus writes ``status`` first and
``resultType`` before ``result`` (``web/api/v1/api.go``: the ``Response`` and ``QueryData`` structs' field
order), so the items can be judged as they come; a server that writes them in another order is still read
right: the items that arrive before both are known are kept until they are (see :class:`Envelope`).

No JSON library of its own: the standard decoder (``json.JSONDecoder.raw_decode``) decodes each value from a
text buffer that holds one chunk of the answer and what is left of the previous one; the parser's state is
that buffer and a few small fields, whatever the number of series.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

CHUNK_BYTES = 64 * 1024
_WHITESPACE = " \t\n\r"


class MalformedAnswer(ValueError):
    """The answer is not one JSON object (or is cut short)."""


class AnswerTooLarge(ValueError):
    """The answer is longer than the reader allows."""


@dataclass
class Envelope:
    """The answer's fields other than ``data.result``, as far as read; ``held``: result items that came
    before ``status`` and ``resultType`` did (none from Prometheus itself)."""

    status: Any = None
    result_type: Any = None
    error_type: Any = None
    error: Any = None
    is_object: bool = False
    data_is_object: bool = False
    held: list[Any] = field(default_factory=list)

    @property
    def known(self) -> bool:
        """Both fields that say how to read the items have been read."""
        return self.status is not None and self.result_type is not None


class _Buffer:
    """The unread text of the answer: one chunk at a time, decoded as UTF-8 (a character cut between two
    chunks waits for the next), with the bytes read counted against ``max_bytes``."""

    def __init__(self, read: Callable[[int], bytes], max_bytes: int) -> None:
        self._read = read
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._max_bytes = max_bytes
        self.bytes_read = 0
        self.text = ""
        self.at = 0
        self.ended = False

    def more(self) -> bool:
        """Append the next chunk (dropping what was consumed); False at the end of the answer."""
        if self.ended:
            return False
        chunk = self._read(CHUNK_BYTES)
        self.bytes_read += len(chunk)
        if self.bytes_read > self._max_bytes:
            raise AnswerTooLarge(self._max_bytes)
        self.text = self.text[self.at :] + self._decoder.decode(chunk, final=not chunk)
        self.at = 0
        self.ended = not chunk
        return True

    def peek(self) -> str:
        """The next character that is not whitespace ('' at the end of the answer)."""
        while True:
            while self.at < len(self.text) and self.text[self.at] in _WHITESPACE:
                self.at += 1
            if self.at < len(self.text):
                return self.text[self.at]
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise MalformedAnswer(f"expected {char!r}")
        self.at += 1

    def value(self, decoder: json.JSONDecoder) -> Any:
        """The next JSON value, read whole (a value cut by the chunk's end waits for the next chunk)."""
        self.peek()
        while True:
            try:
                decoded, end = decoder.raw_decode(self.text, self.at)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise MalformedAnswer("a value is cut short or not JSON") from None
            if end == len(self.text) and not self.ended and self.text[self.at] not in '{["':
                self.more()  # a number or a literal may go on in the next chunk: read it whole
                continue
            self.at = end
            return decoded


def items(read: Callable[[int], bytes], envelope: Envelope, *, max_bytes: int) -> Iterator[Any]:
    """The items of ``data.result`` as they are read from ``read`` (a file's ``read(n)``), each once the
    envelope's ``status`` and ``resultType`` are known (:class:`Envelope`); ``envelope`` is filled in as the
    answer is read and complete once the iterator is exhausted. Raises :class:`MalformedAnswer` or
    :class:`AnswerTooLarge`."""
    buffer, decoder = _Buffer(read, max_bytes), json.JSONDecoder()
    if buffer.peek() != "{":
        raise MalformedAnswer("not a JSON object")
    envelope.is_object = True
    for key in _keys(buffer, decoder):
        if key == "data" and buffer.peek() == "{":
            envelope.data_is_object = True
            yield from _data(buffer, decoder, envelope)
            continue
        value = buffer.value(decoder)
        if key == "status":
            envelope.status = value
        elif key == "errorType":
            envelope.error_type = value
        elif key == "error":
            envelope.error = value
    if buffer.peek() != "":
        raise MalformedAnswer("more than one JSON value")
    yield from _drained(envelope)


def _data(buffer: _Buffer, decoder: json.JSONDecoder, envelope: Envelope) -> Iterator[Any]:
    for key in _keys(buffer, decoder):
        if key == "result" and buffer.peek() == "[":
            yield from _result(buffer, decoder, envelope)
            continue
        value = buffer.value(decoder)
        if key == "resultType":
            envelope.result_type = value


def _result(buffer: _Buffer, decoder: json.JSONDecoder, envelope: Envelope) -> Iterator[Any]:
    buffer.expect("[")
    if buffer.peek() == "]":
        buffer.at += 1
        return
    while True:
        item = buffer.value(decoder)
        if envelope.known:
            yield from _drained(envelope)
            yield item
        else:
            envelope.held.append(item)
        if buffer.peek() == "]":
            buffer.at += 1
            return
        buffer.expect(",")


def _drained(envelope: Envelope) -> Iterator[Any]:
    held, envelope.held = envelope.held, []
    yield from held


def _keys(buffer: _Buffer, decoder: json.JSONDecoder) -> Iterator[str]:
    """The keys of the object that starts at the buffer, each with the buffer at its value; the caller reads
    the value before asking for the next key."""
    buffer.expect("{")
    if buffer.peek() == "}":
        buffer.at += 1
        return
    while True:
        if buffer.peek() != '"':
            raise MalformedAnswer("an object key is not a string")
        key = buffer.value(decoder)
        buffer.expect(":")
        yield key
        if buffer.peek() == "}":
            buffer.at += 1
            return
        buffer.expect(",")
