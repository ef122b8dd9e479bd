"""An external driver verified without GFD: from a DCGM exporter's DCGM_FI_DRIVER_VERSION label when
an exporter runs on the node, and from NVML when gpuplan runs on the node itself (a fake NVML host whose
hostname is the lab node's); the component status names the source. A host without a driver is no source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.providers.nvml import FAKE_ENV

NO_GFD = lab_spec(devicePlugin="{owner: external}", gfd="{owner: none}", validator="{owner: none}")
RTX_3060 = {
    "name": "NVIDIA GeForce RTX 3060",
    "memory_mib": 12288,
    "compute_capability": "8.6",
    "mig_capable": False,
}


def driver_status(kubeconfig: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), "--json"]) == 0
    document: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    assert all(f["component"] != "driver" or f["severity"] != "error" for f in document["findings"])
    status: dict = document["components"]["driver"]  # type: ignore[type-arg]
    return status


def test_a_dcgm_exporter_without_gfd_verifies_the_driver(
    tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAKE_ENV, str(tmp_path / "no-such-description.json"))  # never this host's NVML
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(NO_GFD)
    before = driver_status(kubeconfig, spec, capsys)
    assert before["status"] == "unknown", "no GFD label and no exporter yet"
    assert run(["--kubeconfig", str(kubeconfig), "apply", "-f", str(spec), "--auto-approve"]) == 0
    capsys.readouterr()

    status = driver_status(kubeconfig, spec, capsys)
    assert status["status"] == "verified"
    assert status["detail"] == "verified 580.105.08 on 1/1 nodes (DCGM exporter)"


def test_nvml_on_the_node_itself_verifies_the_driver(
    tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(NO_GFD)
    host = tmp_path / "nvml.json"
    host.write_text(json.dumps({"hostname": "lab-node", "driver_version": "580.105.08", "gpus": [RTX_3060]}))
    monkeypatch.setenv(FAKE_ENV, str(host))
    status = driver_status(kubeconfig, spec, capsys)
    assert status["status"] == "verified"
    assert status["detail"] == "verified 580.105.08 on 1/1 nodes (NVML on this host)"

    host.write_text(json.dumps({"hostname": "lab-node", "init_error": "LibraryNotFound"}))
    status = driver_status(kubeconfig, spec, capsys)
    assert status["status"] == "unknown", "a host without a driver is no source, and no error"

    host.write_text(json.dumps({"hostname": "elsewhere", "driver_version": "580.105.08", "gpus": [RTX_3060]}))
    assert driver_status(kubeconfig, spec, capsys)["status"] == "unknown", "not a node of this cluster"
