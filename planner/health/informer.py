"""What the health waiter knows of a component's pods and of the nodes: listed once, then kept by watches.

A gate is judged many times while a rollout proceeds. Listing every pod and node for each of those rounds
costs requests and memory in proportion to the fleet on every round; an informer (client-go's pattern) lists
once and then applies the watch events that follow the list's resourceVersion, so a round costs one watch
request whatever the number of nodes. Each object is folded as it arrives into the few fields the gates read
(:func:`fold_pod`, :func:`fold_node`), so what is held stays small: no managedFields beyond the label owners,
no images, volumes or addresses.

:meth:`Informer.follow` applies the events of one watch window (the waiter's poll window) up to a moment
after its first event, so a burst of events is one round, not one round per event, and a quiet window is
one request; a reader thread takes the events from the stream (client-go's informers have one too), so the
round ends on time after the last event of a burst. A too-old resourceVersion (410) lists again, as an
informer relists.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import TransientProviderError
from gpuplan.providers.protocols import FoldingLister, Listing, Reader, WatchEvent, WatchExpired

Obj = Mapping[str, Any]
Key = tuple[str, str]

BURST_SECONDS = 0.2
"""After the first event of a window, how long further events are taken into the same round."""
CONTAINER_FIELDS = ("name", "image", "command", "args", "env")
"""What the in-sync test compares between a pod's containers and its template's."""
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")
STATE_FIELDS = ("reason", "message", "exitCode")
"""What the failure causes read of a container's waiting or terminated state."""
NODE_SPEC_FIELDS = ("taints", "unschedulable")
NODE_STATUS_FIELDS = ("capacity", "allocatable", "runtimeHandlers")
SHARED_LIMIT = 50_000
"""The most distinct values :func:`_shared` keeps before it starts afresh."""


@dataclass
class Informer:
    """One kind's objects, matching a namespace and label selector, kept current by watches."""

    provider: Reader
    api_version: str
    kind: str
    fold: Callable[[Obj], dict[str, Any]]
    namespace: str | None = None
    label_selector: str | None = None
    clock: Callable[[], float] = time.monotonic
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    resource_version: str | None = None
    synced: bool = False
    followed: bool = False
    """A watch applied events since the last list."""

    def items(self) -> tuple[dict[str, Any], ...]:
        """The objects, by namespace and name (a stable order for the gates' messages)."""
        return tuple(self.objects[key] for key in sorted(self.objects))

    def sync(self) -> None:
        """List afresh: the objects and the resourceVersion to watch from. A provider that folds as the pages
        arrive (:class:`~gpuplan.providers.protocols.FoldingLister`) holds one page of whole objects at a
        time, whatever the fleet's size."""
        # the old cache goes before the list comes, not after it; a list that fails leaves the informer
        # unsynced, so the next round lists again instead of judging an empty cache
        self.objects, self.synced = {}, False
        if isinstance(self.provider, FoldingLister):
            folded = self.provider.list_folded(
                self.api_version,
                self.kind,
                lambda obj: (key_of(obj), self.fold(obj)),
                namespace=self.namespace,
                label_selector=self.label_selector,
            )
            self.objects, self.resource_version = dict(folded.items), folded.resource_version
        else:
            listing = self._list()
            self.objects = {key_of(live.manifest): self.fold(live.manifest) for live in listing}
            self.resource_version = listing.resource_version
        self.synced, self.followed = True, False

    def follow(self, window: float) -> int:
        """Apply the events of one watch window of at most ``window`` seconds; the number applied.

        Lists first when never synced, or when the watch says the resourceVersion is too old."""
        if not self.synced or self.resource_version is None:
            self.sync()
            return len(self.objects)
        events = self.provider.watch(
            self.api_version,
            self.kind,
            namespace=self.namespace,
            label_selector=self.label_selector,
            resource_version=self.resource_version,
            timeout=max(1.0, window),
        )
        self.followed = True
        applied = 0
        for item in _burst(events):
            if isinstance(item, WatchExpired):
                self.sync()
                return len(self.objects)
            if isinstance(item, TransientProviderError):
                break  # a dropped stream: the next window resumes from the last version applied
            version = item.resource_version
            if item.type != "BOOKMARK":
                self._apply(item.type, item.object)
                applied += 1
            if version:
                self.resource_version = version
        return applied

    def _apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = self.fold(obj)

    def _list(self) -> Listing:
        if self.api_version == "v1" and self.kind == "Node":
            return self.provider.list_nodes(label_selector=self.label_selector)
        return self.provider.list_objects(
            self.api_version, self.kind, namespace=self.namespace, label_selector=self.label_selector
        )


_END = object()


def _burst(events: Iterator[WatchEvent]) -> Iterator[WatchEvent | TransientProviderError]:
    """The events of a watch up to ``BURST_SECONDS`` after its first one, or all of them if it ends
    first. A reader thread takes them from the stream, so a silence after an event ends the round on time
    instead of blocking the read until the server ends the window; the thread (a daemon) stops at the first
    event after the round (or when the window ends), and what the round did not apply is read again by the
    next round's watch, from the last version applied."""
    found: queue.SimpleQueue[Any] = queue.SimpleQueue()
    over = threading.Event()

    def read() -> None:
        try:
            for event in events:
                if over.is_set():
                    break
                found.put(event)
        except TransientProviderError as exc:
            found.put(exc)
        except Exception as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            found.put(exc)
        finally:
            _close(events)
            found.put(_END)

    threading.Thread(target=read, name="gpuplan-watch", daemon=True).start()
    deadline: float | None = None
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = found.get(timeout=wait)
            except queue.Empty:
                return
            if item is _END:
                return
            if isinstance(item, Exception) and not isinstance(item, TransientProviderError):
                raise item
            yield item
            if isinstance(item, TransientProviderError):
                return
            deadline = deadline if deadline is not None else time.monotonic() + BURST_SECONDS
    finally:
        # the round is over: the reader stops at its next event instead of decoding the rest of the
        # window, which the next round's watch reads again (rounds follow each other faster than a
        # window ends, so every event was decoded by several overlapping readers)
        over.set()


