"""Pulls from a registry the node cannot reach: the network's side of an image pull.

A scenario node's ``unreachableRegistries`` lists registry hosts its resolver has no record of (an
air-gapped node, a DNS that only serves the site's own names). Every pull of an image of such a registry
fails before any request reaches it, so the tag does not matter: containerd's resolver wraps Go's
``net/http`` error (``Head "https://<host>/v2/<repository>/manifests/<tag>": dial tcp: lookup <host> on
127.0.0.53:53: no such host``, the node's local stub resolver) in ``failed to do request`` (containerd
core/remotes/docker/resolver.go), the CRI answers ``code = Unknown``, and the kubelet shows it as
ErrImagePull, then ImagePullBackOff wrapping it (pkg/kubelet/images/image_manager.go), as for a missing tag.

The two pull states reach the pure rules as image faults of internal kinds (:data:`UNREACHABLE`,
:data:`UNREACHABLE_BACK_OFF`), which ``checks.image_failure`` words. Pure; used by
``gpuplan.sim.kubelet.image_pulls``.
"""

from __future__ import annotations

from collections.abc import Collection

from gpuplan.sim.kubelet.images import parse_image

UNREACHABLE = "RegistryUnreachable"
UNREACHABLE_BACK_OFF = "RegistryUnreachableBackOff"
NODE_RESOLVER = "127.0.0.53:53"
"""systemd-resolved's stub listener, where an Ubuntu node's containerd sends its lookups."""


def unreachable(image: str, registries: Collection[str]) -> bool:
    """Whether ``image`` comes from one of the node's unreachable ``registries``."""
    return bool(registries) and parse_image(image).registry in registries


def unreachable_message(image: str) -> str:
    """What containerd answers the kubelet for a pull from a registry whose name does not resolve."""
    ref = parse_image(image)
    reference = ref.digest or ref.tag
    url = f"https://{ref.registry}/v2/{ref.repository}/manifests/{reference}"
    return (
        f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": failed to resolve '
        f'reference "{image}": failed to do request: Head "{url}": dial tcp: lookup {ref.registry} on '
        f"{NODE_RESOLVER}: no such host"
    )


def back_off_message(image: str) -> str:
    """The waiting message of ImagePullBackOff: the kubelet wraps the last pull error."""
    return f'Back-off pulling image "{image}": ErrImagePull: {unreachable_message(image)}'
