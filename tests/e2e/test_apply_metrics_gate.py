"""The DCGM metrics gate of an apply on a lab whose API server refuses to proxy to the exporter pods (the
simulator's ``proxy_refused`` fault answers the real server's 400 ``address not allowed``): it fails at
once with the server's reason and the ways on, and ``healthSampleNodes: 0`` passes with a note in the
apply's output. Timings are read from the apply's own progress events, never from the wall clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from lab_stack import lab_spec

from gpuplan.planner.health.metrics_paths import NOT_SCRAPED
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator

pytestmark = pytest.mark.kubectl

TIMEOUT = 120
"""The exporter's healthTimeoutSeconds here: short, so a gate that waited it out would say so."""


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_an_exporter_the_api_server_will_not_proxy_to_fails_the_apply_at_once_with_its_reason(
    lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path, tmp_path: Path
) -> None:
    lab_sim.api_faults.update(proxy_refused={"pods": "address-not-allowed"})
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(dcgmExporter=f"{{healthTimeoutSeconds: {TIMEOUT}}}"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json")
    assert done.returncode == 1, done.stderr
    [gate] = [e for e in events(done.stdout) if e["type"] == "progress" and e["state"] == "failed"]
    assert (gate["component"], gate["gate"]) == ("dcgmExporter", "dcgm-metrics")
    assert "the pod proxy: answered 400: address not allowed" in gate["message"]
    assert not gate["message"].startswith("not healthy after") and gate["elapsed"] < TIMEOUT / 2
    assert "Rolled back" in done.stderr and "address not allowed" in done.stderr
    assert "healthSampleNodes: 0" in done.stderr and "spec.telemetry.prometheus" in done.stderr


@pytest.mark.parametrize("as_json", [True, False])
def test_a_sample_of_zero_nodes_applies_without_a_scrape_and_says_so(
    lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path, tmp_path: Path, as_json: bool
) -> None:
    lab_sim.api_faults.update(proxy_refused={"pods": "address-not-allowed"})
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(lab_spec(dcgmExporter="{healthSampleNodes: 0}"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", *(["--json"] if as_json else []))
    assert done.returncode == 0, done.stderr
    said = f"dcgmExporter: {NOT_SCRAPED}"
    if as_json:
        notes = [
            e for e in events(done.stdout) if e["type"] == "note" and e.get("component") == "dcgmExporter"
        ]
        assert [(n["message"], n["gate"]) for n in notes] == [(said, "dcgm-metrics")]
    else:
        assert said in done.stdout.splitlines()
    assert "proxyRefused:pods" not in lab_sim.api_faults.fired(), "no scrape was tried"
