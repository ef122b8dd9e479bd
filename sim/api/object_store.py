"""What the loop, its controllers and the simulated kubelets use of a store: the in-process ``Store``
(``sim.api.store``) or a client of a Kubernetes API server (``sim.agent.remote_store.RemoteStore``).

Only the verbs they call, with the keyword arguments they pass; ``read_only``, ``answer`` and ``owned`` are
the in-process store's copy-saving hints (``sim.api.sharing``), which a remote store may ignore: its answers
are parsed from the wire and belong to the caller anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from gpuplan.sim.api import selectors
from gpuplan.sim.api.objects import Obj, StorageKey
from gpuplan.sim.api.registry import Registry, ResourceType
from gpuplan.sim.api.store import ListResult
from gpuplan.sim.api.watchlog import Event


class ObjectStore(Protocol):
    """The store verbs of ``docs/sim-internals.md`` "Store" that the loop's handlers use."""

    registry: Registry

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj: ...

    def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | selectors.LabelSelector | None = None,
        field_selector: str | selectors.FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult: ...

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
    ) -> Obj: ...

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
    ) -> Obj: ...

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
    ) -> Obj: ...

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
    ) -> Obj: ...

    def bind(
        self, namespace: str, name: str, node: str, *, manager: str = "kube-scheduler", dry_run: bool = False
    ) -> Obj: ...

    def subscribe(
        self,
        callback: Callable[[Event], None],
        resources: Iterable[StorageKey] | None = None,
        *,
        read_only_writes: bool = True,
    ) -> Callable[[], None]: ...

    def caught_up(self) -> bool: ...

    def write_behind(
        self, key: Hashable, write: Callable[[], Obj | None], then: Callable[[Obj | None], None]
    ) -> None:
        """Make ``write`` (whose answer only feeds the caller's cache) and give ``then`` its answer: at once
        in process, from a background lane of ``key``'s over the network."""
        ...
