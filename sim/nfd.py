"""Node Feature Discovery as the simulated cluster runs it: the NodeFeature CRD and one NodeFeature per node.

NFD v0.19's worker writes, for its node, a ``nfd.k8s-sigs.io/v1alpha1`` NodeFeature named after the node in
its own namespace, labelled ``nfd.node.kubernetes.io/node-name``, listing every PCI device of the node
(``pci.device`` instances: class, vendor, device, subsystem ids), the kernel and OS attributes, and the
labels nfd-master puts on the node (fleet facts §1.2, §1.3). The simulated NFD publishes the same object for
every node the scenario leaves NFD on (``nfd: false`` keeps the worker off a node: no NodeFeature, no
``feature.node.kubernetes.io`` labels), with the node's GPUs at the PCI ids of the catalog (fleet facts §2),
a host bridge, and the BMC's VGA controller that real servers show. The CRD is the one NFD's chart
installs (``deployment/base/nfd-crds/nfd-api-crds.yaml``), created once some node runs NFD; kubectl's
table and the OpenAPI of the kind come from it, as for any custom resource. Deleting a node deletes its
NodeFeature, as nfd-gc does (``pkg/nfd-gc/nfd-gc.go``).

Called by ``gpuplan.sim.cluster`` when it registers or removes a node; pure apart from the store writes.
"""

from __future__ import annotations

from typing import Any

from gpuplan.sim.api.object_store import ObjectStore
from gpuplan.sim.api.store import ApiError
from gpuplan.sim.controllers.cache import resource_type
from gpuplan.sim.nodes import nfd_labels
from gpuplan.sim.scenario import ConcreteNode

NAMESPACE = "node-feature-discovery"
"""The namespace of NFD's own chart (``node-feature-discovery``); nfd-worker writes into its pod's."""
API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
WORKER_VERSION = "v0.19.0"  # fleet facts §1.5: the NFD the GPU Operator v26.7.0 chart pins
MANAGER = "nfd-worker"
CRD_MANAGER = "helm"

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_FEATURES_SCHEMA = {
    "type": "object",
    "properties": {
        "attributes": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["elements"],
                "properties": {"elements": _STRING_MAP},
            },
        },
        "flags": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["elements"],
                "properties": {
                    "elements": {"type": "object", "additionalProperties": {"type": "object"}},
                },
            },
        },
        "instances": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["elements"],
                "properties": {
                    "elements": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["attributes"],
                            "properties": {"attributes": _STRING_MAP},
                        },
                    },
                },
            },
        },
    },
}


def crd() -> dict[str, Any]:
    """``nodefeatures.nfd.k8s-sigs.io`` as NFD's CRD manifest defines it (no printer columns: NAME, AGE)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io"},
        "spec": {
            "group": "nfd.k8s-sigs.io",
            "names": {
                "kind": "NodeFeature",
                "listKind": "NodeFeatureList",
                "plural": "nodefeatures",
                "singular": "nodefeature",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "description": "NodeFeature resource holds the features discovered for one node "
                            "in the cluster.",
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "properties": {"features": _FEATURES_SCHEMA, "labels": _STRING_MAP},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def node_feature(node: ConcreteNode) -> dict[str, Any]:
    """The NodeFeature nfd-worker writes for ``node`` (fleet facts §1.2)."""
    kernel = (node.kernel.split("-")[0].split(".") + ["0", "0"])[:3]
    version = node.os_version.split(".")
    os_release = {"ID": node.os_id, "VERSION_ID": node.os_version, "VERSION_ID.major": version[0]}
    if len(version) > 1:
        os_release["VERSION_ID.minor"] = version[1]
    features: dict[str, Any] = {
        "attributes": {
            "kernel.version": {
                "elements": {
                    "full": node.kernel,
                    "major": kernel[0],
                    "minor": kernel[1],
                    "revision": kernel[2],
                }
            },
            "system.osrelease": {"elements": os_release},
        },
        "instances": {"pci.device": {"elements": pci_devices(node)}},
    }
    if node.host_driver:
        features["flags"] = {"kernel.loadedmodule": {"elements": {"nvidia": {}, "nvidia_uvm": {}}}}
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeFeature",
        "metadata": {
            "name": node.name,
            "namespace": NAMESPACE,
            "labels": {NODE_NAME_LABEL: node.name},
            "annotations": {"nfd.node.kubernetes.io/worker.version": WORKER_VERSION},
        },
        "spec": {"features": features, "labels": nfd_labels(node)},
    }


def pci_devices(node: ConcreteNode) -> list[dict[str, Any]]:
    """Every PCI device NFD lists: the host bridge, the BMC's VGA controller (ASPEED, as on real GPU
    servers: fleet facts §1.3's ``pci-1a03.present``) and one entry per GPU of the catalog model."""
    devices = [
        {"attributes": {"class": "0600", "vendor": "8086", "device": "09a2"}},
        {"attributes": {"class": "0300", "vendor": "1a03", "device": "2000"}},
    ]
    if node.gpu is None:
        return devices
    gpu: dict[str, str] = {
        "class": node.gpu.pci_class,
        "vendor": "10de",
        "device": node.gpu.pci_device_id.removeprefix("0x").lower(),
    }
    if node.gpu.pci_subsystem_device:
        gpu["subsystem_vendor"] = "10de"
        gpu["subsystem_device"] = node.gpu.pci_subsystem_device.removeprefix("0x").lower()
    return devices + [{"attributes": dict(gpu)} for _ in range(node.gpu_count)]


def publish(store: ObjectStore, node: ConcreteNode) -> None:
    """The node's NodeFeature, with the CRD and NFD's namespace first when this is the first NFD node."""
    if store.registry.for_kind(API_VERSION, "NodeFeature") is None:
        store.create(
            resource_type(store.registry, "apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            crd(),
            manager=CRD_MANAGER,
        )
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        store.create(resource_type(store.registry, "v1", "Namespace"), namespace, manager=CRD_MANAGER)
    kind = resource_type(store.registry, API_VERSION, "NodeFeature")
    store.create(kind, node_feature(node), namespace=NAMESPACE, manager=MANAGER)


def forget(store: ObjectStore, node: str) -> None:
    """nfd-gc: the NodeFeature of a node that left the cluster goes too."""
    kind = store.registry.for_kind(API_VERSION, "NodeFeature")
    if kind is None:
        return
    try:
        store.delete(kind, NAMESPACE, node)
    except ApiError as exc:
        if exc.code != 404:
            raise
