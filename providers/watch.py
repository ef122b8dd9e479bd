"""Watch streams through the official client's ``kubernetes.watch.Watch``: events of one kind, as plain dicts.

Called by :meth:`gpuplan.providers.kubernetes_live.LiveReader.watch`, which the health waiter
(:mod:`gpuplan.planner.health.wait`) and ``replace`` use so that waits follow the cluster's events instead of
sleeping. ``Watch.stream`` drives a function of ours that opens the raw HTTP stream with the provider's
ApiClient (so authentication and TLS are the kubeconfig's), and yields the decoded lines; nothing is
deserialised into client models. A stream ends at its ``timeoutSeconds``; the caller decides whether to
watch again from :attr:`WatchEvent.resource_version`.

Errors are gpuplan's: a too-old resourceVersion (410, as a status or an ERROR event) is
:class:`WatchExpired`, after which the caller lists again; other failures are mapped as reads are
(:mod:`gpuplan.providers.k8s_errors`), a dropped stream being a :class:`TransientProviderError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions
from kubernetes import watch as kube_watch
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import TransientProviderError
from gpuplan.providers.k8s_errors import (
    Endpoint,
    NetworkTransient,
    classify_transport_error,
    map_api_exception,
    unreachable,
)
from gpuplan.providers.protocols import WatchEvent, WatchExpired

# How much longer than the server-side timeout the socket may stay silent before it counts as dropped.
READ_SLACK_SECONDS = 10.0


@dataclass(frozen=True)
class WatchRequest:
    """What to watch: the collection path and the selectors, from which resourceVersion, for how long."""

    path: str
    label_selector: str | None = None
    field_selector: str | None = None
    resource_version: str | None = None
    timeout_seconds: int = 30

    def query(self) -> list[tuple[str, str]]:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.timeout_seconds)),
        ]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        return query


def stream(
    client: ApiClient, request: WatchRequest, *, endpoint: Endpoint, what: str, count: Callable[[], None]
) -> Iterator[WatchEvent]:
    """Events until the server ends the stream (its timeout) or the caller stops iterating.

    ``count`` is called once per HTTP request (the provider's request counter)."""
    watcher = kube_watch.Watch()  # type: ignore[no-untyped-call]
    try:
        opener = _opener(client, request, count)
        events = watcher.stream(
            opener,
            resource_version=request.resource_version,  # type: ignore[no-untyped-call]
            timeout_seconds=request.timeout_seconds,
        )
        for event in events:
            raw = event.get("raw_object") if isinstance(event, dict) else None
            if isinstance(raw, dict) and event.get("type"):
                yield WatchEvent(str(event["type"]), raw)
    except ApiException as exc:
        if exc.status == 410:
            raise WatchExpired(
                f"{what}: the resourceVersion to watch from is too old", detail=endpoint.describe()
            ) from exc
        raise map_api_exception(exc, endpoint=endpoint, what=what) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        cause = classify_transport_error(exc)
        if isinstance(cause, NetworkTransient):
            raise TransientProviderError(
                f"{what}: the watch stream was dropped", detail=f"{endpoint.describe()}: {cause}"
            ) from exc
        raise unreachable(cause, endpoint=endpoint) from exc
    finally:
        watcher.stop()  # type: ignore[no-untyped-call]
        watcher._api_client.close()  # type: ignore[no-untyped-call]  # Watch makes a default client it never uses


def _opener(client: ApiClient, request: WatchRequest, count: Callable[[], None]) -> Callable[..., Any]:
    """The function ``Watch.stream`` calls: opens the stream, answers its raw urllib3 response.

    ``Watch.stream`` passes ``watch``, ``_preload_content``, ``resource_version`` and ``timeout_seconds``;
    the request already carries all of them, so they are ignored here."""

    def open_stream(**_ignored: Any) -> Any:
        count()
        method, url, headers, body, post_params = client.param_serialize(
            method="GET",
            resource_path=request.path,
            query_params=request.query(),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = client.call_api(
            method,
            url,
            header_params=headers,
            body=body,
            post_params=post_params,
            _request_timeout=(5.0, request.timeout_seconds + READ_SLACK_SECONDS),
        )
        if not 200 <= response.status <= 299:
            data = response.read()  # type: ignore[no-untyped-call]
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
            )
        return response.response

    return open_stream
