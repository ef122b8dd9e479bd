"""URL routing: turn a request path into what it addresses, using the registry (no handler logic here).

Called by :mod:`gpuplan.sim.api.server` for every request. The Kubernetes URL grammar served:

* ``/version``, ``/healthz``, ``/readyz``, ``/livez`` (and their sub-checks), ``/openapi/v2``,
  ``/openapi/v3[/...]``
* ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``: discovery
* ``/api/v1/<plural>[/<name>[/<subresource>]]`` for cluster kinds and all-namespaces lists,
  ``/api/v1/namespaces/<ns>/<plural>[/<name>[/<subresource>]]`` for namespaced kinds (and the same under
  ``/apis/<group>/<version>``); ``/api/v1/namespaces/<name>[/status]`` is the Namespace itself
* ``/api/v1/namespaces/<ns>/pods/<name>[:<port>]/proxy[/<path>]``: the pod proxy
* ``/api/v1/namespaces/<ns>/services/[<scheme>:]<name>[:<port>]/proxy[/<path>]``: the service proxy (the
  port a Service port's number or name)
* ``/sim/...``: the simulator's control endpoint
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from gpuplan.sim.api.registry import Registry, ResourceType


@dataclass(frozen=True)
class Route:
    """What a path addresses. ``kind`` is one of: version, health, openapi, discovery-core, discovery-groups,
    discovery-group, discovery-resources, resource, proxy, sim, unknown."""

    kind: str
    rt: ResourceType | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    group: str = ""
    version: str = ""
    rest: str = ""  # openapi: the group-version path; proxy: the path after /proxy; sim: the path
    port: int | None = None  # proxy: the port after "name:"
    port_name: str = ""  # service proxy: the port after "name:" as written (a number or a port name)
    message: str = ""  # unknown: why nothing matched (the 404 message)


_HEALTH = ("healthz", "readyz", "livez")


def _not_found(message: str = "the server could not find the requested resource") -> Route:
    return Route("unknown", message=message)


def route(path: str, registry: Registry) -> Route:
    """The :class:`Route` of a URL path (without the query string)."""
    # Segments are split first, then percent-decoded: clients encode ":" in "name:port" and "/" inside names.
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        return _not_found()
    head = parts[0]
    if head == "version" and len(parts) == 1:
        return Route("version")
    if head in _HEALTH:
        return Route("health", rest="/".join(parts))
    if head == "openapi":
        return Route("openapi", version=parts[1] if len(parts) > 1 else "", rest="/".join(parts[2:]))
    if head == "sim":
        return Route("sim", rest="/" + "/".join(parts))
    if head == "api":
        if len(parts) == 1:
            return Route("discovery-core")
        return _group_version_route("", parts[1], parts[2:], registry)
    if head == "apis":
        if len(parts) == 1:
            return Route("discovery-groups")
        if len(parts) == 2:
            return Route("discovery-group", group=parts[1])
        return _group_version_route(parts[1], parts[2], parts[3:], registry)
    return _not_found()


def _group_version_route(group: str, version: str, rest: list[str], registry: Registry) -> Route:
    if not rest:
        return Route("discovery-resources", group=group, version=version)
    namespace: str | None = None
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not _is_namespace_subresource(group, version, rest, registry)
    ):
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    rt = registry.get(group, version, plural)
    if rt is None:
        return _not_found()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if namespace is not None and not rt.namespaced:
        return _not_found()
    if rt.namespaced and namespace is None and name is not None:
        return _not_found()  # a namespaced kind has no item URL outside a namespace
    if subresource == "proxy" and name is not None:
        return _proxy_route(rt, namespace, name, rest[3:])
    if len(rest) > 3:
        return _not_found()
    return Route(
        "resource",
        rt=rt,
        namespace=namespace,
        name=name,
        subresource=subresource,
        group=group,
        version=version,
    )


def _proxy_route(rt: ResourceType, namespace: str | None, name: str, rest: list[str]) -> Route:
    port: int | None = None
    base, sep, port_text = name.partition(":")
    if sep:
        # "name:port" or "scheme:name:port" as the apiserver accepts it; only the port matters here.
        base, _, port_text = name.rpartition(":")
        base = base.split(":")[-1]
        if port_text.isdigit():
            port = int(port_text)
        elif rt.plural != "services":
            return _not_found(f"invalid port {port_text!r} in proxy path")
    return Route(
        "proxy",
        rt=rt,
        namespace=namespace,
        name=base,
        subresource="proxy",
        rest="/" + "/".join(rest),
        port=port,
        port_name=port_text if sep else "",
    )


def _is_namespace_subresource(group: str, version: str, rest: list[str], registry: Registry) -> bool:
    """``/api/v1/namespaces/<name>/status`` addresses the Namespace, not a kind named "status"."""
    return len(rest) == 3 and group == "" and registry.get(group, version, rest[2]) is None
