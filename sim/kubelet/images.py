"""Which NVIDIA component a pod runs, told from its images and commands, plus pod-spec readers.

:func:`identify` keys on the main container's image repository and command/arguments, as a human reading
the pod would: ``nvcr.io/nvidia/k8s-device-plugin`` running ``gpu-feature-discovery`` is GFD, running
``mps-control-daemon`` the MPS control daemon, the same image otherwise the device plugin;
``nvcr.io/nvidia/gpu-operator`` (or the older ``gpu-operator-validator``) with ``nvidia-validator`` init
containers is the operator validator. Sidecars (``config-manager``) never decide.

The small readers below (:func:`env_value`, :func:`main_container` ...) are shared by the rules. Pure;
called by ``gpuplan.sim.kubelet.rules`` and the kubelet runtime.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Obj = dict[str, Any]


class Role(StrEnum):
    DRIVER = "driver"
    TOOLKIT = "toolkit"
    DEVICE_PLUGIN = "device-plugin"
    GFD = "gpu-feature-discovery"
    DCGM_EXPORTER = "dcgm-exporter"
    DCGM = "dcgm"
    VALIDATOR = "validator"
    MIG_MANAGER = "mig-manager"
    MPS_CONTROL_DAEMON = "mps-control-daemon"
    VECTORADD = "cuda-vectoradd"  # the CUDA vectorAdd sample: a GPU test that runs to completion
    GPUPLAN = "gpuplan"  # gpuplan's own image: the kubelet runs its command as a local process
    OTHER = "other"


@dataclass(frozen=True)
class ImageRef:
    """``nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless`` split into its parts."""

    registry: str  # "nvcr.io" ("docker.io" when the reference names none)
    repository: str  # "nvidia/k8s/dcgm-exporter"
    tag: str  # "4.6.0-4.8.3-distroless" ("latest" when neither tag nor digest is given)
    digest: str | None = None

    @property
    def name(self) -> str:
        """Last path component of the repository: ``dcgm-exporter``."""
        return self.repository.rsplit("/", 1)[-1]


@functools.lru_cache(maxsize=4096)
def parse_image(reference: str) -> ImageRef:
    """Split an image reference the way container runtimes do (registry = first part with a dot or port).
    Cached: a fleet's pods name a few images, and the kubelet rules split them at every evaluation."""
    rest, _, digest = reference.partition("@")
    head, _, last = rest.rpartition("/")
    name, _, tag = last.partition(":")
    path = f"{head}/{name}" if head else name
    first, _, remainder = path.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, remainder
    else:
        registry, repository = "docker.io", path if "/" in path else f"library/{path}"
    return ImageRef(registry, repository, tag or ("" if digest else "latest"), digest or None)


# Repository names -> role for images that do one thing whatever their arguments.
_ROLE_BY_IMAGE = {
    "driver": Role.DRIVER,
    "container-toolkit": Role.TOOLKIT,
    "dcgm-exporter": Role.DCGM_EXPORTER,
    "dcgm": Role.DCGM,
    "k8s-mig-manager": Role.MIG_MANAGER,
    "gpu-feature-discovery": Role.GFD,  # the standalone GFD image of older releases
}
_SIDECAR_COMMANDS = ("config-manager", "mps-control-daemon")


def identify(pod: Obj) -> Role:
    """The NVIDIA component ``pod`` runs (Role.OTHER for anything else)."""
    main = main_container(pod)
    if main is None:
        return Role.OTHER
    image = parse_image(main.get("image", ""))
    if image.name in _ROLE_BY_IMAGE:
        return _ROLE_BY_IMAGE[image.name]
    workload = _workload_role(image)
    if workload is not None:
        return workload
    words = command_words(main)
    if image.name == "k8s-device-plugin":
        if any("gpu-feature-discovery" in word for word in words):
            return Role.GFD
        if words and words[0].endswith("mps-control-daemon"):
            return Role.MPS_CONTROL_DAEMON
        if _names_sidecar(words):
            return Role.OTHER
        return Role.DEVICE_PLUGIN
    if image.name in ("gpu-operator", "gpu-operator-validator"):
        if env_value(main, "COMPONENT") == "metrics":
            return Role.OTHER  # the node-status-exporter runs the validator binary in metrics mode
        runs_validations = any(
            "nvidia-validator" in word for c in init_containers(pod) for word in command_words(c)
        )
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if runs_validations or labels.get("app") == "nvidia-operator-validator":
            return Role.VALIDATOR
    return Role.OTHER


