"""A scripted ApiClient: the official client's own class with its one network call replaced.

``param_serialize`` (auth headers, query encoding) and the provider's response handling run for real; only
``call_api`` answers from a route table instead of a socket, so the error mapping and retries are tested
without any network (kopf's ``k8s_mocked`` idea, at the official client's seam).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import RESTResponse

SECRET_TOKEN = "s3cr3t-t0ken-never-printed"
SERVER = "https://cluster.example:6443"

# an answer: (status, JSON body, headers), an exception to raise, or a callable computing one from the query
Answer = Any


class ScriptedApiClient(ApiClient):
    """Answers GETs from ``routes``: path -> list of answers consumed in order (the last one repeats)."""

    def __init__(self, routes: dict[str, list[Answer]]) -> None:
        configuration = Configuration(host=SERVER, api_key={"authorization": SECRET_TOKEN},
                                      api_key_prefix={"authorization": "Bearer"})
        super().__init__(configuration)
        self.routes = {path: list(answers) for path, answers in routes.items()}
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.headers_seen: list[dict[str, str]] = []

    def call_api(self, method: str, url: str, header_params: Any = None, body: Any = None,
                 post_params: Any = None, _request_timeout: Any = None) -> RESTResponse:
        assert method == "GET" and url.startswith(SERVER)
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.requests.append((parts.path, query))
        self.headers_seen.append(dict(header_params or {}))
        answers = self.routes.get(parts.path)
        if not answers:
            answer: Answer = (404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                                    "message": f"the server could not find the requested resource ({parts.path})"},
                              {})
        else:
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer):
            answer = answer(query)
        if isinstance(answer, BaseException):
            raise answer
        status, payload, headers = answer
        raw = urllib3.HTTPResponse(body=json.dumps(payload).encode(), status=status, headers=headers,
                                   preload_content=False)
        return RESTResponse(raw)


@pytest.fixture
def scripted() -> Iterator[Callable[[dict[str, list[Answer]]], ScriptedApiClient]]:
    made: list[ScriptedApiClient] = []

    def make(routes: dict[str, list[Answer]]) -> ScriptedApiClient:
        client = ScriptedApiClient(routes)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()  # type: ignore[no-untyped-call]


class Sleeps(list[float]):
    """An injected sleep that records the delays instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()
