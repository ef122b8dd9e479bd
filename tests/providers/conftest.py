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
        configuration = Configuration(
            host=SERVER, api_key={"authorization": SECRET_TOKEN}, api_key_prefix={"authorization": "Bearer"}
        )
        super().__init__(configuration)
        self.routes = {path: list(answers) for path, answers in routes.items()}
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.headers_seen: list[dict[str, str]] = []

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        assert method == "GET" and url.startswith(SERVER)
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.requests.append((parts.path, query))
        self.headers_seen.append(dict(header_params or {}))
        answers = self.routes.get(parts.path)
        if not answers:
            answer: Answer = (
                404,
                {
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": f"the server could not find the requested resource ({parts.path})",
                },
                {},
            )
        else:
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer):
            answer = answer(query)
        if isinstance(answer, BaseException):
            raise answer
        status, payload, headers = answer
        raw = urllib3.HTTPResponse(
            body=json.dumps(payload).encode(), status=status, headers=headers, preload_content=False
        )
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


# ------------------------------------------------------------------ the simulator's API server over a bare
# store


class ApiStand:
    """A Store behind the simulator's real HTTP ApiServer, and a kubeconfig for it (no controllers)."""

    def __init__(self, tmp_path: Any, faults: Any = None) -> None:
        from gpuplan.sim.api.registry import Registry
        from gpuplan.sim.api.server import ApiServer, write_kubeconfig
        from gpuplan.sim.api.store import Store

        self.store = Store(Registry.builtin())
        self.server = ApiServer(self.store, token=SECRET_TOKEN, faults=faults)
        self.server.start()
        self.kubeconfig = str(
            write_kubeconfig(tmp_path / "kubeconfig", self.server.url, SECRET_TOKEN, self.server.ca_pem)
        )
        self.running = True

    def create(self, obj: dict[str, Any], manager: str = "kubectl-create") -> dict[str, Any]:
        api_version, kind = obj["apiVersion"], obj["kind"]
        rt = self.store.registry.for_kind(api_version, kind)
        assert rt is not None, f"{api_version} {kind} not served"
        created: dict[str, Any] = self.store.create(
            rt, obj, namespace=obj["metadata"].get("namespace"), manager=manager
        )
        return created

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.server.stop()
            self.store.close()


@pytest.fixture
def api_stand(tmp_path: Any) -> Iterator[Callable[..., ApiStand]]:
    stands: list[ApiStand] = []

    def make(faults: Any = None) -> ApiStand:
        folder = tmp_path / f"stand{len(stands)}"
        folder.mkdir()
        stand = ApiStand(folder, faults)
        stands.append(stand)
        return stand

    yield make
    for stand in stands:
        stand.stop()
