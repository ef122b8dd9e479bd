"""The simulated cluster's object store: Kubernetes API semantics over plain JSON dicts, in memory.

Interface: docs/sim-internals.md "Store", implemented as written, no deviation. Additions: keyword arguments
``field_validation`` on update/patch and ``Store(..., event_log_size=, clock=, seed_namespaces=)``; methods
``flush``, ``close``, ``delete_collection``, ``evict`` (pods/eviction) and ``bind`` (pods/binding); list and
watch also accept parsed ``selectors.LabelSelector``/``FieldSelector`` values. Callers: ``sim.api.server``
(every REST verb), ``sim.controllers`` and ``sim.kubelet`` (through the same verbs and ``subscribe``),
``sim.cluster``.

``Store`` is assembled from layers, one module each (``sim.api.core`` explains them): ``core`` (state and
commit), ``lifecycle`` (replace, delete, propagation), ``writes`` (create/update/patch/apply), and this module
(reads, deletes, pod subresources, watch, subscribe). Beside them: ``errors`` (``ApiError``), ``table`` (the
objects and their indexes), ``watchlog`` (``Event``, ``Watch``, the event log), ``paging`` (list snapshots
and continue tokens), ``dispatch`` (the subscriber thread), ``defaults``/``admission``/``strategy`` (what
the server adds to a written object). ``ApiError``, ``Event`` and ``Watch`` are re-exported here.

How it behaves, where a real apiserver leaves a choice:

- **Storage.** One dict per resource (``group``, ``plural``) keyed by (namespace, name); every served version
  of a resource shares it and answers with its own ``apiVersion``. Stored dicts are never mutated (each write
  stores a new dict), so the event log and list snapshots can share them, a status write's new object
  shares the unchanged parts (spec) of the one it replaces, and objects share the parts they have in common
  with others (``sharing``: one pooled instance per distinct map or list under metadata, spec and status,
  one per managedFields trie); every method returns deep copies
  (``objects.copy_json``). A write makes one working copy (of the request, or of the stored object a patch
  applies to; a server-side apply both) and one of its answer; a status merge patch reads the stored object.
- **resourceVersion** is one global integer counter; a write that changes nothing (same content, same
  managedFields) is a no-op that keeps the old resourceVersion and emits no event, as on a real server. A
  resourceVersion in an update's object or in the body of any patch (merge, strategic, JSON, apply) is a
  precondition: 409 Conflict "the object has been modified" when it is not the stored one.
- **Seeded objects.** The system PriorityClasses ``system-node-critical`` and ``system-cluster-critical``
  (resourceVersions 1-2, stored by ``Writes.__init__`` as kube-apiserver's bootstrap hook does), then the
  namespaces ``default``, ``kube-system``, ``kube-public`` and ``kube-node-lease`` (3-6, created by
  ``Store.__init__``; ``seed_namespaces=False`` skips them). Deleting a Namespace deletes everything in it at
  once (DELETED events for each object) instead of a Terminating phase.
- **Deletion** is immediate unless the object has ``metadata.finalizers``: then it gets a
  ``deletionTimestamp`` and goes when an update removes the last finalizer. A pod bound to a node is
  deleted gracefully (``sim.api.graceful``): it gets ``deletionTimestamp`` (now + its grace period) and
  ``deletionGracePeriodSeconds`` (MODIFIED) and goes when its kubelet deletes it with grace period 0.
  Propagation is done by the store in the same call (the garbage collector's effect, without its delay):
  Background and Foreground delete the dependents (objects whose ``ownerReferences`` name the owner's uid),
  recursively; Orphan keeps them and strips that ownerReference. Deleting a CustomResourceDefinition deletes
  its custom objects.
- **Lists** are consistent snapshots: a continue token ``base64({"v", "rv", "start"})`` pins the list's
  resourceVersion, and later pages are rebuilt at that version from the event log (410 Expired once the
  bounded log, ``event_log_size`` events, has dropped a change of that resource made after it).
  ``remainingItemCount`` is set only without selectors, as on a real server.
- **Watches** replay the event log after the given resourceVersion (410 Expired "too old resource version"
  when the log has dropped a change of that resource made after it: the floor is per resource, like the
  apiserver's per-type watch cache), or synthesise ADDED events for the current state for ``None``/"0".
  Selector transitions turn MODIFIED into ADDED/DELETED as the watch cache does. A watch-list
  (``sendInitialEvents``) ends its initial events with the ``k8s.io/initial-events-end`` BOOKMARK. A watch
  that allows bookmarks gets one at the current resourceVersion a minute apart and 2 s before its timeout
  (``handlers.bookmark_times``, as the watch cache schedules them), so an idle watcher of a busy
  resource resumes from a version the log still holds.
- **Subscribers** are called by one dispatcher thread (started by the first ``subscribe``), in write order,
  after the write and outside the lock, for the resources they asked for (all by default; the simulator's
  loop asks for the kinds its cache holds, so the fleet's core/v1 Events are never copied for it, and not
  for its own read-only writes, whose answers it applies itself). All
  subscribers of one event share one deep copy of it: treat ``Event.object``/``Event.old`` as read-only
  (an event's ``old`` is the copy the previous event of that object handed out as its ``object``).
  ``flush()`` waits until every event so far, and every event those deliveries caused, is delivered
  (``close()`` stops the thread).
- **Defaults** as a real server applies them on every create, update, patch and apply of the main resource
  (``sim.api.defaults``: DaemonSet, Deployment, pod and pod template, Service, Secret, Namespace,
  PriorityClass), then admission (``sim.api.admission``: priority from the priority class, 300 s
  not-ready/unreachable tolerations, RuntimeClass overhead and scheduling; one global default class), then
  validation (``sim.api.validation``, 422), then what the strategies set (``sim.api.strategy``: pod phase
  Pending and qosClass, zeroed DaemonSet status, namespace phase and finalizer, CRD conditions, Service
  cluster IP, IP families and node ports). An Update's managedFields list the defaulted fields it introduced,
  as a real server's do. A pod's ``nodeName`` is set at create or once through ``bind`` (pods/binding);
  ``evict`` serves pods/eviction. ``default``, ``kube-system`` and ``kube-public`` cannot be deleted (403).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuplan.sim.api import dispatch, errors, eviction, managed, paging, registry, selectors
from gpuplan.sim.api.core import NAMESPACES
from gpuplan.sim.api.errors import (
    MODIFIED_WHY,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    not_found,
)
from gpuplan.sim.api.lifecycle import GC_MANAGER, IMMORTAL_NAMESPACES
from gpuplan.sim.api.objects import Obj, StorageKey, as_version, copy_json, meta, now_rfc3339
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.watchlog import Event, Watch
from gpuplan.sim.api.writes import Writes

# The interface (docs/sim-internals.md) and the module-level names this module had before it was split.
__all__ = [
    "ApiError",
    "Event",
    "ListResult",
    "Store",
    "Watch",
    "copy_json",
    "now_rfc3339",
    "GC_MANAGER",
    "IMMORTAL_NAMESPACES",
    "SEED_NAMESPACES",
    "MODIFIED_WHY",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "invalid",
    "not_found",
]

SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
ObjList = list[Obj]


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str | None
    remaining: int | None


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def initial_events_end(resource_version: int) -> Obj:
    """The bookmark that ends a watch-list's initial events (metav1.InitialEventsAnnotationKey)."""
    return {
        "metadata": {"resourceVersion": str(resource_version), "annotations": {INITIAL_EVENTS_END: "true"}}
    }


