"""The caches every gate of an apply reads: the nodes and each component's pods, kept by followers.

Each gate used to list the nodes and its component's pods when it started and again to confirm a pass, so
an apply's requests and decoding grew with the fleet once per gate, and several caches of every node were
held at once. Here the nodes are listed once per apply, and a component's pods once when a gate first reads
them (its DaemonSet's selector, so no pod of a component whose gate has not started is decoded), and each
is then kept current by one follower thread that reads its watch as the events come (client-go's shared
informers): a gate that starts finds the nodes current, the driver-version check and a rollback's gates
read what the component's gate kept, and a gate waits for its own caches to move
(:meth:`ApplyCaches.await_change`) instead of reading a watch window of its own.

A follower of the nodes or of a component's pods lives only while a gate holds it (:meth:`ApplyCaches.hold`,
from a gate's first read of it to the end of its wait). A gate that reads its DaemonSet's status alone lets
the others rest (:meth:`ApplyCaches.rest`): while a fleet's pods start, a pod changes about five times and a
node a few (the device plugin's capacity, GFD's labels), and a follower would have the API server encode
each change for it, on the cores the rollout runs on, where the next gate that needs them lists them once
(fleet-1000, three applies each way: 9.1 s with the nodes resting, 10.1 s with them followed throughout).

No lock is held while a request is in flight: a follower takes the lock only to swap in a listing or apply
one event, and a gate only to take a snapshot (a tuple of the folded objects, which are replaced, never
changed, so a snapshot stays consistent while the cache moves on). A pass needs no confirming list: a cache
is followed the whole time a gate holds it, never left behind by a gate that followed another watch.

Only a provider that can hand each follower a client of its own is followed so (the walker's
``writer_factory``); the waiter keeps its own informers otherwise (:mod:`gpuplan.planner.health.informer`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.planner.health.informer import Key, Obj, fold_node, fold_pod, key_of
from gpuplan.providers.protocols import FoldingLister, Reader, WatchExpired

log = logging.getLogger(__name__)

WINDOW_SECONDS = 5.0
"""A follower's watch requests last this long, so a follower told to stop ends within one window."""
RETRY_SECONDS = 0.5
"""How long a follower waits before listing or watching again after the cluster did not answer."""


class Topic(NamedTuple):
    """One cache: a kind, in a namespace ("" for all), by a label or field selector ("" for none)."""

    kind: str
    namespace: str = ""
    labels: str = ""
    fields: str = ""


NODES = Topic("Node")
RESTING = frozenset({"Node", "Pod"})
"""The kinds whose followers rest while no gate holds them (see the module doc)."""
WARNINGS = "type=Warning"
"""The Events a namespace's warnings cache follows (the API server's field selector for Events)."""


