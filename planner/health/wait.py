"""The health waiter: reads a component's objects until its gates pass, fail, or its time is up.

Called by the apply walker after each component's change (and after a rollback's), with the component's
:class:`~gpuplan.modules.base.HealthCheck` values and a provider (a
:class:`~gpuplan.providers.protocols.HealthReader`: the Kubernetes writer, or the in-memory fake). Each
round reads the component's DaemonSet, its pods (the DaemonSet's selector), every node (one paginated list)
and, for a ``dcgm-metrics`` gate, one scrape through the pod proxy per targeted node whose exporter is Ready;
:func:`gpuplan.planner.health.gates.evaluate` judges the result, and ``on_progress`` hears it. Between
rounds it waits on a watch (the pods while a rollout
or pod-level gate is pending, the nodes while a node effect is) that returns at the first event, and at
most ``poll_seconds`` for effects no watch reports (a metrics scrape): never a fixed sleep.

The time limit is the component's ``healthTimeoutSeconds`` (the checks' ``timeoutSeconds``) unless the caller
gives one; when it passes, the last "progressing" message becomes the failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.modules.base import DEFAULT_NODE_SELECTOR, HealthCheck
from gpuplan.planner.health import gates as health
from gpuplan.planner.health import nodes as health_nodes
from gpuplan.planner.health.gates import GateState, GateStatus, Observation, Scrape
from gpuplan.planner.health.revision import current_hash
from gpuplan.providers.protocols import HealthReader, Listing, Reader
from gpuplan.providers.snapshot import ObjectKey

DEFAULT_TIMEOUT_SECONDS = 300.0
EXPORTER_SELECTOR = "app=nvidia-dcgm-exporter"  # an external exporter is found by the operator's label
POD_GATES = frozenset({"rollout", "validator-ready", "dcgm-metrics"})


@dataclass(frozen=True)
class Progress:
    """One round of the wait, for a live display or a JSON ``progress`` event."""

    component: str
    gate: str
    state: GateState
    ready: int
    desired: int
    elapsed: float
    message: str


@dataclass(frozen=True)
class WaitOptions:
    """How to wait: what the component is, the stack facts the gates compare with, and the clocks."""

    component: str = ""
    expected_driver: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_SELECTOR))
    unschedulable_grace: float = health.UNSCHEDULABLE_GRACE_SECONDS
    poll_seconds: float = 2.0
    """The longest quiet wait before reading again, for effects no watch event announces."""
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    """Seconds since the epoch, compared with the pods' condition timestamps."""


@dataclass(frozen=True)
class Reading:
    """One round's observation, and where to watch from for the next: the lists' resourceVersions and the
    pods' namespace and selector."""

    observation: Observation
    pods_version: str | None
    nodes_version: str | None
    pod_namespace: str | None
    pod_selector: str | None


def wait(
    checks: Sequence[HealthCheck],
    provider: HealthReader,
    timeout: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    *,
    options: WaitOptions | None = None,
) -> GateStatus:
    """Until the component's gates pass or one fails; a failed status when ``timeout`` seconds pass first."""
    opts = options or WaitOptions()
    limit = timeout if timeout is not None else component_timeout(checks)
    start = opts.clock()
    while True:
        status, current = _judge(checks, provider, opts)
        elapsed = opts.clock() - start
        if on_progress is not None:
            on_progress(
                Progress(
                    opts.component,
                    status.gate,
                    status.state,
                    status.ready,
                    status.desired,
                    elapsed,
                    status.message,
                )
            )
        if status.done:
            return status
        remaining = limit - elapsed
        if remaining <= 0:
            return replace(
                status,
                state="failed",
                reason=status.reason or "Timeout",
                message=f"not healthy after {limit:g}s: {status.message}",
            )
        _await_change(provider, status, current, min(remaining, opts.poll_seconds))


def component_timeout(checks: Sequence[HealthCheck]) -> float:
    """The component's healthTimeoutSeconds, as its modules put it in every check."""
    limits = [float(check.params["timeoutSeconds"]) for check in checks if check.params.get("timeoutSeconds")]
    return max(limits) if limits else DEFAULT_TIMEOUT_SECONDS


