"""gpuplan renders the operands as the GPU Operator v26.7.0 does, so a running operator's DaemonSets can be
adopted in place: a DaemonSet's selector is immutable and a changed pod template restarts its pods.

The references are the operands of the ``gpu-operator`` scenario (sim/scenarios/gpu-operator.yaml: the
operator's assets after its controller's transforms for the lab, driver and toolkit host-installed) and of
``gpu-operator-bare`` (every operand deployed, driver and toolkit included). For the equivalent
spec gpuplan must render the same DaemonSets, selectors and pod templates, field by field and in list order,
except the paths recorded as deliberate for the spec's pod-template shape:
``modules.common.OPERATOR_DIFFERENCES`` in the operator's (``daemonsets.podTemplate: gpu-operator``, as
``init --from-clusterpolicy`` writes it), ``GPUPLAN_SHAPE_DIFFERENCES`` in gpuplan's own. Both sides are
compared as the API server would store them (``normalize``): without the values it would default identically
and without the empty fields it drops (the operator's ``value: ""`` is stored as no value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gpuplan.modules import driver
from gpuplan.modules.common import GPUPLAN_SHAPE_DIFFERENCES, OPERATOR_DIFFERENCES
from gpuplan.planner.diff.normalize import normalize
from gpuplan.sim.scenario import load_scenario
from tests.modules.conftest import RenderFactory

# each scenario's ClusterPolicy in gpuplan's terms (the chart's versions of the device plugin, GFD, toolkit)
COMPONENTS = {
    "gpu-operator": (
        "  driver: {owner: external}\n  toolkit: {owner: external}\n"
        "  devicePlugin: {version: v0.20.0}\n  gfd: {version: v0.20.0}\n"
    ),
    "gpu-operator-bare": (
        "  toolkit: {version: v1.20.0}\n  devicePlugin: {version: v0.20.0}\n  gfd: {version: v0.20.0}\n"
    ),
}
# the chart's daemonsets.labels, in the operator's shape (what init --from-clusterpolicy writes)
OPERATOR_SHAPE = (
    "  daemonsets:\n    podTemplate: gpu-operator\n"
    "    labels: {helm.sh/chart: gpu-operator-v26.7.0, app.kubernetes.io/managed-by: gpu-operator}\n"
)
SHAPES = {"gpu-operator": (OPERATOR_SHAPE, OPERATOR_DIFFERENCES), "gpuplan": ("", GPUPLAN_SHAPE_DIFFERENCES)}
LAB_OPERANDS = (
    "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
)
OPERANDS = {
    "gpu-operator": LAB_OPERANDS,
    "gpu-operator-bare": ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", *LAB_OPERANDS),
}
CASES = [
    (shape, scenario, name) for shape in SHAPES for scenario, names in OPERANDS.items() for name in names
]
Differences = Mapping[tuple[str, ...], str]


def _operator_objects(scenario: str) -> list[dict[str, Any]]:
    return [dict(obj) for obj in load_scenario(scenario).objects]


def _spec(shape: str, scenario: str) -> str:
    return SHAPES[shape][0] + COMPONENTS[scenario]


def _both(
    render: RenderFactory, scenario: str, shape: str = "gpu-operator"
) -> tuple[dict[str, Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
    """(gpuplan's DaemonSets for the equivalent spec in ``shape``, the scenario's), by name."""
    gpuplan = _daemonsets([o.manifest for o in render(_spec(shape, scenario)).objects])
    return gpuplan, _daemonsets(_operator_objects(scenario))


def _daemonsets(objects: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "DaemonSet"}


def _without_deliberate(daemonset: Mapping[str, Any], deliberate: Differences) -> dict[str, Any]:
    """The selector, update strategy and pod template, less the deliberate differences and API defaults."""
    obj = normalize(daemonset)
    for path in deliberate:
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


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("scenario", sorted(OPERANDS))
def test_the_equivalent_spec_renders_the_operators_daemonsets(
    render: RenderFactory, scenario: str, shape: str
) -> None:
    gpuplan, operator = _both(render, scenario, shape)
    assert sorted(gpuplan) == sorted(operator) == sorted(OPERANDS[scenario])
    for name in OPERANDS[scenario]:
        assert gpuplan[name]["metadata"]["namespace"] == operator[name]["metadata"]["namespace"]
        # the selector as it is, not only without defaults: it can never change in place
        assert gpuplan[name]["spec"]["selector"] == operator[name]["spec"]["selector"], name


@pytest.mark.parametrize(("shape", "scenario", "name"), CASES)
def test_pod_templates_match_the_operators_except_the_deliberate_differences(
    render: RenderFactory, shape: str, scenario: str, name: str
) -> None:
    gpuplan, operator = _both(render, scenario, shape)
    deliberate = SHAPES[shape][1]
    assert (
        _differences(
            _without_deliberate(operator[name], deliberate), _without_deliberate(gpuplan[name], deliberate)
        )
        == []
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_deliberate_differences_are_the_only_ones(render: RenderFactory, shape: str) -> None:
    """Each recorded path does differ on some operand (a stale entry would hide a future difference)."""
    gpuplan, operator = _both(render, "gpu-operator-bare", shape)
    raw = [d for name in gpuplan for d in _differences(operator[name]["spec"], gpuplan[name]["spec"], "spec")]
    at = [d.split(" ")[0].rstrip(":") for d in raw]
    for path in SHAPES[shape][1]:
        if path[0] == "env":
            assert any(_env(operator[n], path[1]) != _env(gpuplan[n], path[1]) for n in gpuplan), path
            continue
        dotted = ".".join(path)
        assert any(p.startswith(dotted) or dotted.startswith(p) for p in at), f"{dotted} no longer differs"


def test_the_labs_operands_are_the_operators_to_the_field_in_its_shape(render: RenderFactory) -> None:
    """The lab's operands are the operator's to the field: adopting them restarts no pod."""
    gpuplan, operator = _both(render, "gpu-operator")
    for name in OPERANDS["gpu-operator"]:
        assert (
            _differences(_without_deliberate(operator[name], {}), _without_deliberate(gpuplan[name], {}))
            == []
        )


def _env(daemonset: Mapping[str, Any], name: str) -> list[str | None]:
    """The values of the variable ``name`` in the DaemonSet's containers, in order."""
    return [e.get("value") for c in _containers(daemonset) for e in c.get("env") or () if e["name"] == name]


