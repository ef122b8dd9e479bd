"""The write side of the Kubernetes provider: the only code in gpuplan that changes a cluster (issue 4).

:class:`KubernetesWriter` extends :class:`gpuplan.providers.kubernetes.KubernetesProvider` (same client
loading, discovery, error mapping and retry policy) with what apply needs: server-side apply as field manager
``gpuplan`` with force (gpuplan is the lifecycle owner of what it applies, and SSA records in managedFields
who changed what), create, replace (delete, wait until gone, create), delete, cordon, eviction, pod deletion,
paginated lists, the pod proxy (for the DCGM scrape) and watches. Callers: the apply walker and the health
waiter (:mod:`gpuplan.planner.health_wait`).

Two promises, kept by every mutating method:

- **No blind overwrite.** Each write re-reads the object first. ``expected_rv`` is the resourceVersion the
  plan recorded (``None``: the plan saw no object; :data:`ANY_VERSION`: do not check); if the cluster's
  differs, :class:`DriftDetected` is raised and nothing is written. The write itself carries the version as a
  precondition (the apply body's ``metadata.resourceVersion``, a delete's ``preconditions``), so a change
  between that read and the write is refused by the server (409) and found by the next attempt's read.
- **No double effect.** Transient failures (429 honouring Retry-After, 5xx, timeouts, dropped connections,
  409 conflicts) are retried with bounded backoff through the injected ``sleep``, each attempt starting with a
  fresh read. When an earlier attempt may have reached the server (5xx, dropped connection) and the re-read
  shows a change, the change is accepted as ours only if it is: the object carries our desired fields (apply),
  our stack label (create), or is gone (delete). So an object is never created twice, and our own landed
  write is not mistaken for drift.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import ConflictError, ProviderError, TransientProviderError
from gpuplan.providers import watch as watch_mod
from gpuplan.providers.k8s_errors import (NetworkTransient, classify_transport_error, map_api_exception,
                                          status_message, unreachable)
from gpuplan.providers.kubernetes import PAGE_SIZE, KubernetesProvider, Resource, _ListExpired
from gpuplan.providers.snapshot import STACK_LABEL, LiveObject, ObjectKey, with_type
from gpuplan.providers.watch import WatchEvent, WatchExpired, WatchRequest

log = logging.getLogger(__name__)

FIELD_MANAGER: Final = "gpuplan"
ANY_VERSION: Final = "*"
"""``expected_rv`` that skips the drift guard (the caller has no plan-time version to hold the object to)."""
APPLY_PATCH: Final = "application/apply-patch+yaml"
POD = ("v1", "Pod")
NODE = ("v1", "Node")
T = TypeVar("T")


class DriftDetected(ConflictError):
    """The object changed since the plan read it; the write was not made (re-plan to see the change)."""

    def __init__(self, key: ObjectKey, *, expected: str | None, found: LiveObject | None) -> None:
        found_rv = found.resource_version if found is not None else None
        was = "absent" if expected is None else f"at resourceVersion {expected}"
        now = "is absent" if found is None else f"is at resourceVersion {found_rv}"
        managers = sorted({str(entry.get("manager")) for entry in (found.managed_fields if found else ())
                           if entry.get("manager") and entry.get("manager") != FIELD_MANAGER})
        detail = f"changed by: {', '.join(managers)}" if managers else ""
        super().__init__(f"{key.ref} changed since the plan: it was {was} and now {now}", where=key.ref,
                         detail=detail, hint="run `gpuplan plan` again to see the change, then apply the new plan")
        self.key = key
        self.expected = expected
        self.found = found_rv


@dataclass(frozen=True)
class Listing:
    """A paginated list read whole: the items, and the resourceVersion to watch from afterwards."""

    items: tuple[LiveObject, ...]
    resource_version: str | None

    def __iter__(self) -> Iterator[LiveObject]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class _Attempt:
    number: int = 0
    uncertain: bool = False
    """An earlier attempt may have reached the server although it failed (5xx, dropped connection)."""


@dataclass(frozen=True)
class _Write:
    method: str
    path: str
    query: Sequence[tuple[str, str]] = ()
    body: Any = None
    content_type: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


class KubernetesWriter(KubernetesProvider):
    """Reads and mutates a cluster (see the module doc). Not thread-safe: one writer per thread."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        """``clock`` measures the waits of :meth:`replace`; the other arguments are the reader's."""
        super().__init__(**kwargs)
        self._clock = clock

    # ------------------------------------------------------------------------------------------- writes

    def apply(self, obj: Mapping[str, Any], *, expected_rv: str | None = ANY_VERSION,
              dry_run: bool = False) -> LiveObject:
        """Server-side apply of ``obj`` (field manager ``gpuplan``, force); ``dry_run``: the server's answer
        without storing it, for a server-side diff."""
        key = ObjectKey.of(obj)
        resource = self._require(key)
        query = [("fieldManager", FIELD_MANAGER), ("force", "true"), *self._dry(dry_run)]

        def step(attempt: _Attempt) -> LiveObject:
            live = self.read(key)
            if self._already_done(key, live, expected_rv, attempt, lambda: live is not None and
                                  contains(live.manifest, obj)):
                assert live is not None
                return live
            data = self._request(_Write("PATCH", resource.path(key.namespace, key.name), query,
                                        _with_precondition(obj, expected_rv), APPLY_PATCH))
            return _live(data, key)

        return self._retrying(f"apply {key.ref}", step)

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> LiveObject:
        """Create ``obj``, which the plan saw absent. An object already there is drift, unless an earlier
        attempt of this call may have created it and it carries the same stack label: then it is ours."""
        key = ObjectKey.of(obj)
        resource = self._require(key)
        stack = ((obj.get("metadata") or {}).get("labels") or {}).get(STACK_LABEL)

        def step(attempt: _Attempt) -> LiveObject:
            live = self.read(key)
            if self._already_done(key, live, None, attempt, lambda: live is not None and stack is not None
                                  and live.labels.get(STACK_LABEL) == stack):
                assert live is not None
                return live
            query = [("fieldManager", FIELD_MANAGER), *self._dry(dry_run)]
            data = self._request(_Write("POST", resource.path(key.namespace), query, dict(obj)))
            return _live(data, key)

        return self._retrying(f"create {key.ref}", step)

    def delete(self, key: ObjectKey, *, propagation: str = "Background", expected_rv: str | None = ANY_VERSION,
               dry_run: bool = False) -> LiveObject | None:
        """Delete the object; the object as it was, or None when it was already gone (and that is what the
        plan expected, or an earlier attempt of this call deleted it)."""
        resource = self._require(key)

        def step(attempt: _Attempt) -> LiveObject | None:
            live = self.read(key)
            if live is None and (expected_rv == ANY_VERSION or attempt.uncertain):
                return None
            if self._already_done(key, live, expected_rv, attempt, lambda: live is None):
                return None
            assert live is not None
            preconditions = {"uid": live.uid, "resourceVersion": live.resource_version}
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation,
                    "preconditions": preconditions, **({"dryRun": ["All"]} if dry_run else {})}
            try:
                self._request(_Write("DELETE", resource.path(key.namespace, key.name), (), body))
            except ApiException as exc:
                if exc.status == 404:
                    return live
                raise
            return live

        return self._retrying(f"delete {key.ref}", step)

    def replace(self, obj: Mapping[str, Any], *, expected_rv: str | None = ANY_VERSION,
                timeout: float = 120.0) -> LiveObject:
        """Delete the live object, wait until it is gone (its finalizers and cascade done), create ``obj``.
        For changes the server refuses in place (an immutable field such as ``spec.selector``)."""
        key = ObjectKey.of(obj)
        old = self.delete(key, propagation="Background", expected_rv=expected_rv)
        if old is not None:
            self.wait_gone(key, uid=old.uid, timeout=timeout)
        return self.create(obj)

    def wait_gone(self, key: ObjectKey, *, uid: str | None, timeout: float) -> None:
        """Until no object ``key`` with ``uid`` exists (a new one of the same name does not count), by
        watching its name; ProviderError when ``timeout`` seconds pass first."""
        deadline = self._clock() + timeout
        while True:
            live = self.read(key)
            if live is None or (uid is not None and live.uid != uid):
                return
            remaining = deadline - self._clock()
            if remaining <= 0:
                finalizers = ", ".join(live.metadata.get("finalizers") or []) or "none"
                raise ProviderError(f"{key.ref} still exists {timeout:g}s after it was deleted",
                                    where=key.ref, detail=f"finalizers: {finalizers}",
                                    hint="check what holds it (finalizers, a stuck garbage collector)")
            try:
                for event in self.watch(key.api_version, key.kind, namespace=key.namespace,
                                        field_selector=f"metadata.name={key.name}",
                                        resource_version=live.resource_version, timeout=min(remaining, 5.0)):
                    if event.type == "DELETED":
                        break
            except TransientProviderError as exc:  # WatchExpired too: read again, watch again
                log.debug("wait for %s to go: %s", key.ref, exc.summary)

    def cordon(self, node: str, on: bool = True) -> LiveObject:
        """Mark ``node`` unschedulable (``on``) or schedulable again; idempotent."""
        key = ObjectKey("v1", "Node", None, node)
        body = {"spec": {"unschedulable": True if on else None}}
        write = _Write("PATCH", self._require(key).path(None, node), [("fieldManager", FIELD_MANAGER)], body,
                       "application/strategic-merge-patch+json")
        return self._retrying(f"{'cordon' if on else 'uncordon'} node {node}",
                              lambda _attempt: _live(self._request(write), key))

    def evict(self, pod: ObjectKey) -> bool:
        """Evict ``pod`` through policy/v1 Eviction: True when it is evicted (or already gone), False when a
        PodDisruptionBudget forbids it now (429 naming the budget): the caller tries again later."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace}}
        path = self._require(pod).path(pod.namespace, pod.name) + "/eviction"

        def step(attempt: _Attempt) -> bool:
            try:
                self._request(_Write("POST", path, (), body))
            except ApiException as exc:
                if exc.status == 404:
                    return True
                if exc.status == 429 and _names_disruption_budget(exc.body):
                    log.info("evict %s: %s", pod.ref, status_message(exc.body))
                    return False
                raise
            return True

        return self._retrying(f"evict {pod.ref}", step)

    def delete_pod(self, pod: ObjectKey, *, grace_seconds: int | None = None) -> bool:
        """Delete ``pod`` (OnDelete DaemonSets restart this way); False when it was already gone."""
        query = [("gracePeriodSeconds", str(grace_seconds))] if grace_seconds is not None else []
        path = self._require(pod).path(pod.namespace, pod.name)

        def step(attempt: _Attempt) -> bool:
            try:
                self._request(_Write("DELETE", path, query))
            except ApiException as exc:
                if exc.status == 404:
                    return attempt.uncertain
                raise
            return True

        return self._retrying(f"delete pod {pod.ref}", step)

    # -------------------------------------------------------------------------------------------- reads

    def list_objects(self, api_version: str, kind: str, *, namespace: str | None = None,
                     label_selector: str | None = None, field_selector: str | None = None) -> Listing:
        """Every matching object, page by page (``limit``/``continue``); an expired token lists again."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return Listing((), None)
        for _ in range(self._retry.attempts):
            listing = self._list_once(resource, namespace, label_selector, field_selector)
            if listing is not None:
                return listing
        raise TransientProviderError(f"list {kind}: the list kept changing faster than it could be read",
                                     detail=self.endpoint.describe(), hint="try again")

    def list_pods(self, *, namespace: str | None = None, label_selector: str | None = None,
                  field_selector: str | None = None) -> Listing:
        return self.list_objects(*POD, namespace=namespace, label_selector=label_selector,
                                 field_selector=field_selector)

    def list_nodes(self, *, label_selector: str | None = None) -> Listing:
        return self.list_objects(*NODE, label_selector=label_selector)

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        """GET ``path`` from ``port`` of ``pod`` through the API server's pod proxy. One attempt: a pod that
        does not serve yet is the caller's "not yet", not something to retry here."""
        resource = self._require(ObjectKey(*POD, namespace, pod))
        url = f"{resource.path(namespace, pod)}:{port}/proxy/{path.lstrip('/')}"
        what = f"scrape {namespace}/{pod}:{port}/{path.lstrip('/')}"
        try:
            return self._request(_Write("GET", url, extra={"Accept": "*/*"}))
        except ApiException as exc:
            raise map_api_exception(exc, endpoint=self.endpoint, what=what) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            cause = classify_transport_error(exc)
            if isinstance(cause, NetworkTransient):
                raise TransientProviderError(f"{what}: connection dropped", detail=str(cause)) from exc
            raise unreachable(cause, endpoint=self.endpoint) from exc

    def watch(self, api_version: str, kind: str, *, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              resource_version: str | None = None, timeout: float = 30.0) -> Iterator[WatchEvent]:
        """Events of ``kind`` after ``resource_version`` for at most ``timeout`` seconds (server-side);
        :class:`WatchExpired` when that version is too old (list again)."""
        resource = self._resource(api_version, kind)
        if resource is None:
            raise ProviderError(f"the cluster does not serve {api_version} {kind}")
        request = WatchRequest(resource.path(namespace), label_selector, field_selector, resource_version,
                               max(1, math.ceil(timeout)))
        return watch_mod.stream(self._api(), request, endpoint=self.endpoint, what=f"watch {kind}",
                                count=self._count_request)

    # ---------------------------------------------------------------------------------------- machinery

    def _retrying(self, what: str, step: Callable[[_Attempt], T]) -> T:
        """Run ``step`` until it succeeds, retrying transient failures and conflicts (bounded backoff)."""
        attempt = _Attempt()
        while True:
            attempt.number += 1
            last = attempt.number >= self._retry.attempts
            try:
                return step(attempt)
            except ApiException as exc:
                error = map_api_exception(exc, endpoint=self.endpoint, what=what)
                if exc.status is not None and int(exc.status) >= 500:
                    attempt.uncertain = True  # the server may have done it before failing
                if not isinstance(error, (TransientProviderError, ConflictError)) or last:
                    raise error from exc
                retry_after = error.retry_after if isinstance(error, TransientProviderError) else None
                log.debug("%s: %s, attempt %d", what, exc.status, attempt.number)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                cause = classify_transport_error(exc)
                if not isinstance(cause, NetworkTransient) or last:
                    raise unreachable(cause, endpoint=self.endpoint, attempts=attempt.number) from exc
                attempt.uncertain = True
                retry_after = None
                log.debug("%s: %s, attempt %d", what, type(exc).__name__, attempt.number)
            self._sleep(self._retry.delay(attempt.number, retry_after))

    def _already_done(self, key: ObjectKey, live: LiveObject | None, expected_rv: str | None,
                      attempt: _Attempt, landed: Callable[[], bool]) -> bool:
        """The drift guard: False to go ahead with the write, True when an earlier attempt of this call
        already made it; raises DriftDetected when the object changed otherwise."""
        found = live.resource_version if live is not None else None
        if attempt.uncertain and landed():
            return True
        if expected_rv == ANY_VERSION or found == expected_rv:
            return False
        raise DriftDetected(key, expected=expected_rv, found=live)

    def _require(self, key: ObjectKey) -> Resource:
        resource = self._resource(key.api_version, key.kind)
        if resource is None:
            raise ProviderError(f"the cluster does not serve {key.api_version} {key.kind}", where=key.ref,
                                hint="install the CustomResourceDefinition of this kind first")
        if resource.namespaced and not key.namespace:
            raise ProviderError(f"{key.kind} is namespaced: {key.ref} needs a namespace")
        return resource

    @staticmethod
    def _dry(dry_run: bool) -> list[tuple[str, str]]:
        return [("dryRun", "All")] if dry_run else []

    def _list_once(self, resource: Resource, namespace: str | None, label_selector: str | None,
                   field_selector: str | None) -> Listing | None:
        """One complete paginated pass; None when the continue token expired (410) midway."""
        items: list[LiveObject] = []
        token: str | None = None
        while True:
            query = [("limit", str(PAGE_SIZE))]
            query += [(name, value) for name, value in (("labelSelector", label_selector),
                                                        ("fieldSelector", field_selector),
                                                        ("continue", token)) if value]
            try:
                data = self._get(resource.path(namespace), query, what=f"list {resource.kind}",
                                 expire_ok=token is not None)
            except _ListExpired:
                return None
            if data is None:
                return Listing((), None)
            page = json.loads(data)
            items += [LiveObject.from_manifest(with_type(item, resource.api_version, resource.kind))
                      for item in page.get("items") or ()]
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if not token:
                return Listing(tuple(items), metadata.get("resourceVersion"))

    def _count_request(self) -> None:
        self.request_count += 1

    def _request(self, write: _Write) -> bytes:
        """One HTTP request through the official client; raises ApiException on a non-2xx answer."""
        client = self._api()
        self._count_request()
        headers = {"Accept": "application/json", **write.extra}
        if write.content_type:
            headers["Content-Type"] = write.content_type
        method, url, header_params, body, post_params = client.param_serialize(
            method=write.method, resource_path=write.path, query_params=list(write.query),
            header_params=headers, body=write.body, auth_settings=["BearerToken"])
        response = client.call_api(method, url, header_params=header_params, body=body, post_params=post_params,
                                   _request_timeout=self._timeout)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        release = getattr(getattr(response, "response", None), "release_conn", None)
        if callable(release):
            release()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=data.decode("utf-8", "replace"), data=None)
        return data


def contains(live: Any, desired: Any) -> bool:
    """Whether ``live`` holds every field of ``desired`` (maps: a superset; lists: same length, item by
    item). Server defaults added to live do not matter; a missing or different desired value does."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and contains(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(
            contains(a, b) for a, b in zip(live, desired))
    return bool(live == desired)


def _with_precondition(obj: Mapping[str, Any], expected_rv: str | None) -> dict[str, Any]:
    """The apply body; with the plan's resourceVersion in it, which the API server takes as a precondition
    (409 if the object changed after our read), closing the gap between the guard's read and the write."""
    body = dict(obj)
    if expected_rv not in (None, ANY_VERSION):
        body["metadata"] = {**(obj.get("metadata") or {}), "resourceVersion": expected_rv}
    return body


def _names_disruption_budget(body: Any) -> bool:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    return "DisruptionBudget" in text or "disruption budget" in text.lower()


def _live(data: bytes, key: ObjectKey) -> LiveObject:
    return LiveObject.from_manifest(with_type(json.loads(data), key.api_version, key.kind))
