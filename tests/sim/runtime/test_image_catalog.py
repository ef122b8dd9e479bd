"""Images as a registry has them: the catalog of NVIDIA release tags, and a pod whose tag the registry lacks
failing its pull as a real kubelet shows it (ErrImagePull, then ImagePullBackOff)."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import pytest
import yaml
from lab_stack import STACK_HEADER
from sim_objects import daemonset

from gpuplan.modules import releases
from gpuplan.planner.spec import model as spec
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.kubelet import image_catalog
from gpuplan.sim.testing import SimFactory

MISSING = "nvcr.io/nvidia/k8s-device-plugin:v0.99.0"
NOT_FOUND = (
    f'rpc error: code = NotFound desc = failed to pull and unpack image "{MISSING}": '
    f'failed to resolve reference "{MISSING}": {MISSING}: not found'
)


@pytest.mark.parametrize(
    ("image", "exists"),
    [
        ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", True),
        ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", True),
        (MISSING, False),
        ("nvcr.io/nvidia/gpu-feature-discovery:v0.8.2-ubi8", True),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless", True),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.3.1-4.4.0-distroless", False),  # distroless from 4.4.0-4.5.0
        ("nvcr.io/nvidia/k8s/dcgm-exporter:9.9.9", False),
        ("nvcr.io/nvidia/driver:595.91.07-ubuntu24.04", True),
        ("nvcr.io/nvidia/driver:580.105.08-rhel9", True),
        ("nvcr.io/nvidia/driver:595.91.07-ubuntu25.10", False),
        ("nvcr.io/nvidia/driver:580-6.8.0-101-generic-ubuntu24.04", True),
        ("nvcr.io/nvidia/driver:580-6.8.0-101-generic-ubuntu20.04", False),
        ("nvcr.io/nvidia/k8s/container-toolkit:v1.17.8-ubuntu20.04", True),
        ("nvcr.io/nvidia/k8s/container-toolkit:v1.17.8", False),
        ("nvcr.io/nvidia/gpu-operator:v26.7.0", True),
        ("nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.2", True),
        ("nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0", True),
        ("nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0", True),
        ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04", True),
        ("nvcr.io/nvidia/k8s-device-plugin@sha256:" + "0" * 64, True),  # a digest: not checked
        ("busybox:1.36.1", True),
        ("gpuplan:0.1.0", True),
        ("nvcr.io/nvidia/pytorch:25.01-py3", True),  # not a simulated component
    ],
)
def test_the_catalog_knows_the_release_tags(image: str, exists: bool) -> None:
    assert image_catalog.exists(image) is exists


def plugin(image: str) -> dict[str, Any]:
    return daemonset(
        {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "nvidia-device-plugin-ctr", "image": image}],
        }
    )


def waiting(sim: Simulator) -> dict[str, Any] | None:
    rt = sim.store.registry.for_kind("v1", "Pod")
    assert rt is not None
    pods = sim.store.list(rt, namespace="kube-system", label_selector="app=plugin").items
    statuses = (pods[0].get("status") or {}).get("containerStatuses") if pods else None
    found: dict[str, Any] | None = ((statuses or [{}])[0].get("state") or {}).get("waiting")
    return copy.deepcopy(found)


def test_a_missing_tag_fails_with_err_image_pull_then_image_pull_back_off(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    rt = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    assert rt is not None
    seen: list[dict[str, Any]] = []

    def failed_once() -> bool:
        state = waiting(sim)
        if state is not None and state["reason"] != "ContainerCreating":
            seen.append(state)
        return bool(seen)

    sim.store.create(rt, plugin(MISSING), namespace="kube-system", manager="test")
    assert sim.wait_for(failed_once)
    assert seen[0] == {"reason": "ErrImagePull", "message": NOT_FOUND}
    assert sim.wait_idle(10)
    assert waiting(sim) == {
        "reason": "ImagePullBackOff",
        "message": f'Back-off pulling image "{MISSING}": ErrImagePull: {NOT_FOUND}',
    }
    events_rt = sim.store.registry.for_kind("v1", "Event")
    assert events_rt is not None
    messages = {e["message"] for e in sim.store.list(events_rt, namespace="kube-system").items}
    assert f'Failed to pull image "{MISSING}": {NOT_FOUND}' in messages
    assert "Error: ErrImagePull" in messages and "Error: ImagePullBackOff" in messages


def test_a_known_tag_and_an_explicit_fault_pull_as_before(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    rt = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    assert rt is not None
    sim.set_image_fault(MISSING, "CrashLoopBackOff")
    sim.store.create(rt, plugin(MISSING), namespace="kube-system", manager="test")
    assert sim.wait_for(lambda: (waiting(sim) or {}).get("reason") == "CrashLoopBackOff")
    sim.set_image_fault(MISSING, None)
    assert sim.wait_idle(10)
    assert (waiting(sim) or {}).get("reason") == "ImagePullBackOff"


AIR_GAPPED = {
    "nodes": [
        {"name": name, "gpu": {"model": "t4"}, "driver": "580.105.08", "toolkit": "1.18.1", **extra}
        for name, extra in (("gapped", {"unreachableRegistries": ["nvcr.io"]}), ("online", {}))
    ]
}
KNOWN = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
NO_SUCH_HOST = (
    f'rpc error: code = Unknown desc = failed to pull and unpack image "{KNOWN}": failed to resolve '
    f'reference "{KNOWN}": failed to do request: Head '
    '"https://nvcr.io/v2/nvidia/k8s-device-plugin/manifests/v0.20.1": '
    "dial tcp: lookup nvcr.io on 127.0.0.53:53: no such host"
)


def waiting_on(sim: Simulator) -> dict[str, Any]:
    rt = sim.store.registry.for_kind("v1", "Pod")
    assert rt is not None
    found = {}
    for pod in sim.store.list(rt, namespace="kube-system", label_selector="app=plugin").items:
        [status] = pod["status"]["containerStatuses"]
        found[pod["spec"]["nodeName"]] = copy.deepcopy(status["state"])
    return found


def test_a_registry_the_node_cannot_reach_fails_every_pull_there_with_the_network_error(
    sim_factory: SimFactory,
) -> None:
    """A tag the registry has: pulled on the node that reaches nvcr.io, ErrImagePull then ImagePullBackOff
    with the DNS error where it does not, and the kubelet's Failed event from that node."""
    sim = sim_factory(AIR_GAPPED, serve=False)
    rt = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    assert rt is not None
    sim.store.create(rt, plugin(KNOWN), namespace="kube-system", manager="test")
    assert sim.wait_idle(10)
    states = waiting_on(sim)
    assert "running" in states["online"]
    assert states["gapped"]["waiting"] == {
        "reason": "ImagePullBackOff",
        "message": f'Back-off pulling image "{KNOWN}": ErrImagePull: {NO_SUCH_HOST}',
    }
    events_rt = sim.store.registry.for_kind("v1", "Event")
    assert events_rt is not None
    failed = [
        event
        for event in sim.store.list(events_rt, namespace="kube-system").items
        if event["message"].startswith("Failed to pull image")
    ]
    assert [(e["source"]["host"], e["message"]) for e in failed] == [
        ("gapped", f'Failed to pull image "{KNOWN}": {NO_SUCH_HOST}')
    ]


