"""``spec.ignore``'s nodes rules hold in the apply's gates as in the drift report: on the built-in ``mixed``
scenario the A100 node's host driver is 570.195.03 while the spec pins 580.105.08. The apply fails on that
node and rolls back; with a rule waiving the driver-version check there, it applies, says which node it did
not judge, and the next drift report is clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.cli import run
from gpuplan.sim.testing import SimFactory

SPEC = """apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: mixed}
spec:
  driver: {owner: external, version: "580.105.08"}
  toolkit: {owner: external}
"""
RULE = """  ignore:
    - nodes: {selector: kubernetes.io/hostname=a100-node}
      checks: [driver-version]
"""


@pytest.mark.slow
def test_a_node_whose_check_the_spec_waives_does_not_hold_the_apply(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("mixed", tls=False)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec_file = tmp_path / "gpustack.yaml"

    def gpuplan(text: str, *args: str) -> tuple[int, str]:
        spec_file.write_text(text)
        capsys.readouterr()
        code = run(
            ["--kubeconfig", str(kubeconfig), *args, "-f", str(spec_file), "--state", str(tmp_path / "s")]
        )
        return code, capsys.readouterr().out

    code, out = gpuplan(SPEC, "apply", "--auto-approve")
    assert code == 1, out
    assert "a100-node: label nvidia.com/cuda.driver-version.full is 570.195.03, expected 580.105.08" in out
    assert "rollback complete" in out

    code, out = gpuplan(SPEC + RULE, "apply", "--auto-approve")
    assert code == 0, out
    assert "driver-version not judged on 1 node(s), as spec.ignore declares: a100-node" in out
    assert "gfd: gfd-labels passed: 4/4 nodes" in out, "GFD's driver label is not compared there either"
    code, out = gpuplan(SPEC + RULE, "drift", "report", "--no-telemetry")
    assert code == 0, out
