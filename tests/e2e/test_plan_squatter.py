"""A hand-made object at a name gpuplan wants: `kubectl create` of the DCGM exporter's
ServiceAccount
before the first plan is a conflict resolved by `gpuplan import`, not a "+ create" that apply would fail on
half-way; after the import the plan updates it in place and apply succeeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.sim.testing import Kubectl

SPEC = lab_spec(devicePlugin="{owner: external}")
ADDRESS = "dcgmExporter/ServiceAccount/gpu-operator/nvidia-dcgm-exporter"
OBJECT = "ServiceAccount/gpu-operator/nvidia-dcgm-exporter"
HAND_MADE = """\
apiVersion: v1
kind: Namespace
metadata: {name: gpu-operator}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nvidia-dcgm-exporter, namespace: gpu-operator}
"""


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def plan_json(kubeconfig: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert gp(kubeconfig, "plan", "-f", str(spec), "--json") == 0
    document: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return document


def test_a_hand_made_service_account_is_a_conflict_until_imported(
    tmp_path: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC)
    # `kubectl create sa` sends protobuf, which the simulator refuses (design §6.1): the same object from YAML
    kubectl("create", "-f", "-", input=HAND_MADE)

    document = plan_json(kubeconfig, spec, capsys)
    [change] = [c for c in document["changes"] if c["address"] == ADDRESS]
    assert (change["action"], change["reason"]) == ("create", "CREATE_OVER_FOREIGN_OBJECT")
    [conflict] = document["conflicts"]
    assert (conflict["address"], conflict["owner_kind"]) == (ADDRESS, "manual")
    assert conflict["resolutions"][0]["command"] == f"gpuplan import -f {spec} {ADDRESS} {OBJECT}"
    assert document["applicable"] is False
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1, "refused before any change"
    assert "unresolved ownership conflict" in capsys.readouterr().err

    assert gp(kubeconfig, "import", "-f", str(spec), ADDRESS, OBJECT) == 0
    capsys.readouterr()
    document = plan_json(kubeconfig, spec, capsys)
    [change] = [c for c in document["changes"] if c["address"] == ADDRESS]
    assert change["action"] == "update", "the adopted account gets gpuplan's labels in place"
    assert document["conflicts"] == [] and document["applicable"] is True

    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    capsys.readouterr()
    labels = json.loads(
        kubectl("get", "sa", "-n", "gpu-operator", "nvidia-dcgm-exporter", "-o", "json").stdout
    )
    assert labels["metadata"]["labels"]["gpuplan.io/stack"] == "lab"
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0
