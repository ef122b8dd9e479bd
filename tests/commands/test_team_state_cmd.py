"""A team's state in the cluster from the command line (design §7.2, §7.4), on the simulated lab. Two working
folders share one ``kubernetes://`` state (through ``spec.state``): a second apply fails naming the first
holder, or waits for it with ``--lock-timeout``; a holder killed with ``kill -9`` leaves a Lease that
expires after its (short, ``spec.state.leaseDurationSeconds``) duration, after which the next apply takes
it over with a Note and converges. ``state migrate`` moves a state file -> cluster -> file with its lineage
and serial; ``state history`` lists the applied generations; ``force-unlock`` removes a Lease's holder;
``state rbac`` prints a Role that is enough (and no more) for a service account to use the state; a URL
gpuplan does not understand is an error, never a local path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lab_stack import LAB_SPEC
from team_state import holding, watch_lease

from gpuplan import cli
from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import ResourceRecord, StateFile, make_address

TEAM = "kubernetes://gpu-operator/team"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _folder(root: Path, name: str, lease_seconds: int = 60) -> Path:
    folder = root / name
    folder.mkdir()
    spec = folder / "gpustack.yaml"
    spec.write_text(
        LAB_SPEC.rstrip("\n") + f"\n  state: {{backend: kubernetes, namespace: gpu-operator, name: team, "
        f"leaseDurationSeconds: {lease_seconds}}}\n"
    )
    return spec


@pytest.fixture
def lab(kubectl: Kubectl) -> None:
    """The lab with the namespace of the team's state, and without the hand-deployed device plugin that
    `gpuplan import` adopts in the lab story (not this test's subject)."""
    kubectl("create", "namespace", "gpu-operator")
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")


def _held(lease: dict[str, Any]) -> bool:
    return bool(lease["spec"].get("holderIdentity"))


def _gpuplan(kubeconfig: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_urls_gpuplan_does_not_understand_are_errors_never_local_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url, words in [
        ("s3://bucket/state", "gpuplan does not understand the state URL scheme s3://"),
        ("kubernetes://only-one-part", "a kubernetes:// state URL names a namespace and a state name"),
        ("kubernetes://Upper/x", "'Upper' is not a namespace name"),
    ]:
        code, out, err = _run(capsys, "state", "list", "--state", url)
        assert code == 1 and out == ""
        assert err.startswith("Error: ") and words in err and "nothing is managed yet" not in err
    assert list(tmp_path.iterdir()) == []  # nothing was created under a look-alike path
    code, _, err = _run(capsys, "state", "migrate", "--to", "gs://b/x", "--state", str(tmp_path / "s.json"))
    assert code == 1 and "gs://" in err


def _state_with_records() -> StateFile:
    record = ResourceRecord(
        address=make_address("gfd", "ConfigMap", "gpu-operator", "cm"),
        component="gfd",
        api_version="v1",
        kind="ConfigMap",
        namespace="gpu-operator",
        name="cm",
        owned={"data": {"k": "v"}},
        applied_serial=7,
    )
    return StateFile.new().with_record(record).model_copy(update={"serial": 7})


def test_migrate_file_to_cluster_to_file_keeps_lineage_and_serial(
    tmp_path: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl("create", "namespace", "gpu-operator")
    original = _state_with_records()
    source = tmp_path / "gpuplan.state.json"
    LocalFileBackend(source).write(original)
    kc = ["--kubeconfig", str(kubeconfig)]
    code, out, err = _run(capsys, *kc, "state", "migrate", "--state", str(source), "--to", TEAM)
    assert code == 0, err
    assert f"Migrated state serial 7 (lineage {original.lineage}) from {source} to {TEAM}." in out
    code, pulled, _ = _run(capsys, *kc, "state", "pull", "--state", TEAM)
    assert (
        code == 0 and json.loads(pulled)["serial"] == 7 and json.loads(pulled)["lineage"] == original.lineage
    )
    code, out, _ = _run(capsys, *kc, "state", "migrate", "--state", str(source), "--to", TEAM)
    assert code == 0 and "already holds this state (serial 7); nothing was written" in out
    back = tmp_path / "back" / "gpuplan.state.json"
    code, out, err = _run(capsys, *kc, "state", "migrate", "--state", TEAM, "--to", f"file://{back}")
    assert code == 0, err
    assert LocalFileBackend(back).read() == original
    code, listed, _ = _run(capsys, *kc, "state", "list", "--state", TEAM)
    assert code == 0 and listed == "gfd/ConfigMap/gpu-operator/cm\n"
    code, shown, _ = _run(capsys, *kc, "state", "show", "gfd/ConfigMap/gpu-operator/cm", "--state", TEAM)
    assert code == 0 and "applied at serial: 7 (state serial 7)" in shown
    newer = tmp_path / "newer.json"
    LocalFileBackend(newer).write(original.without("gfd/ConfigMap/gpu-operator/cm").next_serial())
    code, out, err = _run(capsys, *kc, "state", "push", str(newer), "--state", TEAM)
    assert code == 0 and f"Pushed state serial 8 (lineage {original.lineage}) to {TEAM}." in out, err
    code, _, err = _run(capsys, *kc, "state", "push", str(source), "--state", TEAM)
    assert code == 1 and "state serial 7 is older than the stored serial 8" in err
    other = tmp_path / "other.json"
    LocalFileBackend(other).write(StateFile.new().next_serial())
    code, _, err = _run(capsys, *kc, "state", "migrate", "--state", str(other), "--to", TEAM)
    assert code == 1 and "cannot write a state of lineage" in err  # the target's write rules hold


def test_two_folders_share_one_state_the_second_apply_fails_naming_the_holder_or_waits(
    tmp_path: Path, kubeconfig: Path, lab: None, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _folder(tmp_path, "alice"), _folder(tmp_path, "bob")
    kc = ["--kubeconfig", str(kubeconfig)]
    with holding(kubeconfig, TEAM) as holder:
        code, _, err = _run(capsys, *kc, "apply", "-f", str(second), "--auto-approve")
        assert code == 1
        assert f"Error: {TEAM}: state is locked by pid {holder.pid}" in err
        assert f"force-unlock {holder.lock_id}" in err
        waiting = _gpuplan(kubeconfig, "apply", "-f", str(second), "--auto-approve", "--lock-timeout", "2m")
        assert holder.release() == 0  # the first run ends and releases the lock; the waiting apply goes on
    out, err = waiting.communicate(timeout=600)
    assert waiting.returncode == 0, err
    assert "Apply complete" in out
    code, _, err = _run(capsys, *kc, "plan", "-f", str(first), "--detailed-exitcode")
    assert code == 0, err  # alice's folder sees what bob applied: one state


def test_a_holder_killed_with_kill_9_expires_and_the_next_apply_takes_over_and_converges(
    tmp_path: Path, kubeconfig: Path, lab: None, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _folder(tmp_path, "alice", lease_seconds=3), _folder(tmp_path, "bob", lease_seconds=3)
    killed = _gpuplan(kubeconfig, "apply", "-f", str(first), "--auto-approve")
    try:
        lease = watch_lease(kubeconfig, "gpu-operator", "gpuplan-lock-team", _held)
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=60)
    assert json.loads(lease["metadata"]["annotations"]["gpuplan.io/lock-info"])["pid"] == killed.pid
    kc = ["--kubeconfig", str(kubeconfig)]
    # the Lease is not renewed any more: the apply waits for its expiry (renewTime + 3s), then takes it
    code, out, err = _run(capsys, *kc, "apply", "-f", str(second), "--auto-approve", "--lock-timeout", "1m")
    assert code == 0, err
    assert f"Note: took over the state lock held by pid {killed.pid}" in err
    code, _, err = _run(capsys, *kc, "plan", "-f", str(first), "--detailed-exitcode")
    assert code == 0, err

    code, out, _ = _run(capsys, *kc, "state", "history", "-f", str(second))
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["GENERATION", "SERIAL", "APPLIED", "BY", "CHANGES", "OUTCOME"]
    number, serial, _, by, *changes_and_outcome = rows[-1].split()
    assert number == str(len(rows)) and by.count("@") == 1 and changes_and_outcome[-1] == "applied"
    code, out, _ = _run(capsys, *kc, "state", "history", "-f", str(second), "--json")
    document = json.loads(out)
    assert document["state"] == TEAM
    assert [g["number"] for g in document["generations"]] == list(range(1, len(rows) + 1))
    assert document["generations"][-1]["serial"] == int(serial) and document["generations"][-1]["user"]


def test_force_unlock_removes_the_holder_of_a_lease(
    kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl("create", "namespace", "gpu-operator")
    kc = ["--kubeconfig", str(kubeconfig)]
    with holding(kubeconfig, TEAM) as holder:
        code, _, err = _run(capsys, *kc, "force-unlock", "wrong-id", "--state", TEAM)
        assert code == 1 and f"the lock ID is {holder.lock_id}" in err
        code, out, err = _run(capsys, *kc, "force-unlock", holder.lock_id, "--state", TEAM)
        assert code == 0 and f"Removed lock {holder.lock_id} of pid {holder.pid}" in out
        assert "Warning: a live process still held Lease gpu-operator/gpuplan-lock-team" in err
    lease = json.loads(
        kubectl("get", "lease", "-n", "gpu-operator", "gpuplan-lock-team", "-o", "json").stdout
    )
    assert "holderIdentity" not in lease["spec"]


def test_the_printed_role_is_enough_for_a_service_account_to_use_the_state_and_no_more(
    tmp_path: Path, lab_sim: Simulator, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl("create", "namespace", "gpu-operator")
    kubectl("create", "serviceaccount", "-n", "gpu-operator", "team-ci")
    kubectl("create", "secret", "generic", "-n", "gpu-operator", "unrelated", "--from-literal=k=v")
    code, role, _ = _run(
        capsys, "state", "rbac", "--state", TEAM, "--service-account", "gpu-operator/team-ci"
    )
    assert code == 0 and "# create has no resourceNames" in role
    kubectl("apply", "-f", "-", input=role)
    token = kubectl("create", "token", "team-ci", "-n", "gpu-operator").stdout.strip()
    limited = write_kubeconfig(tmp_path / "team-ci", lab_sim.url, token, ca_pem=lab_sim.ca_pem)
    source = tmp_path / "gpuplan.state.json"
    LocalFileBackend(source).write(_state_with_records())
    kc = ["--kubeconfig", str(limited)]
    code, _, err = _run(capsys, *kc, "state", "migrate", "--state", str(source), "--to", TEAM)
    assert code == 0, err  # create, then get, update of the Lease and the Secret
    code, _, err = _run(capsys, *kc, "state", "rm", "--state", TEAM, "gfd/ConfigMap/gpu-operator/cm")
    assert code == 0, err
    code, _, err = _run(capsys, *kc, "state", "list", "--state", "kubernetes://gpu-operator/other-team")
    assert code == 1 and "(403)" in err and "`gpuplan state rbac` prints the Role" in err
    denied = kubectl("get", "secret", "-n", "gpu-operator", "unrelated", kubeconfig=limited, check=False)
    assert denied.returncode == 1 and "Forbidden" in denied.stderr
    code, _, _ = _run(capsys, "state", "rbac", "--state", str(source))
    assert code == 64  # a file state needs no RBAC
