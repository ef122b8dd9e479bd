"""The walker's result is data: the operation, its outcome and what was undone, with the verdict rendered
from them (no caller rewords or parses it), and the walker makes the driver's node-by-node rollout itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.planner.apply import walker
from gpuplan.planner.apply.model import (
    STOPPED,
    ApplyOptions,
    ApplyResult,
    Failure,
    NullHooks,
    Operation,
    Outcome,
)
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.state.local import LocalFileBackend

from .conftest import make_node

PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
CRASH = Failure(PLUGIN, "p on n: CrashLoopBackOff", "devicePlugin", "CrashLoopBackOff", "n", "p", "rollout")


@pytest.mark.parametrize(
    ("result", "verdict"),
    [
        (ApplyResult(), "Apply complete: 0 change(s) applied, every changed component healthy."),
        (ApplyResult(outcome=Outcome.NO_CHANGES), "No changes. The cluster matches the configuration."),
        (
            ApplyResult(operation=Operation.ROLLBACK, changed=["a", "b"], returning_to=3, serial=9),
            "Rolled back to generation 3: 2 change(s) applied, every changed component healthy; the state is "
            "at serial 9, and this rollback is kept as a new generation.",
        ),
        (
            ApplyResult(outcome=Outcome.ROLLED_BACK, failed=[CRASH], rolled_back=[PLUGIN], restored=["gfd"]),
            f"Apply failed: {CRASH.describe()}. Rolled back: 1 change(s) undone, the cluster and the state "
            "are as before this apply; restored components healthy: gfd.",
        ),
        (
            ApplyResult(operation=Operation.ROLLBACK, outcome=Outcome.ROLLED_BACK, failed=[CRASH]),
            f"Rollback failed: {CRASH.describe()}. Rolled back: 0 change(s) undone, the cluster and "
            "the state are as before this rollback.",
        ),
        (
            ApplyResult(
                operation=Operation.RESUME, outcome=Outcome.ROLLED_BACK, failed=[CRASH], rolled_back=[PLUGIN]
            ),
            f"The interrupted apply failed its health gates: {CRASH.describe()}. Rolled back: 1 change(s) "
            f"undone, the cluster and the state are as before the interrupted apply. Undone: {PLUGIN}.",
        ),
        (
            ApplyResult(
                operation=Operation.RESUME,
                outcome=Outcome.RESUMED,
                kept=2,
                half_made=["gfd"],
                rolled_back=["x", "y"],
            ),
            "The interrupted apply resumed: 2 change(s) healthy, half-made gfd undone (2 change(s)); its "
            "journal is cleared.",
        ),
        (
            ApplyResult(
                operation=Operation.RESUME,
                outcome=Outcome.ROLLBACK_INCOMPLETE,
                half_made=["gfd"],
                left=["x: 409"],
            ),
            "The interrupted apply left gfd half-made, and undoing it failed: x: 409. The journal in the "
            "state names what is left; the next apply retries it.",
        ),
    ],
    ids=[
        "applied",
        "no-changes",
        "rolled-back-to",
        "undone",
        "rollback-undone",
        "resume-undone",
        "resumed",
        "resume-left",
    ],
)
def test_the_verdict_is_rendered_from_the_outcome(result: ApplyResult, verdict: str) -> None:
    assert result.message == verdict


def test_ok_and_the_causes_follow_the_outcome() -> None:
    stopped = Failure("gfd/DaemonSet/gpu-operator/gpu-feature-discovery", "stopped", "gfd", STOPPED)
    failed = ApplyResult(outcome=Outcome.ROLLBACK_INCOMPLETE, failed=[CRASH, stopped])
    assert not failed.ok and not failed.rollback_complete and failed.causes == [CRASH]
    assert ApplyResult(outcome=Outcome.RESUMED).ok and ApplyResult(outcome=Outcome.KEPT).rollback_complete


@pytest.mark.parametrize("rollback", [True, False])
def test_the_walker_makes_the_driver_rollout_for_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rollback: bool
) -> None:
    """With the plan's resourceVersions (its drift guard) and, with --no-rollback, leaving a failed node as
    the operator does: what the commands used to assemble and hand in untyped."""
    made: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, spec: Any, **kwargs: Any) -> None:
            made.append(kwargs)

    monkeypatch.setattr(walker, "DriverRollout", Recorder)
    spec = parse_spec(full_lab_spec(), filename="gpustack.yaml")
    cluster = FakeKubernetes(nodes=[make_node("lab-node", gpu="rtx-3060", driver="580.105.08")])
    plan = make_plan(spec, None, refresh.refresh(cluster, spec, None), created_at="2026-12-01T00:00:00Z")
    no_work = plan.model_copy(update={"changes": ()})
    result = walker.apply(
        no_work,
        spec=spec,
        backend=LocalFileBackend(tmp_path / "s.json"),
        writer=cluster,
        hooks=NullHooks(),
        options=ApplyOptions(rollback=rollback),
    )  # type: ignore[arg-type]
    assert result.outcome is Outcome.NO_CHANGES
    assert made == [{"resource_versions": plan.resource_versions, "restore": rollback}]
