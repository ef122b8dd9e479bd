"""The plan against the simulated lab: the first plan creates the four components in gpu-operator, shows the
host driver and toolkit as external (driver unknown until GFD runs, toolkit verified by the runtime handler),
the hand-deployed device plugin as a conflict with both resolutions, exits 2; after `gpuplan import` of that
plugin the plan replaces it instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_stack import LAB_SPEC

from gpuplan.cli import run

SPEC = LAB_SPEC  # the demo's whole stack
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"


def plan_json(kubeconfig: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), "--json"]) == 0
    document: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return document


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal wide enough for every line: these tests read a component or finding line whole."""
    monkeypatch.setenv("COLUMNS", "10000")


def test_lab_story(tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC)

    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), "--detailed-exitcode"]) == 2
    human = capsys.readouterr().out
    assert (
        "  driver        external  unknown: expected 580.105.08; not reported yet: unknown until GFD runs "
        "(or a "
        "DCGM exporter) on 1 node (lab-node)"
    ) in human
    assert "  toolkit       external  verified: the nvidia runtime handler is on 1/1 nodes" in human
    assert f"gpuplan import -f {spec} {PLUGIN} {HAND}" in human
    assert "kubectl delete daemonset -n kube-system nvidia-device-plugin-daemonset" in human

    document = plan_json(kubeconfig, spec, capsys)
    creates = {c["address"] for c in document["changes"] if c["action"] == "create"}
    assert {c["component"] for c in document["changes"]} == {
        "toolkit",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
    }
    for component, name in (
        ("devicePlugin", "nvidia-device-plugin-daemonset"),
        ("gfd", "gpu-feature-discovery"),
        ("dcgmExporter", "nvidia-dcgm-exporter"),
        ("validator", "nvidia-operator-validator"),
    ):
        assert f"{component}/DaemonSet/gpu-operator/{name}" in creates
    assert "dcgmExporter/Service/gpu-operator/nvidia-dcgm-exporter" in creates
    assert "devicePlugin/ServiceAccount/gpu-operator/nvidia-device-plugin" in creates
    assert all(
        c["nodes"] == ["lab-node"] for c in document["changes"] if c["address"].split("/")[1] == "DaemonSet"
    )
    [conflict] = document["conflicts"]
    assert (conflict["namespace"], conflict["owner_kind"], conflict["address"]) == (
        "kube-system",
        "manual",
        PLUGIN,
    )
    assert document["components"]["driver"]["status"] == "unknown"
    assert document["components"]["toolkit"]["status"] == "verified"
    assert document["namespace_exists"] is False and document["applicable"] is False

    assert run(["--kubeconfig", str(kubeconfig), "import", "-f", str(spec), PLUGIN, HAND]) == 0
    capsys.readouterr()
    document = plan_json(kubeconfig, spec, capsys)
    [replacement] = [c for c in document["changes"] if c["address"] == PLUGIN]
    assert replacement["action"] == "replace"
    assert replacement["replaces"] == "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    assert document["conflicts"] == [] and document["summary"]["replace"] == 1
    assert not any("conflict" in blocker for blocker in document["blockers"])


def test_a_plan_reads_each_node_s_facts_once(
    tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh's node facts are handed to the driver versions and the plan: at fleet scale a pass over
    the nodes costs as much as a page of their list."""
    from gpuplan.planner import facts

    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC)
    read: list[str] = []
    from_node = facts.NodeFacts.from_node

    def counted(node: dict[str, object]) -> facts.NodeFacts:
        read.append(str(node["metadata"]["name"]))  # type: ignore[index]
        return from_node(node)

    monkeypatch.setattr(facts.NodeFacts, "from_node", counted)
    document = plan_json(kubeconfig, spec, capsys)
    assert read == [gpus["node"] for gpus in document["node_gpus"]] and read
