"""Discovery documents: /version, /api, /apis, /apis/<group>, /api/v1 and /apis/<group>/<version>.

Called by :mod:`gpuplan.sim.api.server`; every document is computed from the :class:`Registry` at request
time, so kinds that a CustomResourceDefinition adds appear at once. Both discovery forms are served:

* legacy (``APIVersions``, ``APIGroupList``, ``APIGroup``, ``APIResourceList``), which the official Python
  client's dynamic client reads, with subresources as ``pods/status``, ``pods/eviction`` (group policy,
  kind Eviction), ``pods/proxy`` entries;
* aggregated discovery v2 (``APIGroupDiscoveryList``) when the Accept header asks for it first, as kubectl
  1.37 does: one request for /api and one for /apis instead of one per group version.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from gpuplan.sim.api.registry import Registry, ResourceType

KUBERNETES_VERSION = "v1.37.1"
AGGREGATED_MEDIA_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

# Subresources this server implements, with the kind, verbs and (when not the parent's) group/version a real
# apiserver lists for them. A subresource the registry names but the server does not serve is not
# advertised, so clients never discover something that would answer 404.
_SUBRESOURCES: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "status": ("", ("get", "patch", "update"), "", ""),
    "eviction": ("Eviction", ("create",), "policy", "v1"),
    "token": ("TokenRequest", ("create",), "authentication.k8s.io", "v1"),
    "proxy": ("PodProxyOptions", ("create", "delete", "get", "patch", "update"), "", ""),
    "log": ("", ("get",), "", ""),
    "exec": ("PodExecOptions", ("create", "get"), "", ""),
    "portforward": ("PodPortForwardOptions", ("create", "get"), "", ""),
}
_PROXY_PARENTS = ("pods",)


def version_info() -> dict[str, str]:
    """The ``/version`` answer (``kubectl version`` and ``get --raw /version`` print it)."""
    return {
        "major": "1",
        "minor": "37",
        "emulationMajor": "1",
        "emulationMinor": "37",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "36",
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "0" * 40,
        "gitTreeState": "clean",
        "buildDate": "2026-08-20T00:00:00Z",
        "goVersion": "go1.25.3",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def served_subresources(rt: ResourceType) -> list[str]:
    return [
        sub
        for sub in rt.subresources
        if sub in _SUBRESOURCES and (sub != "proxy" or (rt.group == "" and rt.plural in _PROXY_PARENTS))
    ]


def api_versions(server_address: str) -> dict[str, Any]:
    """``GET /api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    """``GET /apis``: every named group with its versions, preferred first."""
    groups = [_group_entry(group, versions) for group, versions in registry.groups() if group]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    """``GET /apis/<group>``, or None for an unknown group."""
    for name, versions in registry.groups():
        if name == group and group:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}
    return None


def _storage_version_hash(rt: ResourceType) -> str:
    digest = hashlib.sha256(f"{rt.group}/{rt.version}/{rt.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _resource_entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
        "storageVersionHash": _storage_version_hash(rt),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _subresource_entry(rt: ResourceType, sub: str) -> dict[str, Any]:
    kind, verbs, group, version = _SUBRESOURCES[sub]
    entry: dict[str, Any] = {
        "name": f"{rt.plural}/{sub}",
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": kind or rt.kind,
        "verbs": list(verbs),
    }
    if group:
        entry.update(group=group, version=version)
    return entry


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """``GET /api/v1`` or ``GET /apis/<group>/<version>``, or None for an unknown group version."""
    if not any(name == group and version in versions for name, versions in registry.groups()):
        return None
    resources: list[dict[str, Any]] = []
    for rt in sorted(registry.resources(group, version), key=lambda r: r.plural):
        resources.append(_resource_entry(rt))
        resources.extend(_subresource_entry(rt, sub) for sub in served_subresources(rt))
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


# ---- aggregated discovery (apidiscovery.k8s.io/v2) ---------------------------------------------------------


def wants_aggregated(accept: str | None) -> bool:
    """True when the first acceptable media type is aggregated discovery v2 (kubectl 1.37 asks so)."""
    if not accept:
        return False
    first = accept.split(",")[0].replace(" ", "")
    return "g=apidiscovery.k8s.io" in first and "v=v2" in first and "as=APIGroupDiscoveryList" in first


def _aggregated_resource(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rt.plural,
        "singularResource": rt.singular,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subresources = []
    for sub in served_subresources(rt):
        kind, verbs, group, version = _SUBRESOURCES[sub]
        subresources.append(
            {
                "subresource": sub,
                "verbs": list(verbs),
                "responseKind": {
                    "group": group if kind else rt.group,
                    "version": version if kind else rt.version,
                    "kind": kind or rt.kind,
                },
            }
        )
    if subresources:
        entry["subresources"] = subresources
    return entry


def _aggregated_group(registry: Registry, group: str, versions: list[str]) -> dict[str, Any]:
    listed = []
    for version in versions:
        kinds = sorted(registry.resources(group, version), key=lambda r: r.plural)
        listed.append(
            {
                "version": version,
                "resources": [_aggregated_resource(rt) for rt in kinds],
                "freshness": "Current",
            }
        )
    metadata = {"name": group} if group else {"creationTimestamp": None}
    return {"metadata": metadata, "versions": listed}


def aggregated(registry: Registry, *, core: bool) -> dict[str, Any]:
    """The APIGroupDiscoveryList for ``/api`` (``core=True``) or ``/apis``."""
    items = [
        _aggregated_group(registry, group, versions)
        for group, versions in registry.groups()
        if (group == "") == core
    ]
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
