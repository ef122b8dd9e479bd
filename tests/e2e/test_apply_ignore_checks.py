"""``spec.ignore``'s nodes rules hold in the apply's gates as in the drift report: on the built-in ``mixed``
scenario the A100 node's host driver is 570.195.03 while the spec pins 580.105.08. The apply fails on that
node and rolls back; with a rule waiving the driver-version check there, it applies, says which node it did
not judge, and the next drift report is clean."""

from __future__ import annotations

import pytest
from conftest import MixedRunner

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
def test_a_node_whose_check_the_spec_waives_does_not_hold_the_apply(on_mixed: MixedRunner) -> None:
    gpuplan = on_mixed
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
