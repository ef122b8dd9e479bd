"""The health waiter: reads a component's objects until its gates pass, fail, or its time is up.

Called by the apply walker after each component's change (and after a rollback's), with the component's
:class:`~gpuplan.modules.base.HealthCheck` values and a provider (a
:class:`~gpuplan.providers.protocols.HealthReader`: the Kubernetes writer, or the in-memory fake). The first
round lists the component's pods (its DaemonSet's selector) and the nodes; later rounds keep both current
from watches (:mod:`gpuplan.planner.health.informer`), each object folded into the fields the gates read, so
a round costs a GET of the DaemonSet and one watch window, never a list that grows with the fleet. Between
rounds it follows the watch of what the pending gate depends on (the pods while a rollout or pod-level gate
is pending, the nodes while a node effect is), which returns a moment after its first event, and at most
``poll_seconds`` later for effects no watch reports (a metrics scrape): never a fixed sleep. Within an apply
the nodes and pods are the apply's caches instead (``WaitOptions.caches``,
:mod:`gpuplan.planner.health.follow`): listed once and followed while a gate holds them, so a round reads
them at no cost and waits for the ones it reads to move; and a rolling DaemonSet's gate reads its status
alone while the rollout moves (:meth:`GateView.status_only`), and no pod once the status counts them all
(:meth:`GateView._reads_pods`).

A ``dcgm-metrics`` gate scrapes a sample of the nodes through the pod proxy (:func:`sampled_nodes`: the
first ten the rollout made Ready and every node whose exporter restarted; within an apply, once the
DaemonSet's status counts every exporter available, the first ten targeted nodes by name, whose pods alone
are read, :meth:`GateView._status_sample`; the exporter's ``healthSampleNodes`` key sets the size or
``all``), up to :data:`SCRAPERS` at once, and a scrape that passed is not repeated while its pod is the
same. When the API server refuses the pod proxy for good, the exporter's Service, then the spec's
Prometheus, stand in (:mod:`gpuplan.planner.health.metrics_paths`); with every path refused the gate fails
at once, naming each. A ``healthSampleNodes`` of 0 scrapes nothing: the gate passes on the rollout and the
Ready exporter pods, with a note saying so.

The time limit is the component's ``healthTimeoutSeconds`` (the checks' ``timeoutSeconds``) unless the caller
gives one; when it passes, the last "progressing" message becomes the failure. A permanent cause fails the
wait as soon as it shows (:mod:`gpuplan.planner.health.causes`; the waiter keeps the crash-loop exit codes and
the previous verdict those rules compare with).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.modules.base import DEFAULT_NODE_SELECTOR, HealthCheck
from gpuplan.planner.health import causes
from gpuplan.planner.health import gates as health
from gpuplan.planner.health import nodes as health_nodes
from gpuplan.planner.health.follow import NODES, ApplyCaches, Topic, pod_topic
from gpuplan.planner.health.gates import GateState, GateStatus, Obj, Observation, Scrape
from gpuplan.planner.health.informer import Informer, fold_node, fold_pod
from gpuplan.planner.health.metrics_paths import NOT_SCRAPED, POD_PROXY, MetricsPaths, OpenQuerier, refusal
from gpuplan.planner.health.revision import current_hash
from gpuplan.planner.pools import PlannedPools
from gpuplan.planner.spec.ignore import IgnoreRule
from gpuplan.providers.protocols import HealthReader, ProxyRefused, Reader
from gpuplan.providers.snapshot import ObjectKey

log = logging.getLogger(__name__)
Item = TypeVar("Item")
Answer = TypeVar("Answer")

DEFAULT_TIMEOUT_SECONDS = 300.0
EXPORTER_SELECTOR = "app=nvidia-dcgm-exporter"  # an external exporter is found by the operator's label
POD_GATES = frozenset({"rollout", "validator-ready", "dcgm-metrics"})
REST_PER_JUDGED = 2.0
"""With the apply's caches, a wait rests this many times its round's CPU time after a change: a fleet's
rollout sends events faster than its gates could judge them, and the gates share the cores with it."""
SAMPLE_NODES = 10
"""Nodes whose DCGM exporter the metrics gate scrapes, by default (see :func:`sampled_nodes`)."""
SCRAPERS = 8
"""Scrapes of the sample a metrics gate makes at once."""


@dataclass(frozen=True)
class PoolProgress:
    """One node pool's part of a component's round (``pool`` None: the nodes in no pool): the gate it waits
    for (the last one when all passed), its state, and its nodes (or pods) ready of desired."""

    pool: str | None
    gate: str
    state: GateState
    ready: int
    desired: int


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
    node: str | None = None
    """The node the pending gate names as still missing its effect (the first by name), if it names one."""
    pools: tuple[PoolProgress, ...] = ()
    """Each node pool's part, when the component's gates are judged per pool (more than one pool group);
    the fields above are then the first pool's still waiting (or failed)."""


