"""Writing a stack's status to its ``GPUStack`` object (``gpustacks.gpuplan.io``, design §7.3) and a
remediation's entry to the stack's plan log.

:meth:`StatusWriter.write_status` creates the object when it is missing (it holds only status: one per stack,
named after the spec's ``metadata.name``), then writes ``status`` through the status subresource as a JSON
merge patch carrying the resourceVersion it read (a 409 reads again), field manager ``gpuplan``. A condition
keeps its ``lastTransitionTime`` while its status stays the same, as ``meta.SetStatusCondition`` does; a
component the new status no longer names is removed. Nothing here fails the caller: a missing CRD, no
permission (403) or an unreachable server comes back as the text of one ``Warning:`` line.

:meth:`StatusWriter.append_plan_log` keeps a bounded log of the plans ``drift report --remediate`` applied in
ConfigMap ``gpuplan-plan-log-<stack>`` of the stack's namespace: one key per entry, the newest
:data:`PLAN_LOG_ENTRIES` kept, and older entries dropped while the data passes :data:`PLAN_LOG_BYTES`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import GpuplanError
from gpuplan.providers.k8s_errors import status_message
from gpuplan.providers.kubernetes import KubernetesProvider, Request
from gpuplan.providers.protocols import FIELD_MANAGER

API_VERSION: Final = "gpuplan.io/v1alpha1"
KIND: Final = "GPUStack"
CRD_NAME: Final = "gpustacks.gpuplan.io"
MERGE_PATCH: Final = "application/merge-patch+json"
ATTEMPTS: Final = 3
PLAN_LOG_ENTRIES: Final = 20
PLAN_LOG_BYTES: Final = 768 * 1024  # a ConfigMap holds at most 1 MiB
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuplan"}


class _Conflict(Exception):
    """The object changed between the read and the patch (409): read it again."""


def plan_log_name(stack: str) -> str:
    return f"gpuplan-plan-log-{stack}"


class StatusWriter(KubernetesProvider):
    """The writes of the stack's status and plan log (see the module doc); one per command."""

    def write_status(
        self, name: str, status: Mapping[str, Any], *, now: str, namespace: str, expect_crd: bool = True
    ) -> str | None:
        """Write ``status`` (conditions without ``lastTransitionTime``: set here) to GPUStack ``name``; the
        text of a warning when it could not be written, None when it was. ``expect_crd``: whether the stack
        installs the CRD itself; one that does not (its validator is not gpuplan's) writes its status only
        where another stack installed it, and says nothing otherwise."""
        try:
            resource = self._resource(API_VERSION, KIND)
            if resource is None:
                if not expect_crd:
                    return None
                return (
                    f"the GPUStack {name}'s status was not written: the CRD {CRD_NAME} is not installed "
                    "(the validator component renders it; apply a stack whose validator is gpuplan's)"
                )
            for attempt in range(ATTEMPTS):
                live = self._read_or_create(resource.path(None, name), resource.path(), name, namespace)
                try:
                    self._patch_status(resource.path(None, name) + "/status", live, status, now)
                    return None
                except _Conflict:
                    if attempt == ATTEMPTS - 1:
                        raise
        except ApiException as exc:
            return f"the GPUStack {name}'s status was not written: {status_message(exc.body)} ({exc.status})"
        except _Conflict:
            return f"the GPUStack {name}'s status was not written: it kept changing while gpuplan wrote it"
        except GpuplanError as exc:
            return f"the GPUStack {name}'s status was not written: {_said(exc)}"
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return f"the GPUStack {name}'s status was not written: {exc}"
        return None

    def _read_or_create(self, path: str, collection: str, name: str, namespace: str) -> dict[str, Any]:
        data = self._get(path, what=f"read GPUStack {name}")
        if data is not None:
            found: dict[str, Any] = json.loads(data)
            return found
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "labels": dict(MANAGED_BY)},
            "spec": {"namespace": namespace},
        }
        try:
            created: dict[str, Any] = json.loads(
                self._request(Request("POST", collection, [("fieldManager", FIELD_MANAGER)], body))
            )
            return created
        except ApiException as exc:
            if exc.status != 409:  # created meanwhile by another run: read it
                raise
        again = self._get(path, what=f"read GPUStack {name}")
        if again is None:
            raise _Conflict
        found_again: dict[str, Any] = json.loads(again)
        return found_again

    def _patch_status(self, path: str, live: Mapping[str, Any], status: Mapping[str, Any], now: str) -> None:
        old = live.get("status") or {}
        patch = {
            **status,
            "conditions": merge_conditions(old.get("conditions") or [], status.get("conditions") or [], now),
        }
        if "components" in status:
            gone = {
                component: None
                for component in old.get("components") or {}
                if component not in status["components"]
            }
            patch["components"] = {**gone, **status["components"]}
        body = {
            "metadata": {"resourceVersion": (live.get("metadata") or {}).get("resourceVersion")},
            "status": patch,
        }
        try:
            self._request(Request("PATCH", path, [("fieldManager", FIELD_MANAGER)], body, MERGE_PATCH))
        except ApiException as exc:
            if exc.status == 409:
                raise _Conflict from exc
            raise

    # ------------------------------------------------------------------------------------------- plan log

    def append_plan_log(self, stack: str, namespace: str, key: str, entry: Mapping[str, Any]) -> str | None:
        """Add ``entry`` under ``key`` to the stack's plan log (bounded; see the module doc); the text of a
        warning when it could not be written."""
        name = plan_log_name(stack)
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        try:
            data = self._get(path, what=f"read ConfigMap {namespace}/{name}")
            live = json.loads(data) if data is not None else None
            entries = dict((live or {}).get("data") or {})
            entries[key] = json.dumps(entry, indent=1, sort_keys=True)
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
                "data": bounded(entries),
            }
            if live is None:
                collection = f"/api/v1/namespaces/{namespace}/configmaps"
                self._request(Request("POST", collection, [("fieldManager", FIELD_MANAGER)], body))
            else:
                body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
                self._request(Request("PUT", path, [("fieldManager", FIELD_MANAGER)], body))
        except ApiException as exc:
            return (
                f"the plan log {namespace}/{name} was not written: {status_message(exc.body)} ({exc.status})"
            )
        except GpuplanError as exc:
            return f"the plan log {namespace}/{name} was not written: {_said(exc)}"
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return f"the plan log {namespace}/{name} was not written: {exc}"
        return None


