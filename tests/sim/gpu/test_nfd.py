"""The simulated NFD: a NodeFeature per node as nfd-worker writes it (fleet facts §1.2), read through the
real kubectl; ``nfd: false`` keeps NFD off a node; nfd-gc's delete when a node leaves."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from gpuplan.sim.catalog import CATALOG
from gpuplan.sim.controllers.cache import resource_type
from gpuplan.sim.testing import SimFactory

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
SCENARIO = {
    "nodes": [
        {"name": "v100-0", "gpu": {"model": "v100", "count": 2}, "driver": "580.105.08"},
        {"name": "h100-0", "gpu": {"model": "h100-80gb", "count": 8}},
        {"name": "cpu-0"},
        {"name": "dark-0", "gpu": {"model": "t4"}, "nfd": False},
    ]
}


def test_kubectl_lists_one_node_feature_per_nfd_node(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    sim = sim_factory(SCENARIO)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    table = kubectl("get", "nodefeatures", "-A", kubeconfig=kubeconfig).stdout.splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "AGE"]
    assert [line.split()[:2] for line in table[1:]] == [
        ["node-feature-discovery", "cpu-0"],
        ["node-feature-discovery", "h100-0"],
        ["node-feature-discovery", "v100-0"],
    ], "no NodeFeature for dark-0, where NFD is off"
    raw = kubectl(
        "get", "nodefeature", "v100-0", "-n", "node-feature-discovery", "-o", "json", kubeconfig=kubeconfig
    ).stdout
    feature = json.loads(raw)
    assert feature["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "v100-0"}
    devices = feature["spec"]["features"]["instances"]["pci.device"]["elements"]
    gpus = [d["attributes"] for d in devices if d["attributes"]["vendor"] == "10de"]
    assert gpus == [{"class": "0302", "vendor": "10de", "device": "1db5"}] * 2
    assert feature["spec"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert "nvidia" in feature["spec"]["features"]["flags"]["kernel.loadedmodule"]["elements"]
    explained = kubectl("explain", "nodefeature.spec.features", kubeconfig=kubeconfig).stdout
    assert "instances" in explained and "attributes" in explained


def test_the_pci_ids_are_the_catalogs_with_subsystem_ids(sim_factory: SimFactory) -> None:
    sim = sim_factory(SCENARIO)
    kind = sim.store.registry.for_kind("nfd.k8s-sigs.io/v1alpha1", "NodeFeature")
    assert kind is not None
    h100 = sim.store.get(kind, "node-feature-discovery", "h100-0")
    gpus = [
        e["attributes"]
        for e in h100["spec"]["features"]["instances"]["pci.device"]["elements"]
        if e["attributes"]["vendor"] == "10de"
    ]
    assert len(gpus) == 8 and gpus[0] == {
        "class": CATALOG["h100-80gb"].pci_class,
        "vendor": "10de",
        "device": "2330",
        "subsystem_vendor": "10de",
        "subsystem_device": "16c1",
    }
    geforce = CATALOG["rtx-3060"]
    assert (geforce.pci_class, geforce.pci_device_id) == ("0300", "0x2504")


def test_a_node_without_nfd_has_no_feature_labels(sim_factory: SimFactory) -> None:
    sim = sim_factory(SCENARIO)
    node = sim.store.get(resource_type(sim.store.registry, "v1", "Node"), None, "dark-0")
    assert not [key for key in node["metadata"]["labels"] if key.startswith("feature.node.kubernetes.io/")]


def test_no_nfd_anywhere_means_no_crd(sim_factory: SimFactory) -> None:
    sim = sim_factory({"nodes": [{"name": "dark-0", "gpu": {"model": "t4"}, "nfd": False}]})
    assert sim.store.registry.for_kind("nfd.k8s-sigs.io/v1alpha1", "NodeFeature") is None


def test_a_node_that_leaves_takes_its_node_feature_and_one_that_joins_brings_one(
    sim_factory: SimFactory,
) -> None:
    sim = sim_factory(SCENARIO)
    kind = sim.store.registry.for_kind("nfd.k8s-sigs.io/v1alpha1", "NodeFeature")
    assert kind is not None
    sim.remove_node("v100-0")
    sim.add_node({"name": "b200-0", "gpu": {"model": "b200", "count": 8}})
    names = [item["metadata"]["name"] for item in sim.store.list(kind).items]
    assert names == ["b200-0", "cpu-0", "h100-0"]
