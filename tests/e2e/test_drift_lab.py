"""`gpuplan drift report` against simulated clusters where the stack was put in place "as apply will":
the hand-deployed device plugin removed, the spec's objects server-side applied with KubernetesWriter, the
records written with planner.observe.adopt.record_applied + LocalFileBackend, and each component's health
gates waited for with planner.health.wait (the drift report's promises).

Read-only is measured at the API server: every request that reaches it during a report is recorded with its
method, and the only writes are the stack's GPUStack status (none with --no-status)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_stack import LAB_HEADER
from prometheus_client.parser import text_string_to_metric_families
from request_log import record_requests

from gpuplan.cli import run
from gpuplan.commands.drift import render
from gpuplan.modules import catalog
from gpuplan.planner.health import wait as health_wait
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers import stack_status
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, SimFactory
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

LAB_SPEC = LAB_HEADER
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND_DEPLOYED = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
SCENARIOS = Path(__file__).parents[2] / "sim" / "scenarios"


def put_stack_in_place(kubeconfig: Path, folder: Path, spec_text: str, *, healthy: bool = True) -> Path:
    """The spec's objects applied and recorded beside the spec, then (``healthy``) every gate waited for."""
    spec_file = folder / "gpustack.yaml"
    spec_file.write_text(spec_text)
    spec = load_spec(spec_file)
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        if writer.read(HAND_DEPLOYED) is not None:
            writer.delete(HAND_DEPLOYED)
        writer.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.spec.namespace}})
        if writer.read(refresh.RUNTIME_CLASS) is None:  # a host toolkit's RuntimeClass (fleet-N lacks it)
            writer.apply(
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": "nvidia"},
                    "handler": "nvidia",
                }
            )
        facts = refresh.node_facts(refresh.refresh(writer, spec, None))
        stack = spec.context_for(facts)
        records = [
            adopt.record_applied(obj, writer.apply(dict(obj.manifest)), serial=1)
            for obj in spec.desired_objects(stack)
        ]
        LocalFileBackend(folder / "gpuplan.state.json").write(
            StateFile.new().with_records(records).next_serial()
        )
        # the stack's status object, which `gpuplan apply` creates (a drift report may only patch its status)
        writer.apply(
            {
                "apiVersion": stack_status.API_VERSION,
                "kind": stack_status.KIND,
                "metadata": {"name": spec.metadata.name},
            }
        )
        if healthy:
            options = health_wait.WaitOptions(
                expected_driver=spec.spec.driver.explicit_version(), poll_seconds=0.2
            )
            for name, checks in catalog.health_checks(spec.components(), stack).items():
                status = health_wait.wait(checks, writer, timeout=60, options=options)
                assert status.state == "passed", f"{name}: {status.message}"
    return spec_file


@pytest.fixture
def lab(lab_sim: Simulator, kubeconfig: Path, tmp_path: Path) -> Path:
    return put_stack_in_place(kubeconfig, tmp_path, LAB_SPEC)


