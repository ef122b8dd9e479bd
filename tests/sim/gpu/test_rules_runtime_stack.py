"""Toolkit, validator and the checks every pod passes (image faults, sandbox, init containers)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpuplan.sim.kubelet import rules
from gpuplan.sim.kubelet.images import Role, identify
from gpuplan.sim.kubelet.state import NVIDIA_HANDLERS, NodeGpuState

CTX = rules.PodContext()


def _apply(node: NodeGpuState, effect: rules.NodeEffect | None) -> None:
    """What the kubelet runtime does with an effect, for the facts the rules read."""
    if effect is None:
        return
    for handler, present in effect.runtime_handlers.items():
        (node.runtime_handlers.add if present else node.runtime_handlers.discard)(handler)
    for name, value in effect.resources.items():
        if value is None:
            node.resources.pop(name, None)
        else:
            node.resources[name] = value
    if effect.container_driver is not Ellipsis:
        node.container_driver = effect.container_driver
    for key, label in effect.labels.items():
        if label is None:
            node.labels.pop(key, None)
        else:
            node.labels[key] = label


# -- toolkit ---------------------------------------------------------------------------------------------


def test_toolkit_waits_in_driver_validation_until_a_driver_is_loaded(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb")
    pod = build.toolkit_pod()
    assert identify(pod) is Role.TOOLKIT
    waiting = rules.evaluate(pod, node, CTX)
    assert (waiting.phase, waiting.ready, waiting.init_done, waiting.crash_looping) == (
        "Pending",
        False,
        0,
        False,
    )
    assert waiting.effect is None
    node.container_driver = "595.91.07"
    ready = rules.evaluate(pod, node, CTX)
    assert (ready.phase, ready.ready, ready.init_done) == ("Running", True, 1)
    assert ready.effect is not None and dict(ready.effect.runtime_handlers) == dict.fromkeys(
        NVIDIA_HANDLERS, True
    )


def test_toolkit_removal_keeps_only_the_host_toolkits_handler(build: SimpleNamespace) -> None:
    bare = build.make_node("h100-80gb", driver="580.105.08")
    effect = rules.removal_effect(build.toolkit_pod(), bare, CTX)
    assert effect is not None and dict(effect.runtime_handlers) == dict.fromkeys(NVIDIA_HANDLERS, False)
    host = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    effect = rules.removal_effect(build.toolkit_pod(), host, CTX)
    assert effect is not None and "nvidia" not in effect.runtime_handlers
    assert effect.runtime_handlers["nvidia-cdi"] is False


def test_toolkit_waits_for_a_driver_the_gpu_supports(build: SimpleNamespace) -> None:
    node = build.make_node("v100", driver="595.91.07")  # a drifted host driver that no longer knows Volta
    assert rules.evaluate(build.toolkit_pod(), node, CTX).init_done == 0


# -- validator -------------------------------------------------------------------------------------------


def test_validator_progresses_through_its_four_checks(build: SimpleNamespace) -> None:
    """Init:0/4 without driver, 1/4 with it (toolkit check crash-loops), 3/4 once the runtime works, then
    waits for the device plugin's capacity and is Ready with it."""
    node = build.make_node("h100-80gb")
    pod = build.validator_pod(runtime_class=None)
    assert identify(pod) is Role.VALIDATOR
    outcome = rules.evaluate(pod, node, CTX)
    assert (outcome.init_done, outcome.crash_looping, outcome.waiting_reason) == (0, False, "PodInitializing")
    node.container_driver = "595.91.07"
    outcome = rules.evaluate(pod, node, CTX)
    assert (outcome.init_done, outcome.crash_looping, outcome.waiting_reason) == (1, True, "CrashLoopBackOff")
    pod["spec"]["runtimeClassName"] = "nvidia"
    _apply(node, rules.evaluate(build.toolkit_pod(), node, CTX).effect)
    outcome = rules.evaluate(pod, node, CTX)
    assert (outcome.init_done, outcome.crash_looping, outcome.ready) == (3, False, False)
    node.resources["nvidia.com/gpu"] = "8"
    outcome = rules.evaluate(pod, node, CTX)
    assert (outcome.phase, outcome.ready, outcome.init_done) == ("Running", True, 4)
    assert outcome.message == "all validations are successful"