@dataclass(frozen=True)
class WaitOptions:
    """How to wait: what the component is, the stack facts the gates compare with, and the clocks."""

    component: str = ""
    expected_driver: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_SELECTOR))
    unschedulable_grace: float = health.UNSCHEDULABLE_GRACE_SECONDS
    poll_seconds: float = 1.0
    """The longest quiet wait before reading again, for effects no watch event announces, and the watch
    window of a round: a round ends when its window does (the shortest a server-side watch timeout can
    be), so this is also how long after a burst of events the gates are judged."""
    pool_drivers: tuple[tuple[Mapping[str, str], str], ...] = ()
    """(selector, driver version) of the node pools that pin their own driver (:class:`Observation`)."""
    pools: PlannedPools = field(default_factory=PlannedPools)
    """The node pools as the plan placed the nodes (:class:`Observation`)."""
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    """Seconds since the epoch, compared with the pods' condition timestamps."""
    caches: ApplyCaches | None = None
    """The apply's nodes and pods, kept by followers and shared by every gate
    (:mod:`gpuplan.planner.health.follow`); None: the wait lists and watches them itself."""
    ignore: tuple[IgnoreRule, ...] = ()
    """The spec's ``spec.ignore``: the checks its nodes rules waive on the nodes they select."""
    prometheus: OpenQuerier | None = None
    """Opens the spec's Prometheus (``spec.telemetry.prometheus``), the metrics gate's last path to the
    exporters (:mod:`gpuplan.planner.health.metrics_paths`); None: the spec names none."""


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
    view = PoolViews(checks, provider, opts)
    try:
        return _wait(view, opts, limit, start, on_progress)
    finally:
        view.release()


def _wait(
    view: PoolViews,
    opts: WaitOptions,
    limit: float,
    start: float,
    on_progress: Callable[[Progress], None] | None,
) -> GateStatus:
    confirmation = causes.Confirmation()
    while True:
        status = confirmation.confirm(_judge(view))
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
                    status.node,
                    view.by_pool if status.gate != "read" else (),
                )
            )
        if status.done:
            return status
        remaining = limit - elapsed
        if remaining <= 0 and view.read_all():  # the status alone said not yet: say which pods, and why
            status = confirmation.confirm(_judge(view))
            if status.done:
                return status
        if remaining <= 0:
            return replace(
                status,
                state="failed",
                reason=status.reason or "Timeout",
                message=f"not healthy after {limit:g}s: {status.message}",
            )
        if status.gate != "read":  # a failed read is tried again at once (the provider backed off already)
            view.await_change(status, min(remaining, opts.poll_seconds))


def component_timeout(checks: Sequence[HealthCheck]) -> float:
    """The component's healthTimeoutSeconds, as its modules put it in every check."""
    limits = [float(check.params["timeoutSeconds"]) for check in checks if check.params.get("timeoutSeconds")]
    return max(limits) if limits else DEFAULT_TIMEOUT_SECONDS