class Changes:
    """How often each cache moved, and the condition the gates wait on: a gate wakes for the nodes, its own
    component's pods and its DaemonSet, not for another component's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.moved = threading.Condition(self.lock)
        self.counts: dict[Topic, int] = {}

    def bump(self, topic: Topic) -> None:
        """Called with :attr:`lock` held."""
        self.counts[topic] = self.counts.get(topic, 0) + 1
        self.moved.notify_all()

    def stamp(self, topics: Iterable[Topic]) -> int:
        """A number that grows whenever one of ``topics`` moves."""
        with self.lock:
            return self._stamp(topics)

    def await_beyond(self, topics: frozenset[Topic], seen: int, seconds: float) -> bool:
        """Until the stamp of ``topics`` passes ``seen`` or ``seconds`` pass; whether it moved."""
        deadline = time.monotonic() + seconds
        with self.lock:
            while self._stamp(topics) <= seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.moved.wait(left)
            return True

    def _stamp(self, topics: Iterable[Topic]) -> int:
        return sum(self.counts.get(topic, 0) for topic in topics)


class Follower:
    """One kind in one namespace and selector (a :class:`Topic`), listed once and then kept by a thread that
    follows its watch."""

    def __init__(
        self,
        provider: Callable[[], Reader],
        api_version: str,
        topic: Topic,
        fold: Callable[[Obj], dict[str, Any]],
        changes: Changes,
        listing: threading.Semaphore | None = None,
        *,
        fold_watched: Callable[[Obj], dict[str, Any]] | None = None,
    ) -> None:
        """``fold_watched``: how an object that came through the watch is folded, when not as a listed one
        (the warnings cache tells the Events that came after it listed)."""
        self._provider, self.api_version, self.topic, self._fold = provider, api_version, topic, fold
        self._fold_watched = fold_watched or fold
        self._listing = listing or threading.Semaphore()
        self.kind = topic.kind
        self.namespace, self.selector, self.fields = (
            topic.namespace or None,
            topic.labels or None,
            topic.fields or None,
        )
        self._changes = changes
        self._objects: dict[Key, dict[str, Any]] = {}
        self._version: str | None = None
        self._listed = False
        """Listed once: the gates read the cache from then on, also while a too-old watch lists again."""
        self._relist = True
        self._error: ProviderError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gpuplan-follow-{self.kind}", daemon=True)
        self._thread.start()

    def items(self, timeout: float = 60.0) -> tuple[dict[str, Any], ...]:
        """The objects by namespace and name, once listed; the list's error while it fails (a transient one
        keeps the gate waiting, a permanent one fails it as a read of its own would)."""
        deadline = time.monotonic() + timeout
        with self._changes.lock:
            while not self._listed:
                if self._error is not None:
                    raise self._error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransientProviderError(f"list {self.kind}: no answer after {timeout:g}s")
                self._changes.moved.wait(left)
            return tuple(self._objects[key] for key in sorted(self._objects))

    @property
    def listed(self) -> bool:
        with self._changes.lock:
            return self._listed

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        provider = self._provider()
        try:
            while not self._stop.is_set():
                try:
                    if self._relist:
                        self._sync(provider)
                    self._follow(provider)
                except WatchExpired:
                    log.debug("following %s: the watch expired, listing again", self.topic)
                    self._relist = True
                except ProviderError as exc:
                    log.debug("following %s: %s", self.topic, exc.summary)
                    self._failed(exc)
                    self._stop.wait(RETRY_SECONDS)
        except Exception as exc:  # noqa: BLE001 - a stopped apply's client may fail in any way; a live one says
            if not self._stop.is_set():
                self._failed(ProviderError(f"following {self.kind}: {exc}"))
        finally:
            close = getattr(provider, "close", None)
            if callable(close):
                close()

    def _sync(self, provider: Reader) -> None:
        """List afresh; one follower of the apply lists at a time (a page of whole objects is decoded
        before it is folded: the followers that start together would each hold one), and no gate waits for
        that semaphore, only for its own cache's first list."""
        with self._listing:
            self._list(provider)

    def _list(self, provider: Reader) -> None:
        if isinstance(provider, FoldingLister):
            folded = provider.list_folded(
                self.api_version,
                self.kind,
                lambda obj: (key_of(obj), self._fold(obj)),
                namespace=self.namespace,
                label_selector=self.selector,
                field_selector=self.fields,
            )
            objects, version = dict(folded.items), folded.resource_version
        else:
            listing = provider.list_objects(
                self.api_version,
                self.kind,
                namespace=self.namespace,
                label_selector=self.selector,
                field_selector=self.fields,
            )
            objects = {key_of(live.manifest): self._fold(live.manifest) for live in listing}
            version = listing.resource_version
        with self._changes.lock:
            self._objects, self._version, self._error = objects, version, None
            self._listed, self._relist = True, False
            self._changes.bump(self.topic)

    def _follow(self, provider: Reader) -> None:
        """One watch window, each event applied as it arrives."""
        events = provider.watch(
            self.api_version,
            self.kind,
            namespace=self.namespace,
            label_selector=self.selector,
            field_selector=self.fields,
            resource_version=self._version,
            timeout=WINDOW_SECONDS,
        )
        for event in events:
            if self._stop.is_set():
                break
            if event.type == "BOOKMARK":
                self._version = event.resource_version or self._version
                continue
            key = key_of(event.object)
            folded = None if event.type == "DELETED" else self._fold_watched(event.object)
            with self._changes.lock:
                if folded is None:
                    self._objects.pop(key, None)
                else:
                    self._objects[key] = folded
                self._version = event.resource_version or self._version
                self._changes.bump(self.topic)

    def _failed(self, exc: ProviderError) -> None:
        with self._changes.lock:
            self._error = exc
            self._changes.bump(self.topic)


