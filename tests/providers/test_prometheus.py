"""providers.prometheus against a local stub of the Prometheus HTTP API (http.server on 127.0.0.1): the
instant query and its envelope, the bearer token read from its file and never shown, the size cap, and each
failure as one PrometheusError naming the server with a hint."""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpuplan.errors import ConfigError
from gpuplan.providers.prometheus import PrometheusClient, PrometheusError, shown
from gpuplan.providers.protocols import PromSample

TOKEN = "s3cr3t-token-value"
Answer = Callable[[str, dict[str, str]], tuple[int, bytes]]


def vector(*items: tuple[dict[str, str], str]) -> bytes:
    result = [{"metric": labels, "value": [1796142767.6, value]} for labels, value in items]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


class Stub:
    """A Prometheus API stand-in: ``answer(query, headers)`` gives the status and body; requests are kept."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.answer: Answer = lambda query, headers: (200, vector())
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query).get("query", [""])[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                stub.seen.append((parts.path, {"query": query, **headers}))
                status, body = stub.answer(query, headers)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def test_an_instant_query_returns_the_vector_with_the_token_sent(stub: Stub, token_file: Path) -> None:
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "gpu-a"}
    stub.answer = lambda query, headers: (200, vector((labels, "95")))
    client = PrometheusClient(stub.url + "/", bearer_token_file=token_file)
    assert client.query("DCGM_FI_DEV_GPU_TEMP") == [PromSample(labels, 95.0)]
    assert client.request_count == 1
    ((path, request),) = stub.seen
    assert path == "/api/v1/query" and request["query"] == "DCGM_FI_DEV_GPU_TEMP"
    assert request["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (
            400,
            b'{"status":"error","errorType":"bad_data","error":"parse error"}',
            "HTTP 400: bad_data: parse",
        ),
        (401, b"Unauthorized", "Prometheus answered HTTP 401"),
        (200, b"<html>a login page</html>", "not the Prometheus HTTP API's JSON"),
        (
            200,
            b'{"status":"error","errorType":"timeout","error":"query timed out"}',
            "timeout: query timed out",
        ),
        (
            200,
            b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
            "not return an instant vector",
        ),
        (200, b'{"status":"success","data":{"resultType":"vector","result":[{"value":1}]}}', "malformed"),
    ],
)
def test_an_answer_that_is_not_a_vector_is_one_error_naming_the_server_never_the_token(
    stub: Stub, token_file: Path, status: int, body: bytes, said: str
) -> None:
    stub.answer = lambda query, headers: (status, body)
    with pytest.raises(PrometheusError) as raised:
        PrometheusClient(stub.url, bearer_token_file=token_file).query("up")
    rendered = raised.value.render()
    assert rendered.startswith(f"Error: {stub.url}: ") and said in rendered, rendered
    assert "Hint:" in rendered and TOKEN not in rendered
    if status == 401:
        assert "bearerTokenFile" in rendered


def test_an_answer_over_the_size_cap_is_refused(stub: Stub) -> None:
    stub.answer = lambda query, headers: (200, vector(*[({"gpu": str(i)}, "1") for i in range(200)]))
    with pytest.raises(PrometheusError, match="larger than 1000 bytes"):
        PrometheusClient(stub.url, max_bytes=1000).query("up")


def test_an_unreachable_server_is_one_error_naming_it_without_its_password() -> None:
    stub = Stub()
    url = stub.url
    stub.close()
    with pytest.raises(PrometheusError) as raised:
        PrometheusClient(url.replace("http://", "http://user:pw@"), timeout=5).query("up")
    assert raised.value.where == url
    assert raised.value.summary.startswith("cannot reach Prometheus") and "pw" not in raised.value.render()


def test_bad_files_and_urls_are_config_errors_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        PrometheusClient("http://p:9090", bearer_token_file=tmp_path / "absent")
    assert missing.value.where == str(tmp_path / "absent")
    two_lines = tmp_path / "two"
    two_lines.write_text("one\ntwo\n")
    with pytest.raises(ConfigError, match="does not hold one token"):
        PrometheusClient("http://p:9090", bearer_token_file=two_lines)
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate")
    with pytest.raises(ConfigError) as bad_ca:
        PrometheusClient("https://p:9090", ca_file=not_pem)
    assert bad_ca.value.where == str(not_pem) and "caFile" in bad_ca.value.hint
    with pytest.raises(ConfigError, match="not an http"):
        PrometheusClient("prometheus:9090")
    assert shown("https://a:b@p:9090/x") == "https://p:9090/x"


def test_a_fleet_s_answer_is_read_series_by_series_never_whole(stub: Stub) -> None:
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "dcgm-exporter", "modelName": "NVIDIA H200"}
    body = vector(*[({**labels, "gpu": str(i % 8), "node": f"h200-{i // 8}"}, "38") for i in range(20_000)])
    stub.answer = lambda query, headers: (200, body)
    client = PrometheusClient(stub.url)
    tracemalloc.start()
    try:
        count = sum(1 for sample in client.stream("DCGM_FI_DEV_GPU_TEMP") if sample.value == 38.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 20_000 and client.request_count == 1
    assert peak < len(body) / 4, (peak, len(body))
