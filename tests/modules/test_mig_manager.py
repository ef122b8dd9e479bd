"""The mig-manager component: off by default, the operator's objects when asked for, its node labels and
gates, and the spec rule that a MIG config needs one (fleet facts §4.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpuplan.errors import ConfigError
from gpuplan.modules import catalog, mig_parted
from gpuplan.planner.spec import model as spec

RenderFactory = Callable[..., Any]  # the render fixture of conftest.py
HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
OWNED = "  mig: {strategy: mixed, config: all-1g.10gb}\n  migManager: {owner: gpuplan}\n"


def test_off_by_default_renders_nothing(render: RenderFactory) -> None:
    assert not [a for a in render("").addresses() if a.startswith("migManager/")]


def test_owned_renders_the_operators_objects(render: RenderFactory) -> None:
    rendered = render(OWNED)
    assert sorted(a for a in rendered.addresses() if a.startswith("migManager/")) == [
        "migManager/ClusterRole/nvidia-mig-manager",
        "migManager/ClusterRoleBinding/nvidia-mig-manager",
        "migManager/ConfigMap/gpu-operator/default-gpu-clients",
        "migManager/ConfigMap/gpu-operator/default-mig-parted-config",
        "migManager/DaemonSet/gpu-operator/nvidia-mig-manager",
        "migManager/Role/gpu-operator/nvidia-mig-manager",
        "migManager/RoleBinding/gpu-operator/nvidia-mig-manager",
        "migManager/ServiceAccount/gpu-operator/nvidia-mig-manager",
    ]
    ds = rendered.daemonset("migManager", "nvidia-mig-manager")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.deploy.mig-manager": "true",
    }
    container = pod["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DEFAULT_CONFIG_FILE"] == "/mig-parted-config/config-default.yaml"
    assert "CONFIG_FILE" not in env
    # the labels that place it are the spec's node labels (Spec.label_rules), not the DaemonSet's
    assert not any(key.startswith("gpuplan.io/node-") for key in ds["metadata"].get("annotations") or {})
    config = yaml.safe_load(
        rendered["migManager/ConfigMap/gpu-operator/default-mig-parted-config"]["data"]["config.yaml"]
    )
    assert config["version"] == "v1"
    assert config["mig-configs"]["all-1g.10gb"][0]["mig-devices"] == {"1g.10gb": 7}
    assert {"all-disabled", "all-enabled", "all-balanced", "all-7g.141gb", "all-1g.23gb"} <= set(
        config["mig-configs"]
    )


def test_a_custom_config_map_is_mounted_as_config_yaml(render: RenderFactory) -> None:
    rendered = render(OWNED.replace("{owner: gpuplan}", "{owner: gpuplan, config: {name: my-mig}}"))
    assert "migManager/ConfigMap/gpu-operator/default-mig-parted-config" not in rendered.addresses()
    pod = rendered.daemonset("migManager", "nvidia-mig-manager")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["CONFIG_FILE"] == "/mig-parted-config/config.yaml"
    assert {"name": "mig-parted-config", "configMap": {"name": "my-mig"}} in pod["volumes"]


def test_gates(render: RenderFactory) -> None:
    rendered = render(OWNED)
    checks = catalog.health_checks(rendered.spec.components(), rendered.context)["migManager"]
    assert [c.kind for c in checks] == ["rollout", "mig-config", "allocatable", "gfd-labels"]
    assert checks[1].params["config"] == "all-1g.10gb"
    # the device plugin and GFD mig-manager paused come back: their effects, not a settled pod's of its own
    assert [c.params.get("settled") for c in checks[2:]] == [False, False]


def test_a_mig_config_without_a_mig_manager_is_an_error() -> None:
    text = HEADER + "  mig: {strategy: mixed, config: all-1g.10gb}\n"
    with pytest.raises(ConfigError) as raised:
        spec.parse_spec(text, filename="gpustack.yaml")
    assert raised.value.where == "gpustack.yaml:5:34"
    assert "mig.config all-1g.10gb needs a mig-manager, but migManager.owner is none" in str(raised.value)
    assert "migManager: {owner: gpuplan}" in (raised.value.hint or "")
    assert spec.parse_spec(HEADER + "  mig: {config: all-disabled}\n", filename="gpustack.yaml")


def test_the_default_config_names_each_gpus_profiles() -> None:
    a100 = mig_parted.GPUS["NVIDIA-A100-SXM4-80GB"]
    assert mig_parted.profiles_asked("all-1g.10gb", a100) == ("1g.10gb",)
    assert mig_parted.profiles_asked("all-balanced", a100) == ("1g.10gb", "2g.20gb", "3g.40gb")
    assert mig_parted.profiles_asked("all-disabled", a100) == ()
    assert mig_parted.profiles_asked("no-such", a100) is None


def test_an_empty_section_means_gpuplan_runs_it_as_every_other_components(render: RenderFactory) -> None:
    """Design §8.3: a key present with ``{}`` means gpuplan owns the component; absent, the mig-manager
    stays off, so stacks that never named it keep their plans."""
    assert spec.parse_spec(HEADER + "  migManager: {}\n", filename="x").spec.mig_manager.owner == "gpuplan"
    assert spec.parse_spec(HEADER + "  gfd: {}\n", filename="x").spec.mig_manager.owner == "none"
    with_config = "  mig: {strategy: mixed, config: all-1g.10gb}\n  migManager: {}\n"
    assert "migManager/DaemonSet/gpu-operator/nvidia-mig-manager" in render(with_config).addresses()
    versioned = spec.parse_spec(HEADER + "  migManager: {version: v0.14.0}\n", filename="x")
    assert versioned.spec.mig_manager.owner == "gpuplan"


def test_a_generation_recorded_with_an_empty_section_keeps_its_mig_manager_off() -> None:
    """A generation recorded before ``{}`` meant owned had its mig-manager off: a rollback to it must not
    start one. Generations recorded now name the owner."""
    old = {
        "apiVersion": "gpuplan.io/v1alpha1",
        "kind": "GPUStack",
        "metadata": {"name": "lab"},
        "spec": {"migManager": {}},
    }
    assert spec.from_recorded(old).spec.mig_manager.owner == "none"
    now = spec.parse_spec(HEADER + "  migManager: {}\n", filename="x")
    assert now.recorded()["spec"]["migManager"] == {"owner": "gpuplan"}
    assert spec.from_recorded(now.recorded()).spec.mig_manager.owner == "gpuplan"
