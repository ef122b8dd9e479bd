"""Live reads for apply and its health gates: filtered paginated lists, the pod proxy and watches.

:class:`LiveReader` extends :class:`gpuplan.providers.kubernetes.KubernetesProvider` (same client loading,
discovery, error mapping and read retries) with what the refresh of a plan never needs: lists by label and
field selector that keep their resourceVersion (to watch from), a GET through the API server's pod proxy
(the DCGM scrape) and watch streams (:mod:`gpuplan.providers.watch`). It also owns the one raw request
function (:meth:`LiveReader._request`, any verb and body) that the write side
(:class:`gpuplan.providers.kubernetes_write.KubernetesWriter`) builds on. Callers: the health waiter
(:mod:`gpuplan.planner.health.wait`) and the apply walker, through the writer.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.providers import watch as watch_mod
from gpuplan.providers.k8s_errors import (
    NetworkTransient,
    classify_transport_error,
    proxy_error,
    unreachable,
)

# _ListExpired is the reader's signal that a continue token expired (410): the same list starts over
from gpuplan.providers.kubernetes import PAGE_SIZE, KubernetesProvider, Request, Resource, _ListExpired
from gpuplan.providers.protocols import FoldedListing, Listing, WatchEvent
from gpuplan.providers.snapshot import LiveObject, ObjectKey, with_type
from gpuplan.providers.watch import WatchRequest

T = TypeVar("T")
POD = ("v1", "Pod")
NODE = ("v1", "Node")


class LiveReader(KubernetesProvider):
    """Lists, proxy reads and watches (see the module doc). Not thread-safe: one per thread."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        """``clock`` measures waits; the other arguments are the reader's."""
        super().__init__(**kwargs)
        self._clock = clock

    def list_objects(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        """Every matching object, page by page (``limit``/``continue``); an expired token lists again."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return Listing((), None)

        def live(item: dict[str, Any]) -> LiveObject:
            return LiveObject.from_manifest(with_type(item, resource.api_version, resource.kind))

        items, version = self._list_all(resource, namespace, label_selector, field_selector, live)
        return Listing(items, version)

    def list_folded(
        self,
        api_version: str,
        kind: str,
        fold: Callable[[dict[str, Any]], Any],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> FoldedListing:
        """Every matching object passed through ``fold`` as its page arrives, each page dropped before the
        next is read (the health waiter's informers: a fleet's pods and nodes never sit in memory whole). An
        expired continue token lists again from the start; only the last pass is returned."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return FoldedListing((), None)
        items, version = self._list_all(resource, namespace, label_selector, field_selector, fold)
        return FoldedListing(items, version)

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        return self.list_objects(
            *POD, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )

    def list_nodes(self, *, label_selector: str | None = None) -> Listing:
        return self.list_objects(*NODE, label_selector=label_selector)

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        """GET ``path`` from ``port`` of ``pod`` through the API server's pod proxy. One attempt: a pod that
        does not serve yet is the caller's "not yet", not something to retry here; a refusal no wait
        changes is :class:`ProxyRefused` (:func:`~gpuplan.providers.k8s_errors.proxy_error`)."""
        resource = self._require(ObjectKey(*POD, namespace, pod))
        url = f"{resource.path(namespace, pod)}:{port}/proxy/{path.lstrip('/')}"
        return self._proxied(url, f"scrape {namespace}/{pod}:{port}/{path.lstrip('/')}", "pods")

    def service_proxy_get(self, namespace: str, service: str, port: int, path: str) -> bytes:
        """GET ``path`` from ``port`` of ``service`` through the API server's service proxy, which sends it
        to one Ready endpoint it picks at random; errors as :meth:`proxy_get`'s."""
        resource = self._require(ObjectKey("v1", "Service", namespace, service))
        url = f"{resource.path(namespace, service)}:{port}/proxy/{path.lstrip('/')}"
        what = f"scrape Service {namespace}/{service}:{port}/{path.lstrip('/')}"
        return self._proxied(url, what, "services")

    def _proxied(self, url: str, what: str, resource: str) -> bytes:
        try:
            return self._request(Request("GET", url, extra={"Accept": "*/*"}))
        except ApiException as exc:
            raise proxy_error(exc, endpoint=self.endpoint, what=what, resource=resource) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            cause = classify_transport_error(exc)
            if isinstance(cause, NetworkTransient):
                raise TransientProviderError(f"{what}: connection dropped", detail=str(cause)) from exc
            raise unreachable(cause, endpoint=self.endpoint) from exc

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 30.0,
    ) -> Iterator[WatchEvent]:
        """Events of ``kind`` after ``resource_version`` for at most ``timeout`` seconds (server-side);
        :class:`WatchExpired` when that version is too old (list again)."""
        resource = self._resource(api_version, kind)
        if resource is None:
            raise ProviderError(f"the cluster does not serve {api_version} {kind}")
        request = WatchRequest(
            resource.path(namespace),
            label_selector,
            field_selector,
            resource_version,
            max(1, math.ceil(timeout)),
        )
        return watch_mod.stream(
            self._api(), request, endpoint=self.endpoint, what=f"watch {kind}", count=self._count_request
        )

    # ------------------------------------------------------------------------------------------ requests

    def _require(self, key: ObjectKey) -> Resource:
        resource = self._resource(key.api_version, key.kind)
        if resource is None:
            raise ProviderError(
                f"the cluster does not serve {key.api_version} {key.kind}",
                where=key.ref,
                hint="install the CustomResourceDefinition of this kind first",
            )
        if resource.namespaced and not key.namespace:
            raise ProviderError(f"{key.kind} is namespaced: {key.ref} needs a namespace")
        return resource

    def _list_all(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        transform: Callable[[dict[str, Any]], T],
    ) -> tuple[tuple[T, ...], str | None]:
        """The items (each transformed) and the resourceVersion of one complete paginated pass, started
        again when the continue token expires midway, a bounded number of times."""
        for _ in range(self._retry.attempts):
            listing = self._list_once(resource, namespace, label_selector, field_selector, transform)
            if listing is not None:
                return listing
        raise TransientProviderError(
            f"list {resource.kind}: the list kept changing faster than it could be read",
            detail=self.endpoint.describe(),
            hint="try again",
        )

    def _list_once(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        transform: Callable[[dict[str, Any]], T],
    ) -> tuple[tuple[T, ...], str | None] | None:
        """One complete paginated pass; None when the continue token expired (410) midway."""
        items: list[T] = []
        token: str | None = None
        while True:
            query = [("limit", str(PAGE_SIZE))]
            query += [
                (name, value)
                for name, value in (
                    ("labelSelector", label_selector),
                    ("fieldSelector", field_selector),
                    ("continue", token),
                )
                if value
            ]
            try:
                data = self._get(
                    resource.path(namespace), query, what=f"list {resource.kind}", expire_ok=token is not None
                )
            except _ListExpired:
                return None
            if data is None:
                return (), None
            page = json.loads(data)
            items += [transform(item) for item in page.get("items") or ()]
            metadata = page.get("metadata") or {}
            del page, data  # one page at a time: a 5000-node list never sits in memory whole
            token = metadata.get("continue") or None
            if not token:
                return tuple(items), metadata.get("resourceVersion")


def live_object(data: bytes, key: ObjectKey) -> LiveObject:
    """A write's or read's answer as a LiveObject (built-in kinds' answers may lack apiVersion and kind)."""
    return LiveObject.from_manifest(with_type(json.loads(data), key.api_version, key.kind))
