"""Lost responses: the server handles a write, stores it, and then drops the connection or answers 504 instead
of the real answer. Also the fault counters (``ApiFaults.fired``) that let a test prove its faults struck."""

from __future__ import annotations

import http.client
from typing import Any

import pytest
from server_kit import Raw

from gpuplan.sim.api.faults import ApiFaults
from gpuplan.sim.scenario import ApiFaultSpec
from gpuplan.sim.testing import SimFactory

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def _configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def _post_losing_the_answer(raw: Raw, name: str) -> str:
    """POST a ConfigMap; how its answer was lost: 'drop' or '504' (anything else fails the test)."""
    try:
        code, body = raw.json("POST", CONFIGMAPS, _configmap(name))
    except (http.client.RemoteDisconnected, ConnectionError):
        return "drop"
    assert code == 504 and body["reason"] == "Timeout", (code, body)
    return "504"


def test_a_create_whose_response_is_lost_still_created_the_object(raw: Raw, faults: ApiFaults) -> None:
    faults.update(lost_response_rate=1.0)
    ways = [_post_losing_the_answer(raw, f"lost-{index}") for index in range(8)]
    faults.update(lost_response_rate=0.0)

    assert set(ways) == {"drop", "504"}  # seed 7 draws both within eight writes
    for index in range(8):
        code, stored = raw.json("GET", f"{CONFIGMAPS}/lost-{index}")
        assert code == 200 and stored["data"] == {"k": "v"}
    code, again = raw.json("POST", CONFIGMAPS, _configmap("lost-0"))
    assert code == 409 and again["reason"] == "AlreadyExists"  # a blind retry would find it there
    assert faults.fired() == {f"lostResponse:{way}": ways.count(way) for way in set(ways)}


def test_reads_never_lose_their_response(raw: Raw, faults: ApiFaults) -> None:
    faults.update(lost_response_rate=1.0)
    for _ in range(5):
        assert raw.request("GET", CONFIGMAPS)[0] == 200
    assert faults.fired() == {}


def test_a_write_that_fails_on_its_own_keeps_its_real_answer(raw: Raw, faults: ApiFaults) -> None:
    assert raw.json("POST", CONFIGMAPS, _configmap("there"))[0] == 201
    faults.update(lost_response_rate=1.0)
    code, body = raw.json("POST", CONFIGMAPS, _configmap("there"))
    assert code == 409 and body["reason"] == "AlreadyExists"
    assert faults.fired() == {}


def test_errors_and_drops_are_counted_by_kind(raw: Raw, faults: ApiFaults) -> None:
    faults.update(error_rate=1.0, codes=[429])
    raw.request("GET", "/api/v1/nodes")
    raw.request("GET", "/api/v1/nodes")
    faults.update(error_rate=0.0, drop_rate=1.0)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        raw.request("GET", "/api/v1/nodes")
    assert faults.fired() == {"error:429": 2, "drop": 1}


def test_lost_response_rate_is_a_scenario_and_runtime_key() -> None:
    faults = ApiFaults.from_spec({"lostResponseRate": 0.25, "seed": 1})
    assert faults.lost_response_rate == 0.25 and faults.active
    assert faults.to_spec()["lostResponseRate"] == 0.25
    faults.update(lostResponseRate=0.0)
    assert not faults.active
    with pytest.raises(ValueError):
        faults.update(lost_response_rate=1.5)
    assert ApiFaultSpec.model_validate({"lostResponseRate": 0.1}).lostResponseRate == 0.1


def test_lost_responses_do_not_change_an_existing_seed_sequence() -> None:
    def codes(faults: ApiFaults) -> list[int | None]:
        decisions = [faults.decide(write=False) for _ in range(40)]
        return [d.error.code if d.error else None for d in decisions]

    plain = ApiFaults(error_rate=0.3, codes=(500, 429), seed=5)
    with_lost = ApiFaults(error_rate=0.3, codes=(500, 429), lost_response_rate=0.5, seed=5)
    assert codes(plain) == codes(with_lost)  # reads draw nothing for lost responses


def test_a_scenario_and_the_control_api_set_and_clear_lost_responses(sim_factory: SimFactory) -> None:
    sim = sim_factory(
        {
            "nodes": [{"name": "a", "gpu": {"model": "rtx-3060"}}],
            "faults": {"api": {"lostResponseRate": 0.2}},
        },
        serve=False,
    )
    assert sim.api_faults.lost_response_rate == 0.2

    code, body = sim.control.handle("PATCH", "/sim/v1/faults", {"api": {"lostResponseRate": 0.5}})
    assert code == 200 and body["api"]["lostResponseRate"] == 0.5 and sim.api_faults.lost_response_rate == 0.5
    code, body = sim.control.handle("PUT", "/sim/v1/faults", {"api": {"errorRate": 0.1}})
    assert code == 200 and body["api"]["lostResponseRate"] == 0.0  # PUT replaces the whole api section
    sim.control.handle("PATCH", "/sim/v1/faults", {"api": {"lostResponseRate": 0.5}})
    code, body = sim.control.handle("PATCH", "/sim/v1/faults", {"api": None})
    assert code == 200 and body["api"]["lostResponseRate"] == 0.0 and not sim.api_faults.active
    code, body = sim.control.handle("PATCH", "/sim/v1/faults", {"api": {"lostResponseRate": 2}})
    assert code == 400 and sim.api_faults.lost_response_rate == 0.0
