"""API faults: the ApiFaults model (scenario keys, runtime updates, determinism) and what the server does
with it (latency counted through an injected sleep, errors with Retry-After, dropped connections)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from server_kit import Raw, Recorder

from gpuplan.sim.api.faults import ApiFaults


def test_from_spec_reads_the_scenario_keys() -> None:
    faults = ApiFaults.from_spec(
        {"errorRate": 0.1, "codes": [500, 429], "latencyMs": 5, "dropRate": 0.01, "retryAfterSeconds": 3}
    )
    assert (
        faults.error_rate,
        faults.codes,
        faults.latency_ms,
        faults.drop_rate,
        faults.retry_after_seconds,
    ) == (0.1, (500, 429), 5.0, 0.01, 3)
    assert faults.to_spec() == {
        "errorRate": 0.1,
        "codes": [500, 429],
        "latencyMs": 5.0,
        "dropRate": 0.01,
        "retryAfterSeconds": 3,
        "lostResponseRate": 0.0,
    }


@pytest.mark.parametrize(
    "spec", [{"errorRate": 2}, {"codes": [418]}, {"codes": []}, {"latencyMs": -1}, {"bogus": 1}]
)
def test_invalid_settings_are_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ApiFaults.from_spec(spec)


def test_update_at_runtime_accepts_both_spellings_and_is_atomic() -> None:
    faults = ApiFaults()
    assert not faults.active
    faults.update(errorRate=0.5, latency_ms=2)
    assert faults.active and faults.error_rate == 0.5 and faults.latency_ms == 2.0
    with pytest.raises(ValueError):
        faults.update(error_rate=0.0, codes=[999])
    assert faults.error_rate == 0.5  # nothing of the refused update was applied


def test_same_seed_same_faults() -> None:
    def draw(seed: int) -> list[int | None]:
        faults = ApiFaults(error_rate=0.5, codes=(500, 503, 429), seed=seed)
        return [(d.error.code if d.error else None) for d in (faults.decide(write=False) for _ in range(50))]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    assert set(draw(1)) == {None, 500, 503, 429}


def test_conflicts_are_only_drawn_for_writes() -> None:
    faults = ApiFaults(error_rate=1.0, codes=(409,), seed=3)
    assert faults.decide(write=False).error is None
    decision = faults.decide(write=True)
    assert decision.error is not None and decision.error.code == 409 and decision.error.reason == "Conflict"


def test_retry_after_comes_with_429_and_503_only() -> None:
    faults = ApiFaults(error_rate=1.0, codes=(429,), retry_after_seconds=4)
    error = faults.decide(write=False).error
    assert error is not None and error.retry_after_seconds == 4 and error.reason == "TooManyRequests"
    faults.update(codes=[500])
    error = faults.decide(write=False).error
    assert error is not None and error.retry_after_seconds is None


def test_error_rate_one_makes_every_resource_request_fail_with_500(
    raw: Raw, faults: ApiFaults, client: Any
) -> None:
    faults.update(error_rate=1.0, codes=[500])
    for _ in range(3):
        code, body = raw.json("GET", "/api/v1/namespaces")
        assert code == 500 and body["reason"] == "InternalError" and body["kind"] == "Status"
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(client).list_namespace(_request_timeout=5)
    assert caught.value.status == 500


def test_discovery_and_sim_paths_are_never_faulted(raw: Raw, faults: ApiFaults) -> None:
    faults.update(error_rate=1.0, codes=[500], drop_rate=0.0)
    for path in ("/version", "/api", "/apis", "/api/v1", "/openapi/v3", "/sim/faults"):
        assert raw.request("GET", path)[0] == 200, path


def test_429_carries_retry_after(raw: Raw, faults: ApiFaults) -> None:
    faults.update(error_rate=1.0, codes=[429], retry_after_seconds=2)
    code, headers, data = raw.request("GET", "/api/v1/nodes")
    body = json.loads(data)
    assert code == 429 and headers["retry-after"] == "2"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 2


def test_drop_closes_the_connection_without_a_response(raw: Raw, faults: ApiFaults) -> None:
    faults.update(drop_rate=1.0)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        raw.request("GET", "/api/v1/nodes")
    faults.update(drop_rate=0.0)
    assert raw.request("GET", "/api/v1/nodes")[0] == 200


def test_latency_is_applied_through_the_injected_sleep(raw: Raw, faults: ApiFaults, sleeps: Recorder) -> None:
    faults.update(latency_ms=25)
    for _ in range(3):
        assert raw.request("GET", "/api/v1/nodes")[0] == 200
    raw.request("GET", "/version")  # not a resource request: no latency
    assert sleeps.calls == [0.025, 0.025, 0.025]


def test_a_refused_proxy_holds_until_cleared_and_counts_each_refusal() -> None:
    faults = ApiFaults()
    assert faults.proxy_refusal("pods") is None and "proxyRefused" not in faults.to_spec()
    faults.update(proxy_refused={"pods": "address-not-allowed", "services": "forbidden"})
    assert [faults.proxy_refusal("pods") for _ in range(3)] == ["address-not-allowed"] * 3
    assert faults.proxy_refusal("services") == "forbidden" and not faults.active, "not a drawn fault"
    assert faults.to_spec()["proxyRefused"] == {"pods": "address-not-allowed", "services": "forbidden"}
    assert faults.fired() == {"proxyRefused:pods": 3, "proxyRefused:services": 1}
    faults.update(proxy_refused={})
    assert faults.proxy_refusal("pods") is None


@pytest.mark.parametrize(
    "refusals", [{"services": "address-not-allowed"}, {"nodes": "forbidden"}, {"pods": "teapot"}, ["pods"]]
)
def test_a_refusal_the_real_server_never_gives_is_refused(refusals: Any) -> None:
    with pytest.raises(ValueError, match="proxy_refused"):
        ApiFaults(proxy_refused=refusals)