def _workload_role(image: ImageRef) -> Role | None:
    """The workload images the simulated kubelet runs to completion: the vectoradd sample
    (``nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0``, ``-ubuntu22.04``, ``-ubi8``,
    ``vectoradd-cuda11.7.1-ubuntu20.04``, ``vectoradd-cuda10.2`` ...; the older ``nvidia/samples`` repository)
    and any image whose repository's last part is ``gpuplan`` (deploy/Dockerfile's)."""
    if image.name in ("cuda-sample", "samples") and image.tag.startswith("vectoradd"):
        return Role.VECTORADD
    if image.name == "gpuplan":
        return Role.GPUPLAN
    return None


def pod_containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def init_containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("initContainers") or [])


def main_container(pod: Obj) -> Obj | None:
    """The container that does the pod's work: the first one that is not a known sidecar."""
    containers = pod_containers(pod)
    for container in containers:
        if not _runs_sidecar(container):
            return container
    return containers[0] if containers else None


def command_words(container: Obj) -> list[str]:
    """Command and args as one word list (``sh -c "..."`` scripts split on spaces)."""
    parts = _command_parts(container)
    if _STRINGS.issuperset(map(type, parts)):
        return list(_words_of(parts))
    # a part that is no string (a number in args): split as it is (1 and True are one key to a cache)
    return [word for part in parts for word in str(part).split()]


def _runs_sidecar(container: Obj) -> bool:
    parts = _command_parts(container)
    if _STRINGS.issuperset(map(type, parts)):
        return _sidecar_words(parts)
    return _names_sidecar(command_words(container))


def _command_parts(container: Obj) -> tuple[Any, ...]:
    return (*(container.get("command") or ()), *(container.get("args") or ()))


@functools.lru_cache(maxsize=4096)
def _sidecar_words(parts: tuple[str, ...]) -> bool:
    return _names_sidecar(_words_of(parts))


def _names_sidecar(words: tuple[str, ...] | list[str]) -> bool:
    return any(command in word for word in words for command in _SIDECAR_COMMANDS)


_STRINGS = frozenset({str})


@functools.lru_cache(maxsize=4096)
def _words_of(parts: tuple[str, ...]) -> tuple[str, ...]:
    """Every evaluation of a pod reads its containers' commands several times (its role, its main
    container, what it prints), and a template's scripts are long: split once per distinct command."""
    return tuple(word for part in parts for word in part.split())


def env_value(container: Obj, name: str, *, node_name: str = "", pod: Obj | None = None) -> str | None:
    """The value of env var ``name`` in ``container``; ``fieldRef`` to the node or pod name is resolved."""
    for entry in container.get("env") or []:
        if entry.get("name") != name:
            continue
        if "value" in entry:
            return str(entry["value"])
        field_path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field_path == "spec.nodeName":
            return node_name
        if field_path == "metadata.name" and pod is not None:
            return str((pod.get("metadata") or {}).get("name", ""))
        if field_path == "metadata.namespace" and pod is not None:
            return str((pod.get("metadata") or {}).get("namespace", ""))
        return ""
    return None


def all_images(pod: Obj) -> list[tuple[str, str, bool]]:
    """``(container name, image, is_init)`` for init containers then containers, in start order."""
    entries = [(c.get("name", ""), c.get("image", ""), True) for c in init_containers(pod)]
    return entries + [(c.get("name", ""), c.get("image", ""), False) for c in pod_containers(pod)]


def pod_ref(pod: Obj) -> str:
    """``name_namespace(uid)`` as kubelet messages name a pod."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('name', '')}_{meta.get('namespace', 'default')}({meta.get('uid', '')})"
