"""What a simulated API server answers, recorded: the read-only commands' tests (drift report, validate
--cluster) assert that every request is a GET."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator


def record_requests(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(method, path) of every request ``sim``'s API server answers from now on (a read-only command's
    tests assert every one is a GET)."""
    seen: list[tuple[str, str]] = []
    server = sim._server
    assert server is not None
    answer = server.answer

    def recording(request: Any, conn: Any) -> Any:
        seen.append((request.method, request.path))
        return answer(request, conn)

    monkeypatch.setattr(server, "answer", recording)
    return seen


def record_queries(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, str, dict[str, list[str]]]]:
    """(method, path, query) of every request ``sim``'s API server answers from now on: a list tells
    itself from a watch of the same path by its query."""
    seen: list[tuple[str, str, dict[str, list[str]]]] = []
    server = sim._server
    assert server is not None
    answer = server.answer

    def recording(request: Any, conn: Any) -> Any:
        seen.append((request.method, request.path, dict(request.query)))
        return answer(request, conn)

    monkeypatch.setattr(server, "answer", recording)
    return seen
