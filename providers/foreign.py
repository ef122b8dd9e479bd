"""Recognises NVIDIA GPU-stack objects that gpuplan does not manage, and who owns them.

Called by :meth:`KubernetesProvider.refresh` and :class:`FakeKubernetes` on the DaemonSets of all namespaces
and on ClusterPolicies. The planner turns the results into ownership conflicts ("the device plugin already
runs in kube-system, deployed by hand"): one lifecycle owner per component (design §1).

A DaemonSet is classified by its containers' images (facts §1.3, §3): ``k8s-device-plugin`` is the device
plugin, or GFD when the container runs ``gpu-feature-discovery`` (the same image holds both binaries);
``k8s/dcgm-exporter``, ``k8s/container-toolkit`` and ``nvidia/driver`` are what they say; the validator is
the ``gpu-operator-validator`` image, or the ``gpu-operator`` image running ``nvidia-validator``. Its owner is
read from ``ownerReferences`` (a ClusterPolicy: the GPU Operator), Helm's ``app.kubernetes.io/managed-by``
label and ``meta.helm.sh/release-name`` annotation, or another stack's ``gpuplan.io/stack`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan.providers.snapshot import STACK_LABEL, ForeignObject, LiveObject

# ClusterPolicy spec key -> gpuplan component; ClusterPolicy enables every one of them unless enabled: false
CLUSTER_POLICY_COMPONENTS = (
    ("driver", "driver"),
    ("toolkit", "toolkit"),
    ("devicePlugin", "devicePlugin"),
    ("gfd", "gfd"),
    ("dcgmExporter", "dcgmExporter"),
    ("validator", "validator"),
)
_COMPONENT_ORDER = tuple(component for _, component in CLUSTER_POLICY_COMPONENTS)


def image_name(image: str) -> str:
    """``nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0`` -> ``nvidia/k8s/dcgm-exporter``: the path without the
    registry host, tag or digest."""
    path = image.split("@", 1)[0]
    head, _, tail = path.rpartition("/")
    tail = tail.split(":", 1)[0]
    path = f"{head}/{tail}" if head else tail
    first, _, rest = path.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        path = rest  # drop a registry host (nvcr.io, registry.example.com:5000, localhost)
    return path


def _runs(container: Mapping[str, Any], binary: str) -> bool:
    words = [container.get("name") or "", *(container.get("command") or ()), *(container.get("args") or ())]
    return any(binary in str(word) for word in words)


def container_component(container: Mapping[str, Any]) -> str | None:
    """The gpuplan component a container is, from its image (and command, where one image has two roles)."""
    name = image_name(str(container.get("image") or ""))
    last = name.rsplit("/", 1)[-1]
    if last == "k8s-device-plugin":
        if _runs(container, "config-manager"):
            return None  # the sidecar that reloads the plugin's config: not a component of its own
        return "gfd" if _runs(container, "gpu-feature-discovery") else "devicePlugin"
    if last == "gpu-feature-discovery":
        return "gfd"
    if last == "dcgm-exporter":
        return "dcgmExporter"
    if last == "container-toolkit":
        return "toolkit"
    if last == "driver" and name.startswith("nvidia"):
        return "driver"
    if last == "gpu-operator-validator":
        return "validator"
    if last == "gpu-operator" and _runs(container, "nvidia-validator"):
        return "validator"
    return None


def daemonset_components(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """Components a DaemonSet runs, from its main containers (init containers only wait for others:
    every GPU Operator operand has a ``toolkit-validation`` init container)."""
    pod = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    found = {container_component(c) for c in pod.get("containers") or () if isinstance(c, Mapping)}
    if "validator" not in found:
        # the validator's main container only sleeps; its init containers run nvidia-validator
        init = {container_component(c) for c in pod.get("initContainers") or () if isinstance(c, Mapping)}
        if "validator" in init and _is_validator_daemonset(manifest):
            found.add("validator")
    return tuple(component for component in _COMPONENT_ORDER if component in found)


def _is_validator_daemonset(manifest: Mapping[str, Any]) -> bool:
    metadata = manifest.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return "validator" in str(metadata.get("name", "")) or "validator" in str(labels.get("app", ""))


def owner_of(manifest: Mapping[str, Any]) -> tuple[str, str | None]:
    """(owner, owner_name) as described in :class:`ForeignObject`."""
    metadata = manifest.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    for reference in metadata.get("ownerReferences") or ():
        if reference.get("kind") == "ClusterPolicy":
            return "gpu-operator", reference.get("name")
    if manifest.get("kind") == "ClusterPolicy":
        return "gpu-operator", metadata.get("name")
    if str(labels.get("app.kubernetes.io/managed-by", "")).lower() == "helm":
        release = (
            annotations.get("meta.helm.sh/release-name")
            or labels.get("meta.helm.sh/release-name")
            or labels.get("app.kubernetes.io/instance")
        )
        return "helm", release
    if STACK_LABEL in labels:
        return "gpuplan", labels[STACK_LABEL]
    return "manual", None


def foreign_daemonsets(daemonsets: Iterable[LiveObject], *, stack: str) -> list[ForeignObject]:
    """The DaemonSets running a GPU-stack component that are not this stack's own."""
    found = []
    for live in daemonsets:
        if live.labels.get(STACK_LABEL) == stack:
            continue
        components = daemonset_components(live.manifest)
        if components:
            owner, owner_name = owner_of(live.manifest)
            found.append(ForeignObject(live.key, live.manifest, components, owner, owner_name))
    return found


def foreign_cluster_policies(policies: Iterable[LiveObject]) -> list[ForeignObject]:
    """Every ClusterPolicy, with the components it enables (``spec.<component>.enabled``, default true)."""
    found = []
    for live in policies:
        spec = live.manifest.get("spec") or {}
        components = tuple(
            component
            for key, component in CLUSTER_POLICY_COMPONENTS
            if (spec.get(key) or {}).get("enabled", True) is not False or key == "validator"
        )
        found.append(ForeignObject(live.key, live.manifest, components, "gpu-operator", live.key.name))
    return found
