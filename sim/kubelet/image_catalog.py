"""Which NVIDIA image tags exist: the registry's side of an image pull, from ``image_catalog.yaml``.

The data file lists, per repository the simulator runs (device plugin, GFD, DCGM exporter and hostengine,
driver, toolkit, validator, mig-manager, k8s-driver-manager, the cuda-vectoradd sample), the release tags
nvcr.io serves, each repository with its sources. :func:`exists` answers for one image reference: a tag of
a covered repository that is not listed does not exist, so the kubelet's pull fails as a real one does
(``rpc error: code = NotFound``); every other image (busybox, ``gpuplan:*``, any repository not listed, any
reference by digest) is taken to exist, as before.

Driver tags are ``<version>-<os>`` (the versions times the OS builds listed) or precompiled
``<branch>-<kernel>-<flavor>-<os>``. Loaded once, when first asked; pure afterwards. Called by the kubelet
runtime (``gpuplan.sim.kubelet.image_pulls``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpuplan.sim.kubelet.images import parse_image

DRIVER = "nvcr.io/nvidia/driver"
# The pull states of a missing tag, as image faults the rules word (checks.image_failure): internal kinds,
# never a scenario's faults.images value.
NOT_FOUND = "ImageNotFound"
NOT_FOUND_BACK_OFF = "ImageNotFoundBackOff"
_PRECOMPILED = re.compile(r"(\d{3})-(\d+\.\d+\.\d+-\d+)-([a-z]+(?:-[a-z]+)?)-([a-z]+\d+\.\d+)")


@dataclass(frozen=True)
class Catalog:
    """Tags by repository (``nvcr.io/nvidia/k8s-device-plugin``)."""

    tags: dict[str, frozenset[str]]
    precompiled: dict[str, frozenset[str]]  # branches, flavors, os of the precompiled driver images

    def covers(self, repository: str) -> bool:
        return repository in self.tags

    def has(self, repository: str, tag: str) -> bool:
        if tag in self.tags.get(repository, frozenset()):
            return True
        return repository == DRIVER and self._precompiled(tag)

    def _precompiled(self, tag: str) -> bool:
        match = _PRECOMPILED.fullmatch(tag)
        if match is None:
            return False
        branch, _, flavor, os_tag = match.groups()
        wanted = self.precompiled
        return branch in wanted["branches"] and flavor in wanted["flavors"] and os_tag in wanted["os"]


def _strings(values: Any) -> frozenset[str]:
    return frozenset(str(value) for value in values or ())


def _driver_tags(entry: dict[str, Any]) -> frozenset[str]:
    versions = [str(v) for v in entry["versions"]]
    tags = {f"{v}-{os_tag}" for v in versions for os_tag in entry["os"]}
    tags |= {f"{v}-{os_tag}" for v in entry.get("current") or () for os_tag in entry.get("os_current") or ()}
    return frozenset(tags)


def parse(data: dict[str, Any]) -> Catalog:
    tags: dict[str, frozenset[str]] = {}
    precompiled: dict[str, frozenset[str]] = {}
    for repository, entry in data["repositories"].items():
        if repository == DRIVER:
            tags[repository] = _driver_tags(entry)
            precompiled = {key: _strings(value) for key, value in (entry.get("precompiled") or {}).items()}
        else:
            tags[repository] = _strings(entry["tags"])
    return Catalog(tags, precompiled)


@functools.cache
def catalog() -> Catalog:
    text = (resources.files("gpuplan.sim.kubelet") / "image_catalog.yaml").read_text()
    return parse(yaml.safe_load(text))


def repository_of(image: str) -> str:
    ref = parse_image(image)
    return f"{ref.registry}/{ref.repository}"


def exists(image: str) -> bool:
    """Whether the registry serves ``image``; True for anything the catalog does not cover."""
    ref = parse_image(image)
    repository = f"{ref.registry}/{ref.repository}"
    if ref.digest is not None or not catalog().covers(repository):
        return True
    return catalog().has(repository, ref.tag)


def not_found_message(image: str) -> str:
    """What containerd answers the kubelet for a tag the registry does not have (the waiting message of
    ErrImagePull; the kubelet's Failed event prefixes ``Failed to pull image "<image>": ``)."""
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
        f'failed to resolve reference "{image}": {image}: not found'
    )


def back_off_message(image: str) -> str:
    """The waiting message of ImagePullBackOff: the kubelet wraps the last pull error (image_manager.go)."""
    return f'Back-off pulling image "{image}": ErrImagePull: {not_found_message(image)}'
