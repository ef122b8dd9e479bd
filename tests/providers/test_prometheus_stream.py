"""providers.prometheus_stream: a Prometheus answer read chunk by chunk gives the items json.loads would, in
any key order and with any chunk boundary, refuses what is not one JSON object or is too long, and holds the
same few kilobytes whatever the number of series."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuplan.providers import prometheus_stream
from gpuplan.providers.prometheus_stream import AnswerTooLarge, Envelope, MalformedAnswer, items


def series(index: int) -> dict[str, Any]:
    """One DCGM series as Prometheus answers it (labels of the exporter and of the scrape job)."""
    return {
        "metric": {
            "__name__": "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DRIVER_VERSION": "580.105.08",
            "UUID": f"GPU-{index:08x}-156b-5b91-afe4-e5a6325ffd0a",
            "gpu": str(index % 8),
            "modelName": "NVIDIA H200 — “NVL”",  # not ASCII: a character may fall across two chunks
            "node": f"h200-{index // 8}",
            "instance": f"127.129.{index // 8 % 250}.{index % 250}:9400",
            "job": "dcgm-exporter",
        },
        "value": [1796164478.501, str(30 + index % 50)],
    }


def reader(pieces: Iterator[bytes]) -> Callable[[int], bytes]:
    """``read(n)`` over bytes made as they are asked for: the answer itself is never held whole."""
    pending = bytearray()

    def read(size: int) -> bytes:
        while len(pending) < size:
            piece = next(pieces, None)
            if piece is None:
                break
            pending.extend(piece)
        chunk = bytes(pending[:size])
        del pending[:size]
        return chunk

    return read


def answer(
    count: int, *, head: bytes = b'{"status":"success","data":{"resultType":"vector","result":['
) -> Any:
    yield head
    for index in range(count):
        yield (b"," if index else b"") + json.dumps(series(index), ensure_ascii=False).encode()
    yield b"]}}"


def read_all(body: bytes, chunk: int, max_bytes: int = 1 << 30) -> tuple[list[Any], Envelope]:
    envelope = Envelope()
    pieces = iter([body[i : i + chunk] for i in range(0, len(body), chunk)])
    return list(items(reader(pieces), envelope, max_bytes=max_bytes)), envelope


@pytest.mark.parametrize("chunk", [1, 7, 333, 64 * 1024])
def test_the_items_are_json_s_at_every_chunk_boundary(chunk: int) -> None:
    body = b"".join(answer(40))
    found, envelope = read_all(body, chunk)
    assert found == json.loads(body)["data"]["result"]
    assert (envelope.status, envelope.result_type) == ("success", "vector")


def test_an_answer_in_another_key_order_is_read_right() -> None:
    document = {
        "data": {"result": [series(0), series(1)], "resultType": "vector"},
        "warnings": ["a, warning"],
        "status": "success",
    }
    found, envelope = read_all(json.dumps(document, indent=1).encode(), 5)
    assert found == document["data"]["result"]  # type: ignore[index]
    assert (envelope.status, envelope.result_type, envelope.held) == ("success", "vector", [])


def test_an_error_answer_fills_the_envelope() -> None:
    found, envelope = read_all(b'{"status":"error","errorType":"timeout","error":"query timed out"}', 4)
    assert found == [] and (envelope.status, envelope.error_type, envelope.error) == (
        "error",
        "timeout",
        "query timed out",
    )


@pytest.mark.parametrize(
    "body",
    [
        b"<html>a login page</html>",
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}',  # cut short
        b'{"status":"success"} {"status":"success"}',
        b'{"status":"success","data":{"resultType":"vector","result":[1 2]}}',
        b"",
    ],
)
def test_what_is_not_one_json_object_is_malformed(body: bytes) -> None:
    with pytest.raises(MalformedAnswer):
        read_all(body, 3)


def test_an_answer_longer_than_the_cap_stops_being_read() -> None:
    body = b"".join(answer(100))
    with pytest.raises(AnswerTooLarge):
        read_all(body, 1000, max_bytes=len(body) // 2)


def peak_while_reading(count: int) -> int:
    """The most memory the parser (and the items it hands on, dropped at once) took at one time."""
    envelope = Envelope()
    tracemalloc.start()
    try:
        for _ in items(reader(answer(count)), envelope, max_bytes=1 << 40):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_parser_holds_the_same_memory_whatever_the_number_of_series() -> None:
    small, large = peak_while_reading(500), peak_while_reading(20_000)  # 200 KB and 8 MB of answer
    assert large < small + 16 * 1024, (small, large)
    assert large < 16 * prometheus_stream.CHUNK_BYTES, large  # a chunk and its text, never the 8 MB
