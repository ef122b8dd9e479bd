"""`gpuplan plan` on the built-in `mixed` scenario prints each pool's capacity (time-slicing on the H100 node,
MIG on the A100 node) summed over its GPUs, and after an apply a sharing change as the new total and the
config file's changed lines."""

from __future__ import annotations

import pytest
from conftest import MixedRunner

SPEC = """apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: mixed}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
  mig: {strategy: mixed}
  migManager: {owner: gpuplan}
  nodePools:
    - name: inference
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
      devicePlugin: {config: {timeSlicing: {replicas: 4}}}
    - name: training
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
      mig: {config: all-1g.10gb}
"""


@pytest.mark.slow
def test_plan_prints_each_pools_capacity_and_a_sharing_change_as_a_config_diff(
    monkeypatch: pytest.MonkeyPatch, on_mixed: MixedRunner
) -> None:
    monkeypatch.setenv("COLUMNS", "10000")
    gpuplan = on_mixed

    # before any apply: NFD's NodeFeatures count the GPUs (8 on each node)
    code, out = gpuplan(SPEC, "plan")
    assert code == 0, out
    assert (
        "  inference: 1 node (h100-node)\n    capacity: nvidia.com/gpu 8 -> 32 (time-slicing x4)\n"
    ) in out
    assert (
        "  training: 1 node (a100-node)\n"
        "    capacity: nvidia.com/gpu 8 -> 0 (MIG all-1g.10gb)\n"
        "    capacity: nvidia.com/mig-1g.10gb 0 -> 56 (MIG all-1g.10gb)\n"
    ) in out
    code, out = gpuplan(SPEC, "apply", "--auto-approve")
    assert code == 0, out
    code, out = gpuplan(SPEC, "plan", "--detailed-exitcode")
    assert code == 0 and "capacity:" not in out, out
    # the applied generation is the before side: 32 devices now, 64 with eight replicas
    code, out = gpuplan(SPEC.replace("replicas: 4", "replicas: 8"), "plan", "--detailed-exitcode")
    assert code == 2, out
    assert "  inference: 1 node (h100-node)\n    capacity: nvidia.com/gpu 32 -> 64 (time-slicing x8)\n" in out
    assert "      data.inference:\n" in out
    assert "          -       replicas: 4\n          +       replicas: 8\n" in out
