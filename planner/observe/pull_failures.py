"""What the cluster already shows of image pulls that fail for the network: the registries each node cannot
reach.

A kubelet that cannot reach a registry (its name does not resolve on the node, a firewall drops the
connection) leaves the container waiting in ``ErrImagePull`` / ``ImagePullBackOff`` with containerd's
error (``... failed to do request: Head "https://nvcr.io/v2/...": dial tcp: lookup nvcr.io on
127.0.0.53:53: no such host``; ImagePullBackOff wraps the last one, pkg/kubelet/images/image_manager.go),
and records a Warning ``Failed`` Event ``Failed to pull image "<image>": <error>`` with its node as
``source.host``. The error names the registry's host, not one repository, so every image of that registry
fails there alike.

:func:`gather` reads both, each as ONE paginated list reduced page by page: the Pending pods of every
namespace (``fieldSelector=status.phase=Pending``; a pod waiting on its first pull is Pending) and the
Pods' ``Failed`` Events (``fieldSelector=involvedObject.kind=Pod,reason=Failed``), which outlive the pods
of an apply that was rolled back. An Event counts while it is recent (:data:`RECENT_SECONDS`): a pod still
failing repeats its pull at least every 300 s (the kubelet's image back-off cap, MaxContainerBackOff in
pkg/kubelet/kubelet.go), which refreshes its Event's ``lastTimestamp``; an older one is of a pod gone or a
network since healed. A tag that does not exist, a refused login or a registry's 5xx are no evidence here:
the registry answered.

Called by :func:`gpuplan.planner.driver.live_plan.build` when its plan pulls new images; the rule that
turns the evidence into plan errors is :mod:`gpuplan.planner.plan.pulls`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuplan.errors import AccessDeniedError
from gpuplan.planner.health.causes import PULL_REASONS
from gpuplan.providers.protocols import ReducedLister

RECENT_SECONDS = 600.0
"""How old a pull's Failed Event may be and still say the node cannot reach the registry: twice the
kubelet's longest image pull back-off (300 s)."""
NETWORK_ERRORS = (
    "no such host",
    "i/o timeout",
    "no route to host",
    "network is unreachable",
    "connection timed out",
)
"""Go's words for a registry the node could not connect to (net package errors), in containerd's error."""
REGISTRY_ANSWERED = (
    "not found",
    "manifest unknown",
    "unauthorized",
    "denied",
    "forbidden",
    "toomanyrequests",
)
FAILED_PULL = 'Failed to pull image "'
PENDING_PODS = "status.phase=Pending"
POD_PULL_EVENTS = "involvedObject.kind=Pod,reason=Failed"
DEFAULT_REGISTRY = "docker.io"


@dataclass(frozen=True)
class PullFailure:
    """One node's failed pull from ``registry`` for the network; ``error``: the network error's words."""

    node: str
    registry: str
    error: str


@dataclass(frozen=True)
class PullFailures:
    """registry host -> node -> the network error its pulls from there fail with; ``requests``: what the
    reads cost."""

    unreachable: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    requests: int = 0

    def on(self, registry: str, nodes: Iterable[str]) -> dict[str, str]:
        """Of ``nodes``, those that cannot reach ``registry``, with their error."""
        failing = self.unreachable.get(registry) or {}
        return {node: failing[node] for node in nodes if node in failing}


def registry_of(image: str) -> str:
    """The registry host of an image reference, as container runtimes read it: the first path component
    when it has a dot or a port or is ``localhost``, else Docker Hub."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return DEFAULT_REGISTRY


def network_error(message: str) -> str | None:
    """The network error a pull failed with (``no such host``), or None when the registry answered or the
    message names no network error."""
    lowered = message.lower()
    if any(marker in lowered for marker in REGISTRY_ANSWERED):
        return None
    return next((marker for marker in NETWORK_ERRORS if marker in lowered), None)


def pod_failures(pod: Mapping[str, Any]) -> tuple[PullFailure, ...]:
    """The containers of ``pod`` waiting on a pull that failed for the network, as its page arrives."""
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    status = pod.get("status") or {}
    found = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or ():
            waiting = (container.get("state") or {}).get("waiting") or {}
            error = network_error(str(waiting.get("message") or ""))
            if node and waiting.get("reason") in PULL_REASONS and error:
                found.append(PullFailure(node, registry_of(str(container.get("image") or "")), error))
    return tuple(found)


def event_failure(event: Mapping[str, Any], since: float) -> PullFailure | None:
    """A kubelet's ``Failed to pull image`` Event newer than ``since`` (epoch seconds) whose error is the
    network's; None for anything else."""
    message = str(event.get("message") or "")
    if not message.startswith(FAILED_PULL):
        return None
    image, _, why = message.removeprefix(FAILED_PULL).partition('": ')
    node = str((event.get("source") or {}).get("host") or event.get("reportingInstance") or "")
    error = network_error(why)
    seen = _epoch(event.get("lastTimestamp") or (event.get("series") or {}).get("lastObservedTime"))
    seen = seen if seen is not None else _epoch(event.get("eventTime"))
    if not node or error is None or seen is None or seen < since:
        return None
    return PullFailure(node, registry_of(image), error)


def _epoch(stamp: Any) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def fold(found: Iterable[PullFailure], requests: int = 0) -> PullFailures:
    """One error per registry and node: the first seen (pods are read before Events)."""
    unreachable: dict[str, dict[str, str]] = {}
    for failure in found:
        unreachable.setdefault(failure.registry, {}).setdefault(failure.node, failure.error)
    return PullFailures(unreachable, requests)


def gather(reader: ReducedLister, *, clock: Callable[[], float] = time.time) -> PullFailures:
    """The registries each node cannot reach, from its pods waiting on a pull and the recent Failed Events
    (two paginated lists, whatever the fleet). Credentials that may not list one of them (a 403) leave that
    source out: the evidence is only ever what could be read."""
    before = reader.request_count
    since = clock() - RECENT_SECONDS
    pods = _listed(reader, "Pod", pod_failures, PENDING_PODS)
    events = _listed(reader, "Event", lambda event: event_failure(event, since), POD_PULL_EVENTS)
    found = [failure for failures in pods for failure in failures]
    found += [failure for failure in events if failure is not None]
    return fold(found, reader.request_count - before)


def _listed(
    reader: ReducedLister, kind: str, reduce: Callable[[dict[str, Any]], Any], fields: str
) -> list[Any]:
    try:
        return reader.list_reduced("v1", kind, reduce, field_selector=fields)
    except AccessDeniedError:
        return []
