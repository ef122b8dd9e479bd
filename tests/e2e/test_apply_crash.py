"""Crash safety of `gpuplan apply` as a process: killed with SIGKILL at journal steps (GPUPLAN_TEST_KILL_AT)
and after varying delays, the state file is always valid, every object of the stack that exists is in the
state or its journal, and the next apply reconciles the journal and converges to "no changes". Two applies at
once: one proceeds, the other fails at once naming the lock's holder."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from apply_process import LAB_SPEC, ApplyProcess, assert_everything_accounted_for, converge, gpuplan, state_of

from gpuplan.providers.kubernetes_write import KubernetesWriter

pytestmark = pytest.mark.timeout(600)  # the apply after a kill may wait out a validator's back-off


@pytest.fixture
def spec(lab_writer: KubernetesWriter, tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(LAB_SPEC)
    return path


@pytest.mark.parametrize("kill_at", [1, 2, 8, 23, 38])
def test_kill_9_at_a_journal_step_leaves_a_valid_state_and_the_next_apply_converges(
    spec: Path, kubeconfig: Path, lab_writer: KubernetesWriter, kill_at: int
) -> None:
    killed = gpuplan(
        kubeconfig, "apply", "-f", str(spec), "--auto-approve", env={"GPUPLAN_TEST_KILL_AT": str(kill_at)}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert_everything_accounted_for(spec, lab_writer)
    state = state_of(spec)
    assert state["serial"] == kill_at  # killed right after its kill_at-th state write
    pending = any(entry["state"] == "pending" for entry in state["journal"])

    resumed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert ("journal was reconciled" in resumed.stdout) == pending
    converge(spec, kubeconfig)
    assert_everything_accounted_for(spec, lab_writer)


@pytest.mark.parametrize("delay", [0.8, 2.5])
def test_kill_9_after_a_delay_leaves_a_valid_state_and_the_next_apply_converges(
    spec: Path, kubeconfig: Path, lab_writer: KubernetesWriter, delay: float
) -> None:
    with ApplyProcess(kubeconfig, spec, events=False) as process:
        process.kill_after(delay)
        process.finish(timeout=10)
    assert_everything_accounted_for(spec, lab_writer)
    converge(spec, kubeconfig)
    assert_everything_accounted_for(spec, lab_writer)


def test_two_applies_at_once_one_proceeds_the_other_fails_at_once_naming_the_holder(
    spec: Path, kubeconfig: Path
) -> None:
    with ApplyProcess(kubeconfig, spec) as first:
        first.wait_for(lambda event: event["type"] == "change_start")  # walking: it holds the lock by then
        second = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
        assert second.returncode == 1
        assert "locked" in second.stderr.lower() and f"pid {first.pid}" in second.stderr, second.stderr
        assert first.finish() == 0, first.stderr
