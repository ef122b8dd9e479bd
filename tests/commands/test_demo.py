"""`gpuplan demo` walks the built-in lab end to end and ends by itself: the lab as it is, the spec, the plan
with the kube-system conflict and the import it suggests, the apply with its progress, the seed checks, a
manual change caught by the drift report (exit 2) and put back by apply."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan import cli
from gpuplan.planner.spec.model import parse_spec


def test_demo_tours_the_lab_end_to_end_and_exits_zero() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuplan", "demo"], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stderr + result.stdout[-3000:]
    assert "Traceback" not in result.stderr
    out = result.stdout
    steps = [out.index(f"=== {n}.") for n in range(1, 7)]
    assert steps == sorted(steps)
    lab, spec, plan, apply, checks, drift = (
        out[start:end] for start, end in zip(steps, [*steps[1:], len(out)])
    )

    assert "1 x NVIDIA-GeForce-RTX-3060 (12 GiB, ampere)" in lab  # named as inventory and drift name it
    assert "NVIDIA driver:    580.105.08 (installed on the host" in lab
    assert "DaemonSet kube-system/nvidia-device-plugin-daemonset" in lab and "Running, ready 1/1" in lab
    assert "advertises nvidia.com/gpu = 1" in lab

    assert "kind: GPUStack" in spec and "owner: external" in spec

    assert "$ gpuplan plan -f gpustack.yaml --out lab.plan" in plan
    # the plan wraps long lines to the terminal (100 columns in a pipe): the words, joined
    assert "DaemonSet kube-system/nvidia-device-plugin-daemonset already runs it" in " ".join(plan.split())
    assert "This plan cannot be applied" in plan
    assert (
        "$ gpuplan import -f gpustack.yaml "
        "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset "
        "DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    ) in plan
    assert "Imported DaemonSet kube-system/nvidia-device-plugin-daemonset into the state" in plan

    assert "$ gpuplan apply -f gpustack.yaml --auto-approve" in apply
    assert "-/+ devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset: replace complete" in apply
    assert "dcgm-metrics passed" in apply and "validator-ready passed" in apply
    assert "Apply complete" in apply
    assert "No changes. The cluster matches the configuration." in apply

    assert "{.status.capacity.nvidia\\.com/gpu}'\n1\n" in checks
    assert "nvidia.com/gpu.product=NVIDIA-GeForce-RTX-3060" in checks and "nvidia.com/gpu.count=1" in checks
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in checks
    assert "All three pass" in checks

    assert "set image daemonset/nvidia-device-plugin-daemonset" in drift
    assert "$ gpuplan drift report -f gpustack.yaml" in drift
    assert "(by kubectl-set)" in drift and "(exit code 2)" in drift
    assert drift.count("Apply complete: 1 change(s) applied") == 1
    assert "The tour is over" in drift
    hint = drift[drift.index("The tour is over") :]
    assert "gpuplan demo --print-spec > gpustack.yaml" in hint  # the tour's own gpustack.yaml is deleted
    assert hint.index("--print-spec > gpustack.yaml") < hint.index("plan -f gpustack.yaml")


def test_print_spec_writes_the_tours_spec_so_the_closing_hint_works_after_the_tour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The closing hint plans ``gpustack.yaml`` in the user's folder; ``--print-spec`` is how it gets there.
    It prints the spec of step 2 and exits."""
    assert cli.run(["demo", "--print-spec"]) == 0
    text = capsys.readouterr().out
    saved = tmp_path / "gpustack.yaml"
    saved.write_text(text)
    spec = parse_spec(saved.read_text(), filename=str(saved))
    assert spec.metadata.name == "lab" and spec.kind == "GPUStack"
    owners = {name: config.owner for name, config in spec.components().items()}
    assert owners["driver"] == owners["toolkit"] == "external" and owners["devicePlugin"] != "external"


def test_the_mixed_tour_runs_node_pools_end_to_end_and_exits_zero() -> None:
    """The second tour: a pinned driver per pool and a time-sliced pool, planned, applied and advertised."""
    result = subprocess.run(
        [sys.executable, "-m", "gpuplan", "demo", "--scenario", "mixed"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr + result.stdout[-3000:]
    assert "Traceback" not in result.stderr
    out = result.stdout
    steps = [out.index(f"=== {n}.") for n in range(1, 6)]
    assert steps == sorted(steps)
    nodes, spec, plan, apply, advertised = (
        out[start:end] for start, end in zip(steps, [*steps[1:], len(out)])
    )
    assert "host driver 570.195.03" in nodes and "host driver 580.105.08" in nodes
    assert "nodePools:" in spec and "- name: inference" in spec
    assert "Node pools:" in plan and "training: 1 node (a100-node)" in plan
    assert "capacity: nvidia.com/gpu 4 -> 16 (time-slicing x4)" in plan
    assert "label 1 node (l40s-node) nvidia.com/device-plugin.config=inference" in plan
    # the plan wraps long lines to the terminal: the words, joined
    assert "verified 570.195.03, 580.105.08 (each node pool's) on 4/4 nodes" in " ".join(apply.split())
    assert "No changes. The cluster matches the configuration." in apply
    assert "l40s-node  16   (4 GPUs)" in advertised and "rtx-node   1    (1 GPU)" in advertised
    assert "training" in advertised and "inference" in advertised  # inventory's POOL column


def test_print_spec_of_the_mixed_tour_is_a_valid_spec_with_pools(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["demo", "--scenario", "mixed", "--print-spec"]) == 0
    spec = parse_spec(capsys.readouterr().out, filename="gpustack.yaml")
    assert [pool.name for pool in spec.spec.node_pools] == ["training", "inference"]
