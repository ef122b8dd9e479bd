"""The caches every gate of an apply reads: the nodes and each stack namespace's pods, kept by followers.

Each gate used to list the nodes and its component's pods when it started and again to confirm a pass, so
an apply's requests and decoding grew with the fleet once per gate, and several caches of every node were
held at once. Here each cache is listed once per apply and then kept current by one follower thread that
reads its watch as the events come (client-go's shared informers), so a gate that starts finds it current,
and a gate waits for a change of any cache (:meth:`ApplyCaches.await_change`) instead of reading a watch
window of its own.

No lock is held while a request is in flight: a follower takes the lock only to swap in a listing or apply
one event, and a gate only to take a snapshot (a tuple of the folded objects, which are replaced, never
changed, so a snapshot stays consistent while the cache moves on). A pass needs no confirming list: the
caches are followed the whole time, never left behind by a gate that followed another watch.

Only a provider that can hand each follower a client of its own is followed so (the walker's
``writer_factory``); the waiter keeps its own informers otherwise (:mod:`gpuplan.planner.health.informer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.planner.health.informer import Key, Obj, fold_node, fold_pod, key_of
from gpuplan.providers.protocols import FoldingLister, Reader, WatchExpired

WINDOW_SECONDS = 5.0
"""A follower's watch requests last this long, so a follower told to stop ends within one window."""
RETRY_SECONDS = 0.5
"""How long a follower waits before listing or watching again after the cluster did not answer."""


Topic = tuple[str, frozenset[tuple[str, str]]]
"""What a gate reads of a cache: the nodes (:data:`NODES`), or a namespace's pods that a selector matches."""
NODES: Topic = ("nodes", frozenset())