@pytest.fixture
def requests_seen(lab_sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(method, path) of every request the lab's API server answers from now on."""
    return record_requests(lab_sim, monkeypatch)


def report(
    kubeconfig: Path, spec_file: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    code = run(["--kubeconfig", str(kubeconfig), "drift", "report", "-f", str(spec_file), *args])
    return code, capsys.readouterr().out


def json_report(
    kubeconfig: Path, spec_file: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, Any]]:
    code, out = report(kubeconfig, spec_file, capsys, "--format", "json", *args)
    document: dict[str, Any] = json.loads(out)
    return code, document


def of_kind(document: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [finding for finding in document["findings"] if finding["kind"] == kind]


# ------------------------------------------------------------------------------------------- no drift


def test_the_applied_lab_has_no_drift_in_every_format_and_the_report_only_reads(
    lab: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str], requests_seen: list[tuple[str, str]]
) -> None:
    state_file = lab.parent / "gpuplan.state.json"
    before = (state_file.read_bytes(), state_file.stat().st_mtime_ns)

    code, document = json_report(kubeconfig, lab, capsys)
    assert code == 0, document["findings"]
    assert document["drift"] is False and document["findings"] == []
    recorded = len(json.loads(state_file.read_text())["resources"])
    assert document["coverage"] == {"managed": recorded, "unmanaged": 0, "total": recorded, "ratio": 1.0}
    [node] = document["nodes"]
    assert (
        node["name"] == "lab-node"
        and node["gpu"]["family"] == "ampere"
        and node["gpu"]["memory_mib"] == 12288
    )
    assert {name: cell["status"] for name, cell in node["components"].items()} == dict.fromkeys(
        ("driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator"), "ok"
    )
    assert [gpu["index"] for gpu in node["telemetry"]["gpus"]] == ["0"]

    for output_format in ("text", "markdown", "prometheus", "html"):
        code, out = report(kubeconfig, lab, capsys, "--format", output_format)
        assert code == 0, out
        assert "lab-node" in out
    code, text = report(kubeconfig, lab, capsys)
    assert "No drift" in text and text.splitlines()[-1].startswith("lab-node ")

    # the report's one write is the status of the stack's GPUStack (design §7.3), nothing else
    writes = {(method, path) for method, path in requests_seen if method != "GET"}
    assert writes == {("PATCH", "/apis/gpuplan.io/v1alpha1/gpustacks/lab/status")}, sorted(writes)
    assert any("/proxy/metrics" in path for _, path in requests_seen), "telemetry came through the pod proxy"
    requests_seen.clear()
    code, _ = report(kubeconfig, lab, capsys, "--no-status")
    assert code == 0 and requests_seen and {method for method, _ in requests_seen} == {"GET"}
    assert (state_file.read_bytes(), state_file.stat().st_mtime_ns) == before, "the state is never written"
    assert not state_file.with_name("gpuplan.state.json.lock").exists(), "no lock is taken"


def test_prometheus_output_parses_and_is_written_atomically(
    lab: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = lab.parent / "textfile" / "gpuplan.prom"
    target.parent.mkdir()
    target.write_text("# the previous run\n")
    code, out = report(kubeconfig, lab, capsys, "--format", "prometheus", "--output", str(target))
    assert code == 0 and out == ""
    assert os.listdir(target.parent) == ["gpuplan.prom"], "no temporary file is left behind"
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(target.read_text())
        for s in family.samples
    }
    assert samples[("gpuplan_drift_detected", (("stack", "lab"),))] == 0
    assert (
        samples[("gpuplan_component_healthy", (("component", "gfd"), ("node", "lab-node"), ("stack", "lab")))]
        == 1
    )
    assert samples[("gpuplan_drift_findings", (("kind", "changed"), ("stack", "lab")))] == 0
    assert samples[("gpuplan_coverage_ratio", (("stack", "lab"),))] == 1.0
    assert samples[("gpuplan_last_check_timestamp_seconds", (("stack", "lab"),))] > 1.7e9


# ---------------------------------------------------------------------------------------------- drift


def test_kubectl_patch_of_the_device_plugin_image_is_changed_with_both_values_and_kubectl(
    lab: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl(
        "patch",
        "-n",
        "gpu-operator",
        "daemonset/nvidia-device-plugin-daemonset",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/template/spec/containers/0/image",'
        '"value":"nvcr.io/nvidia/k8s-device-plugin:v0.19.0"}]',
    )
    code, document = json_report(kubeconfig, lab, capsys, "--no-telemetry")
    assert code == 2 and document["drift"] is True
    [changed] = of_kind(document, "changed")
    assert changed["address"] == PLUGIN and changed["component"] == "devicePlugin"
    [field] = changed["fields"]
    assert field["path"] == "spec.template.spec.containers[name=nvidia-device-plugin].image"
    assert (field["before"], field["after"]) == (
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
        "nvcr.io/nvidia/k8s-device-plugin:v0.19.0",
    )
    assert field["managers"] == ["kubectl-patch"]
    code, text = report(kubeconfig, lab, capsys, "--no-telemetry")
    assert code == 2
    assert "v0.20.1' -> 'nvcr.io/nvidia/k8s-device-plugin:v0.19.0' (by kubectl-patch)" in text


def test_a_gfd_label_removed_by_hand_names_the_node_and_the_label(
    lab_sim: Simulator, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GFD relabels its node at start and then every sleepInterval, as the real one does: with an hour between
    # passes, the hand edit is still there when the report reads the node.
    lab = put_stack_in_place(kubeconfig, tmp_path, LAB_SPEC + "  gfd: {sleepInterval: 1h}\n")
    kubectl("label", "node", "lab-node", "nvidia.com/gpu.family-")
    code, document = json_report(kubeconfig, lab, capsys)
    assert code == 2
    [finding] = of_kind(document, "unhealthy")
    assert (finding["component"], finding["node"]) == ("gfd", "lab-node")
    assert "label nvidia.com/gpu.family missing" in finding["detail"]
    assert document["nodes"][0]["components"]["gfd"]["status"] == "unhealthy"


def test_the_deleted_exporter_service_is_missing(
    lab: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl("delete", "-n", "gpu-operator", "service/nvidia-dcgm-exporter")
    code, document = json_report(kubeconfig, lab, capsys)
    assert code == 2
    [missing] = of_kind(document, "missing")
    assert missing["address"] == "dcgmExporter/Service/gpu-operator/nvidia-dcgm-exporter"
    recorded = len(json.loads((lab.parent / "gpuplan.state.json").read_text())["resources"])
    assert document["coverage"]["managed"] == recorded - 1


def test_a_second_device_plugin_in_another_namespace_is_unmanaged(
    lab: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = yaml.safe_load((SCENARIOS / "lab.yaml").read_text())["objects"][0]
    manifest["metadata"]["namespace"] = "ml-team"
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team"}}),
    )
    kubectl("apply", "-f", "-", input=json.dumps(manifest))
    code, document = json_report(kubeconfig, lab, capsys, "--no-telemetry")
    assert code == 2
    [unmanaged] = of_kind(document, "unmanaged")
    assert unmanaged["address"] == "apps/v1/DaemonSet/ml-team/nvidia-device-plugin-daemonset"
    assert unmanaged["component"] == "devicePlugin" and unmanaged["owner"] == "manual"
    assert document["coverage"]["unmanaged"] == 1 and document["coverage"]["ratio"] < 1


def test_a_hot_gpu_with_xid_79_is_a_telemetry_finding_for_that_gpu(
    lab: Path, lab_sim: Simulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab_sim.set_gpu_fault("lab-node", 0, temperature=95, xid=79)
    code, document = json_report(kubeconfig, lab, capsys)
    assert code == 2
    found = of_kind(document, "telemetry")
    uuid = document["nodes"][0]["telemetry"]["gpus"][0]["uuid"]
    assert uuid and uuid.startswith("GPU-")
    assert {(f["node"], f["gpu"], f["uuid"], f["metric"], f["value"]) for f in found} == {
        ("lab-node", "0", uuid, "DCGM_FI_DEV_GPU_TEMP", 95.0),
        ("lab-node", "0", uuid, "DCGM_FI_DEV_XID_ERRORS", 79.0),
    }
    xid = next(f for f in found if f["metric"] == "DCGM_FI_DEV_XID_ERRORS")
    assert f"GPU 0 (UUID {uuid}" in xid["detail"] and "XID 79" in xid["detail"]
    code, _ = json_report(kubeconfig, lab, capsys, "--temperature-threshold", "100")
    assert code == 2, "the XID still counts with a higher temperature threshold"


def scrapes_under_api_faults(lab_sim: Simulator, monkeypatch: pytest.MonkeyPatch, **faults: Any) -> None:
    """The API faults switched on for the scrapes only (the refresh before them reads a healthy server), with
    the provider's retry policy kept but its waits cut to nothing."""
    from gpuplan.planner.observe import telemetry
    from gpuplan.providers.k8s_errors import RetryPolicy

    real = telemetry.scrape_nodes

    def faulted(*args: Any, **kwargs: Any) -> telemetry.ScrapeRun:
        lab_sim.set_api_faults(**faults)
        try:
            return real(*args, retry=RetryPolicy(base_delay=0.0, max_retry_after=0.0), **kwargs)
        finally:
            lab_sim.clear_api_faults()

    monkeypatch.setattr(telemetry, "scrape_nodes", faulted)


def test_transient_scrape_errors_are_retried_and_never_drift(
    lab: Path,
    lab_sim: Simulator,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scrapes_under_api_faults(
        lab_sim, monkeypatch, error_rate=0.5, codes=(429, 503), seed=7, retry_after_seconds=0
    )
    code, document = json_report(kubeconfig, lab, capsys)
    assert (code, document["findings"], document["notes"]) == (0, [], []), "retried until the scrape answered"
    assert document["nodes"][0]["telemetry"]["gpus"]


def test_a_scrape_failing_past_the_retries_is_not_scraped_and_exit_1_when_no_gpu_was_judged(
    lab: Path,
    lab_sim: Simulator,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scrapes_under_api_faults(lab_sim, monkeypatch, error_rate=1.0, codes=(500,))
    code = run(["--kubeconfig", str(kubeconfig), "drift", "report", "-f", str(lab), "--format", "json"])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == 1 and document["findings"] == [], "a 500 is not drift; nothing judged is not a clean 0"
    [note] = document["notes"]
    assert note.startswith("not scraped: 1 node(s) (lab-node): ") and "500" in note
    assert "not scraped: " in document["nodes"][0]["components"]["dcgmExporter"]["reason"]
    assert document["summary"]["telemetry_not_scraped"] == 1
    assert 'gpuplan_telemetry_not_scraped_nodes{stack="lab"} 1.0' in render(
        document, "prometheus", color=False
    )
    assert [line for line in captured.err.splitlines() if line.startswith("Error:")] == [
        "Error: could not check the GPUs' telemetry: no DCGM exporter could be scraped"
    ]


def test_the_spec_s_telemetry_thresholds_judge_the_lab_and_a_flag_overrides_them(
    lab: Path, lab_sim: Simulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.write_text(LAB_SPEC + "  telemetry: {temperatureCelsius: 70, xid: false}\n")
    lab_sim.set_gpu_fault("lab-node", 0, temperature=75, xid=79)
    code, document = json_report(kubeconfig, lab, capsys)
    assert code == 2
    assert [(f["metric"], f["value"]) for f in of_kind(document, "telemetry")] == [
        ("DCGM_FI_DEV_GPU_TEMP", 75.0)
    ]
    code, document = json_report(kubeconfig, lab, capsys, "--temperature-threshold", "80")
    assert (code, of_kind(document, "telemetry")) == (0, [])


def test_inventory_shows_the_exporter_and_validator_where_their_pods_are_ready(
    lab: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    requests_seen: list[tuple[str, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["--kubeconfig", str(kubeconfig), "inventory", "-f", str(lab), "--json"]) == 0
    [node] = json.loads(capsys.readouterr().out)["nodes"]
    assert (node["components"]["dcgm_exporter"], node["components"]["validator"]) == (True, True)
    assert [path for _, path in requests_seen if "/pods" in path] == ["/api/v1/pods"], (
        "one list, no per-node read"
    )
    kubectl("delete", "-n", "gpu-operator", "daemonset/nvidia-dcgm-exporter", "--wait=false")
    kubectl(
        "wait",
        "--for=delete",
        "-n",
        "gpu-operator",
        "pod",
        "-l",
        "gpuplan.io/component=dcgmExporter",
        "--timeout=30s",
    )
    assert run(["--kubeconfig", str(kubeconfig), "inventory", "--json"]) == 0
    [node] = json.loads(capsys.readouterr().out)["nodes"]
    assert (node["components"]["dcgm_exporter"], node["components"]["validator"]) == (False, True)


# ------------------------------------------------------------------------------------ other clusters


def test_drifted_host_drivers_are_version_findings_naming_node_and_both_versions(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("drifted")
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec_file = put_stack_in_place(
        kubeconfig, tmp_path, LAB_SPEC.replace("name: lab", "name: fleet"), healthy=False
    )
    assert sim.wait_idle(60)
    code, document = json_report(kubeconfig, spec_file, capsys, "--no-telemetry")
    assert code == 2
    versions = {
        (f["node"], f["found"], f["expected"])
        for f in of_kind(document, "version")
        if f["component"] == "driver"
    }
    assert ("gpu-b", "580.82.07", "580.105.08") in versions
    assert all(node != "gpu-a" for node, _, _ in versions)
    detail = next(f["detail"] for f in of_kind(document, "version") if f["node"] == "gpu-b")
    assert "580.82.07" in detail and "580.105.08" in detail and "gpu-b" in detail
    toolkit = {n["name"]: n["components"]["toolkit"]["status"] for n in document["nodes"]}
    assert toolkit == {"gpu-a": "ok", "gpu-b": "ok", "gpu-c": "unhealthy"}, "gpu-c lost its toolkit"


def test_mixed_shows_every_node_and_its_gpu_family(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("mixed")
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec_file = put_stack_in_place(
        kubeconfig, tmp_path, LAB_SPEC.replace('version: "580.105.08"', ""), healthy=False
    )
    assert sim.wait_idle(60)
    code, text = report(kubeconfig, spec_file, capsys)
    assert code in (0, 2)
    rows = {
        line.split()[0]: line
        for line in text.splitlines()
        if line.split() and line.split()[0].endswith("-node")
    }
    assert set(rows) == {"a100-node", "h100-node", "l40s-node", "rtx-node"}
    assert (
        "A100-SXM4-80GB" in rows["a100-node"]
        and "ampere" in rows["a100-node"]
        and "80 GiB" in rows["a100-node"]
    )
    assert "hopper" in rows["h100-node"] and "ada-lovelace" in rows["l40s-node"]


# ----------------------------------------------------------------------------------------------- errors


def test_a_stopped_simulator_is_exit_1_with_one_error_line(
    lab: Path, lab_sim: Simulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab_sim.stop()
    target = lab.parent / "report.json"
    code = run(
        [
            "--kubeconfig",
            str(kubeconfig),
            "drift",
            "report",
            "-f",
            str(lab),
            "--format",
            "json",
            "--output",
            str(target),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    errors = [line for line in captured.err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in captured.err
    assert not target.exists(), "nothing is written when the cluster could not be read"


def test_no_state_is_exit_1(
    lab_sim: Simulator, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = tmp_path / "gpustack.yaml"
    spec_file.write_text(LAB_SPEC)
    code = run(["--kubeconfig", str(kubeconfig), "drift", "report", "-f", str(spec_file)])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err.startswith(f"Error: {tmp_path / 'gpuplan.state.json'}: no state to compare with")


# ------------------------------------------------------------------------------------------------- html


@pytest.fixture
def chromium() -> Callable[..., str]:
    binary = next(
        (path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(path)), None
    )
    if binary is None:
        pytest.skip("chromium is not installed (Debian's chromium package; .ci/run installs it)")
    import subprocess

    def dump_dom(page: Path, profile: Path) -> str:
        result = subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return result.stdout

    return dump_dom


def test_the_html_report_renders_the_matrix_in_headless_chromium(
    lab: Path,
    lab_sim: Simulator,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    chromium: Callable[..., str],
    tmp_path: Path,
) -> None:
    lab_sim.set_gpu_fault("lab-node", 0, xid=79)
    page = tmp_path / "report.html"
    code, _ = report(kubeconfig, lab, capsys, "--format", "html", "--output", str(page))
    assert code == 2
    dom = chromium(page, tmp_path / "chromium-profile")
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.cells: dict[str, str] = {}
            self.rows: list[str] = []
            self._component: str | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found = dict(attrs)
            if tag == "tr" and found.get("data-node"):
                self.rows.append(str(found["data-node"]))
            if tag == "td" and found.get("data-component"):
                self._component = str(found["data-component"])
                self.cells[self._component] = str(found.get("class"))

    parsed = Cells()
    parsed.feed(dom)
    assert parsed.rows == ["lab-node"]
    assert parsed.cells == dict.fromkeys(
        ("driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator"), "ok"
    )
    assert "XID 79" in dom and 'id="matrix"' in dom