def pool_groups(checks: Sequence[HealthCheck]) -> list[tuple[HealthCheck, ...]]:
    """The checks by node pool (``params["pool"]``), the stack's first: each group is judged on its own
    DaemonSet and nodes (design §7.1)."""
    groups: dict[str | None, list[HealthCheck]] = {}
    for check in checks:
        groups.setdefault(check.params.get("pool"), []).append(check)
    return [tuple(group) for group in groups.values()]


class GateView:
    """What one component's wait knows between rounds: its pods and the nodes (informers: listed once, then
    kept by watches), and the DCGM scrapes that passed (a node is not scraped again while its exporter pod
    is the same)."""

    def __init__(
        self,
        checks: Sequence[HealthCheck],
        provider: HealthReader,
        options: WaitOptions,
        nodes: Informer | None = None,
    ) -> None:
        self.checks, self.provider, self.options = tuple(checks), provider, options
        self.rollout = next((check for check in checks if check.kind == "rollout"), None)
        self.metrics_check = next((check for check in checks if check.kind == "dcgm-metrics"), None)
        self.nodes = nodes or Informer(provider, "v1", "Node", fold_node, clock=options.clock)
        groups = pool_groups(checks)
        params = groups[0][0].params if len(groups) == 1 else {}  # a mix of pools (a probe): every node
        self.pool: str | None = params.get("pool")
        self.pool_selector: Mapping[str, str] = params.get("poolSelector") or {}
        self.excluded: tuple[Mapping[str, str], ...] = tuple(params.get("excludeSelectors") or ())
        self.pods: Informer | None = None
        self.topics: set[Topic] = set()
        """What this view read of the apply's caches (its wait wakes when one of them moves)."""
        self.held: set[Topic] = set()
        """The caches this view holds (:meth:`ApplyCaches.hold`) until :meth:`release`."""
        self.exits = causes.ExitCodes()
        self.scraped: dict[str, tuple[str, Scrape]] = {}
        """node -> (exporter pod uid, its scrape that passed the gate)."""
        self.counted_sample: list[str] | None = None
        """The nodes whose exporter pods the last round read alone (:meth:`_status_sample`), if it did."""
        self.deferring = options.caches is not None and self.rollout is not None
        """Whether the pods and nodes are still left unread while the DaemonSet's status moves."""
        self.paths = MetricsPaths(options.prometheus)

    def read(self) -> Observation:
        """One round: the DaemonSet (a GET), the caches (listed on the first round only, or the apply's),
        the scrapes; only the DaemonSet while :meth:`status_only` says so."""
        daemonset = _read_daemonset(self.provider, self.rollout.params) if self.rollout is not None else None
        if self.options.caches is not None and self.rollout is not None:
            namespace = str(self.rollout.params.get("namespace") or "")
            self.topics.add(self.options.caches.daemonsets(namespace))
        if self.status_only(daemonset):
            return Observation(daemonset=daemonset, now=self.options.wall())
        self.deferring = False
        observation = Observation(
            daemonset=daemonset,
            nodes=self._node_items(),
            now=self.options.wall(),
            unschedulable_grace=self.options.unschedulable_grace,
            expected_driver=self.options.expected_driver,
            node_selector=self.options.node_selector,
            pool_selector=self.pool_selector,
            excluded=self.excluded,
            pool_drivers=self.options.pool_drivers,
            pools=self.options.pools,
            revision_hash=_revision_hash(self.provider, self.rollout, daemonset),
            ignore=self.options.ignore,
        )
        if not self._reads_pods(observation) and not self._effect_missing(observation):
            observation = replace(observation, pods_read=False)
        elif (pods := self._pod_items(daemonset, observation)) is not None:
            observation = replace(observation, pods=pods, exits=self.exits.record(pods))
        if self.metrics_check is not None:
            observation = replace(observation, metrics=self._scrape(self.metrics_check.params, observation))
        return observation

    def judge(self) -> GateStatus:
        observation = self.read()
        if self.deferring and self.rollout is not None:  # named as evaluate names it: a display says which
            return replace(health.rollout(self.rollout.params, observation), gate=self.rollout.kind)
        status = health.combine(health.evaluate(check, observation) for check in self.checks)
        if self.metrics_check is None or status.state == "failed":
            return status
        refused = self.paths.failure(self.metrics_check.kind)
        if refused is not None:  # no wait changes a refusal: the cause now, not the timeout's words later
            return refused
        if status.state != "passed":
            return status
        if self.metrics_check.params.get("sampleNodes") == 0:
            return replace(status, notes=(*status.notes, NOT_SCRAPED))
        return replace(status, notes=(*status.notes, self.paths.note)) if self.paths.note else status

    def _reads_pods(self, observation: Observation) -> bool:
        """Whether the round needs the pods: always, but within an apply not once the view's rolling
        DaemonSet's status says every pod is updated and available (no pod is then left whose cause a gate
        could name) and counts one per targeted node (the validator's gate then counts its Ready pods by
        the status, :func:`~gpuplan.planner.health.nodes.validators_counted`), unless a gate scrapes them."""
        daemonset = observation.daemonset
        if self.options.caches is None or self.rollout is None or daemonset is None:
            return True
        if self.metrics_check is not None or health.on_delete(self.rollout.params, daemonset):
            return True
        if any(check.kind in rule.checks for rule in self.options.ignore for check in self.checks):
            return True  # the status counts the waived nodes' pods too: the gate counts the others
        if not health.rolled_out(daemonset):
            return True
        if not any(check.kind == "validator-ready" for check in self.checks):
            return False
        desired = int((daemonset.get("status") or {}).get("desiredNumberScheduled") or 0)
        return desired != len(health_nodes.targeted_nodes(observation))

    def _effect_missing(self, observation: Observation) -> bool:
        """Whether a gate finds an effect missing that its pods tell apart from one still coming (how long
        the pod on the node has been Ready, :func:`~gpuplan.planner.health.causes.settled_pod`)."""
        return any(
            check.kind in causes.SETTLED_EFFECTS and health.evaluate(check, observation).state != "passed"
            for check in self.checks
        )

    def status_only(self, daemonset: Mapping[str, Any] | None) -> bool:
        """Whether this round reads the DaemonSet's status alone, as ``kubectl rollout status`` does: within
        an apply (the caches), while a rolling DaemonSet's status says its rollout is not done and no
        Warning Event about one of its pods came since the apply wrote it. Following a fleet's pods as they
        start costs the API server an encoded event per pod change and the gate a decoded one, on the cores
        the rollout runs on. Every permanent cause a gate names comes with a warning from the kubelet or
        the scheduler (Failed for a pull, an invalid image or a container config error, BackOff for a
        crash loop, FailedScheduling), so a warning, or the status saying done (the effects are then judged
        on every node), has the pods and nodes read and followed from then on; and a wait that runs out
        of time reads them once, to say which pods are not ready and why (:meth:`PoolViews.read_all`)."""
        caches, rollout = self.options.caches, self.rollout
        if not self.deferring or caches is None or rollout is None:
            return False
        namespace, name = str(rollout.params.get("namespace") or ""), str(rollout.params.get("daemonset"))
        self.topics.add(caches.warnings(namespace))
        if daemonset is not None and health.on_delete(rollout.params, daemonset):
            why = "it is OnDelete: its status does not tell which pods are current"
        elif daemonset is not None and health.rolled_out(daemonset):
            why = "its status says the rollout is done"
        elif caches.warned(namespace, f"{name}-"):
            why = "a Warning Event names one of its pods"
        else:
            caches.rest()
            return True
        log.debug("DaemonSet %s/%s: reading its pods and the nodes: %s", namespace, name, why)
        return False

    @property
    def watched(self) -> bool:
        """Whether a watch moved the caches since they were listed."""
        return self.nodes.followed or (self.pods is not None and self.pods.followed)

    def relist(self) -> None:
        """List the caches of this wait again (not the apply's: their followers never fall behind)."""
        if self.options.caches is None:
            self.nodes.sync()
        if self.pods is not None:
            self.pods.sync()

    def await_change(self, status: GateStatus, seconds: float) -> None:
        """Apply the events of one watch window on what the pending gate depends on: the pods while a
        rollout or pod-level gate is pending, the nodes while a node effect is."""
        pods_first = status.gate in POD_GATES or self.options.caches is not None  # the nodes are followed
        informer = self.pods if pods_first and self.pods is not None else self.nodes
        informer.follow(seconds)

    def release(self) -> None:
        """Let the caches this view read rest once no other gate holds them (the wait is over)."""
        if self.options.caches is not None:
            self.options.caches.release(self.held)
        self.held.clear()
        self.paths.close()

    def _hold(self, topic: Topic) -> None:
        self.topics.add(topic)
        if topic not in self.held:
            assert self.options.caches is not None
            self.options.caches.hold(topic)
            self.held.add(topic)

    def _node_items(self) -> tuple[dict[str, Any], ...]:
        if self.options.caches is not None:
            self._hold(NODES)
            return self.options.caches.nodes()
        if not self.nodes.synced:
            self.nodes.sync()
        return self.nodes.items()

    def _pod_items(
        self, daemonset: Mapping[str, Any] | None, observation: Observation
    ) -> tuple[dict[str, Any], ...] | None:
        namespace, selector = _pod_query(self.checks, daemonset)
        if not selector:
            return None
        self.counted_sample = self._status_sample(observation) if namespace else None
        if self.counted_sample is not None:
            assert namespace  # a sample is taken only in a namespace
            return self._pods_on(namespace, selector, self.counted_sample)
        if self.options.caches is not None and namespace:
            self._hold(pod_topic(namespace, selector))
            return self.options.caches.pods(namespace, selector)
        return self._pods(namespace, selector).items()

    def _pods(self, namespace: str | None, selector: str) -> Informer:
        if self.pods is None or (self.pods.namespace, self.pods.label_selector) != (namespace, selector):
            self.pods = Informer(
                self.provider,
                "v1",
                "Pod",
                fold_pod,
                namespace=namespace,
                label_selector=selector,
                clock=self.options.clock,
            )
        if not self.pods.synced:
            self.pods.sync()
        return self.pods

    def _status_sample(self, observation: Observation) -> list[str] | None:
        """The nodes whose exporter pods alone a metrics gate reads: within an apply, once its DaemonSet's
        status counts every exporter updated and available, one per targeted node, the first
        ``sampleNodes`` targeted nodes by name (every other exporter counts by that status, as a Ready pod
        does). Listing a fleet's exporter pods to pick ten of them cost the API server as much as the
        nodes. None: the pods are read (``all``, an OnDelete DaemonSet, or a status that does not count
        them all yet)."""
        check, daemonset = self.metrics_check, observation.daemonset
        if check is None or self.rollout is None or daemonset is None or self.options.caches is None:
            return None
        wanted = check.params.get("sampleNodes", SAMPLE_NODES)
        if wanted == "all" or health.on_delete(self.rollout.params, daemonset):
            return None
        if not health.rolled_out(daemonset):
            return None
        targets = sorted(health_nodes.node_name(node) for node in health_nodes.targeted_nodes(observation))
        desired = int((daemonset.get("status") or {}).get("desiredNumberScheduled") or 0)
        return targets[: int(wanted)] if desired == len(targets) else None

    def _pods_on(self, namespace: str, selector: str, nodes: Sequence[str]) -> tuple[dict[str, Any], ...]:
        """The pods ``selector`` matches on ``nodes``: one list per node by its ``spec.nodeName`` field
        selector (the API server's pod-by-node index), up to :data:`SCRAPERS` at once."""

        def on(node: str) -> list[dict[str, Any]]:
            on_node = f"spec.nodeName={node}"
            listing = self.provider.list_objects(
                "v1", "Pod", namespace=namespace, label_selector=selector, field_selector=on_node
            )
            return [fold_pod(live.manifest) for live in listing]

        return tuple(pod for here in _at_once(on, nodes) for pod in here)

    def _scrape(self, params: Mapping[str, Any], observation: Observation) -> dict[str, Scrape]:
        """The scrapes the gate judges: the sampled nodes' (see :func:`sampled_nodes`), a passed one reused
        while its pod is the same; every other node's exporter counts by its Ready pod alone."""
        port, path = int(params.get("port") or 9400), str(params.get("path") or "/metrics")
        exporters = _exporter_pods(observation)
        sample = sampled_nodes(params, exporters)
        scrapes: dict[str, Scrape] = {}
        wanted: dict[str, Obj] = {}
        for name, here in exporters.items():
            pod = next((p for p in here if health.pod_ready(p)), None)
            if pod is None:
                scrapes[name] = Scrape(health.pod_name(here[0]), error="the exporter pod is not Ready yet")
            elif name not in sample:
                scrapes[name] = Scrape(health.pod_name(pod), sampled_out=True)
            else:
                wanted[name] = pod
        scrapes.update(self._scrape_pods(wanted, port, path, observation))
        if self.counted_sample is not None:  # the status counts every other node's exporter available
            for node in health_nodes.targeted_nodes(observation):
                scrapes.setdefault(health_nodes.node_name(node), Scrape(None, sampled_out=True))
        return scrapes

    def _scrape_pods(
        self, wanted: Mapping[str, Obj], port: int, path: str, observation: Observation
    ) -> dict[str, Scrape]:
        """The sample's scrapes, up to :data:`SCRAPERS` at once: each waits on the API server's proxy and
        the exporter behind it, not on this process. Once the pod proxy is refused for good, through the
        paths that stand in for it (:meth:`MetricsPaths.fallback`)."""
        if not wanted:
            return {}
        if POD_PROXY not in self.paths.refused:
            scraped = _at_once(
                lambda item: self._scrape_pod(item[0], item[1], port, path, observation), list(wanted.items())
            )
            if POD_PROXY not in self.paths.refused:
                return dict(zip(wanted, scraped, strict=True))
        assert self.metrics_check is not None
        return self.paths.fallback(self.provider, self.metrics_check.params, wanted)

    def _scrape_pod(self, node: str, pod: Obj, port: int, path: str, observation: Observation) -> Scrape:
        uid = str((pod.get("metadata") or {}).get("uid") or health.pod_name(pod))
        remembered = self.scraped.get(node)
        if remembered is not None and remembered[0] == uid:
            return remembered[1]
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        try:
            text = self.provider.proxy_get(namespace, health.pod_name(pod), port, path)
        except ProxyRefused as exc:  # no wait changes it: the paths that stand in are tried this round
            self.paths.refuse(POD_PROXY, refusal(exc))
            return Scrape(health.pod_name(pod), error=exc.summary)
        except ProviderError as exc:  # 503 while the exporter starts, 404 if the pod just went: not yet
            return Scrape(health.pod_name(pod), error=exc.summary)
        scrape = Scrape(health.pod_name(pod), text=text.decode("utf-8", "replace"))
        assert self.metrics_check is not None
        target = next(n for n in observation.nodes if health_nodes.node_name(n) == node)
        if (
            health_nodes.dcgm_metrics(
                self.metrics_check.params, target, replace(observation, metrics={node: scrape})
            )
            is None
        ):
            self.scraped[node] = (uid, scrape)
        return scrape


