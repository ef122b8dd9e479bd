"""MIG through the real kubectl: labelling a node ``nvidia.com/mig.config`` drives the simulated mig-manager
(fleet facts §4.4), and the device plugin and GFD that come back show the MIG devices (§4.5, §4.6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, SimFactory

MANIFESTS = Path(__file__).parent / "manifests"
NODE = "a100"
MIG_CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  all-balanced:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 7
"""

pytestmark = pytest.mark.kubectl


def _mig_manager() -> list[dict[str, Any]]:
    """mig-manager as the operator runs it with its default config (fleet facts §4.2)."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": MIG_CONFIG},
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "nvidia-mig-manager", "namespace": "gpu-operator"},
    }
    container = {
        "name": "nvidia-mig-manager",
        "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0",
        "env": [{"name": "DEFAULT_CONFIG_FILE", "value": "/mig-parted-config/config-default.yaml"}],
        "volumeMounts": [{"name": "mig-parted-config", "mountPath": "/mig-parted-config"}],
    }
    pod = {
        "serviceAccountName": "nvidia-mig-manager",
        "runtimeClassName": "nvidia",
        "nodeSelector": {"nvidia.com/gpu.deploy.mig-manager": "true"},
        "containers": [container],
        "volumes": [
            {
                "name": "mig-parted-config",
                "configMap": {
                    "name": "default-mig-parted-config",
                    "items": [{"key": "config.yaml", "path": "config-default.yaml"}],
                },
            }
        ],
    }
    labels = {"app": "nvidia-mig-manager"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-mig-manager", "namespace": "gpu-operator", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    return [config_map, account, daemonset]


def _with_strategy(path: Path, strategy: str) -> list[dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for document in documents:
        if document["kind"] == "DaemonSet":
            for item in document["spec"]["template"]["spec"]["containers"][0]["env"]:
                if item["name"] == "MIG_STRATEGY":
                    item["value"] = strategy
    return documents


def _start(sim_factory: SimFactory, strategy: str) -> Simulator:
    objects = [
        *[d for d in yaml.safe_load_all((MANIFESTS / "00-namespace.yaml").read_text()) if d],
        *_with_strategy(MANIFESTS / "10-device-plugin.yaml", strategy),
        *_with_strategy(MANIFESTS / "20-gfd.yaml", strategy),
        *_mig_manager(),
    ]
    deploy = ("device-plugin", "gpu-feature-discovery", "mig-manager")
    node = {
        "name": NODE,
        "gpu": {"model": "a100-80gb", "count": 8},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
        "labels": {f"nvidia.com/gpu.deploy.{name}": "true" for name in deploy},
    }
    sim = sim_factory({"nodes": [node], "objects": objects, "timing": {"podReadySeconds": 0.01}})
    assert sim.wait_for(lambda: _allocatable(sim).get("nvidia.com/gpu") == "8", 30), _allocatable(sim)
    return sim


def _node(sim: Simulator) -> dict[str, Any]:
    found: dict[str, Any] = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, NODE)
    return found


def _labels(sim: Simulator) -> dict[str, str]:
    return dict(_node(sim)["metadata"].get("labels") or {})


def _allocatable(sim: Simulator) -> dict[str, str]:
    return dict((_node(sim).get("status") or {}).get("allocatable") or {})


def _settled(sim: Simulator, state: str, resource: str, value: str) -> bool:
    labels = _labels(sim)
    return labels.get("nvidia.com/mig.config.state") == state and _allocatable(sim).get(resource) == value


def _plugin_pods(sim: Simulator) -> set[str]:
    pods = sim.store.list(sim.store.registry.for_kind("v1", "Pod"), namespace="gpu-operator").items
    return {
        p["metadata"]["uid"]
        for p in pods
        if p["metadata"]["labels"]["app"] == "nvidia-device-plugin-daemonset"
    }


def _configure(sim: Simulator, kubectl: Kubectl, config: Path, name: str) -> None:
    kubectl("label", "node", NODE, f"nvidia.com/mig.config={name}", "--overwrite", kubeconfig=config)


def test_mixed_all_1g_10gb_then_all_disabled(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    sim = _start(sim_factory, "mixed")
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    before = _plugin_pods(sim)
    _configure(sim, kubectl, config, "all-1g.10gb")
    assert sim.wait_for(lambda: _settled(sim, "success", "nvidia.com/mig-1g.10gb", "56"), 30), _labels(sim)
    assert sim.wait_for(lambda: len(_plugin_pods(sim)) == 1, 30)
    assert _plugin_pods(sim) != before  # paused for the change: a new plugin pod advertises the MIG devices
    assert sim.wait_for(lambda: "nvidia.com/mig-1g.10gb.count" in _labels(sim), 30)
    labels = _labels(sim)
    assert _allocatable(sim)["nvidia.com/gpu"] == "0"
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-1g.10gb.")} == {
        "nvidia.com/mig-1g.10gb.count": "56",
        "nvidia.com/mig-1g.10gb.memory": "9856",
        "nvidia.com/mig-1g.10gb.multiprocessors": "14",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/mig-1g.10gb.replicas": "1",
        "nvidia.com/mig-1g.10gb.sharing-strategy": "none",
        "nvidia.com/mig-1g.10gb.slices.gi": "1",
        "nvidia.com/mig-1g.10gb.slices.ci": "1",
        "nvidia.com/mig-1g.10gb.engines.copy": "1",
        "nvidia.com/mig-1g.10gb.engines.decoder": "1",
        "nvidia.com/mig-1g.10gb.engines.encoder": "0",
        "nvidia.com/mig-1g.10gb.engines.jpeg": "1",
        "nvidia.com/mig-1g.10gb.engines.ofa": "0",
    }
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"  # restored after the pause

    _configure(sim, kubectl, config, "all-disabled")
    assert sim.wait_for(lambda: _settled(sim, "success", "nvidia.com/gpu", "8"), 30), _allocatable(sim)
    assert sim.wait_for(lambda: "nvidia.com/mig-1g.10gb.count" not in _labels(sim), 30), _labels(sim)
    assert _allocatable(sim)["nvidia.com/mig-1g.10gb"] == "0"  # the kubelet keeps the name at 0


def test_single_strategy_rewrites_nvidia_gpu(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    sim = _start(sim_factory, "single")
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    _configure(sim, kubectl, config, "all-1g.10gb")
    assert sim.wait_for(lambda: _settled(sim, "success", "nvidia.com/gpu", "56"), 30), _allocatable(sim)
    assert sim.wait_for(lambda: _labels(sim).get("nvidia.com/gpu.count") == "56", 30), _labels(sim)
    labels = _labels(sim)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert (labels["nvidia.com/gpu.slices.gi"], labels["nvidia.com/gpu.slices.ci"]) == ("1", "1")


def test_unknown_config_and_profile_fail(sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path) -> None:
    sim = _start(sim_factory, "mixed")
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    _configure(sim, kubectl, config, "all-1g.18gb")  # an H200 profile: refused on the A100
    assert sim.wait_for(lambda: _settled(sim, "failed", "nvidia.com/gpu", "8"), 30), _labels(sim)
    assert _labels(sim).get("nvidia.com/gpu.deploy.device-plugin") == "true"  # nothing was paused
    _configure(sim, kubectl, config, "all-balanced")
    assert sim.wait_for(lambda: _settled(sim, "success", "nvidia.com/mig-3g.40gb", "8"), 30), _labels(sim)
    assert _allocatable(sim)["nvidia.com/mig-1g.10gb"] == "16"
    _configure(sim, kubectl, config, "no-such-config")
    assert sim.wait_for(lambda: _labels(sim).get("nvidia.com/mig.config.state") == "failed", 30)
    assert _allocatable(sim)["nvidia.com/mig-2g.20gb"] == "8"  # the layout stays


def test_it_acts_on_label_changes_only(sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path) -> None:
    """A failed config stays failed while the label stays; the deploy labels are restored once, not kept."""
    sim = _start(sim_factory, "mixed")
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    _configure(sim, kubectl, config, "all-1g.10gb")
    assert sim.wait_for(lambda: _settled(sim, "success", "nvidia.com/mig-1g.10gb", "56"), 30), _labels(sim)
    kubectl(
        "label", "node", NODE, "nvidia.com/gpu.deploy.device-plugin=false", "--overwrite", kubeconfig=config
    )
    assert sim.wait_for(lambda: _allocatable(sim).get("nvidia.com/mig-1g.10gb") == "0", 30)
    assert _labels(sim)["nvidia.com/gpu.deploy.device-plugin"] == "false"  # someone else's pause is kept

    _configure(sim, kubectl, config, "no-such-config")
    assert sim.wait_for(lambda: _labels(sim).get("nvidia.com/mig.config.state") == "failed", 30)
    kubectl(
        "label", "node", NODE, "nvidia.com/gpu.deploy.device-plugin=true", "--overwrite", kubeconfig=config
    )
    assert sim.wait_for(lambda: _allocatable(sim).get("nvidia.com/mig-1g.10gb") == "56", 30)
    assert _labels(sim)["nvidia.com/mig.config.state"] == "failed"
