"""The write side of the Kubernetes provider: the only code in gpuplan that changes a cluster.

:class:`KubernetesWriter` extends :class:`gpuplan.providers.kubernetes_live.LiveReader` (the reader's client
loading, discovery, error mapping and retry policy, plus filtered lists, the pod proxy and watches) with the
writes apply needs: server-side apply as field manager ``gpuplan`` with force (gpuplan is the lifecycle owner
of what it applies, and SSA records in managedFields who changed what), create (an apply too, so that a field
a later apply leaves out is removed), replace (delete, wait until gone, create), delete, cordon, eviction and
pod deletion. Callers: the apply walker and, for its reads, the
health waiter (:mod:`gpuplan.planner.health.wait`).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import ConflictError, ProviderError, TransientProviderError
from gpuplan.providers.k8s_errors import (
    NetworkTransient,
    classify_transport_error,
    map_api_exception,
    status_message,
    unreachable,
)
from gpuplan.providers.kubernetes import Request
from gpuplan.providers.kubernetes_live import LiveReader, live_object
from gpuplan.providers.protocols import (
    ANY_VERSION,
    FIELD_MANAGER,
    NODE_LABELS_FIELD_MANAGER,
    DriftDetected,
    EvictionRefused,
    Listing,
    contains,
)
from gpuplan.providers.snapshot import STACK_LABEL, LiveObject, ObjectKey

__all__ = ["ANY_VERSION", "FIELD_MANAGER", "DriftDetected", "KubernetesWriter", "Listing", "contains"]

log = logging.getLogger(__name__)

APPLY_PATCH: Final = "application/apply-patch+yaml"
T = TypeVar("T")


@dataclass
class _Attempt:
    number: int = 0
    uncertain: bool = False
    """An earlier attempt may have reached the server although it failed (5xx, dropped connection)."""


class KubernetesWriter(LiveReader):
    """Reads and mutates a cluster (see the module doc). Not thread-safe: one writer per thread."""

    # ------------------------------------------------------------------------------------------- writes

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        expected_rv: str | None = ANY_VERSION,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> LiveObject:
        """Server-side apply of ``obj`` (field manager ``gpuplan`` unless another is named, force);
        ``dry_run``: the server's answer without storing it, for a server-side diff."""
        key = ObjectKey.of(obj)
        resource = self._require(key)
        query = [("fieldManager", field_manager or FIELD_MANAGER), ("force", "true"), *self._dry(dry_run)]

        def step(attempt: _Attempt) -> LiveObject:
            live = self.read(key)
            if self._already_done(
                key, live, expected_rv, attempt, lambda: live is not None and contains(live.manifest, obj)
            ):
                assert live is not None
                return live
            data = self._request(
                Request(
                    "PATCH",
                    resource.path(key.namespace, key.name),
                    query,
                    _with_precondition(obj, expected_rv),
                    APPLY_PATCH,
                )
            )
            return live_object(data, key)

        return self._retrying(f"apply {key.ref}", step)

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> LiveObject:
        """Create ``obj``, which the plan saw absent. An object already there is drift, unless an earlier
        attempt of this call may have created it and it carries the same stack label: then it is ours."""
        key = ObjectKey.of(obj)
        resource = self._require(key)
        stack = ((obj.get("metadata") or {}).get("labels") or {}).get(STACK_LABEL)

        def step(attempt: _Attempt) -> LiveObject:
            live = self.read(key)
            if self._already_done(
                key,
                live,
                None,
                attempt,
                lambda: live is not None and stack is not None and live.labels.get(STACK_LABEL) == stack,
            ):
                assert live is not None
                return live
            # created by server-side apply, not POST: a POST makes gpuplan an Update manager of every field,
            # and a later apply that leaves a field out does not remove what an Update entry owns
            query = [("fieldManager", FIELD_MANAGER), ("force", "true"), *self._dry(dry_run)]
            data = self._request(
                Request("PATCH", resource.path(key.namespace, key.name), query, dict(obj), APPLY_PATCH)
            )
            return live_object(data, key)

        return self._retrying(f"create {key.ref}", step)

    def delete(
        self,
        key: ObjectKey,
        *,
        propagation: str = "Background",
        expected_rv: str | None = ANY_VERSION,
        dry_run: bool = False,
    ) -> LiveObject | None:
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
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "propagationPolicy": propagation,
                "preconditions": preconditions,
                **({"dryRun": ["All"]} if dry_run else {}),
            }
            try:
                self._request(Request("DELETE", resource.path(key.namespace, key.name), (), body))
            except ApiException as exc:
                if exc.status == 404:
                    return live
                raise
            return live

        return self._retrying(f"delete {key.ref}", step)

    def replace(
        self, obj: Mapping[str, Any], *, expected_rv: str | None = ANY_VERSION, timeout: float = 120.0
    ) -> LiveObject:
        """Delete the live object, wait until it is gone (its finalizers and cascade done), create ``obj``.
        For changes the server refuses in place (an immutable field such as ``spec.selector``)."""
        key = ObjectKey.of(obj)
        old = self.delete(key, propagation="Background", expected_rv=expected_rv)
        if old is not None:
            self.wait_gone(key, uid=old.uid, timeout=timeout)
        return self.create(obj)

    def merge_patch(self, key: ObjectKey, patch: Mapping[str, Any]) -> LiveObject:
        """A JSON merge patch (RFC 7386) of ``key``: what server-side apply cannot do, removing fields
        another manager owns (the GPU Operator's ownerReferences and hash annotations of an adopted
        operand) or setting one field of an object gpuplan does not own (a Deployment's replicas). A
        ``metadata.resourceVersion`` in ``patch`` is the server's precondition."""
        resource = self._require(key)
        write = Request(
            "PATCH",
            resource.path(key.namespace, key.name),
            [("fieldManager", FIELD_MANAGER)],
            dict(patch),
            "application/merge-patch+json",
        )
        return self._retrying(f"patch {key.ref}", lambda _attempt: live_object(self._request(write), key))

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
                raise ProviderError(
                    f"{key.ref} still exists {timeout:g}s after it was deleted",
                    where=key.ref,
                    detail=f"finalizers: {finalizers}",
                    hint="check what holds it (finalizers, a stuck garbage collector)",
                )
            try:
                for event in self.watch(
                    key.api_version,
                    key.kind,
                    namespace=key.namespace,
                    field_selector=f"metadata.name={key.name}",
                    resource_version=live.resource_version,
                    timeout=min(remaining, 5.0),
                ):
                    if event.type == "DELETED":
                        break
            except TransientProviderError as exc:  # WatchExpired too: read again, watch again
                log.debug("wait for %s to go: %s", key.ref, exc.summary)

    def cordon(self, node: str, on: bool = True) -> LiveObject:
        """Mark ``node`` unschedulable (``on``) or schedulable again; idempotent."""
        key = ObjectKey("v1", "Node", None, node)
        body = {"spec": {"unschedulable": True if on else None}}
        write = Request(
            "PATCH",
            self._require(key).path(None, node),
            [("fieldManager", FIELD_MANAGER)],
            body,
            "application/strategic-merge-patch+json",
        )
        return self._retrying(
            f"{'cordon' if on else 'uncordon'} node {node}",
            lambda _attempt: live_object(self._request(write), key),
        )

    def label_node(self, node: str, labels: Mapping[str, str | None]) -> LiveObject:
        """Set (or, for None, remove) ``labels`` on ``node`` with a merge patch, as ``kubectl label`` does."""
        key = ObjectKey("v1", "Node", None, node)
        write = Request(
            "PATCH",
            self._require(key).path(None, node),
            [("fieldManager", NODE_LABELS_FIELD_MANAGER)],
            {"metadata": {"labels": dict(labels)}},
            "application/merge-patch+json",
        )
        return self._retrying(f"label node {node}", lambda _attempt: live_object(self._request(write), key))

    def evict(self, pod: ObjectKey) -> bool | EvictionRefused:
        """Evict ``pod`` through policy/v1 Eviction: True when it is evicted (or already gone), an
        ``EvictionRefused`` with the budget's reason when a PodDisruptionBudget forbids it now (429 naming the
        budget): the caller tries again later."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        path = self._require(pod).path(pod.namespace, pod.name) + "/eviction"

        def step(attempt: _Attempt) -> bool | EvictionRefused:
            try:
                self._request(Request("POST", path, (), body))
            except ApiException as exc:
                if exc.status == 404:
                    return True
                if exc.status == 429 and _names_disruption_budget(exc.body):
                    log.info("evict %s: %s", pod.ref, status_message(exc.body))
                    return EvictionRefused(_budget_reason(exc.body))
                raise
            return True

        return self._retrying(f"evict {pod.ref}", step)

    def delete_pod(self, pod: ObjectKey, *, grace_seconds: int | None = None) -> bool:
        """Delete ``pod`` (OnDelete DaemonSets restart this way); False when it was already gone."""
        query = [("gracePeriodSeconds", str(grace_seconds))] if grace_seconds is not None else []
        path = self._require(pod).path(pod.namespace, pod.name)

        def step(attempt: _Attempt) -> bool:
            try:
                self._request(Request("DELETE", path, query))
            except ApiException as exc:
                if exc.status == 404:
                    return attempt.uncertain
                raise
            return True

        return self._retrying(f"delete pod {pod.ref}", step)

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

    def _already_done(
        self,
        key: ObjectKey,
        live: LiveObject | None,
        expected_rv: str | None,
        attempt: _Attempt,
        landed: Callable[[], bool],
    ) -> bool:
        """The drift guard: False to go ahead with the write, True when an earlier attempt of this call
        already made it; raises DriftDetected when the object changed otherwise."""
        found = live.resource_version if live is not None else None
        if attempt.uncertain and landed():
            return True
        if expected_rv == ANY_VERSION or found == expected_rv:
            return False
        raise DriftDetected(key, expected=expected_rv, found=live)

    @staticmethod
    def _dry(dry_run: bool) -> list[tuple[str, str]]:
        return [("dryRun", "All")] if dry_run else []


def _with_precondition(obj: Mapping[str, Any], expected_rv: str | None) -> dict[str, Any]:
    """The apply body; with the plan's resourceVersion in it, which the API server takes as a precondition
    (409 if the object changed after our read), closing the gap between the guard's read and the write."""
    body = dict(obj)
    if expected_rv not in (None, ANY_VERSION):
        body["metadata"] = {**(obj.get("metadata") or {}), "resourceVersion": expected_rv}
    return body


def _budget_reason(body: Any) -> str:
    """The DisruptionBudget cause of a 429 Status (it names the budget), else its message."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        causes = (json.loads(text).get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        causes = []
    for cause in causes:
        if isinstance(cause, dict) and cause.get("reason") == "DisruptionBudget" and cause.get("message"):
            return str(cause["message"])
    return status_message(body)


def _names_disruption_budget(body: Any) -> bool:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    return "DisruptionBudget" in text or "disruption budget" in text.lower()
