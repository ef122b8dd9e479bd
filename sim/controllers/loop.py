"""The simulator's one reconcile thread: store events in, a heap of timers, and calls from other threads.

Every controller and every simulated kubelet of the simulator runs on this one thread, as handlers of one
``Loop`` (the informer + work-queue pattern of kube-controller-manager, folded into one thread because the
GIL would serialise the work anyway). That makes the caches and the per-node GPU states single-owner data:
no locks around them, and a simulated fleet of 5,000 nodes costs no thread per node and no sleep per pod.

One pass of the loop: apply every queued store event to the shared
:class:`~gpuplan.sim.controllers.cache.Cache` (nodes, pods, DaemonSets, Services, Endpoints, EndpointSlices)
and hand the resulting changes to the handlers (which only mark work), let each handler ``flush`` its work
(the writes it makes come back as events in a later pass), run the timers that are due, and run the calls
other threads asked for (``run_sync``: the control API, the pod proxy, the Python API of ``Simulator``).

The loop also owns the cluster's ``EventRecorder`` (``loop.events``, shared by the handlers that write core/v1
Events) and registers the first handler itself: ``PodEvents``, the scheduler's and kubelets' events derived
from pod transitions.

Callers: ``gpuplan.sim.cluster.Simulator`` builds one Loop, registers the DaemonSet controller, the node
lifecycle controller and the kubelet runtime as handlers, and uses ``wait_idle`` / ``run_sync``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.object_store import ObjectStore
from gpuplan.sim.api.objects import StorageKey
from gpuplan.sim.controllers.cache import Cache, Change
from gpuplan.sim.controllers.events import EventRecorder
from gpuplan.sim.controllers.pod_events import PodEvents

log = logging.getLogger(__name__)

T = TypeVar("T")

# (group, plural) of the kinds the cache tracks -> the cache's kind name
_CACHED = {
    ("", "nodes"): "nodes",
    ("", "pods"): "pods",
    ("apps", "daemonsets"): "daemonsets",
    ("", "services"): "services",
    ("", "endpoints"): "endpoints",
    ("discovery.k8s.io", "endpointslices"): "endpointslices",
    ("", "namespaces"): "namespaces",
    ("batch", "jobs"): "jobs",
    ("batch", "cronjobs"): "cronjobs",
    ("policy", "poddisruptionbudgets"): "poddisruptionbudgets",
}


class Handler(Protocol):
    """A controller or kubelet runtime driven by the loop."""

    def on_change(self, change: Change) -> None:
        """Note what changed (cheap: mark keys dirty); never write to the store here."""

    def flush(self) -> bool:
        """Do the work marked since the last flush (writes are allowed); True when there was any."""


@dataclass(order=True)
class Timer:
    """A deadline on the loop's heap. ``settling`` timers keep ``wait_idle`` waiting; background ones
    (a crash-looping container's next restart) do not, or a crash loop would never let a test settle."""

    deadline: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    settling: bool = field(default=True, compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """The single thread that owns the caches, the controllers' work and the kubelets' node states."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        record_events: bool = True,
        scheduler_events: bool = True,
        kubelet_events: Callable[[str], bool] | None = None,
    ) -> None:
        """``record_events``: write the scheduler's and kubelets' pod Events (``pod_events``); ``events`` is
        the recorder every handler shares either way. ``scheduler_events``: record ``Scheduled`` (a real
        kube-scheduler records its own); ``kubelet_events(node)``: whether that node's kubelet events are this
        loop's to record (every node's by default; none where the nodes run elsewhere, only its own nodes'
        in a node agent)."""
        self.store = store
        self.cache = Cache()
        self.clock = clock
        self.errors: list[BaseException] = []
        self.events = EventRecorder(store, clock=clock)
        self._handlers: list[Handler] = (
            [PodEvents(self, self.events, scheduler=scheduler_events, kubelets=kubelet_events)]
            if record_events
            else []
        )
        self._cond = threading.Condition()
        self._events: deque[store_mod.Event] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._passes = 0

    # -- wiring ------------------------------------------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def subscribe(self, kinds: Iterable[str] | None = None) -> None:
        """Start receiving the store's events (before the first object is created, so none is missed);
        what the store held before (its seeded namespaces) counts as seen. Only the kinds the cache holds
        (the others, core/v1 Events above all, ten per pod, would be copied for the loop to drop), and not
        the handlers' own read-only writes: each handler applies its answer at once (``observe``), so their
        events would be dropped as not newer, after waiting in the loop's queue for the end of its pass.
        ``kinds``: only those of the cache's kinds (a node agent's handlers read nodes and pods only, and each
        kind costs it a list and a watch)."""
        wanted = None if kinds is None else set(kinds)
        resources: list[StorageKey] = [
            key for key, kind in _CACHED.items() if wanted is None or kind in wanted
        ]
        self._unsubscribe = self.store.subscribe(
            self._enqueue_event, resources=resources, read_only_writes=False
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuplan-sim-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        while self._calls:
            _, future = self._calls.popleft()
            future.set_exception(RuntimeError("the simulator stopped"))

    @property
    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # -- scheduling --------------------------------------------------------------------------------------
    def call_later(self, delay: float, callback: Callable[[], None], *, settling: bool = True) -> Timer:
        timer = Timer(self.clock() + max(0.0, delay), next(self._seq), callback, settling)
        with self._cond:
            heapq.heappush(self._timers, timer)
            self._cond.notify_all()
        return timer

    def run_sync(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run ``fn`` on the loop thread and return its result (at once when already on it)."""
        if self.on_loop_thread or self._thread is None:
            return fn()
        return self.submit(fn).result(timeout)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn`` for the loop thread; its future holds the result (for callers that must not block)."""
        future: Future[T] = Future()
        with self._cond:
            self._calls.append((fn, future))
            self._cond.notify_all()
        return future

    def wait_idle(self, timeout: float = 10.0, *, horizon: float = 0.0) -> bool:
        """Wait until every store write has been seen and handled and no settling timer is due before
        ``now + horizon``; False when ``timeout`` passed first."""
        deadline = self.clock() + timeout
        with self._cond:
            while True:
                next_due = self._next_settling_deadline()
                now = self.clock()
                caught_up = self._unsubscribe is None or self.store.caught_up()
                if (
                    not self._busy
                    and not self._events
                    and not self._calls
                    and caught_up
                    and (next_due is None or next_due > now + horizon)
                ):
                    return True
                if now >= deadline:
                    return False
                wait = deadline - now
                if (
                    next_due is not None
                    and not self._busy
                    and not self._events
                    and caught_up
                    and next_due < deadline
                ):
                    wait = min(wait, max(0.001, next_due - now))
                self._cond.wait(min(wait, 0.05))

    def wait_pass(self, timeout: float) -> None:
        """Block until the loop finished another pass (or ``timeout``): a change may have happened."""
        with self._cond:
            start = self._passes
            self._cond.wait_for(lambda: self._passes > start or self._stopping, timeout)

    # -- the thread --------------------------------------------------------------------------------------
    def _enqueue_event(self, event: store_mod.Event) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def _next_settling_deadline(self) -> float | None:
        due = [t.deadline for t in self._timers if t.settling and not t.cancelled]
        return min(due) if due else None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._has_work():
                    self._cond.wait(self._sleep_time())
                if self._stopping:
                    return
                self._busy = True
                events = list(self._events)
                self._events.clear()
                calls = list(self._calls)
                self._calls.clear()
            try:
                self._pass(events, calls)
            finally:
                with self._cond:
                    self._busy = False
                    self._passes += 1
                    self._cond.notify_all()

    def _has_work(self) -> bool:
        if self._events or self._calls:
            return True
        self._drop_cancelled()
        return bool(self._timers) and self._timers[0].deadline <= self.clock()

    def _sleep_time(self) -> float | None:
        self._drop_cancelled()
        if not self._timers:
            return None
        return max(0.0, self._timers[0].deadline - self.clock())

    def _drop_cancelled(self) -> None:
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)

    def _pass(
        self, events: list[store_mod.Event], calls: list[tuple[Callable[[], Any], Future[Any]]]
    ) -> None:
        for event in events:
            self._guard(functools.partial(self._dispatch_event, event))
        self._flush()
        for timer in self._due_timers():
            self._guard(timer.callback)
        self._flush()
        for fn, future in calls:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    future.set_exception(exc)
        self._flush()

    def _dispatch_event(self, event: store_mod.Event) -> None:
        kind = _CACHED.get((event.rt.group, event.rt.plural))
        if kind is None:
            return
        change = self.cache.apply(kind, event.object, deleted=event.type == "DELETED")
        if change is not None:
            self.dispatch(change)

    def observe(self, kind: str, obj: dict[str, Any], *, deleted: bool = False) -> None:
        """Write-through of a handler's own write: the cache and the other handlers learn of it now,
        not only when its event arrives (the event is then ignored as not newer)."""
        change = self.cache.apply(kind, obj, deleted=deleted)
        if change is not None:
            self.dispatch(change)

    def write_behind(
        self,
        kind: str,
        key: Hashable,
        write: Callable[[], dict[str, Any] | None],
        done: Callable[[], None] = lambda: None,
    ) -> None:
        """A handler's write whose answer only updates the cache (``observe``, on this thread, then ``done``):
        the store makes it at once or on a background lane of ``key``'s (``ObjectStore.write_behind``).
        ``write`` returns None when there was nothing to write to."""

        def observed(answer: dict[str, Any] | None) -> None:
            try:
                if answer is not None:
                    self.observe(kind, answer)
            finally:
                done()

        def then(answer: dict[str, Any] | None) -> None:
            if self.on_loop_thread or self._thread is None:
                observed(answer)
            else:
                self.submit(lambda: observed(answer))

        self.store.write_behind(key, write, then)

    def dispatch(self, change: Change) -> None:
        """Tell every handler about a change (also used after a handler's own write-through)."""
        for handler in self._handlers:
            handler.on_change(change)

    def _flush(self) -> None:
        # A handler's write-through can give another handler (or itself) new work: repeat until quiet.
        for _ in range(50):
            busy = [self._guard(handler.flush) for handler in self._handlers]
            if not any(busy):
                return

    def _due_timers(self) -> list[Timer]:
        due: list[Timer] = []
        now = self.clock()
        with self._cond:
            while self._timers and self._timers[0].deadline <= now:
                timer = heapq.heappop(self._timers)
                if not timer.cancelled:
                    due.append(timer)
        return due

    def _guard(self, fn: Callable[[], Any]) -> Any:
        """A bug in one handler must not stop the cluster: log it, keep it for tests, go on."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the loop survives handler bugs
            log.exception("simulator handler failed")
            self.errors.append(exc)
            return False
