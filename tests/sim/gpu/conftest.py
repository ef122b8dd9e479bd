"""Builders for the GPU-rule tests: simulated nodes and pods shaped like the GPU Operator's (facts §3).

The pod specs copy what the real DaemonSets run (images, commands, init containers, env, volumes), so the
rules are tested against the same shapes gpuplan and the operator deploy.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from gpuplan.sim.kubelet.state import NodeGpuState
from gpuplan.sim.scenario import NodeSpec, Scenario, expand_nodes

Obj = dict[str, Any]
VALIDATOR_IMAGE = "nvcr.io/nvidia/gpu-operator:v26.7.0"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"


def make_node(model: str | None = "h100-80gb", count: int = 8, **spec: Any) -> NodeGpuState:
    """A node's GPU state from NodeSpec keys (``driver``, ``toolkit``, ``os``, ``labels`` ...)."""
    gpu = {"model": model, "count": count} if model else None
    node_spec = NodeSpec.model_validate({"name": spec.pop("name", "gpu-node"), "gpu": gpu, **spec})
    return NodeGpuState(expand_nodes(Scenario(nodes=[node_spec]))[0])


def pod(
    containers: list[Obj],
    *,
    init: list[Obj] | None = None,
    runtime_class: str | None = "nvidia",
    volumes: list[Obj] | None = None,
    name: str = "pod-x",
    namespace: str = "gpu-operator",
    labels: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {"containers": containers, "nodeName": "gpu-node"}
    if init:
        spec["initContainers"] = init
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if volumes:
        spec["volumes"] = volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": "0000-uid", "labels": labels or {}},
        "spec": spec,
    }


def env(**values: str) -> list[Obj]:
    return [{"name": key, "value": value} for key, value in values.items()]


def toolkit_validation() -> Obj:
    return {
        "name": "toolkit-validation",
        "image": VALIDATOR_IMAGE,
        "command": ["sh", "-c"],
        "args": [
            "until [ -f /run/nvidia/validations/toolkit-ready ]; do echo waiting for nvidia container "
            "stack to be setup; sleep 5; done"
        ],
    }


def validation(component: str, wait: bool) -> Obj:
    return {
        "name": f"{component}-validation",
        "image": VALIDATOR_IMAGE,
        "command": ["sh", "-c"],
        "args": ["nvidia-validator"],
        "env": env(WITH_WAIT=str(wait).lower(), COMPONENT=component),
    }


def driver_pod(
    image: str = "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04", *, manager: bool = True, **main_env: str
) -> Obj:
    init = (
        [
            {
                "name": "k8s-driver-manager",
                "image": "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0",
                "command": ["driver-manager"],
                "args": ["uninstall_driver"],
            }
        ]
        if manager
        else []
    )
    main = {
        "name": "nvidia-driver-ctr",
        "image": image,
        "command": ["nvidia-driver"],
        "args": ["init"],
        "env": env(**main_env),
    }
    return pod([main], init=init, runtime_class=None, name="nvidia-driver-daemonset-abcde")


def toolkit_pod(version: str = "v1.20.0") -> Obj:
    main = {
        "name": "nvidia-container-toolkit-ctr",
        "image": f"nvcr.io/nvidia/k8s/container-toolkit:{version}",
        "command": ["nvidia-toolkit"],
    }
    return pod(
        [main],
        init=[validation("driver", True)],
        runtime_class=None,
        name="nvidia-container-toolkit-daemonset-abcde",
    )


def plugin_pod(
    *,
    config_map: str | None = None,
    default_key: str = "",
    mig: str | None = None,
    init: bool = True,
    runtime_class: str | None = "nvidia",
    **main_env: str,
) -> Obj:
    """The operator's device plugin pod; with ``config_map`` its config-manager init and sidecar."""
    variables = {"FAIL_ON_INIT_ERROR": "true", "DEVICE_ID_STRATEGY": "uuid", **main_env}
    if mig:
        variables["MIG_STRATEGY"] = mig
    inits, sidecars, volumes = [toolkit_validation()] if init else [], [], []
    if config_map:
        variables["CONFIG_FILE"] = "/config/config.yaml"
        manager_env = env(
            ONESHOT="true",
            NODE_LABEL="nvidia.com/device-plugin.config",
            DEFAULT_CONFIG=default_key,
            CONFIG_FILE_SRCDIR="/available-configs",
            CONFIG_FILE_DST="/config/config.yaml",
            FALLBACK_STRATEGIES="empty",
        )
        mounts = [
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
        ]
        inits.append(
            {
                "name": "config-manager-init",
                "image": PLUGIN_IMAGE,
                "command": ["config-manager"],
                "env": manager_env,
                "volumeMounts": mounts,
            }
        )
        sidecars.append(
            {
                "name": "config-manager",
                "image": PLUGIN_IMAGE,
                "command": ["config-manager"],
                "env": manager_env,
                "volumeMounts": mounts,
            }
        )
        volumes = [
            {"name": "available-configs", "configMap": {"name": config_map}},
            {"name": "config", "emptyDir": {}},
        ]
    main = {
        "name": "nvidia-device-plugin",
        "image": PLUGIN_IMAGE,
        "command": ["nvidia-device-plugin"],
        "env": env(**variables),
    }
    return pod(
        [main, *sidecars],
        init=inits,
        runtime_class=runtime_class,
        volumes=volumes,
        name="nvidia-device-plugin-daemonset-abcde",
    )


