"""A gate that fails for a permanent cause fails as soon as the cause shows, naming it, instead of waiting out
its health timeout (an hour here) and only then rolling back. Timings are read from the apply's own progress
events, never from the wall clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from apply_process import gpuplan
from lab_stack import lab_spec

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.scenario import BUILTIN_DIR
from gpuplan.sim.testing import SimFactory

pytestmark = pytest.mark.kubectl

HOUR = 3600
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.99.0"


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def failed_gate(found: list[dict[str, Any]]) -> dict[str, Any]:
    [failed] = [e for e in found if e["type"] == "progress" and e["state"] == "failed"]
    return failed


def test_a_tag_that_does_not_exist_fails_the_gate_at_its_first_failed_pull(
    lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(devicePlugin=f"{{version: v0.99.0, healthTimeoutSeconds: {HOUR}}}"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json")
    assert done.returncode == 1, done.stderr
    found = events(done.stdout)
    gate = failed_gate(found)
    assert gate["component"] == "devicePlugin" and gate["gate"] == "rollout"
    assert f'failed to pull and unpack image "{IMAGE}"' in gate["message"] and "not found" in gate["message"]
    assert not gate["message"].startswith("not healthy after"), "the cause, not the timeout"
    assert gate["elapsed"] < HOUR / 60, "failed when the pull failed, not at the health timeout"
    [errored] = [e for e in found if e["type"] == "change_errored" and e["reason"] != "Stopped"]
    assert errored["reason"] in ("ErrImagePull", "ImagePullBackOff") and errored["node"] == "lab-node"
    assert "Rolled back" in done.stderr and "not found" in done.stderr


def test_an_external_driver_version_one_node_does_not_run_fails_once_gfd_reports_it(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    """A fresh cluster: nothing reports the drivers at plan time, so the plan cannot refuse; once GFD labels
    the nodes, the A100 node's 570 is seen twice and the apply fails on it (the other nodes run 580)."""
    sim = sim_factory("mixed")
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: mixed}\nspec:\n"
        f'  driver: {{owner: external, version: "580.105.08", healthTimeoutSeconds: {HOUR}}}\n'
        "  toolkit: {owner: external}\n"
        f"  gfd: {{healthTimeoutSeconds: {HOUR}}}\n"
    )
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json")
    assert done.returncode == 1, done.stderr
    gate = failed_gate(events(done.stdout))
    assert gate["node"] == "a100-node" and "570.195.03" in gate["message"] and "580.105.08" in gate["message"]
    assert gate["message"].endswith("(reported in two rounds in a row)")
    assert gate["elapsed"] < HOUR / 60
    # a gate judged meanwhile (the validator's) may be stopped by the failure: it is not a cause
    causes = [e for e in events(done.stdout) if e["type"] == "change_errored" and e["reason"] != "Stopped"]
    [errored] = causes
    assert errored["reason"] == "DriverVersionMismatch"
    assert "Rolled back" in done.stderr


def test_a_registry_the_node_cannot_resolve_fails_the_gate_at_once_and_then_refuses_the_plan(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    """The lab node cannot resolve nvcr.io: the device plugin's pull fails with the DNS answer ``no such
    host``, which no retry changes, so its gate fails then and not at its hour-long timeout. The apply rolls
    back; the kubelet's Failed events stay, so the next plan knows and refuses itself."""
    scenario = yaml.safe_load((BUILTIN_DIR / "lab.yaml").read_text())
    scenario["nodes"][0]["unreachableRegistries"] = ["nvcr.io"]
    scenario["objects"] = []  # no hand-deployed plugin: nothing of nvcr.io has been pulled there yet
    sim = sim_factory(scenario)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(devicePlugin=f"{{version: v0.20.1, healthTimeoutSeconds: {HOUR}}}"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json")
    assert done.returncode == 1, done.stderr
    gate = failed_gate(events(done.stdout))
    assert gate["component"] == "devicePlugin" and gate["node"] == "lab-node"
    assert "dial tcp: lookup nvcr.io on 127.0.0.53:53: no such host" in gate["message"]
    assert gate["elapsed"] < HOUR / 60, "failed when the pull failed, not at the health timeout"
    assert "Rolled back" in done.stderr

    again = gpuplan(kubeconfig, "plan", "-f", str(spec))
    assert again.returncode == 1
    assert (
        "Error: devicePlugin, node lab-node: nvcr.io/nvidia/k8s-device-plugin: these nodes cannot reach "
        "nvcr.io (their pulls from it fail with no such host), so the pods of devicePlugin and gfd cannot "
        "pull it there"
    ) in again.stderr
