"""The simulated GFD labels its node at start, when its inputs change and every GFD_SLEEP_INTERVAL, so a hand
edit of one of its labels stays until the next pass, as on a real node (not reverted at the next
evaluation)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.sim.cluster import Simulator

MANIFESTS = Path(__file__).parents[1] / "e2e" / "manifests"
MERGE = "application/merge-patch+json"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
SHARED = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
)
NODE = {
    "name": "n1",
    "gpu": {"model": "a100-80gb", "count": 2},
    "driver": "580.105.08",
    "toolkit": "1.18.1",
    "labels": {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"},
}


@pytest.fixture
def sims() -> Iterator[list[Simulator]]:
    started: list[Simulator] = []
    yield started
    for sim in started:
        sim.stop()
        assert not sim.errors, sim.errors


def gfd_daemonset(interval: str, *, config_map: str | None = None) -> dict[str, Any]:
    """The operator's GFD DaemonSet (tests/sim/e2e/manifests/20-gfd.yaml) with ``GFD_SLEEP_INTERVAL`` set;
    with ``config_map``, the config-manager init container that picks the ConfigMap key the node label
    names."""
    ds: dict[str, Any] = yaml.safe_load((MANIFESTS / "20-gfd.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    main = pod["containers"][0]
    main["env"] = [e for e in main["env"] if e["name"] != "GFD_SLEEP_INTERVAL"] + [
        {"name": "GFD_SLEEP_INTERVAL", "value": interval}
    ]
    if config_map is not None:
        main["env"].append({"name": "CONFIG_FILE", "value": "/config/config.yaml"})
        manager_env = [
            {"name": k, "value": v}
            for k, v in (
                ("ONESHOT", "true"),
                ("NODE_LABEL", "nvidia.com/device-plugin.config"),
                ("DEFAULT_CONFIG", "plain"),
                ("CONFIG_FILE_SRCDIR", "/available-configs"),
                ("CONFIG_FILE_DST", "/config/config.yaml"),
                ("FALLBACK_STRATEGIES", "empty"),
            )
        ]
        mounts = [
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
        ]
        pod["initContainers"].append(
            {
                "name": "config-manager-init",
                "image": PLUGIN_IMAGE,
                "command": ["config-manager"],
                "env": manager_env,
                "volumeMounts": mounts,
            }
        )
        pod["volumes"] += [
            {"name": "available-configs", "configMap": {"name": config_map}},
            {"name": "config", "emptyDir": {}},
        ]
    return ds


def start_with_gfd(sims: list[Simulator], ds: dict[str, Any], *extra: dict[str, Any]) -> Simulator:
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "nvidia"},
            "handler": "nvidia",
        },
        *extra,
        ds,
    ]
    sim = Simulator({"nodes": [NODE], "objects": objects, "timing": {"podReadySeconds": 0.01}}, serve=False)
    sims.append(sim.start())
    assert sim.wait_for(lambda: "nvidia.com/gpu.product" in labels(sim), 10), labels(sim)
    return sim


def labels(sim: Simulator) -> dict[str, str]:
    node = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, "n1")
    return dict(node["metadata"].get("labels") or {})


def label_node(sim: Simulator, patch: dict[str, str | None]) -> None:
    sim.store.patch(
        sim.store.registry.for_kind("v1", "Node"),
        None,
        "n1",
        {"metadata": {"labels": patch}},
        MERGE,
        manager="kubectl-label",
    )


def test_a_hand_edit_of_a_gfd_label_stays_until_the_next_pass(sims: list[Simulator]) -> None:
    sim = start_with_gfd(sims, gfd_daemonset("1h"))
    assert labels(sim)["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    label_node(sim, {"nvidia.com/gpu.product": "foo", "nvidia.com/gpu.family": None})
    assert sim.wait_idle(10)
    # another label change makes the kubelet evaluate GFD's pod again: not a labelling pass either
    label_node(sim, {"example.com/rack": "r1"})
    assert sim.wait_idle(10)
    after = labels(sim)
    assert after["nvidia.com/gpu.product"] == "foo"
    assert "nvidia.com/gpu.family" not in after
    assert after["example.com/rack"] == "r1"


def test_the_next_interval_pass_puts_the_labels_back(sims: list[Simulator]) -> None:
    sim = start_with_gfd(sims, gfd_daemonset("300ms"))
    label_node(sim, {"nvidia.com/gpu.product": "foo"})
    assert sim.wait_idle(10), "the interval timer is a background one: the cluster settles between passes"
    assert sim.wait_for(lambda: labels(sim)["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB", 10)
    owners = [
        e
        for e in sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, "n1")["metadata"][
            "managedFields"
        ]
        if "f:nvidia.com/gpu.product" in str(e.get("fieldsV1"))
    ]
    assert [e["manager"] for e in owners] == ["gpu-feature-discovery"]


def test_a_change_of_gfds_inputs_relabels_at_once(sims: list[Simulator]) -> None:
    """The node's config label selects another sharing config: GFD writes its new labels without waiting for
    the interval, and that write is a whole pass (the hand edit goes too)."""
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "plugin-configs", "namespace": "gpu-operator"},
        "data": {"plain": "version: v1\n", "shared": SHARED},
    }
    sim = start_with_gfd(sims, gfd_daemonset("1h", config_map="plugin-configs"), config)
    assert labels(sim)["nvidia.com/gpu.replicas"] == "1"
    label_node(sim, {"nvidia.com/gpu.family": "foo"})
    assert sim.wait_idle(10)
    assert labels(sim)["nvidia.com/gpu.family"] == "foo"
    label_node(sim, {"nvidia.com/device-plugin.config": "shared"})
    assert sim.wait_for(lambda: labels(sim).get("nvidia.com/gpu.replicas") == "4", 10), labels(sim)
    assert labels(sim)["nvidia.com/gpu.family"] == "ampere"
    assert labels(sim)["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"
    assert labels(sim)["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


def test_a_restarted_gfd_labels_on_its_first_pass(sims: list[Simulator]) -> None:
    sim = start_with_gfd(sims, gfd_daemonset("1h"))
    label_node(sim, {"nvidia.com/gpu.product": "foo"})
    assert sim.wait_idle(10)
    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    [pod] = sim.store.list(pods_rt, namespace="gpu-operator").items
    sim.store.delete(pods_rt, "gpu-operator", pod["metadata"]["name"])
    # the old pod's removal takes GFD's labels; the DaemonSet's new pod labels the node again at its start
    assert sim.wait_for(lambda: labels(sim).get("nvidia.com/gpu.product") == "NVIDIA-A100-SXM4-80GB", 10)
    [replacement] = sim.store.list(pods_rt, namespace="gpu-operator").items
    assert replacement["metadata"]["uid"] != pod["metadata"]["uid"]
