"""One name and one unit for a GPU in every human view (inventory, drift text, markdown and HTML), and
booleans in tables as yes/no; the JSON documents keep their keys and numbers."""

from __future__ import annotations

from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.planner.drift import report as drift
from gpuplan.planner.observe import inventory, refresh
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.state.model import StateFile
from gpuplan.views import drift_common, drift_html, drift_markdown, drift_text, gpu
from gpuplan.views import inventory as inventory_view

RTX_3060 = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/gpu.memory": "12288",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "6",
    "nvidia.com/cuda.driver-version.full": "580.105.08",
}


def cluster() -> FakeKubernetes:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "rtx-node", "labels": {"kubernetes.io/hostname": "rtx-node", **RTX_3060}},
        "status": {"allocatable": {"nvidia.com/gpu": "1"}, "runtimeHandlers": [{"name": "nvidia"}]},
    }
    return FakeKubernetes(nodes=[node])


def drift_document() -> dict[str, Any]:
    spec = parse_spec(
        lab_spec(dcgmExporter="{owner: none}", validator="{owner: none}"), filename="gpustack.yaml"
    )
    fake, state = cluster(), StateFile.new().next_serial()
    inputs = drift.Inputs(
        spec=spec,
        state=state,
        snapshot=refresh.refresh(fake, spec, state),
        pods=[],
        scrapes={},
        checked_at="2026-11-29T18:00:00Z",
        now=0.0,
    )
    document: dict[str, Any] = drift.build_report(inputs).document()
    return document


@pytest.mark.parametrize(
    ("mib", "text"),
    [(12288, "12"), (81920, "80"), (81559, "79.6"), (46068, "45"), (12287, "12"), (1536, "1.5")],
)
def test_memory_is_in_gib_whole_when_whole_else_one_decimal(mib: int, text: str) -> None:
    assert gpu.gib(mib) == text


def test_a_gpu_is_named_by_its_gfd_product_label() -> None:
    assert gpu.gpu_words("NVIDIA-GeForce-RTX-3060", 12288) == ("NVIDIA-GeForce-RTX-3060", "12 GiB")
    assert gpu.gpu_words("NVIDIA GeForce RTX 3060", 12288).name == "NVIDIA-GeForce-RTX-3060", "an NVML name"
    assert gpu.gpu_words(None, None) == ("unknown", "unknown")


def test_inventory_and_every_drift_view_say_the_same_name_and_memory() -> None:
    document = drift_document()
    views = {
        "inventory": inventory_view.render(inventory.read_cluster(cluster()).document()),
        "drift text": drift_text.render(document),
        "drift markdown": drift_markdown.render(document),
        "drift html": drift_html.render(document),
    }
    for view, text in views.items():
        assert "NVIDIA-GeForce-RTX-3060" in text and "12 GiB" in text, view
        assert "MiB" not in text and " GeForce-RTX-3060" not in text and "|GeForce" not in text, view
    assert document["nodes"][0]["gpu"]["memory_mib"] == 12288, "the JSON keeps its MiB number"


def test_boolean_cells_read_yes_or_no_in_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    assert inventory_view.table(["READY", "MIG"], [[True, False]]) == ["READY   MIG", "yes     no"]
    document = drift_document()
    facts = drift_common.node_facts

    def with_a_boolean(node: Any) -> list[Any]:
        return [*facts(node)[:-1], True]  # a boolean where the driver version was

    monkeypatch.setattr(drift_common, "node_facts", with_a_boolean)
    for render in (drift_text.render, drift_markdown.render, drift_html.render):
        text = render(document)
        assert "True" not in text and "yes" in text, render.__module__
