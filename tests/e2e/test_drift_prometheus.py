"""`gpuplan drift report` reading the GPUs' telemetry from a real Prometheus server that scrapes the
simulated lab's DCGM exporter at its pod IP (tests/prometheus_server.py), against the same report scraping
the exporter itself: a GPU fault injected through the simulator's control API gives the same findings both
ways. An unreachable or stale server is one Error: line naming it, exit 1 (could not check)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_server import SKIP_REASON, PrometheusServer, binary, free_port

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator

if str(Path(__file__).parent) not in sys.path:  # importlib mode keeps tests/e2e off sys.path
    sys.path.insert(0, str(Path(__file__).parent))

from test_drift_lab import LAB_SPEC, json_report, put_stack_in_place  # noqa: E402


@pytest.fixture
def lab(lab_sim: Simulator, kubeconfig: Path, tmp_path: Path) -> Path:
    return put_stack_in_place(kubeconfig, tmp_path, LAB_SPEC)


@pytest.fixture
def prometheus(lab_sim: Simulator, kubeconfig: Path, tmp_path: Path) -> Iterator[PrometheusServer]:
    """Prometheus scraping the lab's exporters at their pod IPs, once the stack runs (``lab``)."""
    if binary() is None:
        pytest.skip(SKIP_REASON)
    server = PrometheusServer(tmp_path / "prometheus", kubeconfig=kubeconfig).start()
    try:
        yield server
    finally:
        server.stop()


def failed_report(kubeconfig: Path, spec_file: Path, capsys: pytest.CaptureFixture[str], url: str) -> str:
    """The standard error of a report that must fail with exit 1 and print nothing else."""
    code = run(
        ["--kubeconfig", str(kubeconfig), "drift", "report", "-f", str(spec_file), "--prometheus", url]
    )
    captured = capsys.readouterr()
    assert code == 1 and captured.out == "", captured
    assert len([line for line in captured.err.splitlines() if line.startswith("Error:")]) == 1
    assert "Hint:" in captured.err and "Traceback" not in captured.err
    return captured.err


STEADY = ("index", "uuid", "model", "temperature_c", "xid", "xid_message")
"""A GPU's readings that hold still: the injected fault, and who the GPU is (memory and load move a little
between the exporter's answer now and the sample Prometheus took a second ago)."""


def gpus(document: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [[{k: gpu[k] for k in STEADY} for gpu in n["telemetry"]["gpus"]] for n in document["nodes"]]


def telemetry_findings(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in document["findings"] if f["kind"] == "telemetry"]


def test_a_hot_gpu_with_xid_gives_the_same_findings_from_prometheus_as_from_the_scrape(
    lab_sim: Simulator,
    kubeconfig: Path,
    lab: Path,
    prometheus: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lab_sim.set_gpu_fault("lab-node", 0, temperature=95, xid=79)
    assert prometheus.discover() == 1
    (group,) = json.loads(prometheus.targets.read_text())
    assert group["targets"][0].startswith("127.") and group["targets"][0].endswith(":9400")
    prometheus.wait_for(
        lambda: any(
            s["value"][1] == "79" for s in prometheus.query('DCGM_FI_DEV_XID_ERRORS{node="lab-node"}')
        ),
        what="the injected XID in Prometheus",
    )
    scraped_code, scraped = json_report(kubeconfig, lab, capsys)
    lab.write_text(LAB_SPEC + f"  telemetry:\n    prometheus: {{url: '{prometheus.url}'}}\n")
    code, queried = json_report(kubeconfig, lab, capsys)
    assert (code, scraped_code) == (2, 2)
    found = telemetry_findings(queried)
    assert {f["metric"] for f in found} == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"}
    assert queried["findings"] == scraped["findings"]
    assert gpus(queried) == gpus(scraped)
    assert [n["components"] for n in queried["nodes"]] == [n["components"] for n in scraped["nodes"]]
    assert any(f"from Prometheus at {prometheus.url}" in note for note in queried["notes"])


def test_a_node_prometheus_has_no_series_for_is_a_finding_not_healthy(
    lab_sim: Simulator,
    kubeconfig: Path,
    lab: Path,
    prometheus: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prometheus.discover()
    prometheus.wait_for_nodes(1)
    healthy, document = json_report(kubeconfig, lab, capsys, "--prometheus", prometheus.url)
    assert healthy == 0 and not document["findings"], document["findings"]
    # the exporter's series are relabelled to another node: Prometheus has none naming lab-node
    config = prometheus.folder / "prometheus.yml"
    config.write_text(
        config.read_text().replace("target_label: node", "target_label: node\n        replacement: elsewhere")
    )
    prometheus.reload()
    prometheus.wait_for(
        lambda: not prometheus.query('DCGM_FI_DEV_GPU_TEMP{node="lab-node"}'), what="lab-node's series to go"
    )
    code, document = json_report(kubeconfig, lab, capsys, "--prometheus", prometheus.url)
    assert code == 2
    (finding,) = document["findings"]
    assert finding["kind"] == "telemetry" and finding["node"] == "lab-node"
    assert finding["detail"].startswith("no telemetry from Prometheus for node lab-node")
    (node,) = document["nodes"]
    assert node["telemetry"]["error"] == "no telemetry from Prometheus"


def test_prometheus_without_dcgm_series_is_exit_1_naming_it(
    kubeconfig: Path, lab: Path, prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    err = failed_report(kubeconfig, lab, capsys, prometheus.url)
    assert err.startswith(f"Error: {prometheus.url}: Prometheus has no DCGM_FI_DEV_GPU_TEMP series"), err


def test_an_unreachable_prometheus_is_exit_1_naming_it(
    kubeconfig: Path, lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    err = failed_report(kubeconfig, lab, capsys, url)
    assert err.startswith(f"Error: {url}: cannot reach Prometheus"), err