def _close(events: Iterator[WatchEvent]) -> None:
    """End the stream (a generator closes its response); an iterator without ``close`` is left as is."""
    close = getattr(events, "close", None)
    if callable(close):
        close()


def fold_pod(pod: Obj) -> dict[str, Any]:
    """The fields of a pod the gates read: identity, owner, the template generation labels, node, containers
    as the in-sync test compares them, and of its status the phase, the conditions and what each container's
    state says (the waiting reason and message, exit codes, restarts; not its image, ids or start times).

    The parts the pods of one DaemonSet have alike (labels, owner, containers, most conditions and
    container states) are one shared object each (:func:`_shared`): the apply's cache holds every pod of
    the stack, four or more per node, so a folded pod is a few small dicts beside its name and uid."""
    metadata: Obj = pod.get("metadata") or {}
    spec: Obj = pod.get("spec") or {}
    status: Obj = pod.get("status") or {}
    folded_meta = _pick(metadata, ("name", "uid", "deletionTimestamp"))
    if "namespace" in metadata:
        folded_meta["namespace"] = sys.intern(str(metadata["namespace"]))
    for key in ("labels", "ownerReferences"):
        if key in metadata:
            folded_meta[key] = _shared(metadata[key])
    folded_status: dict[str, Any] = {}
    if "phase" in status:
        folded_status["phase"] = sys.intern(str(status["phase"]))
    if "conditions" in status:
        conditions = status["conditions"] or ()
        folded_status["conditions"] = [_shared(_pick(c, CONDITION_FIELDS)) for c in conditions]
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in status:
            folded_status[key] = [_shared(_container_state(c)) for c in status[key] or ()]
    folded_spec: dict[str, Any] = {
        "containers": _shared([_pick(c, CONTAINER_FIELDS) for c in spec.get("containers") or ()])
    }
    if "nodeName" in spec:
        folded_spec["nodeName"] = sys.intern(str(spec["nodeName"]))
    return {"metadata": folded_meta, "spec": folded_spec, "status": folded_status}


def _container_state(status: Obj) -> dict[str, Any]:
    """A container's status as the failure causes read it: its name, restarts, and its current and last
    state cut to their kind, reason, message and exit code."""
    kept = _pick(status, ("name", "restartCount"))
    for key in ("state", "lastState"):
        state: Obj = status.get(key) or {}
        if key in status:
            kept[key] = {kind: _pick(detail or {}, STATE_FIELDS) for kind, detail in state.items()}
    return kept


def _shared(value: Any) -> Any:
    """One object for every equal ``value`` folded lately (the pods of a DaemonSet share their labels, owner
    and containers, and mostly their conditions). The folded objects are only read, never changed, so
    sharing them is safe; the table is emptied when it grows past :data:`SHARED_LIMIT` (a fleet's distinct
    values are far fewer)."""
    key = repr(value)
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= SHARED_LIMIT:
            _SHARED.clear()
        found = _SHARED[key] = value
    return found


_SHARED: dict[str, Any] = {}


def fold_node(node: Obj) -> dict[str, Any]:
    """The fields of a node the gates and placement read: labels and who wrote them, taints, GPU capacity,
    runtime handlers and conditions (without their heartbeat). Nodes of one kind have most of these alike:
    each part is one shared object (:func:`_shared`), the labels' names and values interned."""
    metadata: Obj = node.get("metadata") or {}
    status: Obj = node.get("status") or {}
    folded_status = {key: _shared(value) for key, value in _pick(status, NODE_STATUS_FIELDS).items()}
    if "conditions" in status:
        folded_status["conditions"] = [
            _shared(_pick(c, CONDITION_FIELDS)) for c in status["conditions"] or ()
        ]
    return {
        "metadata": {
            "name": metadata.get("name"),
            **({"labels": _interned(metadata["labels"])} if "labels" in metadata else {}),
            "managedFields": [_shared(_label_entry(entry)) for entry in metadata.get("managedFields") or ()],
        },
        "spec": {
            key: _shared(value) for key, value in _pick(node.get("spec") or {}, NODE_SPEC_FIELDS).items()
        },
        "status": folded_status,
    }


def _label_entry(entry: Obj) -> dict[str, Any]:
    """A managedFields entry cut down to its manager and the labels it owns (the gates' label owners)."""
    fields: Obj = entry.get("fieldsV1") or {}
    labels = (fields.get("f:metadata") or {}).get("f:labels")
    kept: dict[str, Any] = {"manager": entry.get("manager"), "operation": entry.get("operation")}
    if entry.get("subresource"):
        kept["subresource"] = entry["subresource"]
    if labels:
        kept["fieldsV1"] = {"f:metadata": {"f:labels": {sys.intern(key): {} for key in labels}}}
    return kept


def _interned(labels: Obj) -> dict[str, Any]:
    """A node's labels with their names and values interned. Each decoded node has its own copy of every
    string, though a fleet's nodes share nearly all of them (NFD's and GFD's labels, and most of their
    values): a cache of thousands of nodes holds each once instead (a folded node: about 13 KiB, half of it
    its labels' strings, before). Only the labels: interning the whole node cost more than decoding it."""
    return {
        sys.intern(key): sys.intern(value) if isinstance(value, str) else value
        for key, value in labels.items()
    }


def _pick(obj: Obj, keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: obj[key] for key in keys if key in obj}


def key_of(obj: Obj) -> Key:
    metadata: Obj = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
