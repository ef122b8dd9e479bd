"""What the engine asks of a Kubernetes provider: small protocols, and the values they trade in.

The planner is typed against these, never against the concrete provider modules (an import-linter contract
in pyproject.toml keeps it so), so that :class:`gpuplan.providers.fake.FakeKubernetes` can stand in for
:class:`gpuplan.providers.kubernetes_write.KubernetesWriter` in unit tests. Each protocol is a few methods;
a caller that needs more than one asks for a combination (:class:`HealthReader`, :class:`RolloutClient`,
:class:`ApplyClient`), and one that needs less asks for the narrow one it uses (:class:`ObjectReader`,
:class:`PodLister`). The read side of a plan's refresh is :class:`gpuplan.providers.snapshot.ClusterReader`.

The values (:class:`Listing`, :class:`WatchEvent`, :data:`ANY_VERSION`, :class:`DriftDetected`,
:class:`ProxyRefused`, :func:`contains`) live here, so that the engine and every provider share one
definition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from gpuplan.errors import ConflictError, ProviderError, TransientProviderError
from gpuplan.providers.snapshot import LiveObject, ObjectKey

FIELD_MANAGER: Final = "gpuplan"
NODE_LABELS_FIELD_MANAGER: Final = "gpuplan-node-labels"
"""The field manager of the node labels gpuplan writes (``label_node``): another manager owning one of them
means someone changed it; the driver rollout's own node labels, written as ``gpuplan``, are another
manager's."""
ANY_VERSION: Final = "*"
"""``expected_rv`` that skips the drift guard (the caller has no plan-time version to hold the object to)."""


@dataclass(frozen=True)
class Listing:
    """A paginated list read whole: the items, and the resourceVersion to watch from afterwards."""

    items: tuple[LiveObject, ...]
    resource_version: str | None

    def __iter__(self) -> Iterator[LiveObject]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class WatchEvent:
    """One event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK; ``object`` the object (a dict)."""

    type: str
    object: Mapping[str, Any]

    @property
    def resource_version(self) -> str | None:
        metadata: Mapping[str, Any] = self.object.get("metadata") or {}
        return metadata.get("resourceVersion")


@dataclass(frozen=True)
class EvictionRefused:
    """What ``evict`` answers when a PodDisruptionBudget forbids the eviction now (429): false, with the
    server's reason, which names the budget (``The disruption budget web needs 1 healthy pods and has 1
    currently``)."""

    reason: str

    def __bool__(self) -> bool:
        return False


class WatchExpired(TransientProviderError):
    """410 Gone: the resourceVersion to watch from is too old; list again and watch from the list's."""


class DriftDetected(ConflictError):
    """The object changed since the plan read it; the write was not made (re-plan to see the change)."""

    def __init__(self, key: ObjectKey, *, expected: str | None, found: LiveObject | None) -> None:
        found_rv = found.resource_version if found is not None else None
        was = "absent" if expected is None else f"at resourceVersion {expected}"
        now = "is absent" if found is None else f"is at resourceVersion {found_rv}"
        # a status-subresource writer (the DaemonSet controller) did not change what the plan was made from
        managers = sorted(
            {
                str(entry.get("manager"))
                for entry in (found.managed_fields if found else ())
                if entry.get("manager")
                and entry.get("manager") != FIELD_MANAGER
                and not entry.get("subresource")
            }
        )
        detail = f"changed by: {', '.join(managers)}" if managers else ""
        super().__init__(
            f"{key.ref} changed since the plan: it was {was} and now {now}",
            where=key.ref,
            detail=detail,
            hint="run `gpuplan plan` again to see the change, then apply the new plan",
        )
        self.key = key
        self.expected = expected
        self.found = found_rv


class ProxyRefused(ProviderError):
    """The API server's pod or service proxy answered what no wait changes (a 400, 401, 403, or a 404 of
    the proxied path itself; the provider decides which answers are such): ``status`` and the server's
    own words for it, ``reason``, already made safe to print (one line, no control characters)."""

    def __init__(self, summary: str, *, status: int, reason: str, **kwargs: str) -> None:
        super().__init__(summary, **kwargs)
        self.status = status
        self.reason = reason


def contains(live: Any, desired: Any) -> bool:
    """Whether ``live`` holds every field of ``desired`` (maps: a superset; lists: same length, item by
    item). Server defaults added to live do not matter; a missing or different desired value does."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            k in live and contains(live[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired))
        )
    return bool(live == desired)


# ------------------------------------------------------------------------------------------------ reads


class ObjectReader(Protocol):
    """One object by key: what the write guard and the journal's recovery read."""

    def read(self, key: ObjectKey) -> LiveObject | None:
        """The object; None when it (or its kind) does not exist."""
        ...


class PodLister(Protocol):
    """Pods by namespace, label selector and field selector (``spec.nodeName=<node>``)."""

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing: ...


class CountingPodLister(PodLister, Protocol):
    """A pod lister that counts its requests, for the plan's request budget."""

    request_count: int


@runtime_checkable
class Reader(ObjectReader, PodLister, Protocol):
    """Live reads: one object, filtered lists that keep their resourceVersion, and watches from it.

    Runtime-checkable: the health waiter asks whether a provider can list ControllerRevisions at all."""

    def list_objects(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing: ...

    def list_nodes(self, *, label_selector: str | None = None) -> Listing: ...

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 30.0,
    ) -> Iterator[WatchEvent]:
        """Events of ``kind`` after ``resource_version``, until ``timeout`` seconds pass or the caller
        stops."""
        ...


