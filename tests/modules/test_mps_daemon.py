"""The MPS control daemon DaemonSet against the GPU Operator's state-mps-control-daemon (fleet facts §5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gpuplan.modules.device_plugin import DevicePlugin
from tests.modules.conftest import RenderFactory
from tests.modules.test_daemonsets import (
    NFD_SELECTOR,
    assert_common,
    container,
    env_of,
    host_paths,
    init_names,
    pod,
)

DS = "nvidia-device-plugin-mps-control-daemon"
MPS = "  mig: {strategy: none}\n  devicePlugin: {config: {mps: {replicas: 4}}}\n"


def test_mps_renders_the_control_daemon_as_the_operator_does(render: RenderFactory) -> None:
    rendered = render(MPS)
    ds = rendered.daemonset("devicePlugin", DS)
    assert_common({**ds, "spec": {**ds["spec"], "template": _without_mps_selector(ds)}}, DS, "device-plugin")
    spec = pod(ds)
    assert spec["nodeSelector"] == {**NFD_SELECTOR, "nvidia.com/mps.capable": "true"}
    assert spec["serviceAccountName"] == "nvidia-device-plugin"
    assert spec["hostPID"] is True and "shareProcessNamespace" not in spec
    assert spec["runtimeClassName"] == "nvidia"
    assert init_names(ds) == ["toolkit-validation", "mps-control-daemon-mounts", "config-manager-init"]
    assert [c["name"] for c in spec["containers"]] == ["mps-control-daemon-ctr", "config-manager"]
    mounts = container(ds, "mps-control-daemon-mounts", init=True)
    assert mounts["command"] == ["mps-control-daemon", "mount-shm"]
    assert mounts["volumeMounts"] == [
        {"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}
    ]
    daemon = container(ds, "mps-control-daemon-ctr")
    assert daemon["command"] == ["mps-control-daemon"]
    assert env_of(daemon) == {
        "NODE_NAME": "<fieldRef>",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "CONFIG_FILE": "/config/config.yaml",
    }
    assert {m["mountPath"] for m in daemon["volumeMounts"]} == {"/dev/shm", "/mps", "/config"}
    sidecar = env_of(container(ds, "config-manager"))
    assert sidecar["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
    assert sidecar["DEFAULT_CONFIG"] == "default" and sidecar["FALLBACK_STRATEGIES"] == "empty"
    assert host_paths(ds) == {
        "run-nvidia": "/run/nvidia",  # toolkit-validation reads the marker through it, as the operator's
        "mps-root": "/run/nvidia/mps",
        "mps-shm": "/run/nvidia/mps/shm",
    }
    assert {"name": "available-configs", "configMap": {"name": "nvidia-device-plugin-config"}} in spec[
        "volumes"
    ]


def _without_mps_selector(ds: Mapping[str, Any]) -> dict[str, Any]:
    """The template with the stack's selector only, for the checks every DaemonSet passes."""
    template = ds["spec"]["template"]
    selector = {k: v for k, v in template["spec"]["nodeSelector"].items() if k != "nvidia.com/mps.capable"}
    return {**template, "spec": {**template["spec"], "nodeSelector": selector}}


def test_a_named_config_may_select_mps_so_the_daemon_reads_it_too(render: RenderFactory) -> None:
    ds = render("  devicePlugin: {config: {name: sharing, default: a100}}\n").daemonset("devicePlugin", DS)
    assert env_of(container(ds, "config-manager-init", init=True))["DEFAULT_CONFIG"] == "a100"
    assert {"name": "available-configs", "configMap": {"name": "sharing"}} in pod(ds)["volumes"]


@pytest.mark.parametrize(
    "body",
    ["", "  devicePlugin: {config: {timeSlicing: {replicas: 4}}}\n", "  devicePlugin: {owner: external}\n"],
)
def test_no_daemon_where_no_config_can_select_mps(render: RenderFactory, body: str) -> None:
    assert not any(DS in address for address in render(body).addresses())


def test_the_device_plugin_gate_waits_for_the_daemon_rollout_too(render: RenderFactory) -> None:
    rendered = render(MPS)
    config = rendered.spec.spec.device_plugin
    checks = DevicePlugin().health_checks(config, rendered.context)
    rollouts = [c.params["daemonset"] for c in checks if c.kind == "rollout"]
    assert rollouts == ["nvidia-device-plugin-daemonset", DS]
    allocatable = next(c for c in checks if c.kind == "allocatable")
    assert allocatable.params["perGpu"] == 4