# The engine's table of known releases (gpuplan.modules.releases) and the simulated registry's catalog
# are kept apart (the engine never imports the simulator); they must name the same releases.
ENGINE_REPOSITORIES = {
    "devicePlugin": "nvcr.io/nvidia/k8s-device-plugin",
    "gfd": "nvcr.io/nvidia/k8s-device-plugin",
    "dcgmExporter": "nvcr.io/nvidia/k8s/dcgm-exporter",
    "toolkit": "nvcr.io/nvidia/k8s/container-toolkit",
    "validator": "nvcr.io/nvidia/gpu-operator",
    "migManager": "nvcr.io/nvidia/cloud-native/k8s-mig-manager",
}


def catalog_tags(repository: str) -> set[str]:
    return set(image_catalog.catalog().tags[repository])


@pytest.mark.parametrize("component", sorted(ENGINE_REPOSITORIES))
def test_the_engine_knows_the_releases_the_registry_has(component: str) -> None:
    known = set(releases.KNOWN[component])  # type: ignore[index]
    tags = catalog_tags(ENGINE_REPOSITORIES[component])
    if component == "gfd":  # GFD is in the device plugin's image from v0.15.0 on
        first = releases.DEVICE_PLUGIN.index("v0.15.0")
        assert known == {t for t in tags if releases.DEVICE_PLUGIN.index(t) >= first}
    else:
        assert known == tags


def test_the_engine_knows_the_drivers_and_driver_managers_the_registry_has() -> None:
    data = yaml.safe_load((resources.files("gpuplan.sim.kubelet") / "image_catalog.yaml").read_text())
    driver = data["repositories"][image_catalog.DRIVER]
    assert set(releases.DRIVER) == {str(v) for v in driver["versions"]}
    assert set(releases.DRIVER_MANAGER) == catalog_tags("nvcr.io/nvidia/cloud-native/k8s-driver-manager")


def test_gpuplan_defaults_are_images_the_registry_has() -> None:
    stack = spec.parse_spec(STACK_HEADER + "  {}\n", filename="gpustack.yaml")
    images = {
        container["image"]
        for obj in stack.desired_objects(stack.context())
        if obj.manifest["kind"] == "DaemonSet"
        for container in obj.manifest["spec"]["template"]["spec"].get("initContainers", [])
        + obj.manifest["spec"]["template"]["spec"]["containers"]
    }
    assert len(images) >= 6
    assert [image for image in sorted(images) if not image_catalog.exists(image)] == []
