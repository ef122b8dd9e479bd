"""The containerised driver through the runtime: pre-installed detection takes the pod off a host-driver
node; on a bare node driver -> toolkit -> device plugin come up in order; an OnDelete driver upgrade only
happens when the old pod is deleted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator

MERGE = "application/merge-patch+json"
DEPLOY = {f"nvidia.com/gpu.deploy.{c}": "true" for c in ("driver", "container-toolkit", "device-plugin")}


def driver_ds(version: str) -> dict[str, Any]:
    """nvidia-driver-daemonset as the GPU Operator renders it (facts §3.1), trimmed to what matters here."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-driver-daemonset", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-driver-daemonset"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {
                    "labels": {
                        "app": "nvidia-driver-daemonset",
                        "app.kubernetes.io/component": "nvidia-driver",
                    }
                },
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.deploy.driver": "true"},
                    "hostPID": True,
                    "initContainers": [
                        {
                            "name": "k8s-driver-manager",
                            "image": "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0",
                            "command": ["driver-manager"],
                            "args": ["uninstall_driver"],
                        }
                    ],
                    "containers": [
                        {
                            "name": "nvidia-driver-ctr",
                            "image": f"nvcr.io/nvidia/driver:{version}-ubuntu24.04",
                            "command": ["nvidia-driver"],
                            "args": ["init"],
                        }
                    ],
                },
            },
        },
    }


def simple_ds(
    name: str,
    image: str,
    selector: str,
    init: list[dict[str, Any]] | None = None,
    runtime_class: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {selector: "true"},
        "containers": [{"name": name, "image": image}],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


VALIDATE_DRIVER = [
    {
        "name": "driver-validation",
        "image": "nvcr.io/nvidia/gpu-operator:v26.7.0",
        "command": ["sh", "-c"],
        "args": ["nvidia-validator"],
        "env": [{"name": "COMPONENT", "value": "driver"}, {"name": "WITH_WAIT", "value": "true"}],
    }
]
WAIT_TOOLKIT = [
    {
        "name": "toolkit-validation",
        "image": "nvcr.io/nvidia/gpu-operator:v26.7.0",
        "command": ["sh", "-c"],
        "args": ["until [ -f /run/nvidia/validations/toolkit-ready ]; do sleep 5; done"],
    }
]


@pytest.fixture
def sim_of() -> Iterator[Any]:
    sims: list[Simulator] = []

    def start(scenario: Any) -> Simulator:
        sim = Simulator(scenario, serve=False).start()
        sims.append(sim)
        return sim

    yield start
    for sim in sims:
        sim.stop()
        assert not sim.errors, sim.errors


def rt(sim: Simulator, api_version: str, kind: str) -> Any:
    return sim.store.registry.for_kind(api_version, kind)


def setup(sim: Simulator, node: str, *objs: dict[str, Any]) -> None:
    sim.store.patch(
        rt(sim, "v1", "Node"), None, node, {"metadata": {"labels": DEPLOY}}, MERGE, manager="test"
    )
    sim.store.create(rt(sim, "v1", "Namespace"), {"metadata": {"name": "gpu-operator"}}, manager="test")
    # the RuntimeClass the GPU Operator creates: pods naming it are refused by admission without it
    sim.store.create(
        rt(sim, "node.k8s.io/v1", "RuntimeClass"),
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        manager="test",
    )
    for obj in objs:
        sim.store.create(rt(sim, "apps/v1", "DaemonSet"), obj, namespace="gpu-operator", manager="test")


def pods(sim: Simulator, app: str) -> list[dict[str, Any]]:
    return sim.store.list(rt(sim, "v1", "Pod"), namespace="gpu-operator", label_selector=f"app={app}").items


def is_ready(sim: Simulator, app: str) -> bool:
    found = pods(sim, app)
    return len(found) == 1 and any(
        c["type"] == "Ready" and c["status"] == "True" for c in found[0]["status"].get("conditions") or []
    )


def test_pre_installed_driver_takes_the_driver_pod_off_the_node(sim_of: Any) -> None:
    sim = sim_of("lab")
    setup(sim, "lab-node", driver_ds("580.105.08"))
    assert sim.wait_idle(10)
    node = sim.store.get(rt(sim, "v1", "Node"), None, "lab-node")
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    owners = [
        e["manager"]
        for e in node["metadata"]["managedFields"]
        if "f:nvidia.com/gpu.deploy.driver" in str(e.get("fieldsV1"))
    ]
    assert owners == ["driver-manager"]
    assert pods(sim, "nvidia-driver-daemonset") == []
    status = sim.store.get(rt(sim, "apps/v1", "DaemonSet"), "gpu-operator", "nvidia-driver-daemonset")[
        "status"
    ]
    assert status["desiredNumberScheduled"] == 0


def test_bare_node_brings_up_driver_toolkit_plugin_and_upgrades_on_delete(sim_of: Any) -> None:
    sim = sim_of(
        {
            "nodes": [{"name": "bare", "gpu": {"model": "h100-80gb", "count": 8}}],
            "timing": {"podReadySeconds": 0.01},
        }
    )
    setup(
        sim,
        "bare",
        driver_ds("580.105.08"),
        simple_ds(
            "nvidia-container-toolkit-daemonset",
            "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",
            "nvidia.com/gpu.deploy.container-toolkit",
            VALIDATE_DRIVER,
        ),
        simple_ds(
            "nvidia-device-plugin-daemonset",
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
            "nvidia.com/gpu.deploy.device-plugin",
            WAIT_TOOLKIT,
            runtime_class="nvidia",
        ),
    )
    assert sim.wait_for(lambda: is_ready(sim, "nvidia-device-plugin-daemonset"), 10)
    assert is_ready(sim, "nvidia-driver-daemonset") and is_ready(sim, "nvidia-container-toolkit-daemonset")
    state = sim.runtime.states["bare"]
    assert state.container_driver == "580.105.08" and "nvidia" in state.runtime_handlers
    node = sim.store.get(rt(sim, "v1", "Node"), None, "bare")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"

    old = pods(sim, "nvidia-driver-daemonset")[0]["metadata"]["name"]
    sim.store.patch(
        rt(sim, "apps/v1", "DaemonSet"),
        "gpu-operator",
        "nvidia-driver-daemonset",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "nvidia-driver-ctr",
                                "image": "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04",
                                "command": ["nvidia-driver"],
                                "args": ["init"],
                            }
                        ]
                    }
                }
            }
        },
        MERGE,
        manager="test",
    )
    assert sim.wait_idle(10)
    assert pods(sim, "nvidia-driver-daemonset")[0]["metadata"]["name"] == old, "OnDelete: nothing replaced"
    assert state.container_driver == "580.105.08"
    sim.store.delete(rt(sim, "v1", "Pod"), "gpu-operator", old)
    assert sim.wait_for(
        lambda: state.container_driver == "595.91.07" and is_ready(sim, "nvidia-driver-daemonset"), 10
    )
    assert pods(sim, "nvidia-driver-daemonset")[0]["metadata"]["name"] != old
