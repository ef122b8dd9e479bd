"""The rules bring up the stack gpuplan itself renders, in the order the real init containers enforce.

A tiny fixed-point kubelet below evaluates every pod on one node and applies the effects (as the runtime
does) until nothing changes; the pods are the DaemonSet templates of ``gpuplan.modules``.
"""

from __future__ import annotations

from typing import Any

from gpuplan.modules.base import StackContext
from gpuplan.modules.catalog import MODULES, render_all
from gpuplan.sim.kubelet import images, rules
from gpuplan.sim.kubelet.state import NodeGpuState
from gpuplan.sim.scenario import expand_nodes, load_scenario, parse_scenario

Obj = dict[str, Any]
NOW = 1_764_400_000.0


CONFIG_MAPS: dict[tuple[str, str], Obj] = {}
"""The ConfigMaps the stack renders (the operator's entrypoint scripts its pods mount), by namespace, name."""


def _pods(stack: StackContext, **owners: str) -> dict[str, Obj]:
    """One pod per rendered DaemonSet, named after it; the rendered ConfigMaps kept for their volumes."""
    configs = {
        name: module.config_model(**({"owner": owners[name]} if name in owners else {}))
        for name, module in MODULES.items()
    }
    pods = {}
    for desired in render_all(configs, stack):
        manifest = desired.manifest
        if manifest["kind"] == "ConfigMap":
            CONFIG_MAPS[(manifest["metadata"].get("namespace", ""), manifest["metadata"]["name"])] = dict(
                manifest
            )
        if manifest["kind"] == "DaemonSet":
            pods[manifest["metadata"]["name"]] = {
                "metadata": {
                    "name": f"{manifest['metadata']['name']}-x",
                    "namespace": stack.namespace,
                    "labels": dict(manifest["spec"]["template"]["metadata"].get("labels") or {}),
                },
                "spec": manifest["spec"]["template"]["spec"],
            }
    return pods


def _apply(node: NodeGpuState, effect: rules.NodeEffect | None) -> None:
    if effect is None:
        return
    for key, label in effect.labels.items():
        node.labels.pop(key, None) if label is None else node.labels.__setitem__(key, label)
    for name, value in effect.resources.items():
        node.resources.pop(name, None) if value is None else node.resources.__setitem__(name, value)
    for handler, present in effect.runtime_handlers.items():
        (node.runtime_handlers.add if present else node.runtime_handlers.discard)(handler)
    if effect.container_driver is not Ellipsis:
        node.container_driver = effect.container_driver


def _converge(pods: dict[str, Obj], node: NodeGpuState) -> dict[str, rules.PodOutcome]:
    ctx = rules.PodContext(now=NOW, config_lookup=lambda namespace, name: CONFIG_MAPS.get((namespace, name)))
    outcomes: dict[str, rules.PodOutcome] = {}
    for _ in range(20):
        before = (dict(node.labels), dict(node.resources), set(node.runtime_handlers), node.container_driver)
        for name, pod in sorted(pods.items()):
            outcomes[name] = rules.evaluate(pod, node, ctx)
            _apply(node, outcomes[name].effect)
        node.ready_roles = {images.identify(pods[n]) for n, o in outcomes.items() if o.ready}
        if before == (
            dict(node.labels),
            dict(node.resources),
            set(node.runtime_handlers),
            node.container_driver,
        ):
            return outcomes
    raise AssertionError("the node never settled")


def test_full_stack_on_a_bare_h100_node_comes_up() -> None:
    node = NodeGpuState(expand_nodes(load_scenario("upgrade4"))[0])
    outcomes = _converge(_pods(StackContext(stack_name="t")), node)
    assert {name: o.ready for name, o in outcomes.items()} == dict.fromkeys(outcomes, True)
    assert set(outcomes) >= {
        "nvidia-driver-daemonset",
        "nvidia-container-toolkit-daemonset",
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
        "nvidia-operator-validator",
    }
    assert node.container_driver == "595.91.07"
    assert node.resources["nvidia.com/gpu"] == "8"
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.labels["nvidia.com/cuda.driver-version.full"] == "595.91.07"
    assert {"nvidia", "nvidia-cdi", "nvidia-legacy"} <= node.runtime_handlers


def test_lab_with_host_driver_and_toolkit_owned_externally() -> None:
    node = NodeGpuState(expand_nodes(load_scenario("lab"))[0])
    pods = _pods(
        StackContext(stack_name="lab", owners={"driver": "external", "toolkit": "external"}),
        driver="external",
        toolkit="external",
    )
    assert "nvidia-driver-daemonset" not in pods and "nvidia-container-toolkit-daemonset" not in pods
    outcomes = _converge(pods, node)
    assert all(o.ready for o in outcomes.values()), {n: o.message for n, o in outcomes.items() if not o.ready}
    assert node.resources["nvidia.com/gpu"] == "1"
    assert (node.labels["nvidia.com/gpu.product"], node.labels["nvidia.com/gpu.family"]) == (
        "NVIDIA-GeForce-RTX-3060",
        "ampere",
    )
    assert node.labels["nvidia.com/cuda.driver-version.full"] == "580.105.08"


def test_default_driver_on_volta_stalls_the_stack_behind_it() -> None:
    scenario = parse_scenario("nodes:\n  - {name: v100-node, gpu: {model: v100, count: 8}}\n")
    node = NodeGpuState(expand_nodes(scenario)[0])
    outcomes = _converge(_pods(StackContext(stack_name="t")), node)
    driver = outcomes["nvidia-driver-daemonset"]
    assert driver.crash_looping and "is not supported by the NVIDIA 595.91.07 driver release" in (
        driver.message or ""
    )
    toolkit = outcomes["nvidia-container-toolkit-daemonset"]
    assert (toolkit.ready, toolkit.init_done) == (False, 0)
    assert not any(o.ready for o in outcomes.values())
    assert "nvidia.com/gpu" not in node.resources and node.container_driver is None
