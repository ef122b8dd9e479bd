"""The plan views: a golden human rendering, the human text agreeing with the JSON document it is rendered
from, the JSON contract keys, and colour only when asked for."""

from __future__ import annotations

import copy
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan.build import has_changes, make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.model import StateFile
from gpuplan.views import colour, layout, plan_human, plan_json

GOLDEN = Path(__file__).parent / "golden"
UNWRAPPED = 10_000  # a width no line reaches: for tests of what the plan says, not of how it is laid out
HAND = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
        "template": {
            "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
            "spec": {
                "containers": [
                    {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}
                ]
            },
        },
    },
}
HELM_EXPORTER = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {
        "name": "dcgm-exporter",
        "namespace": "monitoring",
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "dcgm"},
    },
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.0-4.6.0-ubuntu22.04"}
                ]
            }
        }
    },
}


def gpu_node(
    name: str, *, driver: str | None = None, gfd: bool = True, allocatable: str | None = None
) -> dict[str, Any]:
    """An A100 node as kubelet, NFD and (with ``gfd``) GPU Feature Discovery label it."""
    labels = {
        "kubernetes.io/hostname": name,
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
    }
    if gfd:
        labels.update(
            {
                "nvidia.com/gpu.present": "true",  # a labelled node: gpuplan (or the operator) wrote it
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.family": "ampere",
                "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "0",
                "nvidia.com/mig.capable": "true",
            }
        )
        if driver:
            labels["nvidia.com/cuda.driver-version.full"] = driver
    status: dict[str, Any] = {
        "nodeInfo": {"containerRuntimeVersion": "containerd://2.1.3"},
        "runtimeHandlers": [{"name": "runc"}, {"name": "nvidia"}],
        "allocatable": {},
    }
    if allocatable:
        status["allocatable"]["nvidia.com/gpu"] = allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": status,
    }


def spec_text(gfd: str = "v0.20.1", validator: str = "gpuplan") -> str:
    return full_lab_spec(gfd=f"{{version: {gfd}}}", validator=f"{{owner: {validator}}}")


def every_kind_of_change() -> dict[str, Any]:
    """A plan with a replace (imported plugin), an update (gfd version), drift reverted (dcgm exporter image),
    deletes (validator now owner none), a conflict (a Helm exporter), findings and external statuses."""
    applied_spec = parse_spec(spec_text(), filename="gpustack.yaml")
    nodes = [
        gpu_node("gpu-a", driver="580.105.08"),
        gpu_node("gpu-b", driver="575.57.08"),
        gpu_node("gpu-c", gfd=False),
        gpu_node("gpu-d", driver="580.105.08"),
    ]
    cluster = FakeKubernetes([HAND, HELM_EXPORTER], nodes=nodes)
    records = [
        adopt.record_applied(obj, cluster.put(obj.manifest), serial=1)
        for obj in applied_spec.desired_objects()
        if obj.address.component != "devicePlugin"
    ]
    hand = cluster.read(ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset"))
    assert hand is not None
    records.append(adopt.record_imported("devicePlugin", hand, serial=1))
    state = StateFile.new().with_records(records).next_serial()
    key = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
    live = cluster.read(key)
    assert live is not None
    edited = copy.deepcopy(dict(live.manifest))
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s/dcgm-exporter:hotfix"
    edited["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-set",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": "2026-11-29T11:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {"f:containers": {'k:{"name":"nvidia-dcgm-exporter"}': {"f:image": {}}}}
                    }
                }
            },
        }
    ]
    cluster.put(edited)
    spec = parse_spec(spec_text(gfd="v0.20.2", validator="none"), filename="gpustack.yaml")
    plan = make_plan(spec, state, refresh.refresh(cluster, spec, state), created_at="2026-11-29T12:00:00Z")
    return plan.document()


def test_human_plan_matches_the_golden_file() -> None:
    """Regenerate with GPUPLAN_UPDATE_GOLDEN=1 after an intended change, and review the diff."""
    text = plan_human.render(every_kind_of_change(), width=layout.DEFAULT_WIDTH)
    golden = GOLDEN / "plan_every_change.txt"
    if os.environ.get("GPUPLAN_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_human_and_json_agree() -> None:
    document = every_kind_of_change()
    text = plan_human.render(document, width=UNWRAPPED)
    for change in document["changes"]:
        line = f"  {plan_human.SYMBOLS.get(change['action'], '?')} {change['address']}\n"
        assert (line in text) == (change["action"] != "no-op"), change["address"]
        for field in change["fields"]:
            assert (
                f"      {field['path']}: {plan_human.value(field['before'])} -> "
                f"{plan_human.value(field['after'])}" in text
            )
    for item in document["drift"]:
        assert f"~ {item['address']}" in text
        assert all(field["path"] in text and ", ".join(field["managers"]) in text for field in item["fields"])
    for conflict in document["conflicts"]:
        assert all(resolution["command"] in text for resolution in conflict["resolutions"])
    for finding in document["findings"]:
        assert finding["message"] in text
    counts = document["summary"]
    assert (
        f"Plan: {counts['create']} to add, {counts['update']} to change, {counts['replace']} to replace, "
        f"{counts['delete']} to destroy."
    ) in text
    assert counts["replace"] == 1 and counts["update"] >= 2 and counts["delete"] == 7
    assert plan_json.exit_code(document, detailed=True) == 2 and has_changes(document)
    assert json.loads(plan_json.render(document)) == document


def test_drift_comes_first_and_components_keep_graph_order() -> None:
    text = plan_human.render(every_kind_of_change())
    assert text.index("Objects have changed outside gpuplan") < text.index("gpuplan will perform")
    headings = [line.split()[1] for line in text.splitlines() if line.startswith("# ")]
    assert headings == ["devicePlugin", "gfd", "dcgmExporter", "validator"]


def test_no_changes_and_refresh_only_outcomes() -> None:
    spec = parse_spec(spec_text(), filename="gpustack.yaml")
    cluster = FakeKubernetes(nodes=[gpu_node("gpu-a", driver="580.105.08", allocatable="1")])
    records = [
        adopt.record_applied(obj, cluster.put(obj.manifest), serial=1) for obj in spec.desired_objects()
    ]
    state = StateFile.new().with_records(records).next_serial()
    snapshot = refresh.refresh(cluster, spec, state)
    document = make_plan(spec, state, snapshot, created_at="2026-11-29T12:00:00Z").document()
    text = plan_human.render(document)
    assert text.endswith("No changes. The cluster matches the configuration.\n")
    assert "gpuplan will perform" not in text and plan_json.exit_code(document, detailed=True) == 0
    refresh_only = make_plan(spec, state, snapshot, refresh_only=True).document()
    assert "No changes. The state matches the cluster" in plan_human.render(refresh_only)
    assert plan_json.exit_code(refresh_only, detailed=True) == 0


def test_colour_only_when_enabled() -> None:
    document = every_kind_of_change()
    assert "\033[" not in plan_human.render(document)
    assert "\033[32m" in plan_human.render(document, palette=colour.Palette(True))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "allowed", "enabled"),
    [(_Tty(), True, True), (_Tty(), False, False), (io.StringIO(), True, False)],
)
def test_palette_for_stream(stream: io.StringIO, allowed: bool, enabled: bool) -> None:
    assert colour.for_stream(stream, allowed=allowed).enabled is enabled


