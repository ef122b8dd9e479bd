"""Host drivers as they are: an external driver without a version in the spec takes what each node reports
(the mixed fleet runs 570 on its A100 node, 580 on the rest), plans and applies clean, records each node's
version in the state, and the drift report calls a node's version drift only once it changes from that
record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli import run
from gpuplan.sim.testing import Kubectl, SimFactory

pytestmark = pytest.mark.kubectl

SPEC = (
    "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: mixed}\nspec:\n"
    "  driver: {owner: external}\n  toolkit: {owner: external}\n"
)
RECORDED = {
    "a100-node": "570.195.03",
    "h100-node": "580.105.08",
    "l40s-node": "580.105.08",
    "rtx-node": "580.105.08",
}


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")


def test_a_versionless_external_driver_takes_each_nodes_host_driver(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("mixed")
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC)

    def gpuplan(*args: str) -> tuple[int, str]:
        code = run(["--kubeconfig", str(kubeconfig), *args])
        return code, capsys.readouterr().out

    code, planned = gpuplan("plan", "-f", str(spec), "--json")
    assert code == 0
    driver = json.loads(planned)["components"]["driver"]
    assert driver["version"] is None, "no default version of gpuplan's is held against host drivers"
    assert [f for f in json.loads(planned)["findings"] if f["severity"] == "error"] == []

    assert gpuplan("apply", "-f", str(spec), "--auto-approve")[0] == 0
    state = json.loads((tmp_path / "gpuplan.state.json").read_text())
    assert state["host_drivers"] == RECORDED

    code, human = gpuplan("plan", "-f", str(spec))
    assert code == 0 and "No changes." in human
    assert (
        "driver        external  verified: host 570.195.03 on a100-node, 580.105.08 on 3 nodes (the spec "
        "pins no version: taken as they are)"
    ) in human
    code, report = gpuplan("drift", "report", "-f", str(spec), "--format", "json")
    assert code == 0, report
    code, listing = gpuplan("inventory", "-f", str(spec), "--json")
    assert code == 0
    assert {row["name"]: row["driver"]["version"] for row in json.loads(listing)["nodes"]} == RECORDED, (
        "the inventory shows each node's host driver as it is"
    )

    sim.set_host_driver("h100-node", "580.126.09")  # upgraded outside gpuplan: GFD relabels the node
    assert sim.wait_idle(30)
    label = "jsonpath={.metadata.labels.nvidia\\.com/cuda\\.driver-version\\.full}"
    assert kubectl("get", "node", "h100-node", "-o", label, kubeconfig=kubeconfig).stdout == "580.126.09"
    code, report = gpuplan("drift", "report", "-f", str(spec), "--format", "json")
    assert code == 2
    [finding] = [f for f in json.loads(report)["findings"] if f["kind"] == "version"]
    assert finding["node"] == "h100-node" and finding["component"] == "driver"
    assert finding["detail"] == (
        "node h100-node reports driver 580.126.09 (GFD's label), the last apply recorded 580.105.08"
    )
    code, human = gpuplan("plan", "-f", str(spec))
    assert code == 0, "a host driver taken as it is may change: the plan names it, nothing blocks"
    assert "changed since the last apply on h100-node (580.105.08 -> 580.126.09)" in human
