"""The drift report views render the same document: text, JSON, markdown, Prometheus and HTML.

The document comes from planner.drift.report.build_report on a small fake cluster (so the views are tested
against the real document shape), with findings of every kind added, one of them carrying markup and table
syntax."""

from __future__ import annotations

import json
import tracemalloc
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

import pytest
from lab_stack import lab_spec
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.planner.drift import report as drift
from gpuplan.planner.observe import refresh
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.state.model import StateFile
from gpuplan.views import drift_html, drift_json, drift_markdown, drift_prometheus, drift_text
from gpuplan.views.colour import Palette

SPEC = lab_spec(
    driver="{owner: external}",
    devicePlugin="{owner: external}",
    gfd="{owner: external}",
    dcgmExporter="{owner: external}",
    validator="{owner: none}",  # owner none and nothing of it there: no column
)
NASTY = "<script>alert('x')</script> | `tick`"


def node(name: str, *, gpu: bool) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    status: dict[str, Any] = {"allocatable": {}, "runtimeHandlers": [{"name": "nvidia"}]}
    if gpu:
        labels.update(
            {
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.family": "hopper",
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/gpu.compute.major": "9",
                "nvidia.com/gpu.compute.minor": "0",
                "nvidia.com/cuda.driver-version.full": "580.105.08",
            }
        )
        status["allocatable"]["nvidia.com/gpu"] = "7"
    return {"metadata": {"name": name, "labels": labels}, "status": status}


@pytest.fixture
def document() -> dict[str, Any]:
    spec = parse_spec(SPEC, filename="gpustack.yaml")
    cluster = FakeKubernetes(nodes=[node("h100-node", gpu=True), node("cpu-node", gpu=False)])
    state = StateFile.new().next_serial()
    report = drift.build_report(
        drift.Inputs(
            spec=spec,
            state=state,
            snapshot=refresh.refresh(cluster, spec, state),
            pods=[],
            scrapes={},
            checked_at="2026-11-29T18:00:00Z",
            now=0.0,
        )
    )
    doc: dict[str, Any] = report.document()
    extra = [
        drift.Finding(
            "changed",
            "gfd",
            f"DaemonSet x changed {NASTY}",
            address="gfd/DaemonSet/gpu-operator/x",
            data={"fields": []},
        ),
        drift.Finding(
            "telemetry",
            "dcgmExporter",
            "GPU 0 (UUID GPU-1) on h100-node reported XID 79",
            node="h100-node",
            data={"gpu": "0", "uuid": "GPU-1", "metric": "DCGM_FI_DEV_XID_ERRORS", "value": 79.0},
        ),
    ]
    doc["findings"] += [f.document() for f in extra]
    doc["summary"]["findings"]["changed"] += 1
    doc["summary"]["findings"]["telemetry"] += 1
    doc["summary"]["total"] += 2
    doc["drift"] = True
    doc["nodes"][1]["telemetry"]["gpus"] = [
        {
            "index": "0",
            "uuid": "GPU-1",
            "model": "H100",
            "temperature_c": 91.0,
            "utilisation_percent": 95.0,
            "xid": 79,
            "xid_message": None,
        }
    ]
    doc["nodes"][1]["telemetry"]["heavy_load_gpus"] = ["0"]
    return doc


def test_the_report_of_the_fake_cluster_finds_the_wrong_allocatable(document: dict[str, Any]) -> None:
    unhealthy = [f for f in document["findings"] if f["kind"] == "unhealthy"]
    assert [(f["component"], f["node"]) for f in unhealthy] == [("devicePlugin", "h100-node")]
    assert document["nodes"][1]["components"]["devicePlugin"] == {
        "status": "unhealthy",
        "reason": "allocatable nvidia.com/gpu is 7, expected 8",
        "check": "allocatable",
    }, "the failing check's name, as spec.ignore's checks name it"


def test_json_is_the_document(document: dict[str, Any]) -> None:
    assert json.loads(drift_json.render(document)) == document
    assert set(document) >= {"format_version", "drift", "findings", "nodes"}
    assert {"kind", "component", "address", "node", "detail"} <= set(document["findings"][0])


