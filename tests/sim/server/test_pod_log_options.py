"""pods/log's options and the kubelet's choice of run (``sim/api/pod_logs.py``), on a hand-made pod and log
store: the parts kubectl checks on its own side before they reach a server."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import pytest

from gpuplan.sim.api.pod_logs import LogStream, rfc3339_nano, serve_log
from gpuplan.sim.api.protocol import HttpError, Request, Response
from gpuplan.sim.kubelet.logs import ContainerLogs


def pod(state: dict[str, Any], node: str = "n1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u1"},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"containerStatuses": [{"name": "c", "state": state, **status}]},
    }


RUNNING = pod({"running": {}})


def store() -> ContainerLogs:
    """Lines an hour and a minute old, by the clock when the test runs (sinceSeconds counts from now)."""
    now, logs = datetime.now(UTC), ContainerLogs()
    logs.write("u1", "c", "an hour ago", now=now - timedelta(hours=1))
    logs.write("u1", "c", "a minute ago\njust now", now=now - timedelta(minutes=1))
    return logs


def answer(query: str, the_pod: dict[str, Any] = RUNNING, logs: ContainerLogs | None = None) -> bytes:
    request = Request("GET", "/log", parse_qs(query, keep_blank_values=True), {})
    result = serve_log(the_pod, request, logs or store(), threading.Event())
    assert isinstance(result, Response)
    return result.body


def test_since_tail_and_limit_apply_in_the_kubelets_order() -> None:
    assert answer("") == b"an hour ago\na minute ago\njust now\n"
    assert answer("sinceSeconds=600") == b"a minute ago\njust now\n"
    since = (datetime.now(UTC) - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert answer(f"sinceTime={since}") == b"a minute ago\njust now\n"
    assert answer("tailLines=1") == b"just now\n"
    assert answer("tailLines=0") == b""
    assert answer("sinceSeconds=600&tailLines=5&limitBytes=4") == b"a mi"


def test_timestamps_are_rfc3339_with_nanoseconds() -> None:
    stamp = rfc3339_nano(datetime(2026, 12, 1, 16, 0, 0, 120000, tzinfo=UTC))
    assert stamp == "2026-12-01T16:00:00.12Z"
    assert rfc3339_nano(datetime(2026, 12, 1, 16, 0, 0, tzinfo=UTC)) == "2026-12-01T16:00:00Z"
    assert answer("timestamps=true&tailLines=1").split(b" ", 1)[1] == b"just now\n"


@pytest.mark.parametrize(
    "query, problem",
    [
        ("tailLines=-1", "tailLines: Invalid value: -1: must be greater than or equal to 0"),
        ("limitBytes=0", "limitBytes: Invalid value: 0: must be greater than 0"),
        ("sinceSeconds=0", "sinceSeconds: Invalid value: 0: must be greater than 0"),
        ("sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", "at most one of `sinceTime` or `sinceSeconds`"),
    ],
)
def test_invalid_options_are_422(query: str, problem: str) -> None:
    with pytest.raises(HttpError) as refused:
        answer(query)
    assert refused.value.code == 422 and problem in refused.value.message
    assert refused.value.message.startswith('PodLogOptions "p" is invalid: ')


def test_a_pod_on_no_node_has_an_empty_log() -> None:
    assert answer("", pod({"waiting": {"reason": "Pending"}}, node="")) == b""


def test_a_crashed_container_waiting_to_restart_serves_the_run_that_crashed() -> None:
    logs = store()
    logs.finish("u1", "c")
    crashed = pod(
        {"waiting": {"reason": "CrashLoopBackOff"}}, lastState={"terminated": {"exitCode": 1}}, restartCount=1
    )
    assert answer("", crashed, logs).endswith(b"just now\n")
    assert answer("previous=true", crashed, logs).endswith(b"just now\n")
    with pytest.raises(HttpError, match="image can.t be pulled"):
        answer("", pod({"waiting": {"reason": "ErrImagePull"}}), ContainerLogs())


def test_a_followed_log_of_a_running_container_is_a_stream() -> None:
    logs = store()
    request = Request("GET", "/log", {"follow": ["true"], "tailLines": ["1"]}, {})
    stream = serve_log(RUNNING, request, logs, threading.Event())
    assert isinstance(stream, LogStream)
    logs.write("u1", "c", "later")
    logs.finish("u1", "c")
    assert b"".join(stream.chunks()) == b"just now\nlater\n"