def _said(exc: GpuplanError) -> str:
    """The error's summary and the cluster's own words for it, on one line."""
    return " ".join(f"{exc.summary}: {exc.detail}".split()) if exc.detail else exc.summary


def bounded(entries: Mapping[str, str]) -> dict[str, str]:
    """The newest entries (keys sort by time) that fit: at most :data:`PLAN_LOG_ENTRIES`, and the oldest
    dropped while the total passes :data:`PLAN_LOG_BYTES` (the newest is always kept)."""
    kept = sorted(entries)[-PLAN_LOG_ENTRIES:]
    while len(kept) > 1 and sum(len(k) + len(entries[k]) for k in kept) > PLAN_LOG_BYTES:
        kept.pop(0)
    return {key: entries[key] for key in kept}


def merge_conditions(
    old: list[Mapping[str, Any]], new: list[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """``new`` with each condition's ``lastTransitionTime`` kept from ``old`` when its status did not change
    (``now`` when it did, or is new); conditions of other types in ``old`` are kept."""
    before = {str(c.get("type")): c for c in old}
    merged = []
    for condition in new:
        previous = before.pop(str(condition["type"]), None)
        unchanged = previous is not None and previous.get("status") == condition["status"]
        since = previous.get("lastTransitionTime") if unchanged and previous is not None else now
        merged.append({**condition, "lastTransitionTime": since or now})
    return merged + [dict(c) for c in before.values()]