def test_text_has_summary_findings_then_the_matrix(document: dict[str, Any]) -> None:
    text = drift_text.render(document)
    lines = text.splitlines()
    assert lines[1] == "Drift found: 3 findings (changed 1, unhealthy 1, telemetry 1)."
    assert lines.index("Findings:") < next(i for i, line in enumerate(lines) if line.startswith("NODE "))
    header = next(line for line in lines if line.startswith("NODE "))
    assert header.split() == [
        "NODE",
        "GPU",
        "FAMILY",
        "COUNT",
        "MEMORY",
        "DRIVER-VERSION",
        "DRIVER",
        "TOOLKIT",
        "DEVICE-PLUGIN",
        "GFD",
        "DCGM-EXPORTER",
        "LOAD",
    ]
    row = next(line for line in lines if line.startswith("h100-node"))
    assert row.split() == [
        "h100-node",
        "NVIDIA-H100-80GB-HBM3",
        "hopper",
        "8",
        "79.6",
        "GiB",
        "580.105.08",
        "(GFD",
        "label)",
        "ok",
        "ok",
        "unhealthy",
        "ok",
        "n/a",
        "heavy",
        "load:",
        "GPU",
        "0",
    ]
    assert "  h100-node devicePlugin: unhealthy (allocatable nvidia.com/gpu is 7, expected 8)" in lines
    assert "\033[" not in text
    assert "\033[31m" in drift_text.render(document, palette=Palette(True))


def test_markdown_tables_survive_pipes_and_backticks(document: dict[str, Any]) -> None:
    markdown = drift_markdown.render(document)
    row = next(line for line in markdown.splitlines() if line.startswith("| changed"))
    assert row.count(" | ") == 3, "the | in the detail is escaped"
    assert "\\| \\`tick\\`" in row
    matrix = [
        line
        for line in markdown.splitlines()
        if line.startswith("| h100-node") or line.startswith("| cpu-node")
    ]
    assert len(matrix) == 2 and "**unhealthy**: allocatable" in matrix[1]


def test_prometheus_text_parses_with_every_kind_and_each_cell(document: dict[str, Any]) -> None:
    families = {f.name: f for f in text_string_to_metric_families(drift_prometheus.render(document))}
    findings = {s.labels["kind"]: s.value for s in families["gpuplan_drift_findings"].samples}
    assert findings == {
        "changed": 1,
        "missing": 0,
        "unmanaged": 0,
        "version": 0,
        "unhealthy": 1,
        "telemetry": 1,
    }
    assert families["gpuplan_drift_detected"].samples[0].value == 1
    healthy = {
        (s.labels["node"], s.labels["component"]): s.value
        for s in families["gpuplan_component_healthy"].samples
    }
    assert healthy[("h100-node", "devicePlugin")] == 0 and healthy[("h100-node", "gfd")] == 1
    assert ("cpu-node", "gfd") not in healthy, "n/a cells are not a health signal"
    checked = datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC).timestamp()
    assert families["gpuplan_last_check_timestamp_seconds"].samples[0].value == checked
    xid = families["gpuplan_gpu_xid_last"].samples[0]
    assert (xid.labels["node"], xid.labels["uuid"], xid.value) == ("h100-node", "GPU-1", 79)


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.cells: dict[tuple[str, str], str] = {}
        self._row = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append(tag)
        self.links += [str(v) for k, v in attrs if k in ("src", "href")]
        if tag == "tr" and found.get("data-node"):
            self._row = str(found["data-node"])
        if tag == "td" and found.get("data-component"):
            self.cells[(self._row, str(found["data-component"]))] = str(found.get("class"))


def test_html_is_one_page_with_a_coloured_matrix_and_nothing_unescaped(document: dict[str, Any]) -> None:
    page = drift_html.render(document)
    parsed = Page()
    parsed.feed(page)
    assert "script" not in parsed.tags and parsed.links == [], "no script, nothing loaded from anywhere"
    assert "&lt;script&gt;" in page and NASTY not in page
    assert parsed.cells[("h100-node", "devicePlugin")] == "unhealthy"
    assert parsed.cells[("h100-node", "driver")] == "ok" and parsed.cells[("cpu-node", "gfd")] == "na"
    assert "td.unhealthy{" in page, "the colours are inline CSS"


def test_markdown_headers_keep_the_casing_of_gpu_gfd_and_dcgm(document: dict[str, Any]) -> None:
    markdown = drift_markdown.render(document)
    header = next(line for line in markdown.splitlines() if line.startswith("| Node"))
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "Node",
        "GPU",
        "Family",
        "Count",
        "Memory",
        "Driver version",
        "Driver",
        "Toolkit",
        "Device plugin",
        "GFD",
        "DCGM exporter",
        "Load",
    ]