class Changes:
    """How often each topic moved, and the condition the gates wait on: a gate wakes for the nodes and its
    own component's pods, not for every pod of the stack's namespace."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.moved = threading.Condition(self.lock)
        self.counts: dict[Topic, int] = {}

    def bump(self, topics: Iterable[Topic]) -> None:
        """Called with :attr:`lock` held."""
        touched = False
        for topic in topics:
            self.counts[topic] = self.counts.get(topic, 0) + 1
            touched = True
        if touched:
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
    """One kind in one scope, listed once and then kept by a thread that follows its watch."""

    def __init__(
        self,
        provider: Callable[[], Reader],
        kind: tuple[str, str],
        fold: Callable[[Obj], dict[str, Any]],
        changes: Changes,
        namespace: str | None = None,
        topics: Mapping[Topic, Mapping[str, str]] | None = None,
    ) -> None:
        self._provider, (self.api_version, self.kind), self._fold = provider, kind, fold
        self.namespace, self._changes = namespace, changes
        self._objects: dict[Key, dict[str, Any]] = {}
        self._version: str | None = None
        self._listed = False
        """Listed once: the gates read the cache from then on, also while a too-old watch lists again."""
        self._relist = True
        self._error: ProviderError | None = None
        self.topics: dict[Topic, Mapping[str, str]] = dict(topics or {})
        """The topics gates read of this cache, with the labels each selects (changed under the lock)."""
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
                    self._relist = True
                except ProviderError as exc:
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
        if isinstance(provider, FoldingLister):
            folded = provider.list_folded(
                self.api_version,
                self.kind,
                lambda obj: (key_of(obj), self._fold(obj)),
                namespace=self.namespace,
            )
            objects, version = dict(folded.items), folded.resource_version
        else:
            listing = provider.list_objects(self.api_version, self.kind, namespace=self.namespace)
            objects = {key_of(live.manifest): self._fold(live.manifest) for live in listing}
            version = listing.resource_version
        with self._changes.lock:
            self._objects, self._version, self._error = objects, version, None
            self._listed, self._relist = True, False
            self._changes.bump(self.topics)

    def _follow(self, provider: Reader) -> None:
        """One watch window, each event applied as it arrives."""
        events = provider.watch(
            self.api_version,
            self.kind,
            namespace=self.namespace,
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
            folded = None if event.type == "DELETED" else self._fold(event.object)
            with self._changes.lock:
                before = self._objects.pop(key, None)
                if folded is not None:
                    self._objects[key] = folded
                self._version = event.resource_version or self._version
                self._changes.bump(self._touched(event.object, before))

    def _touched(self, now: Obj, before: Obj | None) -> list[Topic]:
        """The topics whose selector matches the object as it is or as it was."""
        return [
            topic
            for topic, wanted in self.topics.items()
            if _labelled(now, wanted) or (before is not None and _labelled(before, wanted))
        ]

    def _failed(self, exc: ProviderError) -> None:
        with self._changes.lock:
            self._error = exc
            self._changes.bump(self.topics)


class ApplyCaches:
    """The nodes, and the pods of each namespace a gate asks about, for every gate of one apply."""

    def __init__(self, provider: Callable[[], Reader]) -> None:
        self._provider = provider
        self.changes = Changes()
        self.topics: set[Topic] = set()
        """Every topic a gate read (a gate waits for its own; see :meth:`stamp`)."""
        self._lock = threading.Lock()
        self._nodes: Follower | None = None
        self._pods: dict[str, Follower] = {}
        self._daemonsets: dict[str, Follower] = {}

    def stamp(self, topics: Iterable[Topic]) -> int:
        """Grows whenever one of ``topics`` moves: read before a round, handed to :meth:`await_change`."""
        return self.changes.stamp(topics)

    def nodes(self) -> tuple[dict[str, Any], ...]:
        with self._lock:
            if self._nodes is None:
                self._nodes = Follower(
                    self._provider, ("v1", "Node"), fold_node, self.changes, topics={NODES: {}}
                )
            follower = self._nodes
        return follower.items()

    def pods(self, namespace: str, selector: str) -> tuple[dict[str, Any], ...] | None:
        """The namespace's pods that ``selector`` matches; None for a selector other than ``k=v,...``.

        The whole namespace is followed, not gpuplan's labels only: the pods an earlier owner made (a GPU
        Operator that gpuplan took over) carry none of gpuplan's labels, yet a rollout waits for them."""
        wanted = equality_selector(selector)
        if wanted is None:
            return None
        topic = pod_topic(namespace, wanted)
        with self._lock:
            follower = self._pods.get(namespace)
            if follower is None:
                follower = Follower(
                    self._provider, ("v1", "Pod"), fold_pod, self.changes, namespace, {topic: wanted}
                )
                self._pods[namespace] = follower
        with self.changes.lock:
            follower.topics[topic] = wanted
        return tuple(pod for pod in follower.items() if _labelled(pod, wanted))

    def daemonsets(self, namespace: str) -> Topic:
        """The topic of the namespace's DaemonSets, followed from the first call on: a rollout gate reads
        its DaemonSet afresh each round, and wakes when one's status moves (its pods may all be Ready a
        while before the controller counts them) instead of at its next poll."""
        topic: Topic = (f"daemonsets/{namespace}", frozenset())
        with self._lock:
            if namespace not in self._daemonsets:
                self._daemonsets[namespace] = Follower(
                    self._provider, ("apps/v1", "DaemonSet"), _named, self.changes, namespace, {topic: {}}
                )
        return topic

    def await_change(self, topics: frozenset[Topic], seen: int, seconds: float) -> bool:
        """Until one of ``topics`` moved since its :meth:`stamp` was ``seen``, or ``seconds`` pass."""
        return self.changes.await_beyond(topics, seen, seconds)

    def close(self) -> None:
        """Stop the followers (each ends with its current watch window; their threads hold no lock)."""
        with self._lock:
            followers = [
                *([self._nodes] if self._nodes else []),
                *self._pods.values(),
                *self._daemonsets.values(),
            ]
        for follower in followers:
            follower.stop()


def pod_topic(namespace: str, wanted: Mapping[str, str]) -> Topic:
    return (f"pods/{namespace}", frozenset(wanted.items()))


def equality_selector(selector: str) -> dict[str, str] | None:
    """``k=v,k2=v2`` as a mapping; None for any other form (set-based, inequality, existence)."""
    wanted: dict[str, str] = {}
    for term in filter(None, (part.strip() for part in selector.split(","))):
        key, sep, value = term.partition("=")
        if not sep or key.endswith("!") or value.startswith("=") or not key.strip():
            return None
        if any(mark in term for mark in (" in ", " notin ", "(")):
            return None
        wanted[key.strip()] = value.strip()
    return wanted


def _named(obj: Obj) -> dict[str, Any]:
    """What the DaemonSets' cache keeps: their names (it is followed for its events only)."""
    return {"metadata": {"name": (obj.get("metadata") or {}).get("name")}}


def _labelled(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())
