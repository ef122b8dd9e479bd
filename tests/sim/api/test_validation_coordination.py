"""The API server's checks of a Secret's data (ConfigMap-key names, 1 MiB in all) and a Lease's spec."""

from __future__ import annotations

import base64

from gpuplan.sim.api import validation_coordination as checks


def _secret(data: dict[str, bytes]) -> dict[str, object]:
    return {"data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def test_a_secret_of_exactly_1_mib_is_taken_and_one_byte_more_is_too_long() -> None:
    assert checks.secret(_secret({"a": b"x" * (512 * 1024), "b": b"y" * (512 * 1024)})) == []
    [cause] = checks.secret(_secret({"a": b"x" * (1024 * 1024 + 1)}))
    assert cause == {
        "reason": "FieldValueTooLong",
        "field": "data",
        "message": "Too long: may not be more than 1048576 bytes",
    }


def test_a_secret_key_must_be_a_config_key() -> None:
    [cause] = checks.secret(_secret({"no/slash": b"v"}))
    assert cause["field"] == "data[no/slash]" and cause["reason"] == "FieldValueInvalid"
    assert checks.secret(_secret({"ok-key_1.x": b"v"})) == []


def test_a_lease_duration_must_be_positive_and_transitions_not_negative() -> None:
    assert checks.lease({"spec": {"leaseDurationSeconds": 15, "leaseTransitions": 0}}) == []
    assert checks.lease({"spec": {}}) == []
    causes = checks.lease({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}})
    assert [c["field"] for c in causes] == ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
    assert causes[0]["message"] == "Invalid value: 0: must be greater than 0"