def test_every_view_renders_the_columns_the_report_chose(document: dict[str, Any]) -> None:
    """A mig-manager column and a hand-edited node label, as a stack owning the mig-manager reports them."""
    document["components"].append("migManager")
    reason = "label nvidia.com/mig.config is all-disabled, expected all-1g.10gb"
    document["nodes"][1]["components"]["migManager"] = {"status": "unhealthy", "reason": reason}
    document["nodes"][0]["components"]["migManager"] = {"status": "n/a", "reason": "not targeted"}
    field_doc = {
        "path": "metadata.labels.nvidia.com/mig.config",
        "before": "all-1g.10gb",
        "after": "all-disabled",
        "managers": ["kubectl-label"],
    }
    edited = drift.Finding(
        "changed",
        "migManager",
        "label nvidia.com/mig.config of node h100-node changed outside gpuplan: ...",
        node="h100-node",
        data={"fields": [field_doc]},
    )
    document["findings"].append(edited.document())

    text = drift_text.render(document)
    assert next(line for line in text.splitlines() if line.startswith("NODE ")).split()[-2:] == [
        "MIG-MANAGER",
        "LOAD",
    ]
    assert f"  h100-node migManager: unhealthy ({reason})" in text
    assert "changed    migManager  node h100-node" in text
    markdown = drift_markdown.render(document)
    assert "| MIG manager | Load |" in markdown and "| h100-node |" in markdown
    parsed = Page()
    parsed.feed(drift_html.render(document))
    assert parsed.cells[("h100-node", "migManager")] == "unhealthy"
    assert parsed.cells[("cpu-node", "migManager")] == "na"
    families = {f.name: f for f in text_string_to_metric_families(drift_prometheus.render(document))}
    healthy = {
        (s.labels["node"], s.labels["component"]): s.value
        for s in families["gpuplan_component_healthy"].samples
    }
    assert healthy[("h100-node", "migManager")] == 0 and ("cpu-node", "migManager") not in healthy
    assert json.loads(drift_json.render(document))["findings"][-1]["fields"] == [field_doc]


def test_the_json_report_is_made_in_pieces_as_it_is_encoded_never_as_one_text() -> None:
    gpus = [{"index": str(i), "uuid": f"GPU-{i}", "temperature_c": 40.0, "xid": 0} for i in range(8)]
    document = {"nodes": [{"name": f"gpu-{n:04d}", "telemetry": {"gpus": gpus}} for n in range(2000)]}
    text = drift_json.render(document)
    assert "".join(drift_json.pieces(document)) == text
    tracemalloc.start()
    try:
        longest = max(len(piece) for piece in drift_json.pieces(document))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert longest < 2 * drift_json.PIECE_CHARS
    assert peak < len(text) / 4, (peak, len(text))  # encoded whole, the indented text took 5x its size


def test_every_format_shows_what_spec_ignore_declares_never_as_drift(document: dict[str, Any]) -> None:
    ignored = {
        "kind": "changed",
        "component": "gfd",
        "address": "gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        "node": None,
        "detail": "DaemonSet gpu-feature-discovery changed outside gpuplan: image (ignored: spec.ignore)",
        "fields": [],
        "nodes": ["h100-node"],
    }
    declared = {**document, "ignored": [ignored], "summary": {**document["summary"], "ignored": 1}}
    assert "Ignored (spec.ignore, not drift):" in drift_text.render(declared)
    markdown = drift_markdown.render(declared)
    assert "### Ignored (spec.ignore, not drift)" in markdown and ignored["address"] in markdown
    page = drift_html.render(declared)
    assert '<table id="ignored">' in page and "(ignored: spec.ignore)" in page
    assert '<table id="ignored">' not in drift_html.render(document), "no section when nothing is ignored"
    assert json.loads(drift_json.render(declared))["ignored"][0]["nodes"] == ["h100-node"]
    families = {f.name: f for f in text_string_to_metric_families(drift_prometheus.render(declared))}
    counted = {s.labels["kind"]: s.value for s in families["gpuplan_drift_ignored"].samples}
    assert counted == {**dict.fromkeys(drift.KINDS, 0.0), "changed": 1.0}
    findings = {s.labels["kind"]: s.value for s in families["gpuplan_drift_findings"].samples}
    assert findings["changed"] == 1, "what is ignored does not count as a finding"
