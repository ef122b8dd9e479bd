"""``spec.ignore`` in the plan and the drift report: a declared field keeps its live value (never planned,
never reverted, listed as ignored), and a declared check on the nodes a selector matches is no drift."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.planner.diff import fields as diff
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import Plan, make_plan
from gpuplan.planner.spec import ignore, selector
from gpuplan.planner.spec.model import parse_spec
from gpuplan.views import plan_human

from .conftest import make_node
from .test_drift import GFD, HAND_GFD, SPEC, Lab, gpu_node, live_manifest, set_gfd_image_by_hand

GFD_ADDRESS = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
IMAGE = "spec.template.spec.containers[name=gpu-feature-discovery].image"
RULE = f"  ignore:\n    - address: {GFD_ADDRESS}\n      paths: ['{IMAGE}']\n"


def lab_of(spec_text: str = SPEC) -> Lab:
    return Lab([gpu_node("gpu-a"), gpu_node("gpu-b"), make_node("cpu-0", gpu=None)], spec_text)


def plan_of(lab: Lab, spec_text: str, **kwargs: Any) -> Plan:
    spec = parse_spec(spec_text, filename="gpustack.yaml")
    return make_plan(spec, lab.state, refresh.refresh(lab.cluster, spec, lab.state), **kwargs)


def gfd_change(plan: Plan) -> Any:
    return next(change for change in plan.changes if change.address == GFD_ADDRESS)


def test_a_hand_change_on_an_ignored_path_is_kept_and_listed_as_ignored_not_as_drift() -> None:
    lab = lab_of()
    set_gfd_image_by_hand(lab)
    assert gfd_change(plan_of(lab, SPEC)).action == "update", "without the rule the image is reverted"
    plan = plan_of(lab, SPEC + RULE)
    assert gfd_change(plan).action == "no-op" and not plan.has_changes
    assert [d.address for d in plan.drift] == []
    [ignored] = plan.ignored
    assert (ignored.address, ignored.paths) == (GFD_ADDRESS, (IMAGE,))
    [field] = ignored.fields
    assert (field.path, field.after) == (IMAGE, HAND_GFD) and field.before.endswith("v0.20.1")
    assert plan.document()["ignored"][0]["fields"][0]["after"] == HAND_GFD
    text = plan_human.render(plan.document(), width=200)
    assert "Ignored (spec.ignore)" in text and f"= {GFD_ADDRESS}" in text and HAND_GFD in text
    assert "No changes. The cluster matches the configuration." in text
    refreshed = plan_of(lab, SPEC + RULE, refresh_only=True)
    assert not refreshed.has_changes and [i.address for i in refreshed.ignored] == [GFD_ADDRESS]


def test_apply_keeps_the_ignored_value_while_it_reverts_a_field_not_ignored() -> None:
    lab = lab_of()
    set_gfd_image_by_hand(lab)
    live = live_manifest(lab, GFD)
    live["spec"]["template"]["spec"]["priorityClassName"] = "by-hand"
    lab.cluster.put(live)
    change = gfd_change(plan_of(lab, SPEC + RULE))
    assert (change.action, change.reason) == ("update", "UPDATE_BECAUSE_DRIFT")
    assert [f.path for f in change.fields] == ["spec.template.spec.priorityClassName"]
    container = change.after["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == HAND_GFD, "what apply writes keeps the declared value"


def test_a_spec_change_on_an_ignored_path_is_ignored_too() -> None:
    lab = lab_of()
    assert gfd_change(plan_of(lab, SPEC + "  gfd: {version: v0.20.2}\n")).action == "update"
    plan = plan_of(lab, SPEC + "  gfd: {version: v0.20.2}\n" + RULE)
    assert gfd_change(plan).action == "no-op"
    [field] = plan.ignored[0].fields
    assert field.before.endswith("v0.20.2") and field.after.endswith("v0.20.1")


def test_with_values_sets_removes_and_appends_keyed_items() -> None:
    manifest = {"spec": {"containers": [{"name": "a", "image": "x"}], "host": True}}
    changed = diff.with_values(
        manifest,
        [
            ("spec.containers[name=a].image", "y"),
            ("spec.host", None),
            ("spec.containers[name=b]", {"name": "b", "image": "z"}),
        ],
    )
    assert changed == {"spec": {"containers": [{"name": "a", "image": "y"}, {"name": "b", "image": "z"}]}}
    assert manifest["spec"]["containers"][0]["image"] == "x", "the input is not changed"


@pytest.mark.parametrize(
    ("text", "labels", "holds"),
    [
        ("pool=lab", {"pool": "lab"}, True),
        ("pool==lab,zone", {"pool": "lab"}, False),
        ("pool!=lab", {}, True),
        ("!gpuplan.io/skip", {"gpuplan.io/skip": ""}, False),
    ],
)
def test_the_spec_selector_matches_as_kubernetes_equality_selectors(
    text: str, labels: dict[str, str], holds: bool
) -> None:
    assert selector.problem(text) is None
    assert selector.matcher(text)(labels) is holds


def test_a_path_rule_covers_its_path_and_everything_below_it() -> None:
    assert ignore.covered(["spec.template.spec.containers"], IMAGE)
    assert ignore.covered([IMAGE], IMAGE)
    assert not ignore.covered(["spec.template.spec.container"], IMAGE), "a prefix of a name is not a path"


NODES_RULE = "  ignore:\n    - nodes: {selector: 'lab.example/flaky=true'}\n      checks: [{checks}]\n"


def test_a_declared_check_on_a_matched_node_is_ignored_and_its_cell_names_the_check() -> None:
    lab = lab_of(SPEC + NODES_RULE.replace("{checks}", "allocatable"))
    for name in ("gpu-a", "gpu-b"):
        node = gpu_node(name)
        node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        if name == "gpu-a":
            node["metadata"]["labels"]["lab.example/flaky"] = "true"
        lab.cluster.put_node(node)
    report = lab.report()
    assert [(f.kind, f.node) for f in report.findings] == [("unhealthy", "gpu-b")]
    [waived] = report.ignored
    assert (waived.kind, waived.node, waived.data["check"]) == ("unhealthy", "gpu-a", "allocatable")
    assert "ignored: spec.ignore" in waived.detail
    cells = {n["name"]: n["components"]["devicePlugin"] for n in report.document()["nodes"]}
    assert (cells["gpu-a"]["status"], cells["gpu-a"]["check"]) == ("ok", "allocatable")
    assert "spec.ignore" in cells["gpu-a"]["reason"]
    assert (cells["gpu-b"]["status"], cells["gpu-b"]["check"]) == ("unhealthy", "allocatable")


def test_declared_telemetry_and_driver_version_checks_are_ignored_on_matched_nodes() -> None:
    from .test_drift import Scrape, scrape_text

    lab = Lab(
        [gpu_node("gpu-a", driver="580.95.05", labels={"lab.example/flaky": "true"})],
        SPEC + NODES_RULE.replace("{checks}", "telemetry, driver-version"),
    )
    lab.scrapes = {"gpu-a": Scrape("e", text=scrape_text("gpu-a", 2, temperature=95, driver="580.95.05"))}
    report = lab.report()
    assert report.findings == () and report.exit_code() == 0
    assert sorted((f.kind, f.data["check"]) for f in report.ignored) == [
        ("telemetry", "telemetry"),
        ("version", "driver-version"),
    ]
