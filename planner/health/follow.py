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
from collections.abc import Callable, Mapping
from typing import Any

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.planner.health.informer import Key, Obj, fold_node, fold_pod, key_of
from gpuplan.providers.protocols import FoldingLister, Reader, WatchExpired

WINDOW_SECONDS = 5.0
"""A follower's watch requests last this long, so a follower told to stop ends within one window."""
RETRY_SECONDS = 0.5
"""How long a follower waits before listing or watching again after the cluster did not answer."""


class Changes:
    """A counter every follower bumps when its cache moves, and the condition the gates wait on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.moved = threading.Condition(self.lock)
        self.version = 0

    def bump(self) -> None:
        """Called with :attr:`lock` held."""
        self.version += 1
        self.moved.notify_all()

    def await_beyond(self, seen: int, seconds: float) -> bool:
        """Until the counter passes ``seen`` or ``seconds`` pass; whether it moved."""
        deadline = time.monotonic() + seconds
        with self.lock:
            while self.version <= seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.moved.wait(left)
            return True


class Follower:
    """One kind in one scope, listed once and then kept by a thread that follows its watch."""

    def __init__(
        self,
        provider: Callable[[], Reader],
        kind: tuple[str, str],
        fold: Callable[[Obj], dict[str, Any]],
        changes: Changes,
        namespace: str | None = None,
    ) -> None:
        self._provider, (self.api_version, self.kind), self._fold = provider, kind, fold
        self.namespace, self._changes = namespace, changes
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
            self._changes.bump()

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
            folded = None if event.type in ("DELETED", "BOOKMARK") else self._fold(event.object)
            with self._changes.lock:
                if event.type == "DELETED":
                    self._objects.pop(key_of(event.object), None)
                elif folded is not None:
                    self._objects[key_of(event.object)] = folded
                self._version = event.resource_version or self._version
                if event.type != "BOOKMARK":
                    self._changes.bump()

    def _failed(self, exc: ProviderError) -> None:
        with self._changes.lock:
            self._error = exc
            self._changes.bump()


class ApplyCaches:
    """The nodes, and the pods of each namespace a gate asks about, for every gate of one apply."""

    def __init__(self, provider: Callable[[], Reader]) -> None:
        self._provider = provider
        self.changes = Changes()
        self._lock = threading.Lock()
        self._nodes: Follower | None = None
        self._pods: dict[str, Follower] = {}

    @property
    def version(self) -> int:
        """Moves whenever any cache does: read before a round, handed to :meth:`await_change` after it."""
        with self.changes.lock:
            return self.changes.version

    def nodes(self) -> tuple[dict[str, Any], ...]:
        with self._lock:
            if self._nodes is None:
                self._nodes = Follower(self._provider, ("v1", "Node"), fold_node, self.changes)
            follower = self._nodes
        return follower.items()

    def pods(self, namespace: str, selector: str) -> tuple[dict[str, Any], ...] | None:
        """The namespace's pods that ``selector`` matches; None for a selector other than ``k=v,...``.

        The whole namespace is followed, not gpuplan's labels only: the pods an earlier owner made (a GPU
        Operator that gpuplan took over) carry none of gpuplan's labels, yet a rollout waits for them."""
        wanted = equality_selector(selector)
        if wanted is None:
            return None
        with self._lock:
            follower = self._pods.get(namespace)
            if follower is None:
                follower = Follower(self._provider, ("v1", "Pod"), fold_pod, self.changes, namespace)
                self._pods[namespace] = follower
        return tuple(pod for pod in follower.items() if _labelled(pod, wanted))

    def await_change(self, seen: int, seconds: float) -> bool:
        """Until some cache moved since :attr:`version` was ``seen``, or ``seconds`` pass."""
        return self.changes.await_beyond(seen, seconds)

    def close(self) -> None:
        """Stop the followers (each ends with its current watch window; their threads hold no lock)."""
        with self._lock:
            followers = [*([self._nodes] if self._nodes else []), *self._pods.values()]
        for follower in followers:
            follower.stop()


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


def _labelled(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())
