"""gpuplan renders the operands as the GPU Operator v26.7.0 does, so a running operator's DaemonSets can be
adopted in place: a DaemonSet's selector is immutable and a changed pod template restarts its pods.

The reference is the ``gpu-operator`` scenario's operands (sim/scenarios/gpu-operator.yaml: the operator's
assets after its controller's transforms for the lab, driver and toolkit host-installed). For the equivalent
spec gpuplan must render the same DaemonSets, selectors and pod templates, field by field and in list order,
except the paths ``modules.common.OPERATOR_DIFFERENCES`` records as deliberate. Both sides lose the values
the API server would default identically (``strip_defaults``), as the live objects would.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from gpuplan.modules.common import OPERATOR_DIFFERENCES
from gpuplan.planner.diff.defaults import strip_defaults
from gpuplan.sim.scenario import load_scenario
from tests.modules.conftest import RenderFactory

# the lab's ClusterPolicy in gpuplan's terms: host driver and toolkit, the chart's plugin and GFD version
EQUIVALENT_SPEC = """\
  driver: {owner: external}
  toolkit: {owner: external}
  devicePlugin: {version: v0.20.0}
  gfd: {version: v0.20.0}
"""
OPERANDS = (
    "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
)


def _operator_objects() -> list[dict[str, Any]]:
    return [dict(obj) for obj in load_scenario("gpu-operator").objects]


def _daemonsets(objects: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "DaemonSet"}


def _without_deliberate(daemonset: Mapping[str, Any]) -> dict[str, Any]:
    """The selector, update strategy and pod template, less the deliberate differences and API defaults."""
    obj = copy.deepcopy(dict(daemonset))
    strip_defaults(obj, from_server=False)
    for path in OPERATOR_DIFFERENCES:
        if path[0] == "env":
            for container in _containers(obj):
                container["env"] = [e for e in container.get("env") or () if e["name"] != path[1]]
            continue
        _drop(obj, path)
    spec = obj["spec"]
    return {key: spec.get(key) for key in ("selector", "updateStrategy", "template")}


def _drop(tree: dict[str, Any], path: tuple[str, ...]) -> None:
    """Remove ``path`` from ``tree``, and the maps it leaves empty (gpuplan's affinity without its node
    affinity is the operator's absent one)."""
    value = tree.get(path[0])
    if len(path) == 1:
        tree.pop(path[0], None)
    elif isinstance(value, dict):
        _drop(value, path[1:])
        if not value:
            del tree[path[0]]


def _containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", ()), *pod.get("containers", ())]


def _differences(operator: Any, gpuplan: Any, path: str = "") -> list[str]:
    """Every path where the two differ, lists compared in order."""
    if isinstance(operator, dict) and isinstance(gpuplan, dict):
        found = []
        for key in sorted(set(operator) | set(gpuplan)):
            if key not in operator or key not in gpuplan:
                found.append(f"{path}.{key} ({'only gpuplan' if key in gpuplan else 'only the operator'})")
            else:
                found += _differences(operator[key], gpuplan[key], f"{path}.{key}")
        return found
    if isinstance(operator, list) and isinstance(gpuplan, list) and len(operator) == len(gpuplan):
        return [
            d for i, pair in enumerate(zip(operator, gpuplan)) for d in _differences(*pair, f"{path}[{i}]")
        ]
    return [] if operator == gpuplan else [f"{path}: operator {operator!r}, gpuplan {gpuplan!r}"]


def test_the_equivalent_spec_renders_the_operators_daemonsets(render: RenderFactory) -> None:
    rendered = render(EQUIVALENT_SPEC)
    gpuplan = _daemonsets([o.manifest for o in rendered.objects])
    operator = _daemonsets(_operator_objects())
    assert sorted(gpuplan) == sorted(operator) == sorted(OPERANDS)
    for name in OPERANDS:
        assert gpuplan[name]["metadata"]["namespace"] == operator[name]["metadata"]["namespace"]
        # the selector as it is, not only without defaults: it can never change in place
        assert gpuplan[name]["spec"]["selector"] == operator[name]["spec"]["selector"], name


@pytest.mark.parametrize("name", OPERANDS)
def test_pod_templates_match_the_operators_except_the_deliberate_differences(
    render: RenderFactory, name: str
) -> None:
    gpuplan = _daemonsets([o.manifest for o in render(EQUIVALENT_SPEC).objects])[name]
    operator = _daemonsets(_operator_objects())[name]
    assert _differences(_without_deliberate(operator), _without_deliberate(gpuplan)) == []


def test_the_deliberate_differences_are_the_only_ones(render: RenderFactory) -> None:
    """Each recorded path does differ on some operand (a stale entry would hide a future difference)."""
    gpuplan = _daemonsets([o.manifest for o in render(EQUIVALENT_SPEC).objects])
    operator = _daemonsets(_operator_objects())
    raw = [
        d for name in OPERANDS for d in _differences(operator[name]["spec"], gpuplan[name]["spec"], "spec")
    ]
    for path in OPERATOR_DIFFERENCES:
        if path[0] == "env":
            continue  # the driver's digest: the lab's operator deploys no driver
        dotted = ".".join(path)
        at = [d.split(" ")[0].rstrip(":") for d in raw]
        assert any(p.startswith(dotted) or dotted.startswith(p) for p in at), f"{dotted} no longer differs"


def test_the_operand_scripts_are_the_operators(render: RenderFactory) -> None:
    rendered = render(EQUIVALENT_SPEC)
    ours = {
        o.manifest["metadata"]["name"]: o.manifest
        for o in rendered.objects
        if o.manifest["kind"] == "ConfigMap"
    }
    theirs = {o["metadata"]["name"]: o for o in _operator_objects() if o["kind"] == "ConfigMap"}
    assert theirs.keys() <= ours.keys()
    for name, config_map in theirs.items():
        assert ours[name]["data"] == config_map["data"], name