@runtime_checkable
class ReducedLister(Protocol):
    """One paginated list of a kind, each item reduced as its page arrives (a fleet's pods)."""

    request_count: int

    def list_reduced(
        self,
        api_version: str,
        kind: str,
        reduce: Callable[[dict[str, Any]], Any],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Any]: ...


@dataclass(frozen=True)
class FoldedListing:
    """A paginated list whose items were folded as their pages arrived; the resourceVersion to watch from."""

    items: tuple[Any, ...]
    resource_version: str | None


@runtime_checkable
class FoldingLister(Protocol):
    """Lists that fold each item as its page arrives (the health waiter's informers), so a fleet's full
    objects are never held at once: one page of them at a time."""

    def list_folded(
        self,
        api_version: str,
        kind: str,
        fold: Callable[[dict[str, Any]], Any],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> FoldedListing: ...


class PodProxy(Protocol):
    """A GET through the API server's pod proxy (a DCGM exporter's metrics); :class:`ProxyRefused` when the
    server refuses it for good, another :class:`ProviderError` when the pod does not serve yet."""

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes: ...


@runtime_checkable
class ServiceProxy(Protocol):
    """A GET through the API server's service proxy, which picks one ready endpoint of the Service itself;
    errors as :class:`PodProxy`'s."""

    def service_proxy_get(self, namespace: str, service: str, port: int, path: str) -> bytes: ...


class ProxyReader(PodProxy, Protocol):
    """A pod proxy of its own, counted and closed by whoever opened it (the drift report's scrapes)."""

    request_count: int

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class PromSample:
    """One series of a PromQL instant vector: its labels (``__name__`` included) and its value."""

    labels: Mapping[str, str]
    value: float


class MetricsQuerier(Protocol):
    """A Prometheus server's HTTP API, as the drift report and the inventory read it
    (:class:`gpuplan.providers.prometheus.PrometheusClient`). ``url`` names the server in errors."""

    url: str
    request_count: int

    def query(self, promql: str) -> list[PromSample]:
        """The instant vector ``promql`` evaluates to now (``GET /api/v1/query``)."""
        ...

    def stream(self, promql: str) -> Iterable[PromSample]:
        """:meth:`query`'s series one at a time as they are read, for an answer too large to hold whole (a
        fleet's GPUs); its errors may come after some series."""
        ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------- writes


class Writer(Protocol):
    """Writes held to the resourceVersion the plan read (``expected_rv``; None: the plan saw no object,
    :data:`ANY_VERSION`: no check): a moved version raises :class:`DriftDetected` and writes nothing."""

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        expected_rv: str | None = ANY_VERSION,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> LiveObject:
        """Server-side apply as ``field_manager`` (None: gpuplan's own): the fields this manager sent before
        and omits now are removed, another manager's stay."""
        ...

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> LiveObject:
        """Create ``obj``; one already there is a conflict."""
        ...

    def delete(
        self,
        key: ObjectKey,
        *,
        propagation: str = "Background",
        expected_rv: str | None = ANY_VERSION,
        dry_run: bool = False,
    ) -> LiveObject | None:
        """The object as it was, or None when it was already gone."""
        ...

    def replace(
        self, obj: Mapping[str, Any], *, expected_rv: str | None = ANY_VERSION, timeout: float = 120.0
    ) -> LiveObject:
        """Delete, wait until gone, create (for a field the server refuses to change in place)."""
        ...

    def wait_gone(self, key: ObjectKey, *, uid: str | None, timeout: float) -> None:
        """Until no object ``key`` with ``uid`` exists; ProviderError when ``timeout`` passes first."""
        ...


class NodeOperations(Protocol):
    """What a driver rollout does to a node and its pods."""

    def cordon(self, node: str, on: bool = True) -> LiveObject:
        """Mark ``node`` unschedulable (``on``) or schedulable again; idempotent."""
        ...

    def evict(self, pod: ObjectKey) -> bool | EvictionRefused:
        """True when evicted (or already gone); false (an ``EvictionRefused`` where the server said why)
        when a PodDisruptionBudget forbids it now."""
        ...

    def delete_pod(self, pod: ObjectKey, *, grace_seconds: int | None = None) -> bool:
        """False when the pod was already gone."""
        ...


class NodeLabeller(Protocol):
    """How apply writes the node labels of node pools (``nvidia.com/device-plugin.config``,
    ``nvidia.com/mig.config``), as ``kubectl label node`` does."""

    def label_node(self, node: str, labels: Mapping[str, str | None]) -> LiveObject:
        """Set each label of ``labels`` on ``node`` (None: remove it); the node as written."""
        ...


# ----------------------------------------------------------------------------------------- combinations


class HealthReader(Reader, PodProxy, Protocol):
    """What the health waiter reads through."""


class RolloutClient(Reader, Writer, NodeOperations, Protocol):
    """What the driver's node-by-node rollout reads and changes through."""


class Patcher(Protocol):
    """JSON merge patches, for the fields server-side apply cannot remove (another manager owns them)."""

    def merge_patch(self, key: ObjectKey, patch: Mapping[str, Any]) -> LiveObject: ...


class ApplyClient(Reader, Writer, NodeOperations, NodeLabeller, PodProxy, Protocol):
    """What the apply walker works through: each of its worker threads opens one and closes it."""

    def close(self) -> None: ...


class TakeoverClient(ApplyClient, Patcher, Protocol):
    """What handing a GPU Operator's operands to gpuplan needs: an apply's client and merge patches."""
