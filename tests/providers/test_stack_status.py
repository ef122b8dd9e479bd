"""The GPUStack status writer's pure parts: conditions keep their transition time unless they flip, and the
plan log stays bounded."""

from __future__ import annotations

from gpuplan.providers import stack_status


def test_a_condition_keeps_its_transition_time_until_its_status_flips() -> None:
    old = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "t0", "reason": "Applied", "message": "m"},
        {
            "type": "Drifted",
            "status": "False",
            "lastTransitionTime": "t0",
            "reason": "NoDrift",
            "message": "",
        },
        {"type": "Other", "status": "True", "lastTransitionTime": "t0", "reason": "R", "message": ""},
    ]
    new = [
        {"type": "Ready", "status": "True", "reason": "Healthy", "message": "again"},
        {"type": "Drifted", "status": "True", "reason": "DriftFound", "message": "x"},
    ]
    merged = {c["type"]: c for c in stack_status.merge_conditions(old, new, "t1")}
    assert merged["Ready"]["lastTransitionTime"] == "t0" and merged["Ready"]["message"] == "again"
    assert merged["Drifted"]["lastTransitionTime"] == "t1"
    assert merged["Other"]["lastTransitionTime"] == "t0"  # another writer's condition is kept
    assert stack_status.merge_conditions([], new[:1], "t2")[0]["lastTransitionTime"] == "t2"


def test_the_plan_log_keeps_the_newest_entries_that_fit() -> None:
    entries = {f"2026-12-01T{i:02d}0000Z-serial-{i}.json": "x" for i in range(30)}
    kept = stack_status.bounded(entries)
    assert len(kept) == stack_status.PLAN_LOG_ENTRIES and max(kept) == max(entries)
    big = {"a": "x" * stack_status.PLAN_LOG_BYTES, "b": "y" * stack_status.PLAN_LOG_BYTES}
    assert list(stack_status.bounded(big)) == ["b"]  # the newest stays, even alone past the bound