def gfd_pod(
    *, config_map: str | None = None, default_key: str = "", mig: str = "none", **main_env: str
) -> Obj:
    plugin = plugin_pod(config_map=config_map, default_key=default_key)
    variables = {
        "GFD_SLEEP_INTERVAL": "60s",
        "GFD_FAIL_ON_INIT_ERROR": "true",
        "MIG_STRATEGY": mig,
        **main_env,
    }
    if config_map:
        variables["CONFIG_FILE"] = "/config/config.yaml"
    main = {
        "name": "gpu-feature-discovery",
        "image": PLUGIN_IMAGE,
        "command": ["gpu-feature-discovery"],
        "env": env(**variables),
    }
    sidecars = [c for c in plugin["spec"]["containers"] if c["name"] == "config-manager"]
    gfd = pod(
        [main, *sidecars],
        init=plugin["spec"].get("initContainers"),
        volumes=plugin["spec"].get("volumes"),
        name="gpu-feature-discovery-abcde",
    )
    return gfd


def exporter_pod(
    tag: str = "4.6.0-4.8.3-distroless",
    *,
    collectors: str | None = None,
    config_map: str | None = None,
    node_name_env: bool = True,
) -> Obj:
    variables: list[Obj] = env(DCGM_EXPORTER_LISTEN=":9400", DCGM_EXPORTER_KUBERNETES="true")
    if node_name_env:
        variables.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    main: Obj = {
        "name": "nvidia-dcgm-exporter",
        "image": f"nvcr.io/nvidia/k8s/dcgm-exporter:{tag}",
        "env": variables,
        "ports": [{"name": "metrics", "containerPort": 9400}],
    }
    volumes = None
    if collectors:
        variables += env(DCGM_EXPORTER_COLLECTORS=collectors)
    if config_map:
        main["volumeMounts"] = [
            {
                "name": "metrics-config",
                "mountPath": "/etc/dcgm-exporter/dcgm-metrics.csv",
                "subPath": "dcgm-metrics.csv",
            }
        ]
        volumes = [
            {
                "name": "metrics-config",
                "configMap": {
                    "name": config_map,
                    "items": [{"key": "dcgm-metrics.csv", "path": "dcgm-metrics.csv"}],
                },
            }
        ]
    return pod([main], init=[toolkit_validation()], volumes=volumes, name="nvidia-dcgm-exporter-abcde")


def validator_pod(*, runtime_class: str | None = "nvidia") -> Obj:
    inits = [
        validation("driver", True),
        validation("toolkit", False),
        validation("cuda", False),
        validation("plugin", False),
    ]
    main = {
        "name": "nvidia-operator-validator",
        "image": VALIDATOR_IMAGE,
        "command": ["sh", "-c"],
        "args": ["echo all validations are successful; sleep infinity"],
    }
    return pod(
        [main],
        init=inits,
        runtime_class=runtime_class,
        name="nvidia-operator-validator-abcde",
        labels={"app": "nvidia-operator-validator"},
    )


def config_maps(**by_name: dict[str, str]) -> Callable[[str, str], Obj | None]:
    """A ``PodContext.config_lookup`` serving ConfigMaps ``name -> data`` in every namespace."""

    def lookup(namespace: str, name: str) -> Obj | None:
        data = by_name.get(name)
        return None if data is None else {"metadata": {"name": name, "namespace": namespace}, "data": data}

    return lookup


TIME_SLICING_4 = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


@pytest.fixture
def now() -> float:
    return 1_764_400_000.0


@pytest.fixture
def build() -> SimpleNamespace:
    """The builders above, for tests (pytest's importlib mode keeps conftest out of reach of imports)."""
    return SimpleNamespace(
        make_node=make_node,
        pod=pod,
        env=env,
        driver_pod=driver_pod,
        toolkit_pod=toolkit_pod,
        plugin_pod=plugin_pod,
        gfd_pod=gfd_pod,
        exporter_pod=exporter_pod,
        validator_pod=validator_pod,
        config_maps=config_maps,
        validation=validation,
        TIME_SLICING_4=TIME_SLICING_4,
    )