def test_long_values_are_shortened_and_node_lists_counted() -> None:
    assert plan_human.value(None) == "(absent)"
    assert len(plan_human.value("x" * 500)) <= plan_human.VALUE_WIDTH
    assert (
        plan_human.node_list([f"gpu-{i}" for i in range(5000)])
        == "5000 nodes (gpu-0, gpu-1, gpu-2 and 4997 more)"
    )


def test_findings_that_differ_only_by_node_are_grouped_in_the_human_view_only() -> None:
    """200 nodes without GFD: one warning naming the count and the first nodes; the JSON keeps one per
    node."""
    spec = parse_spec(spec_text(), filename="gpustack.yaml")
    nodes = [gpu_node(f"gpu-{index:04d}", gfd=False) for index in range(1, 201)]
    nodes.append(gpu_node("gpu-wrong", driver="575.57.08"))
    cluster = FakeKubernetes([], nodes=nodes)
    document = make_plan(spec, None, refresh.refresh(cluster, spec, None)).document()
    unknown = [f for f in document["findings"] if f["message"].startswith("GPU model unknown until GFD runs")]
    assert len(unknown) == 200 and {f["node"] for f in unknown} == {
        n["metadata"]["name"] for n in nodes[:200]
    }
    text = plan_human.render(document, width=UNWRAPPED)
    grouped = [line for line in text.splitlines() if "GPU model unknown until GFD runs" in line]
    assert grouped == [
        "  Warning: on 200 nodes: gpu-0001, gpu-0002, gpu-0003 and 197 more: " + unknown[0]["message"]
    ]
    assert text.count(unknown[0]["hint"]) == 1
    # a finding on one node keeps its own line, naming the node
    assert "Error: driver, node gpu-wrong: the node reports driver 575.57.08" in text


def test_a_create_of_an_absent_object_goes_without_a_reason_and_others_keep_theirs() -> None:
    document = every_kind_of_change()
    lines = plan_human.render(document, width=UNWRAPPED).splitlines()
    actions = next(at for at, line in enumerate(lines) if line.startswith("gpuplan will perform"))
    for change in document["changes"]:
        if change["action"] == "no-op":
            continue
        at = lines.index(f"  {plan_human.SYMBOLS[change['action']]} {change['address']}", actions)
        said = lines[at + 1] == f"      # {change['reason_text']}"
        assert said == (change["reason"] != "CREATE_BECAUSE_ABSENT"), change["address"]
    assert any(change["reason"] == "CREATE_BECAUSE_ABSENT" for change in document["changes"])
    assert "it does not exist in the cluster" not in "\n".join(lines)


@pytest.mark.parametrize("width", [60, 80, 100])
def test_long_lines_wrap_to_the_width_and_commands_stay_whole(width: int) -> None:
    document = every_kind_of_change()
    text = plan_human.render(document, width=width)
    words = {word for line in text.splitlines() for word in line.split()}
    commands = [r["command"] for conflict in document["conflicts"] for r in conflict["resolutions"]]
    too_long = [
        line
        for line in text.splitlines()
        if len(line) > width and line.strip() not in commands and len(line.split()) > 1
    ]
    assert too_long == []
    assert all(f"        {command}" in text.splitlines() for command in commands)
    # wrapping moves words, never cuts them
    assert words == {
        word for line in plan_human.render(document, width=UNWRAPPED).splitlines() for word in line.split()
    }


def test_colour_does_not_change_where_lines_wrap() -> None:
    document = every_kind_of_change()
    painted = plan_human.render(document, palette=colour.Palette(True), width=80)
    plain = plan_human.render(document, width=80)
    shown = [line.split() for line in re.sub(r"\033\[[0-9;]*m", "", painted).splitlines()]
    assert shown == [line.split() for line in plain.splitlines()]


def test_the_width_is_the_terminals_else_100(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    assert layout.terminal_width() == 72
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(layout.shutil, "get_terminal_size", lambda fallback: os.terminal_size(fallback))
    assert layout.terminal_width() == 100
