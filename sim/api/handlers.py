"""Resource handlers: one generic REST implementation of every verb, for every kind the registry serves.

Called by :mod:`gpuplan.sim.api.server` with a routed request (:class:`gpuplan.sim.api.routing.Route`); talks
to the :class:`gpuplan.sim.api.store.Store` only through its public methods. Store errors (``ApiError``)
propagate to the server, which answers their Status. What the store does not know about lives here: query
parameters and DeleteOptions bodies, the default field manager, server-side field validation
(``fieldValidation``), Table answers, the eviction subresource and the watch stream.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from gpuplan.sim.api import openapi, tables
from gpuplan.sim.api.protocol import (
    JSON,
    HttpError,
    Request,
    Response,
    decode_body,
    encode,
    json_response,
    method_not_allowed,
    success_status,
)
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.routing import Route
from gpuplan.sim.api.store import ApiError, Store

DEFAULT_WATCH_SECONDS = 1800
_PATCH_TYPES = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_PROPAGATION = ("Background", "Foreground", "Orphan")
# How often a quiet watch looks up from its queue to notice a stopping server or a vanished client.
_WATCH_POLL_SECONDS = 0.25
BOOKMARK_EVERY_SECONDS = 60.0
"""How often a long watch that allows bookmarks gets one (the watch cache's bookmarkFrequency)."""
BOOKMARK_BEFORE_DEADLINE_SECONDS = 2.0
"""How long before a watch's timeout its last bookmark comes."""


def field_manager(request: Request) -> str:
    """``fieldManager`` or, like the apiserver, the User-Agent up to its first "/" (128 characters at
    most)."""
    given = request.param("fieldManager")
    if given:
        return str(given)
    agent = request.header("User-Agent").split("/")[0].strip()
    return (agent or "unknown")[:128]


def _dry_run(request: Request, body: dict[str, Any] | None = None) -> bool:
    values = list(request.query.get("dryRun", []))
    if body and isinstance(body.get("dryRun"), list):
        values.extend(body["dryRun"])
    for value in values:
        if value != "All":
            raise HttpError(400, "BadRequest", f'Invalid dryRun value "{value}": valid values are "All"')
    return bool(values)


def _int_param(request: Request, name: str) -> int | None:
    value = request.param(name)
    if value in (None, ""):
        return None
    try:
        return int(str(value))
    except ValueError:
        raise HttpError(400, "BadRequest", f'invalid {name} value "{value}": must be an integer') from None


class ResourceHandlers:
    """Serves the resource routes (``/api/v1/...``, ``/apis/<g>/<v>/...``) against one store."""

    def __init__(self, store: Store, stopping: threading.Event) -> None:
        self.store = store
        self._stopping = stopping

    # ---- dispatch -----------------------------------------------------------------------------------------

    def handle(self, route: Route, request: Request) -> Response | WatchStream:
        assert route.rt is not None
        method, rt = request.method, route.rt
        if route.subresource is None:
            if route.name is None:
                return self._collection(route, rt, request)
            return self._item(route, rt, request)
        if route.subresource == "status" and "status" in rt.subresources:
            return self._status(route, rt, request)
        if route.subresource == "eviction" and "eviction" in rt.subresources:
            if method != "POST":
                raise method_not_allowed()
            return self._evict(route, rt, request)
        raise HttpError(404, "NotFound", "the server could not find the requested resource")

    def _collection(self, route: Route, rt: ResourceType, request: Request) -> Response | WatchStream:
        if request.method in ("GET", "HEAD"):
            if request.flag("watch"):
                return self._watch(route, rt, request)
            return self._list(route, rt, request)
        if request.method == "POST":
            if rt.namespaced and route.namespace is None:
                raise method_not_allowed()
            return self._create(route, rt, request)
        if request.method == "DELETE":
            return self._delete_collection(route, rt, request)
        raise method_not_allowed()

    def _item(self, route: Route, rt: ResourceType, request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            return self._get(route, rt, request)
        if request.method == "PUT":
            return self._update(route, rt, request, subresource=None)
        if request.method == "PATCH":
            return self._patch(route, rt, request, subresource=None)
        if request.method == "DELETE":
            return self._delete(route, rt, request)
        raise method_not_allowed()

    def _status(self, route: Route, rt: ResourceType, request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            return self._get(route, rt, request)
        if request.method == "PUT":
            return self._update(route, rt, request, subresource="status")
        if request.method == "PATCH":
            return self._patch(route, rt, request, subresource="status")
        raise method_not_allowed()

    # ---- reads --------------------------------------------------------------------------------------------

    def _get(self, route: Route, rt: ResourceType, request: Request) -> Response:
        assert route.name is not None
        obj = self.store.get(rt, route.namespace, route.name)
        if tables.wants_table(request.header("Accept")):
            meta = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")}
            return _respond(
                200,
                tables.table(
                    rt.group,
                    rt.plural,
                    [obj],
                    list_metadata=meta,
                    include_object=_include_object(request),
                    columns=rt.columns,
                ),
                request,
            )
        return _respond(200, obj, request)

    def _list(self, route: Route, rt: ResourceType, request: Request) -> Response:
        result = self.store.list(
            rt,
            namespace=route.namespace,
            label_selector=request.param("labelSelector"),
            field_selector=request.param("fieldSelector"),
            limit=_int_param(request, "limit"),
            continue_token=request.param("continue") or None,
        )
        meta: dict[str, Any] = {"resourceVersion": result.resource_version}
        if result.continue_token:
            meta["continue"] = result.continue_token
        if result.remaining is not None:
            meta["remainingItemCount"] = result.remaining
        if tables.wants_table(request.header("Accept")):
            return _respond(
                200,
                tables.table(
                    rt.group,
                    rt.plural,
                    result.items,
                    list_metadata=meta,
                    include_object=_include_object(request),
                    columns=rt.columns,
                ),
                request,
            )
        items = [_with_type(rt, item) for item in result.items]
        body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}
        return _respond(200, body, request)

    def _watch(self, route: Route, rt: ResourceType, request: Request) -> WatchStream:
        timeout = _int_param(request, "timeoutSeconds")
        as_table = tables.wants_table(request.header("Accept"))
        try:
            watch = self.store.watch(
                rt,
                namespace=route.namespace,
                label_selector=request.param("labelSelector"),
                field_selector=request.param("fieldSelector"),
                resource_version=request.param("resourceVersion") or None,
                send_initial_events=_send_initial_events(request),
            )
        except ApiError as error:
            if error.code != 410:
                raise
            # A too-old resourceVersion is reported inside a 200 stream, as a real apiserver does.
            return WatchStream(
                None,
                rt,
                self._stopping,
                0,
                as_table=False,
                include_object="Metadata",
                bookmarks=False,
                initial_error=error.status(),
            )
        allowed = request.flag("allowWatchBookmarks")
        return WatchStream(
            watch,
            rt,
            self._stopping,
            DEFAULT_WATCH_SECONDS if timeout is None else timeout,
            as_table=as_table,
            include_object=_include_object(request),
            bookmarks=allowed or _send_initial_events(request),
            heartbeat=(lambda: self.store.bookmark(watch)) if allowed else None,
        )

    # ---- writes -------------------------------------------------------------------------------------------

    def _object_body(self, rt: ResourceType, request: Request) -> tuple[dict[str, Any], list[str]]:
        body = decode_body(request)
        if not isinstance(body, dict):
            raise HttpError(400, "BadRequest", "the body of the request must be a JSON object")
        body.setdefault("apiVersion", rt.api_version)
        body.setdefault("kind", rt.kind)
        return body, _validate_fields(rt, body, request)

    def _create(self, route: Route, rt: ResourceType, request: Request) -> Response:
        body, warnings = self._object_body(rt, request)
        created = self.store.create(
            rt,
            body,
            namespace=route.namespace,
            manager=field_manager(request),
            dry_run=_dry_run(request),
            field_validation=_field_validation(request),
        )
        return _respond(201, created, request, warnings)

    def _update(
        self, route: Route, rt: ResourceType, request: Request, *, subresource: str | None
    ) -> Response:
        assert route.name is not None
        body, warnings = self._object_body(rt, request)
        updated = self.store.update(
            rt,
            body,
            namespace=route.namespace,
            name=route.name,
            manager=field_manager(request),
            subresource=subresource,
            dry_run=_dry_run(request),
        )
        return _respond(200, updated, request, warnings)

    def _patch(
        self, route: Route, rt: ResourceType, request: Request, *, subresource: str | None
    ) -> Response:
        assert route.name is not None
        patch_type = request.content_type
        if patch_type not in _PATCH_TYPES:
            raise HttpError(
                415,
                "UnsupportedMediaType",
                f"the server does not support the patch type "
                f'"{patch_type}"; supported: {", ".join(_PATCH_TYPES)}',
            )
        body = decode_body(request)
        warnings: list[str] = []
        if isinstance(body, dict):
            warnings = _validate_fields(rt, body, request)
        manager = request.param("fieldManager") or ""
        if patch_type == "application/apply-patch+yaml":
            if not manager:
                raise HttpError(
                    422,
                    "Invalid",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                    "Required value: is required for apply patch",
                    {
                        "group": "meta.k8s.io",
                        "kind": "PatchOptions",
                        "causes": [
                            {
                                "reason": "FieldValueRequired",
                                "field": "fieldManager",
                                "message": "Required value: is required for apply patch",
                            }
                        ],
                    },
                )
            existed = self._exists(rt, route.namespace, route.name)
        else:
            manager, existed = field_manager(request), True
        patched = self.store.patch(
            rt,
            route.namespace,
            route.name,
            body,
            patch_type,
            manager=manager,
            subresource=subresource,
            dry_run=_dry_run(request),
            force=request.flag("force"),
        )
        return _respond(200 if existed else 201, patched, request, warnings)

    def _exists(self, rt: ResourceType, namespace: str | None, name: str) -> bool:
        try:
            self.store.get(rt, namespace, name)
        except ApiError as error:
            if error.code == 404:
                return False
            raise
        return True

    def _delete_options(self, request: Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.body.strip():
            decoded = decode_body(request)
            if not isinstance(decoded, dict):
                raise HttpError(400, "BadRequest", "DeleteOptions must be a JSON object")
            options = decoded
        propagation = request.param("propagationPolicy") or options.get("propagationPolicy")
        orphan = request.param("orphanDependents") or options.get("orphanDependents")
        if propagation is None and str(orphan).lower() == "true":
            propagation = "Orphan"
        if propagation is not None and propagation not in _PROPAGATION:
            raise HttpError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                f'Unsupported value: "{propagation}": supported values: '
                '"Foreground", "Background", "Orphan", "nil"',
            )
        return {
            "propagation": propagation,
            "dry_run": _dry_run(request, options),
            "preconditions": options.get("preconditions") or None,
            "grace_period_seconds": _grace_period(
                request.param("gracePeriodSeconds"), options.get("gracePeriodSeconds")
            ),
        }

    def _delete(self, route: Route, rt: ResourceType, request: Request) -> Response:
        assert route.name is not None
        deleted = self.store.delete(rt, route.namespace, route.name, **self._delete_options(request))
        return _respond(200, _with_type(rt, deleted), request)

    def _delete_collection(self, route: Route, rt: ResourceType, request: Request) -> Response:
        options = self._delete_options(request)
        listed = self.store.list(
            rt,
            namespace=route.namespace,
            label_selector=request.param("labelSelector"),
            field_selector=request.param("fieldSelector"),
        )
        deleted = []
        for item in listed.items:
            meta = item.get("metadata", {})
            try:
                deleted.append(
                    _with_type(rt, self.store.delete(rt, meta.get("namespace"), meta["name"], **options))
                )
            except ApiError as error:
                if error.code != 404:  # deleted meanwhile (a cascade): not an error for a collection delete
                    raise
        body = {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": deleted,
        }
        return _respond(200, body, request)

    def _evict(self, route: Route, rt: ResourceType, request: Request) -> Response:
        assert route.name is not None
        eviction: dict[str, Any] = {}
        if request.body.strip():
            decoded = decode_body(request)
            eviction = decoded if isinstance(decoded, dict) else {}
        name = eviction.get("metadata", {}).get("name")
        if name and name != route.name:
            raise HttpError(400, "BadRequest", "name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        assert route.namespace is not None
        self.store.evict(
            route.namespace,
            route.name,
            propagation=options.get("propagationPolicy"),
            dry_run=_dry_run(request, options),
            preconditions=options.get("preconditions") or None,
            grace_period_seconds=_grace_period(None, options.get("gracePeriodSeconds")),
            manager=field_manager(request),
        )
        return json_response(201, success_status(201))


# ---- helpers ----------------------------------------------------------------------------------------------


def _grace_period(param: str | None, option: Any) -> int | None:
    """DeleteOptions.gracePeriodSeconds from the query (it wins, as the apiserver decodes it last) or body."""
    value = param if param is not None else option
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HttpError(
            400, "BadRequest", f'invalid gracePeriodSeconds "{value}": must be an integer'
        ) from None


def _with_type(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    obj.setdefault("apiVersion", rt.api_version)
    obj.setdefault("kind", rt.kind)
    return obj


def _include_object(request: Request) -> str:
    value = request.param("includeObject") or "Metadata"
    if value not in ("Object", "Metadata", "None"):
        raise HttpError(
            400, "BadRequest", f'includeObject must be one of Object, Metadata, None, not "{value}"'
        )
    return value


def _field_validation(request: Request) -> str:
    value = request.param("fieldValidation") or "Warn"
    if value not in ("Strict", "Warn", "Ignore"):
        raise HttpError(
            400, "BadRequest", f'fieldValidation must be one of "Ignore", "Warn" or "Strict", got "{value}"'
        )
    return value


def _validate_fields(rt: ResourceType, body: dict[str, Any], request: Request) -> list[str]:
    """Apply ``fieldValidation`` to a write's body: 400 for Strict, warnings for Warn (the server default).

    Unknown fields are removed from the body in every mode, as the apiserver's decoder drops them.
    """
    mode = _field_validation(request)
    if body.get("kind", rt.kind) != rt.kind or body.get("apiVersion", rt.api_version) != rt.api_version:
        return []  # another kind's body: the store answers the type mismatch, not a list of unknown fields
    unknown = openapi.unknown_fields(rt, body, prune=mode != "Strict")
    if not unknown:
        return []
    if mode == "Strict":
        raise HttpError(400, "BadRequest", openapi.strict_decoding_message(rt, unknown))
    return [f'unknown field "{field}"' for field in unknown] if mode == "Warn" else []


def _respond(code: int, obj: Any, request: Request, warnings: list[str] | None = None) -> Response:
    headers = [("Warning", '299 - "' + w.replace('"', '\\"') + '"') for w in warnings or []]
    return json_response(code, obj, pretty=request.flag("pretty"), headers=headers)


class WatchStream:
    """A watch answer: newline-delimited JSON events, one per chunk, until the timeout, the server's stop,
    the client's disconnect (``client_gone``) or a store error (sent as an ERROR event, as real servers
    do)."""

    code = 200
    content_type = JSON

    def __init__(
        self,
        watch: Any,
        rt: ResourceType,
        stopping: threading.Event,
        timeout_seconds: int,
        *,
        as_table: bool,
        include_object: str,
        bookmarks: bool,
        initial_error: dict[str, Any] | None = None,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        """``heartbeat``: queues a BOOKMARK at the store's current resourceVersion (a watch that allows
        bookmarks), sent as the apiserver's watch cache sends them (:func:`bookmark_times`)."""
        self._watch, self._rt, self._stopping = watch, rt, stopping
        self._heartbeat = heartbeat
        self._timeout = timeout_seconds
        self._as_table, self._include_object, self._bookmarks = as_table, include_object, bookmarks
        self._initial_error = initial_error
        self._columns_sent = False
        self.client_gone: Callable[[], bool] = lambda: False

    def chunks(self) -> Iterator[bytes]:
        if self._initial_error is not None:
            yield encode({"type": "ERROR", "object": self._initial_error}) + b"\n"
            return
        began = time.monotonic()
        deadline = began + self._timeout
        beats = bookmark_times(began, deadline) if self._heartbeat is not None else iter(())
        beat = next(beats, None)
        while not self._stopping.is_set():
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return
            if beat is not None and now >= beat and self._heartbeat is not None:
                self._heartbeat()
                beat = next(beats, None)
            try:
                event = self._watch.next(timeout=min(_WATCH_POLL_SECONDS, remaining))
            except ApiError as error:
                yield encode({"type": "ERROR", "object": error.status()}) + b"\n"
                return
            if event is None:
                # A closed store watch (store closed, or the CRD of its kind deleted) returns None at once:
                # end the stream rather than spin until the timeout.
                if self.client_gone() or getattr(self._watch, "closed", False):
                    return
                continue
            if event.get("type") == "BOOKMARK" and not self._bookmarks:
                continue
            yield encode(self._render(event)) + b"\n"

    def _render(self, event: dict[str, Any]) -> dict[str, Any]:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR" or not self._as_table or kind == "BOOKMARK":
            return {"type": kind, "object": _with_type(self._rt, obj) if kind != "ERROR" else obj}
        table = tables.table(
            self._rt.group,
            self._rt.plural,
            [obj],
            include_object=self._include_object,
            include_columns=not self._columns_sent,
            list_metadata={"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")},
            now=datetime.datetime.now(datetime.UTC),
            columns=self._rt.columns,
        )
        self._columns_sent = True
        return {"type": kind, "object": table}

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()


def bookmark_times(began: float, deadline: float) -> Iterator[float]:
    """When a watch that allows bookmarks gets one, as the apiserver's watch cache sends them
    (k8s.io/apiserver, ``pkg/storage/cacher/cache_watcher.go``, ``nextBookmarkTime``): roughly every
    :data:`BOOKMARK_EVERY_SECONDS`, and right before the watch's timeout, 2 s before its deadline (none when
    that moment is already past). An idle watcher of a busy resource thus resumes from a recent
    resourceVersion instead of one the log has dropped (410 Expired, then a list of everything)."""
    last = deadline - BOOKMARK_BEFORE_DEADLINE_SECONDS
    beat = began
    while True:
        beat = min(beat + BOOKMARK_EVERY_SECONDS, last)
        if beat <= began:
            return
        yield beat
        if beat >= last:
            return


def _send_initial_events(request: Request) -> bool:
    """A watch-list request; the apiserver takes ``sendInitialEvents`` only with
    ``resourceVersionMatch=NotOlderThan``, and refuses it otherwise."""
    if not request.flag("sendInitialEvents"):
        return False
    if request.param("resourceVersionMatch") != "NotOlderThan":
        raise HttpError(
            422,
            "Invalid",
            'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents '
            "requires setting resourceVersionMatch to NotOlderThan",
        )
    return True
