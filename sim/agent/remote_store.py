"""The store verbs the loop and the simulated kubelets use (``sim.api.object_store.ObjectStore``), served by a
Kubernetes API server over HTTPS instead of the in-process ``Store``.

- Reads and writes are REST requests (``client.ApiClient``); a failure raises the ``ApiError`` the
  in-process store raises for it, so the kubelet code's 404 and 409 handling needs no second path.
  ``read_only``, ``answer`` and ``owned`` are the in-process store's copy-saving hints: here every answer is
  parsed from the wire and the caller's own. ``manager`` is the ``fieldManager`` query parameter.
- ``subscribe`` starts one ``Reflector`` (list, then watch) per kind asked for, shared by every subscriber
  of that kind. ``read_only_writes=False`` cannot be honoured (a watch does not say who wrote): the loop's
  cache drops the events of its handlers' own writes as not newer (``Cache.apply``), as it did before the
  in-process store learnt to leave them out.
- A create whose caller reads no answer (``answer=False``: the Events the kubelets record) is written by a
  background lane, in order among the Events of its object, as client-go's event broadcaster writes from
  its own goroutine: the loop does not wait for the round trip, and a refused Event is dropped, as
  client-go drops it. ``write_behind`` hands a write whose answer only feeds the caller's cache (a pod's
  status) to the lane of its object the same way: a fleet's kubelets write at once, not one after another.
- ``caught_up()``: no such write is waiting, and every reflector has listed once and has delivered the
  resourceVersion of each write this store made of its kind. That is the latest write it knows of: a watch
  of pods never sees the resourceVersion of a Lease's write, so the bar is per kind.
- ``registry`` starts as the built-in kinds plus the CustomResourceDefinitions the server has (listed once by
  ``discover``); a CRD created through this store registers its kinds when the server reports it
  Established, as the in-process store registers them at create.
- ``cache_reads`` kinds (the ConfigMaps a kubelet reads for device-plugin and MIG configs) are answered from
  a reflector of that kind once it has listed, and from the server when it has no such object: a real
  kubelet's ConfigMap manager watches what it mounts (``pkg/kubelet/configmap``) rather than asking at every
  pod sync, and here an evaluation of a pod may read one each time.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.sim.agent.client import ApiClient, path_of
from gpuplan.sim.agent.reflector import Reflector
from gpuplan.sim.api import registry as registry_mod
from gpuplan.sim.api import selectors
from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.objects import StorageKey
from gpuplan.sim.api.registry import Registry, ResourceType
from gpuplan.sim.api.store import ListResult
from gpuplan.sim.api.watchlog import Event

Obj = dict[str, Any]
ESTABLISHED_TIMEOUT_S = 30.0
CRDS: StorageKey = ("apiextensions.k8s.io", "customresourcedefinitions")
WRITE_LANES = 8
"""Threads for the writes nobody waits for: a round trip to a busy API server takes tens of milliseconds,
and a fleet's kubelets write thousands of pod statuses and Events at once."""


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchOptions:
    """How one kind is reflected: a server-side field selector and a client-side filter."""

    field_selector: str | None = None
    keep: Callable[[Obj], bool] | None = None