class PoolViews:
    """One wait over a component's node pools and rollouts: a :class:`GateView` per pool group and, where a
    group rolls out more than one DaemonSet (the device plugin and its MPS control daemon), per rollout
    (all sharing the node informer); one verdict for all (the first failure, else the first view still
    progressing), and each round follows the watch of the view that is pending, or, with the apply's
    caches, waits for any of them to move."""

    def __init__(self, checks: Sequence[HealthCheck], provider: HealthReader, options: WaitOptions) -> None:
        groups = view_groups(checks)
        first = GateView(groups[0], provider, options)
        self.views = [first, *(GateView(group, provider, options, first.nodes) for group in groups[1:])]
        self.pending = first
        self.by_pool: tuple[PoolProgress, ...] = ()
        """The last round's verdict per node pool (:func:`per_pool`)."""
        self.caches = options.caches
        self.seen = 0
        """The stamp of the caches this wait reads when the last round began: what moved since is news."""
        self.judged_in = 0.0
        """The CPU time the last round took to judge (its thread's: not the requests it waited on)."""

    def judge(self) -> GateStatus:
        began = time.thread_time()
        if self.caches is not None:
            self.seen = self.caches.stamp(self._topics())
        statuses = [view.judge() for view in self.views]
        self.judged_in = time.thread_time() - began
        self.pending = next(
            (view for view, status in zip(self.views, statuses) if not status.done), self.views[0]
        )
        self.by_pool = per_pool([view.pool for view in self.views], statuses)
        return health.combine(statuses) if len(statuses) > 1 else statuses[0]

    @property
    def watched(self) -> bool:
        return any(view.watched for view in self.views)

    def read_all(self) -> bool:
        """Have every view read its pods and nodes from the next round on; whether one read its DaemonSet's
        status alone until now."""
        deferring = any(view.deferring for view in self.views)
        for view in self.views:
            view.deferring = False
        return deferring

    def release(self) -> None:
        for view in self.views:
            view.release()

    def relist(self) -> None:
        self.views[0].relist()
        for view in self.views[1:]:  # the node informer is the first view's
            if view.pods is not None:
                view.pods.sync()

    def await_change(self, status: GateStatus, seconds: float) -> None:
        """Until what the pending view depends on moves. With the apply's caches, until the nodes or the
        pods one of the views read moved since the round began, and then twice the CPU time the round took to
        judge (:data:`REST_PER_JUDGED`), so that the events of a busy rollout are judged in batches, not one
        round per event, and judging takes at most a third of a core from the rollout it waits for."""
        if self.caches is None or self.pending.pods is not None:  # pods of no namespace: its own informer
            self.pending.await_change(status, seconds)
            return
        if self.caches.await_change(self._topics(), self.seen, seconds):
            time.sleep(REST_PER_JUDGED * self.judged_in)

    def _topics(self) -> frozenset[Topic]:
        return frozenset(topic for view in self.views for topic in view.topics)