def test_validator_needs_the_nvidia_handler_for_its_sandbox(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08")
    outcome = rules.evaluate(build.validator_pod(), node, CTX)
    assert (outcome.phase, outcome.waiting_reason, outcome.init_done) == ("Pending", "ContainerCreating", 0)
    assert 'no runtime for "nvidia" is configured' in (outcome.message or "")


def test_validator_plugin_check_ignores_zero_capacity(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    node.resources["nvidia.com/gpu"] = "0"  # what a removed device plugin leaves behind
    outcome = rules.evaluate(build.validator_pod(), node, CTX)
    assert (outcome.init_done, outcome.ready) == (3, False)


# -- checks every pod goes through --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "phase", "crash"),
    [
        ("CrashLoopBackOff", "Running", True),
        ("RunContainerError", "Running", True),
        ("ImagePullBackOff", "Pending", False),
        ("ErrImagePull", "Pending", False),
    ],
)
def test_image_faults_apply_to_any_image(
    build: SimpleNamespace, failure: str, phase: str, crash: bool
) -> None:
    image = "docker.io/library/busybox:1.36"
    pod = build.pod([{"name": "app", "image": image}], runtime_class=None)
    ctx = rules.PodContext(image_faults={image: failure})
    outcome = rules.evaluate(pod, build.make_node(None), ctx)
    assert (outcome.phase, outcome.waiting_reason, outcome.crash_looping, outcome.ready) == (
        phase,
        failure,
        crash,
        False,
    )
    if failure == "ImagePullBackOff":
        assert outcome.message == f'Back-off pulling image "{image}"'
    if failure == "CrashLoopBackOff":
        assert (
            outcome.message == "back-off 10s restarting failed container=app pod=pod-x_gpu-operator(0000-uid)"
        )


def test_image_fault_on_an_init_container_stops_there(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    pod = build.validator_pod()
    ctx = rules.PodContext(image_faults={"nvcr.io/nvidia/gpu-operator:v26.7.0": "ImagePullBackOff"})
    outcome = rules.evaluate(pod, node, ctx)
    assert (outcome.phase, outcome.init_done, outcome.waiting_reason) == ("Pending", 0, "ImagePullBackOff")


def test_other_images_just_run(build: SimpleNamespace) -> None:
    pod = build.pod([{"name": "app", "image": "nginx:1.27"}], runtime_class=None)
    assert identify(pod) is Role.OTHER
    outcome = rules.evaluate(pod, build.make_node(None), CTX)
    assert (outcome.phase, outcome.ready, outcome.effect) == ("Running", True, None)
    assert rules.removal_effect(pod, build.make_node(None), CTX) is None


def test_missing_config_map_volume_keeps_the_pod_creating(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    outcome = rules.evaluate(build.plugin_pod(config_map="time-slicing-config"), node, CTX)
    assert (outcome.phase, outcome.waiting_reason) == ("Pending", "ContainerCreating")
    assert outcome.message == (
        'MountVolume.SetUp failed for volume "available-configs" : configmap "time-slicing-config" not found'
    )


@pytest.mark.parametrize(
    ("image", "command", "role"),
    [
        ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", ["gpu-feature-discovery"], Role.GFD),
        ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", None, Role.DEVICE_PLUGIN),
        (
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
            ["/bin/bash", "-c", "/bin/entrypoint.sh"],
            Role.DEVICE_PLUGIN,
        ),
        ("nvcr.io/nvidia/gpu-feature-discovery:v0.8.2", None, Role.GFD),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless", None, Role.DCGM_EXPORTER),
        ("nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04", None, Role.DCGM),
        ("nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0", None, Role.MIG_MANAGER),
        ("nvcr.io/nvidia/gpu-operator:v26.7.0", ["gpu-operator"], Role.OTHER),
        ("registry.local:5000/mirror/nvidia/driver@sha256:abcd", None, Role.DRIVER),
    ],
)
def test_identify_by_image_and_command(
    build: SimpleNamespace, image: str, command: list[str] | None, role: Role
) -> None:
    container: dict[str, Any] = {"name": "main", "image": image}
    if command:
        container["command"] = command
    assert identify(build.pod([container])) is role


def test_config_manager_sidecar_never_decides_the_role(build: SimpleNamespace) -> None:
    pod = build.gfd_pod(config_map="cfg")
    pod["spec"]["containers"].reverse()  # sidecar first
    assert identify(pod) is Role.GFD
