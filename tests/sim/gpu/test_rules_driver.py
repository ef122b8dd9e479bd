"""The driver container on the right node installs its driver; on the wrong ones it fails as the real one
does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuplan.sim.kubelet import rules
from gpuplan.sim.kubelet.images import Role, identify

CTX = rules.PodContext()


def test_driver_pod_is_identified(build: SimpleNamespace) -> None:
    assert identify(build.driver_pod()) is Role.DRIVER


def test_installs_on_a_node_without_host_driver(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", os="ubuntu24.04")
    outcome = rules.evaluate(build.driver_pod("nvcr.io/nvidia/driver:595.91.07-ubuntu24.04"), node, CTX)
    assert (outcome.phase, outcome.ready, outcome.init_done, outcome.crash_looping) == (
        "Running",
        True,
        1,
        False,
    )
    assert outcome.effect is not None and outcome.effect.container_driver == "595.91.07"


def test_effect_makes_the_node_report_the_container_driver_and_removal_takes_it(
    build: SimpleNamespace,
) -> None:
    node = build.make_node("a100-80gb")
    pod = build.driver_pod("nvcr.io/nvidia/driver:580.105.08-ubuntu24.04")
    outcome = rules.evaluate(pod, node, CTX)
    assert outcome.effect is not None
    node.container_driver = outcome.effect.container_driver  # what the runtime does with the effect
    assert node.driver_version == "580.105.08"
    assert rules.evaluate(pod, node, CTX).ready  # evaluating again keeps it Ready
    removal = rules.removal_effect(pod, node, CTX)
    assert removal is not None and removal.container_driver is None


def test_pre_installed_host_driver_labels_the_node_and_crash_loops_in_init(build: SimpleNamespace) -> None:
    node = build.make_node("rtx-3060", count=1, driver="580.105.08", name="lab-node")
    outcome = rules.evaluate(build.driver_pod(), node, CTX)
    assert (outcome.phase, outcome.ready, outcome.init_done) == ("Pending", False, 0)
    assert (outcome.waiting_reason, outcome.crash_looping) == ("CrashLoopBackOff", True)
    assert outcome.effect is not None
    assert outcome.effect.labels == {"nvidia.com/gpu.deploy.driver": "pre-installed"}
    assert outcome.effect.manager == "driver-manager"
    assert "pre-installed" in (outcome.message or "")
    assert rules.removal_effect(build.driver_pod(), node, CTX) is None  # the host driver stays


def test_without_driver_manager_the_host_driver_is_in_use(build: SimpleNamespace) -> None:
    node = build.make_node("a100-80gb", driver="580.105.08")
    outcome = rules.evaluate(build.driver_pod(manager=False), node, CTX)
    assert (
        outcome.crash_looping and outcome.waiting_reason == "CrashLoopBackOff" and outcome.phase == "Running"
    )
    assert outcome.message == "Could not unload NVIDIA driver kernel modules, driver is in use"


def test_another_loaded_container_driver_blocks_the_driver_manager(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb")
    node.container_driver = "580.105.08"
    outcome = rules.evaluate(build.driver_pod("nvcr.io/nvidia/driver:595.91.07-ubuntu24.04"), node, CTX)
    assert (outcome.init_done, outcome.waiting_reason) == (0, "CrashLoopBackOff")
    assert "driver is in use" in (outcome.message or "")


def test_tag_for_another_published_os_pulls_and_cannot_find_kernel_headers(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", os="ubuntu24.04")
    outcome = rules.evaluate(build.driver_pod("nvcr.io/nvidia/driver:580.105.08-ubuntu22.04"), node, CTX)
    assert outcome.crash_looping and not outcome.ready and outcome.init_done == 1
    assert "Could not resolve Linux kernel version" in (outcome.message or "")
    assert outcome.effect is None


def test_tag_that_does_not_exist_is_an_image_pull_error_then_back_off(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", os="ubuntu24.04")
    image = "nvcr.io/nvidia/driver:580.105.08-ubuntu25.10"
    pod = build.driver_pod(image)
    first = rules.evaluate(pod, node, CTX)
    assert (first.phase, first.waiting_reason, first.crash_looping) == ("Pending", "ErrImagePull", False)
    assert image in (first.message or "")
    pod["status"] = {
        "containerStatuses": [{"name": "nvidia-driver-ctr", "state": {"waiting": {"reason": "ErrImagePull"}}}]
    }
    second = rules.evaluate(pod, node, CTX)
    assert second.waiting_reason == "ImagePullBackOff"
    assert second.message == f'Back-off pulling image "{image}"'


def test_rhel_tags_use_the_major_version_only(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", os="rhel9.4", kernel="5.14.0-427.13.1.el9_4.x86_64")
    assert rules.evaluate(build.driver_pod("nvcr.io/nvidia/driver:595.91.07-rhel9"), node, CTX).ready
    assert not rules.evaluate(build.driver_pod("nvcr.io/nvidia/driver:595.91.07-rhel8"), node, CTX).ready


@pytest.mark.parametrize(
    ("model", "image", "ready"),
    [
        ("v100", "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04", False),  # facts §10.1: R580 is Volta's last
        ("v100", "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04", True),
        ("b200", "nvcr.io/nvidia/driver:550.163.01-ubuntu24.04", False),  # Blackwell needs >= 570
        ("b200", "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04", True),
        ("t4", "nvcr.io/nvidia/driver:535.274.02-ubuntu24.04", True),
    ],
)
def test_driver_branch_against_gpu_architecture(
    build: SimpleNamespace, model: str, image: str, ready: bool
) -> None:
    outcome = rules.evaluate(build.driver_pod(image), build.make_node(model), CTX)
    assert outcome.ready == ready
    if not ready:
        assert outcome.crash_looping and outcome.effect is None
        assert "is not supported by the NVIDIA" in (outcome.message or "")
        assert "could not insert 'nvidia'" in (outcome.message or "")


def test_kernel_module_type_against_architecture(build: SimpleNamespace) -> None:
    blackwell = rules.evaluate(
        build.driver_pod(KERNEL_MODULE_TYPE="proprietary"), build.make_node("b200"), CTX
    )
    assert not blackwell.ready and "requires use of the NVIDIA open kernel modules" in (
        blackwell.message or ""
    )
    volta = rules.evaluate(build.driver_pod(KERNEL_MODULE_TYPE="open"), build.make_node("v100"), CTX)
    assert not volta.ready and "GPU System Processor (GSP)" in (volta.message or "")
    assert rules.evaluate(build.driver_pod(KERNEL_MODULE_TYPE="auto"), build.make_node("b200"), CTX).ready


def test_precompiled_driver_must_match_the_kernel(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", kernel="6.8.0-101-generic")
    good = rules.evaluate(
        build.driver_pod("nvcr.io/nvidia/driver:580-6.8.0-101-generic-ubuntu24.04"), node, CTX
    )
    assert good.ready and good.effect is not None and good.effect.container_driver == "580.105.08"
    bad = rules.evaluate(
        build.driver_pod("nvcr.io/nvidia/driver:580-6.8.0-100-generic-ubuntu24.04"), node, CTX
    )
    assert not bad.ready and "Module nvidia not found in directory /lib/modules/6.8.0-101-generic" in (
        bad.message or ""
    )