def per_pool(pools: Sequence[str | None], statuses: Sequence[GateStatus]) -> tuple[PoolProgress, ...]:
    """One verdict per node pool, in the views' order (the stack's first), from the statuses of the views
    (a pool may have several: one per rollout); none when every view is of one pool."""
    grouped: dict[str | None, list[GateStatus]] = {}
    for pool, status in zip(pools, statuses):
        grouped.setdefault(pool, []).append(status)
    if len(grouped) < 2:
        return ()
    verdicts = ((pool, health.combine(found)) for pool, found in grouped.items())
    return tuple(PoolProgress(pool, s.gate, s.state, s.ready, s.desired) for pool, s in verdicts)


def view_groups(checks: Sequence[HealthCheck]) -> list[tuple[HealthCheck, ...]]:
    """The checks one :class:`GateView` each judges: by node pool (:func:`pool_groups`), and within a pool
    one view per DaemonSet its rollout gates name, the first with the pool's other gates."""
    views: list[tuple[HealthCheck, ...]] = []
    for group in pool_groups(checks) or [()]:
        rollouts = [check for check in group if check.kind == "rollout"]
        if len(rollouts) <= 1:
            views.append(group)
            continue
        views.append(tuple(check for check in group if check.kind != "rollout" or check is rollouts[0]))
        views += [(check,) for check in rollouts[1:]]
    return views