class RemoteStore:
    """A Kubernetes API server as the loop's store (see the module doc)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        registry: Registry | None = None,
        watch_options: Mapping[StorageKey, WatchOptions] | None = None,
        cache_reads: Iterable[StorageKey] = (),
        watch_timeout_s: int | None = None,
        write_lanes: int = WRITE_LANES,
    ) -> None:
        """``watch_options``: per kind, what its reflector selects; ``cache_reads``: kinds whose ``get`` is
        answered from a reflector; ``watch_timeout_s``: each watch request's ``timeoutSeconds`` (tests use a
        short one to make watches start again); ``write_lanes``: threads for the writes nobody waits for."""
        self.client = client
        self.registry = registry or Registry.builtin()
        self._options = dict(watch_options or {})
        self._cache_reads = set(cache_reads)
        self._watch_timeout_s = watch_timeout_s
        self._lock = threading.Lock()
        self._reflectors: dict[StorageKey, Reflector] = {}
        self._subscribers: dict[StorageKey, list[Callable[[Event], None]]] = {}
        self._written: dict[StorageKey, int] = {}
        self._background = _Lanes(write_lanes)
        self._closed = False

    # -- discovery -----------------------------------------------------------------------------------
    def discover(self) -> None:
        """Register the kinds of the server's CustomResourceDefinitions (one paginated list)."""
        rt = self._rt(CRDS)
        query = {"limit": "500"}
        while True:
            answer = self.client.request("GET", path_of(rt), query=query)
            for crd in answer.get("items") or []:
                self._register_crd(crd)
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return
            query["continue"] = str(token)

    def _register_crd(self, crd: Obj) -> None:
        for rt in registry_mod.from_crd(crd):
            self.registry.register(rt)

    def _rt(self, key: StorageKey) -> ResourceType:
        for rt in self.registry.all():
            if rt.storage_key == key:
                return rt
        raise LookupError(f"the registry does not serve {key[1]}.{key[0]}")

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        reflector = self._read_cache(rt)
        if reflector is not None and reflector.objects is not None:
            found = reflector.objects.get((namespace or "" if rt.namespaced else "", name))
            if found is not None:
                return found
        return self.client.request("GET", path_of(rt, namespace, name))

    def _read_cache(self, rt: ResourceType) -> Reflector | None:
        if rt.storage_key not in self._cache_reads:
            return None
        reflector = self._reflector(rt.storage_key, keep_objects=True)
        return reflector if reflector.synced.is_set() else None

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
        query: dict[str, str] = {}
        for name, value in (
            ("labelSelector", label_selector),
            ("fieldSelector", field_selector),
            ("limit", limit),
            ("continue", continue_token),
        ):
            if isinstance(value, (selectors.LabelSelector, selectors.FieldSelector)):
                raise TypeError("a remote list takes selectors as strings")
            if value is not None:
                query[name] = str(value)
        answer = self.client.request("GET", path_of(rt, namespace), query=query)
        meta = answer.get("metadata") or {}
        items = answer.get("items") or []
        for item in items:
            item.setdefault("apiVersion", rt.api_version)
            item.setdefault("kind", rt.kind)
        remaining = meta.get("remainingItemCount")
        return ListResult(
            items,
            str(meta.get("resourceVersion") or ""),
            meta.get("continue") or None,
            int(remaining) if remaining is not None else None,
        )

    # -- writes --------------------------------------------------------------------------------------
    def create(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        namespace: str | None = None,
        manager: str,
        dry_run: bool = False,
        field_validation: str = "Ignore",
        read_only: bool = False,
        answer: bool = True,
        owned: bool = False,
    ) -> Obj:
        namespace = namespace or (obj.get("metadata") or {}).get("namespace") if rt.namespaced else None
        body = {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
        query = _options(manager, dry_run, field_validation)
        if not answer and not dry_run:
            # an Event keeps its order among those of its object (client-go's broadcaster writes in order)
            involved = body.get("involvedObject") or body.get("regarding") or {}
            key = (involved.get("namespace"), involved.get("name")) if involved else (rt.storage_key, None)
            self._background.put(key, lambda: self._write(rt, "POST", path_of(rt, namespace), body, query))
            return body
        created = self._write(rt, "POST", path_of(rt, namespace), body, query)
        if rt.storage_key == CRDS and not dry_run:
            self._register_crd(self._established(created))
        return created

    def write_behind(
        self, key: Hashable, write: Callable[[], Obj | None], then: Callable[[Obj | None], None]
    ) -> None:
        """Make ``write`` on the lane of ``key`` and hand its answer to ``then`` on that lane (None when it
        failed: logged). ``caught_up`` is False until ``then`` has returned."""

        def run() -> None:
            answer: Obj | None = None
            try:
                answer = write()
            except ApiError as exc:
                log.warning("a status write was refused: %s", exc.message)
            finally:
                then(answer)

        self._background.put(key, run)

    def update(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        namespace: str | None,
        name: str,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Ignore",
    ) -> Obj:
        body = {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
        path = path_of(rt, namespace, name, subresource or "")
        return self._write(rt, "PUT", path, body, _options(manager, dry_run, field_validation))

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        *,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        field_validation: str = "Ignore",
        read_only: bool = False,
    ) -> Obj:
        query = _options(manager, dry_run, field_validation)
        if force:
            query["force"] = "true"
        path = path_of(rt, namespace, name, subresource or "")
        return self._write(rt, "PATCH", path, body, query, content_type=patch_type)

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
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation is not None:
            options["propagationPolicy"] = propagation
        if dry_run:
            options["dryRun"] = ["All"]
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return self._write(rt, "DELETE", path_of(rt, namespace, name), options, {})

    def bind(
        self, namespace: str, name: str, node: str, *, manager: str = "kube-scheduler", dry_run: bool = False
    ) -> Obj:
        """pods/binding; the answer is the Status the server gives (a real one does not return the pod)."""
        pods = self._rt(("", "pods"))
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return self._write(
            pods, "POST", path_of(pods, namespace, name, "binding"), body, _options(manager, dry_run, "")
        )

    def _write(
        self,
        rt: ResourceType,
        method: str,
        path: str,
        body: Any,
        query: dict[str, str],
        *,
        content_type: str = "application/json",
    ) -> Obj:
        answer = self.client.request(method, path, query=query, body=body, content_type=content_type)
        version = (answer.get("metadata") or {}).get("resourceVersion")
        if version and answer.get("kind") != "Status":
            with self._lock:
                key = rt.storage_key
                self._written[key] = max(self._written.get(key, 0), int(version))
        return answer

    def _established(self, crd: Obj) -> Obj:
        """The CRD once the server serves its kinds (condition Established), as ``kubectl wait`` waits for
        it; the in-process store serves them at once."""
        rt = self._rt(CRDS)
        deadline = time.monotonic() + ESTABLISHED_TIMEOUT_S
        while True:
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return crd
            if time.monotonic() > deadline:
                name = crd["metadata"]["name"]
                raise ApiError(504, "Timeout", f"CustomResourceDefinition {name} is not established")
            time.sleep(0.1)
            crd = self.client.request("GET", path_of(rt, None, crd["metadata"]["name"]))

    # -- watch ---------------------------------------------------------------------------------------
    def subscribe(
        self,
        callback: Callable[[Event], None],
        resources: Iterable[StorageKey] | None = None,
        *,
        read_only_writes: bool = True,
    ) -> Callable[[], None]:
        if resources is None:
            raise ValueError("a remote store reflects the kinds it is asked for: name them")
        keys = list(resources)
        with self._lock:
            for key in keys:
                self._subscribers.setdefault(key, []).append(callback)
        for key in keys:
            self._reflector(key)

        def unsubscribe() -> None:
            with self._lock:
                for key in keys:
                    callbacks = self._subscribers.get(key, [])
                    if callback in callbacks:
                        callbacks.remove(callback)

        return unsubscribe

    def _reflector(self, key: StorageKey, *, keep_objects: bool = False) -> Reflector:
        with self._lock:
            found = self._reflectors.get(key)
            if found is not None or self._closed:
                if found is None:
                    raise RuntimeError("the remote store is closed")
                return found
            options = self._options.get(key, WatchOptions())
            extra = {} if self._watch_timeout_s is None else {"watch_timeout_s": self._watch_timeout_s}
            reflector = Reflector(
                self.client,
                self._rt(key),
                lambda event: self._deliver(key, event),
                field_selector=options.field_selector,
                keep=options.keep,
                keep_objects=keep_objects or key in self._cache_reads,
                **extra,
            )
            self._reflectors[key] = reflector
        reflector.start()
        return reflector

    def _deliver(self, key: StorageKey, event: Event) -> None:
        with self._lock:
            callbacks = list(self._subscribers.get(key, ()))
        for callback in callbacks:
            callback(event)

    def caught_up(self) -> bool:
        if not self._background.drained():
            return False
        with self._lock:
            reflectors = list(self._reflectors.items())
            written = dict(self._written)
        return all(r.synced.is_set() and r.seen >= written.get(key, 0) for key, r in reflectors)

    def wait_synced(self, timeout: float) -> bool:
        """Every reflector started so far has listed once; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            reflectors = list(self._reflectors.values())
        return all(r.synced.wait(max(0.0, deadline - time.monotonic())) for r in reflectors)

    @property
    def reflectors(self) -> dict[StorageKey, Reflector]:
        with self._lock:
            return dict(self._reflectors)

    def close(self) -> None:
        """Stop every reflector (joining its thread) and the connections."""
        with self._lock:
            self._closed = True
            reflectors = list(self._reflectors.values())
        for reflector in reflectors:
            reflector.stop()
        self._background.close()
        self.client.close()


def _options(manager: str, dry_run: bool, field_validation: str) -> dict[str, str]:
    query: dict[str, str] = {}
    if manager:
        query["fieldManager"] = manager
    if dry_run:
        query["dryRun"] = "All"
    if field_validation:
        query["fieldValidation"] = field_validation
    return query


class _Lanes:
    """Threads that make writes nobody waits for: a write goes to the lane its key picks, so two writes of one
    object keep their order while writes of different objects overlap their round trips, as a real node's
    status and event writes overlap those of every other node. Threads start at the first write."""

    def __init__(self, lanes: int) -> None:
        self._queues: list[queue.SimpleQueue[Callable[[], Any] | None]] = [
            queue.SimpleQueue() for _ in range(lanes)
        ]
        self._pending = 0
        self._lock = threading.Lock()
        self._threads: dict[int, threading.Thread] = {}
        self._closing = False

    def put(self, key: Hashable, write: Callable[[], Any]) -> None:
        lane = hash(key) % len(self._queues)
        with self._lock:
            self._pending += 1
            if lane not in self._threads:
                thread = threading.Thread(
                    target=self._run, args=(lane,), name=f"gpuplan-agent-writes-{lane}", daemon=True
                )
                self._threads[lane] = thread
                thread.start()
        self._queues[lane].put(write)

    def drained(self) -> bool:
        with self._lock:
            return self._pending == 0

    def close(self) -> None:
        """Stop each lane after the write it is making: what still waits is dropped, as a stopping kubelet's
        status and Events are (a fleet's backlog on a busy server would hold the stop for minutes)."""
        with self._lock:
            self._closing = True
            threads = dict(self._threads)
        for lane in threads:
            self._queues[lane].put(None)
        for thread in threads.values():
            thread.join(10)

    def _run(self, lane: int) -> None:
        while (write := self._queues[lane].get()) is not None:
            try:
                if not self._closing:
                    write()
            except ApiError as exc:
                log.debug("a background write was refused: %s", exc.message)
            except Exception:  # noqa: BLE001 - a lost connection must not end the writer
                log.exception("a background write failed")
            finally:
                with self._lock:
                    self._pending -= 1