class ApplyCaches:
    """The nodes, each component's pods, each namespace's DaemonSets and Warning Events, for every gate of
    one apply."""

    def __init__(self, provider: Callable[[], Reader]) -> None:
        self._provider = provider
        self.changes = Changes()
        self._lock = threading.Lock()
        self._followers: dict[Topic, Follower] = {}
        self._holds: Counter[Topic] = Counter()
        self._listing = threading.Semaphore()

    def stamp(self, topics: Iterable[Topic]) -> int:
        """Grows whenever one of ``topics`` moves: read before a round, handed to :meth:`await_change`."""
        return self.changes.stamp(topics)

    def nodes(self) -> tuple[dict[str, Any], ...]:
        return self._follower("v1", NODES, fold_node).items()

    def pods(self, namespace: str, selector: str) -> tuple[dict[str, Any], ...]:
        """The pods ``selector`` matches in ``namespace`` (a component's DaemonSet's: the pods an earlier
        owner made, a GPU Operator that gpuplan took over, are among them)."""
        return self._follower("v1", pod_topic(namespace, selector), fold_pod).items()

    def daemonsets(self, namespace: str) -> Topic:
        """The topic of the namespace's DaemonSets, followed from the first call on: a rollout gate reads
        its DaemonSet afresh each round, and wakes when one's status moves (its pods may all be Ready a
        while before the controller counts them) instead of at its next poll."""
        topic = Topic("DaemonSet", namespace)
        self._follower("apps/v1", topic, _named)
        return topic

    def warnings(self, namespace: str) -> Topic:
        """The topic of the namespace's Warning Events, followed from the first call on (the walker's first
        write of a DaemonSet there): :meth:`warned` tells the ones that came after it listed."""
        return self._warnings(namespace).topic

    def listen_for_warnings(self, namespace: str) -> None:
        """Follow the namespace's Warning Events and return once they are listed: every Event from then on
        counts for :meth:`warned`. A list that fails is left to :meth:`warned`, which then has the pods
        read."""
        try:
            self._warnings(namespace).items()
        except ProviderError:
            return

    def _warnings(self, namespace: str) -> Follower:
        topic = Topic("Event", namespace, fields=WARNINGS)
        return self._follower("v1", topic, _about_pod(fresh=False), _about_pod(fresh=True))

    def warned(self, namespace: str, pod_prefix: str) -> bool:
        """Whether a Warning Event about a pod named ``pod_prefix...`` came (or repeated) since the
        namespace's warnings were first listed: a kubelet or scheduler saying why a pod does not start."""
        try:
            events = self._warnings(namespace).items()
        except ProviderError:  # Events that cannot be read: as if one warned (the pods are read instead)
            return True
        return any(event["fresh"] and str(event["pod"]).startswith(pod_prefix) for event in events)

    def await_change(self, topics: frozenset[Topic], seen: int, seconds: float) -> bool:
        """Until one of ``topics`` moved since its :meth:`stamp` was ``seen``, or ``seconds`` pass."""
        return self.changes.await_beyond(topics, seen, seconds)

    def hold(self, topic: Topic) -> None:
        """A gate reads ``topic`` from now until it releases it: its follower does not rest meanwhile."""
        with self._lock:
            self._holds[topic] += 1

    def release(self, topics: Iterable[Topic]) -> None:
        """The gate that held ``topics`` is done with them."""
        with self._lock:
            for topic in topics:
                self._holds[topic] = max(0, self._holds[topic] - 1)

    def rest(self) -> list[Topic]:
        """Stop following the nodes and pods that no gate holds (listed again when a gate next reads
        them); the topics that rest. A follower still making its first list is left to finish it, for the
        reader that asked for it."""
        with self._lock:
            idle = [
                follower
                for topic, follower in self._followers.items()
                if topic.kind in RESTING and self._holds[topic] <= 0 and follower.listed
            ]
            for follower in idle:
                del self._followers[follower.topic]
        for follower in idle:
            follower.stop()
        return [follower.topic for follower in idle]

    def close(self) -> None:
        """Stop the followers (each ends with its current watch window; their threads hold no lock)."""
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            follower.stop()

    def _follower(
        self,
        api_version: str,
        topic: Topic,
        fold: Callable[[Obj], dict[str, Any]],
        fold_watched: Callable[[Obj], dict[str, Any]] | None = None,
    ) -> Follower:
        with self._lock:
            follower = self._followers.get(topic)
            if follower is None:
                follower = self._followers[topic] = Follower(
                    self._provider,
                    api_version,
                    topic,
                    fold,
                    self.changes,
                    self._listing,
                    fold_watched=fold_watched,
                )
            return follower


def pod_topic(namespace: str, selector: str) -> Topic:
    return Topic("Pod", namespace, selector)


def _named(obj: Obj) -> dict[str, Any]:
    """What the DaemonSets' cache keeps: their names (it is followed for its events only)."""
    return {"metadata": {"name": (obj.get("metadata") or {}).get("name")}}


def _about_pod(*, fresh: bool) -> Callable[[Obj], dict[str, Any]]:
    """What the warnings cache keeps of an Event: the pod it is about (empty for another kind), and whether
    it came through the watch (``fresh``) rather than the first list."""

    def fold(obj: Obj) -> dict[str, Any]:
        involved = obj.get("involvedObject") or obj.get("regarding") or {}
        return {"pod": involved.get("name") if involved.get("kind") == "Pod" else "", "fresh": fresh}

    return fold