def sampled_nodes(params: Mapping[str, Any], exporters: Mapping[str, Sequence[Obj]]) -> set[str]:
    """The nodes whose exporter is scraped: the first ``sampleNodes`` (default :data:`SAMPLE_NODES`; ``all``
    for every node) the rollout made Ready, in the order it did (the Ready condition's transition time, then
    the node's name), plus every node whose exporter restarted. The exporter of every other node counts as
    healthy by its Ready pod, which the rollout gate already demands; the scrape proves on a sample that
    the exporters serve metrics for every GPU, and a scrape per node and round would cost a request per
    node."""
    wanted = params.get("sampleNodes", SAMPLE_NODES)
    if wanted == "all":
        return set(exporters)
    if wanted == 0:  # no scrape at all, not even of a restarted exporter: its Ready pod counts
        return set()
    ready = sorted(
        (_ready_since(pod), name)
        for name, here in exporters.items()
        for pod in here[:1]
        if health.pod_ready(pod)
    )
    sample = {name for _, name in ready[: int(wanted)]}
    restarted = {
        name
        for name, here in exporters.items()
        if any(int(c.get("restartCount") or 0) > 0 for p in here for c in _container_statuses(p))
    }
    return sample | restarted


def _at_once(call: Callable[[Item], Answer], items: Sequence[Item]) -> list[Answer]:
    """``call`` of each item, in order, up to :data:`SCRAPERS` at once: each waits on the API server (its
    proxy and the exporter behind it, or a list), not on this process. One item needs no thread."""
    if len(items) <= 1:
        return [call(item) for item in items]
    with futures.ThreadPoolExecutor(max_workers=min(SCRAPERS, len(items))) as pool:
        return list(pool.map(call, items))