@pytest.mark.parametrize("scenario", sorted(OPERANDS))
def test_the_operand_scripts_are_the_operators(render: RenderFactory, scenario: str) -> None:
    rendered = render(_spec("gpu-operator", scenario))
    ours = {
        o.manifest["metadata"]["name"]: o.manifest
        for o in rendered.objects
        if o.manifest["kind"] == "ConfigMap"
    }
    theirs = {o["metadata"]["name"]: o for o in _operator_objects(scenario) if o["kind"] == "ConfigMap"}
    assert theirs.keys() <= ours.keys()
    for name, config_map in theirs.items():
        assert ours[name]["data"] == config_map["data"], name


# the operator's objects gpuplan does not render yet (docs/reference/operator-fidelity.md, "left")
NOT_RENDERED = {("RuntimeClass", "nvidia-cdi"), ("RuntimeClass", "nvidia-legacy")}
GPUPLAN_ONLY = {
    ("CustomResourceDefinition", "gpustacks.gpuplan.io")
}  # the stack's own status object (design §7.3)


@pytest.mark.parametrize("scenario", sorted(OPERANDS))
def test_every_object_the_operator_owns_has_a_namesake(render: RenderFactory, scenario: str) -> None:
    """Same kinds and names for the companions too (RBAC, ConfigMaps, the Service, the RuntimeClass)."""
    owned = [o for o in _operator_objects(scenario) if o["metadata"].get("ownerReferences")]
    theirs = {(o["kind"], o["metadata"]["name"]) for o in owned}
    rendered = render(_spec("gpu-operator", scenario)).objects
    ours = {(o.manifest["kind"], o.manifest["metadata"]["name"]) for o in rendered}
    assert theirs - ours == NOT_RENDERED
    assert ours - theirs == GPUPLAN_ONLY


def test_the_operators_driver_digest_is_kept_while_the_driver_is_configured_as_it_was(
    render: RenderFactory,
) -> None:
    """driver.operatorDigest (init --from-clusterpolicy reads it off the operator's DaemonSet): the adopted
    driver's template is the operator's to the field; a changed driver renders gpuplan's own digest, so the
    driver's fast path never skips a reinstall it needs."""
    operator = _daemonsets(_operator_objects("gpu-operator-bare"))["nvidia-driver-daemonset"]
    adopted = driver.adopted_digest(operator)
    assert adopted is not None and adopted.value == _env(operator, "DRIVER_CONFIG_DIGEST")[0]
    kept = f"  driver: {{operatorDigest: {{value: '{adopted.value}', config: '{adopted.config}'}}}}\n"
    gpuplan = _daemonsets(
        [o.manifest for o in render(_spec("gpu-operator", "gpu-operator-bare") + kept).objects]
    )
    ours = gpuplan["nvidia-driver-daemonset"]
    assert _differences(_without_deliberate(operator, {}), _without_deliberate(ours, {})) == []
    changed = kept.replace("{operatorDigest", "{version: 580.105.08, operatorDigest")
    rendered = render(_spec("gpu-operator", "gpu-operator-bare") + changed).daemonset(
        "driver", "nvidia-driver-daemonset"
    )
    assert adopted.value not in _env(rendered, "DRIVER_CONFIG_DIGEST")