class Store(Writes):
    """All objects of the simulated cluster. Thread-safe: one lock serialises writes and snapshots."""

    def __init__(
        self,
        registry: registry.Registry,
        *,
        event_log_size: int = 20000,
        clock: Callable[[], datetime] | None = None,
        seed_namespaces: bool = True,
    ) -> None:
        """``event_log_size``: events kept for watch replay and list snapshots; ``clock``: the time of
        creationTimestamp and managedFields (UTC now by default); ``seed_namespaces``: create default,
        kube-system, kube-public and kube-node-lease (resourceVersions 3-6, after the system PriorityClasses'
        1-2, before any subscriber)."""
        super().__init__(registry, event_log_size=event_log_size, clock=clock)
        if seed_namespaces:
            for name in SEED_NAMESPACES:
                self.create(NAMESPACES, {"metadata": {"name": name}}, manager="kube-apiserver")

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def clock(self) -> Callable[[], datetime]:
        """The store's time (creationTimestamp, managedFields); pods/eviction stamps disruptedPods with it."""
        return self._clock

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self._lock:
            obj = self._table.get(rt, namespace, name)
        if obj is None:
            raise errors.not_found(rt, name)
        return as_version(rt, obj)

    def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | selectors.LabelSelector | None = None,
        field_selector: str | selectors.FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        labels, fields = self._selectors(rt, label_selector, field_selector)
        list_rv, start = paging.decode_continue(continue_token) if continue_token else (None, None)
        with self._lock:
            list_rv = self._rv if list_rv is None else list_rv
            objects, keys = paging.snapshot(
                rt, list_rv, self._bucket(rt), self._table.keys_for(rt, fields), self._log
            )
            page = paging.Page(keys, namespace if rt.namespaced else None, start)
            chosen, more = page.select(objects, labels, fields, limit)
            remaining = page.remaining() if more and labels.empty and fields.empty else None
        token = paging.encode_continue(list_rv, page.last) if more and page.last is not None else None
        return ListResult([as_version(rt, o) for o in chosen], str(list_rv), token, remaining)

    def _selectors(
        self,
        rt: ResourceType,
        label_selector: str | selectors.LabelSelector | None,
        field_selector: str | selectors.FieldSelector | None,
    ) -> tuple[selectors.LabelSelector, selectors.FieldSelector]:
        try:
            labels = (
                label_selector
                if isinstance(label_selector, selectors.LabelSelector)
                else selectors.parse_labels(label_selector)
            )
            fields = (
                field_selector
                if isinstance(field_selector, selectors.FieldSelector)
                else selectors.parse_fields(field_selector, rt.kind)
            )
        except selectors.SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        return labels, fields

    # ------------------------------------------------------------------ delete

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
        dry_run: bool = False,
        preconditions: dict[str, Any] | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """DELETE: a pod bound to a node gets a grace period (``grace_period_seconds``, else its
        terminationGracePeriodSeconds) and is only marked terminating; 0 removes it at once."""
        if propagation not in (None, "Background", "Foreground", "Orphan"):
            raise errors.bad_request(
                f'Unsupported value: "{propagation}": supported values: "Foreground", "Background", "Orphan"'
            )
        with self._lock:
            old = self._current(rt, namespace, name)
            self._check_preconditions(rt, old, preconditions or {})
            return self._delete_requested(rt, old, propagation or "Background", grace_period_seconds, dry_run)

    def delete_collection(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation: str | None = None,
        dry_run: bool = False,
        grace_period_seconds: int | None = None,
    ) -> ObjList:
        """Delete every object a list with these selectors returns; the deleted objects."""
        items = self.list(
            rt, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        ).items
        deleted = []
        for item in items:
            try:
                deleted.append(
                    self.delete(
                        rt,
                        meta(item).get("namespace"),
                        meta(item)["name"],
                        propagation=propagation,
                        dry_run=dry_run,
                        grace_period_seconds=grace_period_seconds,
                    )
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return deleted

    # ------------------------------------------------------------------ pod subresources

    def evict(
        self,
        namespace: str,
        name: str,
        *,
        dry_run: bool = False,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, Any] | None = None,
        propagation: str | None = None,
        manager: str = eviction.MANAGER,
    ) -> dict[str, Any]:
        """POST pods/<name>/eviction (policy/v1): the pod's PodDisruptionBudget consulted and spent
        (``sim.api.eviction``), then the pod deleted as a DELETE would, gracefully. ``manager``: the
        request's field manager, which writes the pod's DisruptionTarget condition."""
        return eviction.evict(
            self,
            namespace,
            name,
            dry_run=dry_run,
            grace_period_seconds=grace_period_seconds,
            preconditions=preconditions,
            propagation=propagation,
            manager=manager,
        )

    def bind(
        self, namespace: str, name: str, node: str, *, manager: str = "kube-scheduler", dry_run: bool = False
    ) -> Obj:
        """POST pods/<name>/binding: set spec.nodeName once, as the scheduler does (409 if already bound)."""
        pods = self._pods()
        with self._lock:
            old = self._current(pods, namespace, name)
            bound = (old.get("spec") or {}).get("nodeName")
            if bound:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod '
                    f'{name} is already assigned to node "{bound}"',
                    {"name": name, "kind": "pods/binding"},
                )
            new = copy_json(old)
            new["spec"]["nodeName"] = node
            conditions = [
                c for c in (new.get("status") or {}).get("conditions", []) if c.get("type") != "PodScheduled"
            ]
            new.setdefault("status", {})["conditions"] = conditions + [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": self._now()}
            ]
            meta(new)["managedFields"] = managed.record_update(
                old,
                new,
                meta(old).get("managedFields") or [],
                manager=manager,
                api_version="v1",
                time=self._now(),
            )
            if not dry_run:
                self._commit(pods, "MODIFIED", old, new)
            return as_version(pods, new)

    def _pods(self) -> ResourceType:
        return self._table.types[("", "pods")]

    # ------------------------------------------------------------------ watch, subscribe

    def watch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | selectors.LabelSelector | None = None,
        field_selector: str | selectors.FieldSelector | None = None,
        resource_version: str | None = None,
        send_initial_events: bool = False,
    ) -> Watch:
        """A watch from ``resource_version`` (replayed from the event log), or, with none or "0", from the
        current objects as ADDED events. ``send_initial_events`` is the watch-list protocol kubectl 1.37 and
        client-go informers speak (``sendInitialEvents=true``, ``resourceVersionMatch=NotOlderThan``): the
        current objects as ADDED events whatever ``resource_version`` says (the store is never older than it),
        then a BOOKMARK at the current resourceVersion annotated ``k8s.io/initial-events-end: "true"``."""
        labels, fields = self._selectors(rt, label_selector, field_selector)
        watch = Watch(rt, namespace if rt.namespaced else None, labels, fields, self._remove_watch)
        with self._lock:
            if send_initial_events or resource_version in (None, "", "0"):
                bucket = self._bucket(rt)
                for found in self._table.keys_sorted(rt):
                    if watch.matches(bucket[found]):
                        watch.push(("ADDED", bucket[found]))
                if send_initial_events:
                    watch.push(("BOOKMARK", initial_events_end(self._rv)))
            else:
                self._log.replay(rt, watch, resource_version)
            self._log.add_watch(watch)
        return watch

    def bookmark(self, watch: Watch) -> None:
        """Queue a BOOKMARK at the current resourceVersion on ``watch``, behind every event it was fed
        (both under the store's lock): a watcher that resumes from it misses nothing."""
        with self._lock:
            watch.push(("BOOKMARK", {"metadata": {"resourceVersion": str(self._rv)}}))

    def _remove_watch(self, watch: Watch) -> None:
        with self._lock:
            self._log.remove_watch(watch)

    def subscribe(
        self,
        callback: Callable[[Event], None],
        resources: Iterable[StorageKey] | None = None,
        *,
        read_only_writes: bool = True,
    ) -> Callable[[], None]:
        """Call ``callback`` for every event, in write order, from the dispatcher thread. ``resources``: only
        for the events of those resources (their ``(group, plural)`` storage keys). ``read_only_writes``
        False: not for the writes made ``read_only`` (their writer applies the answer itself, as the loop's
        handlers do). Events it does not want are not copied for it; ``caught_up`` says when all arrived."""
        wanted = None if resources is None else frozenset(resources)
        subscriber = dispatch.Subscriber(callback, wanted, read_only_writes)
        with self._lock:
            self._dispatcher.set_subscribers([*self._dispatcher.subscribers, subscriber])
            self._dispatcher.start()

        def unsubscribe() -> None:
            with self._lock:
                kept = [entry for entry in self._dispatcher.subscribers if entry is not subscriber]
                self._dispatcher.set_subscribers(kept)

        return unsubscribe

    def write_behind(
        self, key: Hashable, write: Callable[[], Obj | None], then: Callable[[Obj | None], None]
    ) -> None:
        """In process a write has no round trip to hide: made at once, its answer handed over at once."""
        answer: Obj | None = None
        try:
            answer = write()
        finally:
            then(answer)

    def caught_up(self) -> bool:
        """Whether the subscribers were given every event written so far (``flush`` waits for it)."""
        return self._dispatcher.caught_up()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until subscribers have seen every event, including those their own writes caused; False on
        timeout."""
        return self._dispatcher.flush(timeout)

    def close(self) -> None:
        """Stop the dispatcher thread and end every watch."""
        self._dispatcher.stop()
        with self._lock:
            watches = self._log.all_watches()
        for watch in watches:
            watch.close()