def observe(checks: Sequence[HealthCheck], provider: HealthReader, options: WaitOptions) -> Observation:
    """One read of everything the component's gates look at (lists, no watch)."""
    view = GateView(checks, provider, options)
    try:
        return view.read()
    finally:
        view.release()


def _exporter_pods(observation: Observation) -> dict[str, list[Obj]]:
    """Targeted node -> its exporter pods of the current template, Ready ones first (a node with none is
    left out: the gate says no exporter runs there)."""
    pods = (
        health.current_pods(observation.daemonset, observation.pods)
        if observation.daemonset
        else list(observation.pods)
    )
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        by_node.setdefault(health.node_of(pod) or "", []).append(pod)
    found: dict[str, list[Obj]] = {}
    for node in health_nodes.targeted_nodes(observation):
        name = health_nodes.node_name(node)
        here = sorted(by_node.get(name, ()), key=lambda p: (not health.pod_ready(p), health.pod_name(p)))
        if here:
            found[name] = here
    return found


def _ready_since(pod: Obj) -> str:
    condition = health.condition_of(pod, "Ready") or {}
    return str(condition.get("lastTransitionTime") or "")


def _container_statuses(pod: Obj) -> Sequence[Obj]:
    statuses: Sequence[Obj] = (pod.get("status") or {}).get("containerStatuses") or ()
    return statuses


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


def _judge(view: PoolViews) -> GateStatus:
    """The round's verdict. A pass seen through watches is confirmed on a fresh list of the pods and nodes
    (one read, as every round used to be), since the watch not followed last may lag behind: the verdict
    that ends the wait is never given on stale objects."""
    try:
        status = view.judge()
        if status.state == "passed" and view.watched:
            view.relist()
            status = view.judge()
    except TransientProviderError as exc:  # retries exhausted on a flaky server: not healthy *yet*
        return GateStatus("progressing", f"the cluster did not answer: {exc.summary}", gate="read")
    return status


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


def watch_warnings(caches: ApplyCaches, daemonset: Mapping[str, Any]) -> None:
    """Follow the Warning Events of a DaemonSet's namespace, listed before the DaemonSet is written, so that
    its gate, while it reads the status alone, hears of a pod that cannot start from the first warning on.
    Listed after the write, a pull failure's one Warning (Failed; the back-offs that follow are Normal
    Events, pkg/kubelet/images/image_manager.go) could land in the first list, which counts for nothing,
    and the gate read the status alone until its timeout."""
    namespace = (daemonset.get("metadata") or {}).get("namespace")
    if namespace:
        caches.listen_for_warnings(str(namespace))