def observe(checks: Sequence[HealthCheck], provider: HealthReader, options: WaitOptions) -> Reading:
    """One read of everything the component's gates look at."""
    rollout = next((check for check in checks if check.kind == "rollout"), None)
    daemonset = _read_daemonset(provider, rollout.params) if rollout is not None else None
    namespace, selector = _pod_query(checks, daemonset)
    pods = provider.list_pods(namespace=namespace, label_selector=selector) if selector else Listing((), None)
    nodes = provider.list_nodes()
    observation = Observation(
        daemonset=daemonset,
        pods=tuple(pod.manifest for pod in pods),
        nodes=tuple(n.manifest for n in nodes),
        now=options.wall(),
        unschedulable_grace=options.unschedulable_grace,
        expected_driver=options.expected_driver,
        node_selector=options.node_selector,
        revision_hash=_revision_hash(provider, rollout, daemonset),
    )
    metrics_check = next((check for check in checks if check.kind == "dcgm-metrics"), None)
    if metrics_check is not None:
        observation = replace(observation, metrics=_scrape(metrics_check.params, observation, provider))
    return Reading(observation, pods.resource_version, nodes.resource_version, namespace, selector)


def _revision_hash(
    provider: HealthReader, rollout: HealthCheck | None, daemonset: Mapping[str, Any] | None
) -> str | None:
    """The current template's revision hash of an OnDelete DaemonSet (the driver), for the in-sync test; a
    provider that cannot list ControllerRevisions (a test fake) leaves the test to generation and
    containers."""
    if (
        rollout is None
        or daemonset is None
        or rollout.params.get("strategy") != "OnDelete"
        or not isinstance(provider, Reader)
    ):
        return None
    found: str | None = current_hash(provider, daemonset)
    return found


def _judge(
    checks: Sequence[HealthCheck], provider: HealthReader, options: WaitOptions
) -> tuple[GateStatus, Reading | None]:
    try:
        current = observe(checks, provider, options)
    except TransientProviderError as exc:  # retries exhausted on a flaky server: not healthy *yet*
        return GateStatus("progressing", f"the cluster did not answer: {exc.summary}", gate="read"), None
    return health.combine(health.evaluate(check, current.observation) for check in checks), current


def _await_change(
    provider: HealthReader, status: GateStatus, current: Reading | None, seconds: float
) -> None:
    """Block until the next event of what the pending gate depends on, or ``seconds``."""
    if current is None:
        return  # the read failed after the provider's own backed-off retries: read again at once
    if status.gate in POD_GATES and current.pod_selector:
        events = provider.watch(
            "v1",
            "Pod",
            namespace=current.pod_namespace,
            label_selector=current.pod_selector,
            resource_version=current.pods_version,
            timeout=seconds,
        )
    else:
        events = provider.watch("v1", "Node", resource_version=current.nodes_version, timeout=seconds)
    try:
        for _event in events:
            break  # something changed: read again
    except TransientProviderError:
        pass  # an expired or dropped watch: the next round reads afresh
    finally:
        close = getattr(events, "close", None)
        if callable(close):
            close()


def _read_daemonset(provider: HealthReader, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    key = ObjectKey("apps/v1", "DaemonSet", str(params.get("namespace") or ""), str(params.get("daemonset")))
    live = provider.read(key)
    return live.manifest if live is not None else None


def _pod_query(
    checks: Sequence[HealthCheck], daemonset: Mapping[str, Any] | None
) -> tuple[str | None, str | None]:
    """Namespace and label selector of the component's pods: its DaemonSet's, else what a gate names."""
    if daemonset is not None:
        match = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{key}={value}" for key, value in sorted(match.items()))
        return (daemonset.get("metadata") or {}).get("namespace"), selector or None
    for check in checks:
        if check.kind == "validator-ready":
            return check.params.get("namespace"), str(check.params.get("selector"))
        if check.kind == "dcgm-metrics":
            return check.params.get("namespace"), EXPORTER_SELECTOR
    return None, None


def _scrape(params: Mapping[str, Any], observation: Observation, provider: HealthReader) -> dict[str, Scrape]:
    """One scrape per targeted node, through the Ready exporter pod running there."""
    port, path = int(params.get("port") or 9400), str(params.get("path") or "/metrics")
    pods = (
        health.current_pods(observation.daemonset, observation.pods)
        if observation.daemonset
        else list(observation.pods)
    )
    scrapes: dict[str, Scrape] = {}
    for node in health_nodes.targeted_nodes(observation):
        name = str((node.get("metadata") or {}).get("name"))
        here = sorted((pod for pod in pods if health.node_of(pod) == name), key=health.pod_name)
        if not here:
            continue
        pod = next((p for p in here if health.pod_ready(p)), None)
        if pod is None:
            scrapes[name] = Scrape(health.pod_name(here[0]), error="the exporter pod is not Ready yet")
            continue
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        try:
            text = provider.proxy_get(namespace, health.pod_name(pod), port, path).decode("utf-8", "replace")
        except ProviderError as exc:  # 503 while the exporter starts, 404 if the pod just went: not yet
            scrapes[name] = Scrape(health.pod_name(pod), error=exc.summary)
            continue
        scrapes[name] = Scrape(health.pod_name(pod), text=text)
    return scrapes
