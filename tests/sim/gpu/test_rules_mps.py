"""CUDA MPS on a node: the control daemon runs with its node's config, the plugin waits for it, GFD labels
the node MPS-capable (fleet facts §5)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpuplan.sim.kubelet import gfd, images, plugin_config, rules
from gpuplan.sim.kubelet.images import Role
from gpuplan.sim.kubelet.state import NodeGpuState

PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
MPS_4 = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"


def _node(build: SimpleNamespace, **spec: object) -> NodeGpuState:
    node: NodeGpuState = build.make_node("h100-80gb", 8, driver="580.105.08", toolkit="1.18.1", **spec)
    return node


def daemon_pod(build: SimpleNamespace) -> dict[str, Any]:
    """The MPS control daemon pod as gpuplan and the operator render it: the plugin pod's config-manager
    init and sidecar around ``mps-control-daemon``."""
    plugin = build.plugin_pod(config_map="cfg", default_key="default")
    mounts = {
        "name": "mps-control-daemon-mounts",
        "image": PLUGIN_IMAGE,
        "command": ["mps-control-daemon", "mount-shm"],
    }
    inits = plugin["spec"]["initContainers"]
    daemon = {
        "name": "mps-control-daemon-ctr",
        "image": PLUGIN_IMAGE,
        "command": ["mps-control-daemon"],
        "env": build.env(NVIDIA_VISIBLE_DEVICES="all", CONFIG_FILE="/config/config.yaml"),
    }
    sidecars = [c for c in plugin["spec"]["containers"] if c["name"] == "config-manager"]
    pod: dict[str, Any] = build.pod(
        [daemon, *sidecars],
        init=[inits[0], mounts, *inits[1:]],
        volumes=plugin["spec"]["volumes"],
        name="nvidia-device-plugin-mps-control-daemon-abcde",
    )
    return pod


def test_the_daemon_is_told_apart_from_the_plugin(build: SimpleNamespace) -> None:
    assert images.identify(daemon_pod(build)) is Role.MPS_CONTROL_DAEMON
    assert images.identify(build.plugin_pod(config_map="cfg")) is Role.DEVICE_PLUGIN


def test_the_daemon_starts_a_control_daemon_per_resource_with_an_mps_config(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"default": MPS_4}))
    outcome = rules.evaluate(daemon_pod(build), _node(build), ctx)
    assert (outcome.phase, outcome.ready, outcome.init_done) == ("Running", True, 3)
    assert "CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe" in (outcome.message or "")
    assert outcome.effect is None


def test_the_daemon_reads_the_key_the_node_label_selects(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(
        config_lookup=build.config_maps(cfg={"default": build.TIME_SLICING_4, "mps": MPS_4})
    )
    plain = rules.evaluate(daemon_pod(build), _node(build), ctx)
    assert plain.ready and plain.message == "No devices are configured for MPS sharing; Waiting indefinitely."
    node = _node(build, labels={"nvidia.com/device-plugin.config": "mps"})
    assert "/mps/nvidia.com/gpu/pipe" in (rules.evaluate(daemon_pod(build), node, ctx).message or "")


def test_a_bad_config_crash_loops_the_daemon(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"default": MPS_4.replace("4", "1")}))
    outcome = rules.evaluate(daemon_pod(build), _node(build), ctx)
    assert outcome.crash_looping and "number of replicas must be >= 2" in (outcome.message or "")


def test_the_plugin_waits_for_the_daemon_before_advertising_mps_replicas(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"default": MPS_4}))
    plugin = build.plugin_pod(config_map="cfg", default_key="default")
    node = _node(build)
    node.resources = {"nvidia.com/gpu": "8"}
    waiting = rules.evaluate(plugin, node, ctx)
    assert (waiting.phase, waiting.ready) == ("Running", False)
    assert "Waiting for MPS daemon to be ready" in (waiting.message or "")
    assert waiting.effect is not None and dict(waiting.effect.resources) == {"nvidia.com/gpu": "0"}
    node.ready_roles.add(Role.MPS_CONTROL_DAEMON)
    serving = rules.evaluate(plugin, node, ctx)
    assert serving.ready and serving.effect is not None
    assert dict(serving.effect.resources) == {"nvidia.com/gpu": "32"}


def test_time_slicing_does_not_wait_for_any_daemon(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"default": build.TIME_SLICING_4}))
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg", default_key="default"), _node(build), ctx)
    assert outcome.ready and outcome.effect is not None
    assert dict(outcome.effect.resources) == {"nvidia.com/gpu": "32"}


def test_gfd_labels_mps_capable_only_with_an_mps_config(build: SimpleNamespace) -> None:
    node = _node(build)
    shared = gfd.gfd_labels(node, plugin_config.PluginConfig(sharing_strategy="mps", replicas=4))
    assert shared["nvidia.com/mps.capable"] == "true"
    assert (shared["nvidia.com/gpu.replicas"], shared["nvidia.com/gpu.sharing-strategy"]) == ("4", "mps")
    assert shared["nvidia.com/gpu.product"].endswith("-SHARED")
    sliced = gfd.gfd_labels(node, plugin_config.PluginConfig(sharing_strategy="time-slicing", replicas=4))
    assert sliced["nvidia.com/mps.capable"] == "false"
