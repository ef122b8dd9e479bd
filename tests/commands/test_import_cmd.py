"""`gpuplan import` against the simulated lab: the hand-deployed device plugin adopted under its live
identity, what the next plan does with it, and the errors that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.state.local import LocalFileBackend

ADDRESS = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"
RECORDED = "devicePlugin/DaemonSet/kube-system/nvidia-device-plugin-daemonset"


def spec_file(folder: Path, owner: str = "gpuplan") -> Path:
    path = folder / "gpustack.yaml"
    path.write_text(lab_spec(devicePlugin=f"{{owner: {owner}}}"))
    return path


def state_of(folder: Path) -> LocalFileBackend:
    return LocalFileBackend(folder / "gpuplan.state.json")


def test_import_records_the_object_and_the_next_plan_replaces_it(
    tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path)
    assert run(["--kubeconfig", str(kubeconfig), "import", "-f", str(spec), ADDRESS, HAND]) == 0
    out = capsys.readouterr().out
    assert f"as {RECORDED} (state serial 0 -> 1). The cluster was not changed." in out
    assert f"Next plan: -/+ replace {ADDRESS}: the adopted DaemonSet kube-system/" in out
    state = state_of(tmp_path).read()
    assert state is not None and state.serial == 1 and list(state.resources) == [RECORDED]
    record = state.record(RECORDED)
    assert record.uid and record.resource_version and record.namespace == "kube-system"
    assert "status" not in record.owned and "managedFields" not in record.owned["metadata"]

    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    [change] = [c for c in document["changes"] if c["address"] == ADDRESS]
    assert (change["action"], change["reason"]) == ("replace", "REPLACE_BECAUSE_IDENTITY_CHANGED")
    assert document["conflicts"] == [] and document["state_serial"] == 1
    assert document["drift"] == [], "an imported object is recorded as it is: no false drift"

    assert run(["--kubeconfig", str(kubeconfig), "import", "-f", str(spec), ADDRESS, HAND]) == 1
    assert "already in the state" in capsys.readouterr().err
    assert state_of(tmp_path).read() == state, "a refused import writes nothing"


@pytest.mark.parametrize(
    ("owner", "address", "ref", "message"),
    [
        (
            "gpuplan",
            "devicePlugin/DaemonSet/gpu-operator/typo",
            HAND,
            "devicePlugin/DaemonSet/gpu-operator/typo is not an object gpuplan manages in this spec",
        ),
        ("external", ADDRESS, HAND, "is not an object gpuplan manages in this spec"),
        (
            "gpuplan",
            ADDRESS,
            "ServiceAccount/kube-system/default",
            "is a DaemonSet, but ServiceAccount/kube-system",
        ),
        (
            "gpuplan",
            ADDRESS,
            "DaemonSet/kube-system/absent",
            "no DaemonSet kube-system/absent in the cluster",
        ),
        ("gpuplan", ADDRESS, "kube-system", "malformed object reference 'kube-system'"),
        ("gpuplan", "devicePlugin/DaemonSet", HAND, "malformed address"),
    ],
)
def test_import_errors_write_nothing(
    tmp_path: Path,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    owner: str,
    address: str,
    ref: str,
    message: str,
) -> None:
    spec = spec_file(tmp_path, owner)
    assert run(["--kubeconfig", str(kubeconfig), "import", "-f", str(spec), address, ref]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and message in err
    assert not (tmp_path / "gpuplan.state.json").exists()


def test_the_error_for_a_wrong_address_lists_the_valid_ones(
    tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path)
    assert (
        run(
            ["--kubeconfig", str(kubeconfig), "import", "-f", str(spec), "gfd/DaemonSet/gpu-operator/x", HAND]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert (
        "valid addresses" in err
        and f"  {ADDRESS}" in err
        and "gfd/DaemonSet/gpu-operator/gpu-feature-discovery" in err
    )
