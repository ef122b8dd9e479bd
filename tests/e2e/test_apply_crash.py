"""Crash safety of `gpuplan apply` as a process: killed with SIGKILL at journal steps (GPUPLAN_TEST_KILL_AT) and
after varying delays, the state file is always valid, every object of the stack that exists is in the state
or its journal, and the next apply reconciles the journal and converges to "no changes". Two applies at once:
one proceeds, the other fails at once naming the lock's holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.state.document import parse_state

SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: lab
spec:
  driver:
    owner: external
    version: "580.105.08"
  toolkit:
    owner: external
"""
HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
KINDS = [("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
         ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("rbac.authorization.k8s.io/v1", "Role"),
         ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("apps/v1", "DaemonSet"), ("v1", "Service"),
         ("node.k8s.io/v1", "RuntimeClass")]


def gpuplan(kubeconfig: Path, *args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          check=False)


@pytest.fixture
def cluster(lab_sim: Simulator, kubeconfig: Path, tmp_path: Path) -> tuple[Path, Path, KubernetesWriter]:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC)
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    writer.delete(HAND)
    yield spec, kubeconfig, writer  # type: ignore[misc]
    writer.close()


def stack_objects(writer: KubernetesWriter) -> set[str]:
    found = set()
    for api_version, kind in KINDS:
        for obj in writer.list_objects(api_version, kind, label_selector="gpuplan.io/stack=lab"):
            found.add(obj.key.ref)
    return found


def assert_everything_accounted_for(spec: Path, writer: KubernetesWriter) -> None:
    state_path = spec.parent / "gpuplan.state.json"
    if not state_path.exists():
        assert stack_objects(writer) == set()
        return
    state = parse_state(state_path.read_bytes(), source=str(state_path))  # valid, or this raises
    known = set()
    for record in state.resources.values():
        known.add(ObjectKey(record.api_version, record.kind, record.namespace, record.name).ref)
    for entry in state.journal:
        for manifest in (entry.before, entry.after):
            if manifest:
                known.add(ObjectKey.of(manifest).ref)
    missing = stack_objects(writer) - known
    assert not missing, f"objects in neither the state nor its journal: {sorted(missing)}"


def converge(spec: Path, kubeconfig: Path) -> None:
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr


@pytest.mark.parametrize("kill_at", [1, 2, 8, 23, 38])
def test_kill_9_at_a_journal_step_leaves_a_valid_state_and_the_next_apply_converges(
        cluster: tuple[Path, Path, KubernetesWriter], kill_at: int) -> None:
    spec, kubeconfig, writer = cluster
    killed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve",
                     env={"GPUPLAN_TEST_KILL_AT": str(kill_at)})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert_everything_accounted_for(spec, writer)
    state = json.loads((spec.parent / "gpuplan.state.json").read_text())
    assert state["serial"] == kill_at  # killed right after its kill_at-th state write
    pending = any(entry["state"] == "pending" for entry in state["journal"])

    resumed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert ("journal was reconciled" in resumed.stdout) == pending
    converge(spec, kubeconfig)
    assert_everything_accounted_for(spec, writer)


@pytest.mark.parametrize("delay", [0.8, 2.5])
def test_kill_9_after_a_delay_leaves_a_valid_state_and_the_next_apply_converges(
        cluster: tuple[Path, Path, KubernetesWriter], delay: float) -> None:
    spec, kubeconfig, writer = cluster
    process = subprocess.Popen([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), "apply", "-f",
                                str(spec), "--auto-approve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    assert_everything_accounted_for(spec, writer)
    converge(spec, kubeconfig)
    assert_everything_accounted_for(spec, writer)


def test_two_applies_at_once_one_proceeds_the_other_fails_at_once_naming_the_holder(
        cluster: tuple[Path, Path, KubernetesWriter], tmp_path: Path) -> None:
    spec, kubeconfig, _ = cluster
    first = subprocess.Popen([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), "apply", "-f",
                              str(spec), "--auto-approve", "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        for line in first.stdout:  # wait for the first one to be walking (it holds the lock by then)
            if json.loads(line).get("type") == "change_start":
                break
        second = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
        assert second.returncode == 1
        assert "locked" in second.stderr.lower() and f"pid {first.pid}" in second.stderr, second.stderr
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err
