"""The Kubernetes provider: the only code in gpuplan that talks to a cluster (design §2).

Read side: :meth:`KubernetesProvider.refresh` builds a :class:`ClusterSnapshot` for plan, drift and
inventory; :meth:`KubernetesProvider.read` fetches one object for import/adopt. Callers: the planner's refresh
step and the CLI commands that wire a provider (``--kubeconfig``, ``--context``).

Refresh costs a fixed number of API requests, whatever the number of nodes or pods:

- ``GET /version``, and discovery once per API group-version it needs (``/api/v1``, ``/apis/apps/v1``,
  ``/apis/nvidia.com/v1`` ...; a 404 means the group is not served, e.g. no ClusterPolicy CRD);
- one label-selected list per managed kind (``labelSelector=gpuplan.io/stack=<stack>``, all namespaces);
- DaemonSets of all namespaces once, to find foreign NVIDIA components (:mod:`.foreign`); the managed
  DaemonSets are taken from the same answer instead of a second list;
- ClusterPolicies (``nvidia.com/v1``) when that CRD is served;
- nodes as ONE paginated list (``limit=500`` + ``continue``): a page per 500 nodes, with the NodeFeatures'
  below the only part that grows, as design §5 allows; each page is reduced to the node facts the planner
  uses before the next is read; this list and the NodeFeatures' are read on two threads beside the others;
- the stack's namespace object;
- NFD's NodeFeatures (``nfd.k8s-sigs.io/v1alpha1``, fleet facts §1.2) as ONE paginated list of all
  namespaces, selected by the label nfd-worker sets (``nfd.node.kubernetes.io/node-name``) and reduced to
  each node's NVIDIA PCI devices page by page; no NFD CRD (404 on discovery) means no NFD source, a 403 is
  recorded (the plan warns), never an error.

The refresh reads no pods: health is apply's business (a plan's few pod reads go through
:meth:`KubernetesProvider.list_reduced`, with a label or field selector). Lists are read raw (no model
deserialisation: the bytes go through ``json.loads``), which matters for 5000 nodes. Every HTTP request,
retries included, is counted in :attr:`KubernetesProvider.request_count`; a snapshot records how many its
refresh made.

Errors are translated at this boundary (:mod:`.k8s_errors`); reads retry 429, 5xx, dropped connections and
read timeouts with bounded backoff, honouring Retry-After, through an injectable ``sleep``. Credentials are
never logged nor put in snapshots or errors. A refresh reads the nodes and the NodeFeatures on two threads of
its own beside the rest (requests are counted under a lock, discovery keys differ per thread); otherwise not
thread-safe: one provider per thread.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar
from urllib.parse import quote

import urllib3.exceptions
import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuplan.errors import AccessDeniedError, ConfigError, ProviderError, TransientProviderError
from gpuplan.providers import foreign
from gpuplan.providers.background import Background
from gpuplan.providers.k8s_errors import (
    IN_CLUSTER,
    Endpoint,
    NetworkTransient,
    RetryPolicy,
    classify_transport_error,
    map_api_exception,
    unreachable,
)
from gpuplan.providers.snapshot import (
    NFD_NODE_NAME_LABEL,
    NODE_FEATURE,
    STACK_LABEL,
    ClusterSnapshot,
    ForeignObject,
    LiveObject,
    NodeFeatures,
    ObjectKey,
    group_keys,
    merge_node_features,
    node_facts,
    node_feature_devices,
    with_type,
)

Reduced = TypeVar("Reduced")

log = logging.getLogger(__name__)

PAGE_SIZE = 500
KIND_READERS = 3
"""Threads a refresh lists the stack's kinds on, beside its main thread and the nodes' and NodeFeatures'."""
CONNECTIONS = 16
"""Connections a client keeps to the API server, at least: one for each of a refresh's concurrent reads."""
DAEMONSET = ("apps/v1", "DaemonSet")
CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")
KUBECONFIG_HINT = (
    "pass --kubeconfig PATH or set KUBECONFIG; `gpuplan sim start --kubeconfig PATH` writes one "
    "for the simulated cluster"
)


@dataclass(frozen=True)
class Resource:
    """A served kind, as discovery describes it."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if namespace and self.namespaced:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        return f"{base}/{quote(name, safe='')}" if name else base


class _ListExpired(Exception):
    """410 Gone: the continue token of a paginated list expired; the list starts over."""


def kubeconfig_paths(explicit: str | None) -> list[str]:
    """The kubeconfig files to load: ``explicit``, else $KUBECONFIG (a path list), else ~/.kube/config."""
    value = explicit or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return [os.path.expanduser(path) for path in value.split(os.pathsep) if path]


def load_client(kubeconfig: str | None, context: str | None) -> tuple[ApiClient, Endpoint]:
    """An ApiClient for the kubeconfig (or the in-cluster service account), and what errors may name."""
    paths = kubeconfig_paths(kubeconfig)
    existing = [path for path in paths if os.path.isfile(path)]
    configuration = Configuration()
    if existing:
        shown = os.pathsep.join(paths)
        _load_kubeconfig(configuration, existing, shown, context)
    elif (
        kubeconfig is None and not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST")
    ):
        shown = IN_CLUSTER
        _load_in_cluster(configuration)
    else:
        raise ConfigError("kubeconfig not found", where=os.pathsep.join(paths), hint=KUBECONFIG_HINT)
    configuration.retries = False  # one attempt per request: the provider retries and counts itself
    # a connection for each of a refresh's concurrent reads (its kinds, the nodes, the NodeFeatures), kept
    # for the next request: past the client's default (five a core) urllib3 closed the surplus and warned
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, CONNECTIONS)
    return ApiClient(configuration), Endpoint(configuration.host, shown, context)


_LOAD_ERRORS = (ConfigException, yaml.YAMLError, ValueError, KeyError, TypeError, AttributeError, OSError)


def _load_kubeconfig(configuration: Configuration, paths: list[str], shown: str, context: str | None) -> None:
    try:
        kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.pathsep.join(paths),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except _LOAD_ERRORS as exc:
        reason = " ".join(str(exc).split())[:256]
        with_context = f" with context {context}" if context else ""
        raise ConfigError(
            f"kubeconfig cannot be used{with_context}",
            where=shown,
            detail=f"{type(exc).__name__}: {reason}",
            hint=KUBECONFIG_HINT,
        ) from exc


def _load_in_cluster(configuration: Configuration) -> None:
    try:
        kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except _LOAD_ERRORS as exc:
        raise ConfigError(
            "no kubeconfig, and the in-cluster service account cannot be used",
            detail=" ".join(str(exc).split())[:256],
            hint=KUBECONFIG_HINT,
        ) from exc


@dataclass(frozen=True)
class Request:
    """One HTTP request: verb, path, query, JSON body, Content-Type and extra headers."""

    method: str
    path: str
    query: Sequence[tuple[str, str]] = ()
    body: Any = None
    content_type: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


class KubernetesProvider:
    """Reads a cluster through the official client (see the module doc for what a refresh costs)."""

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: ApiClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
        retry: RetryPolicy | None = None,
        request_timeout: tuple[float, float] = (5.0, 60.0),
    ) -> None:
        """The client is built on first use. ``api_client`` replaces the kubeconfig (tests inject a scripted
        one); ``sleep`` is what retries wait with."""
        self._kubeconfig = kubeconfig
        self._context = context
        self._client = api_client
        self._endpoint = (
            Endpoint(api_client.configuration.host, kubeconfig or "(given client)", context)
            if api_client is not None
            else None
        )
        self._sleep = sleep
        self._retry = retry or RetryPolicy()
        self._timeout = request_timeout
        self._discovered: dict[str, dict[str, Resource]] = {}
        self._discovering: dict[str, threading.Lock] = {}
        self._mutex = threading.Lock()
        self.request_count = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the client's connections (idempotent)."""
        if self._client is not None:
            self._client.close()  # type: ignore[no-untyped-call]

    @property
    def endpoint(self) -> Endpoint:
        self._api()
        assert self._endpoint is not None  # set together with the client
        return self._endpoint

    # ---------------------------------------------------------------------------------------------- reads

    def refresh(self, *, stack: str, namespace: str, kinds: Sequence[tuple[str, str]]) -> ClusterSnapshot:
        """Managed objects (label ``gpuplan.io/stack=<stack>``) of ``kinds`` ((apiVersion, kind) pairs),
        foreign NVIDIA components, every node's facts, the server version and the stack's namespace."""
        start = self.request_count
        self._api()  # one client, made here, for the threads below
        # the two lists that grow with the fleet are read beside the small ones, each on a connection of its
        # own: while this process parses a page, the API server encodes the next
        nodes = Background(self._list_nodes, name="gpuplan-refresh-nodes")
        features = Background(self._node_features, name="gpuplan-refresh-nodefeatures")
        try:
            stack_objects = self._stack_objects(stack=stack, namespace=namespace, kinds=kinds)
        except Exception:
            nodes.wait()  # nothing of this refresh still reads once it has failed
            features.wait()
            raise
        return dataclasses.replace(
            stack_objects,
            nodes=nodes.result(),
            node_features=features.result(),
            requests=self.request_count - start,
        )

    def _stack_objects(
        self, *, stack: str, namespace: str, kinds: Sequence[tuple[str, str]]
    ) -> ClusterSnapshot:
        """What :meth:`refresh` reads beside the nodes and NodeFeatures: a snapshot without them. The
        stack's kinds are listed on :data:`KIND_READERS` threads (a small list's time is the API server's,
        and a dozen of them in a row were a third of a plan of 1,000 nodes; a thread each would cost a TLS
        handshake each); every read has ended when this returns or raises, but for a Ctrl-C."""
        selector = f"{STACK_LABEL}={stack}"
        wanted = [pair for pair in dict.fromkeys(kinds) if pair != DAEMONSET]
        lists = [*((pair, selector) for pair in wanted), (CLUSTER_POLICY, None)]  # every ClusterPolicy
        shares = [share for start in range(KIND_READERS) if (share := lists[start::KIND_READERS])]
        reads = [
            Background(functools.partial(self._list_kinds, share), name="gpuplan-refresh-kinds")
            for share in shares
        ]
        try:
            server_version = self._server_version()
            daemonsets = self._list_kind(*DAEMONSET) or []
            home = self.read(ObjectKey("v1", "Namespace", None, namespace))
        except Exception:  # not a Ctrl-C: that leaves the daemon threads behind at once
            for read in reads:
                read.wait()
            raise
        listed = {pair: items for read in reads for pair, items in read.result().items()}
        managed: dict[ObjectKey, LiveObject] = {}
        unserved: list[tuple[str, str]] = []
        for pair in dict.fromkeys(kinds):
            if pair == DAEMONSET:
                items: list[LiveObject] | None = [d for d in daemonsets if d.labels.get(STACK_LABEL) == stack]
            else:
                items = listed[pair]
            if items is None:
                unserved.append(pair)
            for live in items or ():
                managed[live.key] = live
        found: list[ForeignObject] = foreign.foreign_daemonsets(daemonsets, stack=stack)
        found += foreign.foreign_cluster_policies(listed[CLUSTER_POLICY] or [])
        return ClusterSnapshot(
            managed=managed,
            foreign=tuple(sorted(found, key=lambda f: f.key)),
            nodes=(),
            server_version=server_version,
            requests=0,
            namespace=home,
            unserved=tuple(unserved),
        )

    def _list_kinds(
        self, lists: Sequence[tuple[tuple[str, str], str | None]]
    ) -> dict[tuple[str, str], list[LiveObject] | None]:
        """Each (apiVersion, kind) of ``lists`` listed by its label selector, one after the other."""
        return {pair: self._list_kind(*pair, label_selector=selector) for pair, selector in lists}

    def _node_features(self) -> NodeFeatures:
        """NFD's NodeFeatures, reduced (see the module doc); an absent or forbidden API is no error."""
        try:
            resource = self._resource(*NODE_FEATURE)
            if resource is None:
                return NodeFeatures("not-served")
            listed = self._list(
                resource.path(),
                what="list NodeFeatures",
                transform=node_feature_devices,
                label_selector=NFD_NODE_NAME_LABEL,
            )
        except AccessDeniedError as exc:
            return NodeFeatures("forbidden", detail=exc.summary)
        return merge_node_features(listed or ()) if listed is not None else NodeFeatures("not-served")

    def list_reduced(
        self,
        api_version: str,
        kind: str,
        reduce: Callable[[dict[str, Any]], Reduced],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Reduced]:
        """Every object of ``kind`` in all namespaces as ONE paginated list, each item passed through
        ``reduce`` as its page arrives and the page dropped before the next is read, so a fleet's full objects
        are never held at once (the drift report's pods). An expired continue token lists again from the
        start, so ``reduce`` may see an item twice but only the last pass is returned. [] when the kind is not
        served."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return []
        listed = self._list(
            resource.path(),
            what=f"list {kind}",
            transform=reduce,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        return listed or []

    def read(self, key: ObjectKey) -> LiveObject | None:
        """One object; None when it (or its kind) does not exist."""
        resource = self._resource(key.api_version, key.kind)
        if resource is None:
            return None
        if resource.namespaced and not key.namespace:
            raise ProviderError(f"{key.kind} is namespaced: {key.ref} needs a namespace")
        data = self._get(resource.path(key.namespace, key.name), what=f"read {key.ref}")
        if data is None:
            return None
        return LiveObject.from_manifest(with_type(json.loads(data), key.api_version, key.kind))

    def read_many(self, keys: Iterable[ObjectKey]) -> dict[ObjectKey, LiveObject]:
        """The objects at ``keys`` that exist. Keys are grouped by kind and namespace: a group of one is one
        GET, a larger one is one list of that kind in that namespace (paginated, only the wanted names kept),
        so what a refresh costs follows the stack's kinds, not the number of its objects."""
        found: dict[ObjectKey, LiveObject] = {}
        for (api_version, kind, namespace), names in group_keys(keys).items():
            if len(names) == 1:
                live = self.read(ObjectKey(api_version, kind, namespace, names[0]))
                if live is not None:
                    found[live.key] = live
                continue
            resource = self._resource(api_version, kind)
            if resource is None:
                continue
            if resource.namespaced and not namespace:
                raise ProviderError(f"{kind} is namespaced: {kind}/{names[0]} needs a namespace")
            found.update(self._list_named(resource, namespace, names))
        return found

    def _list_named(
        self, resource: Resource, namespace: str | None, names: Sequence[str]
    ) -> dict[ObjectKey, LiveObject]:
        wanted = set(names)
        api_version, kind = resource.api_version, resource.kind

        def keep(item: dict[str, Any]) -> LiveObject | None:
            if (item.get("metadata") or {}).get("name") not in wanted:
                return None
            return LiveObject.from_manifest(with_type(item, api_version, kind))

        listed = self._list(resource.path(namespace), what=f"list {kind}", transform=keep) or []
        return {live.key: live for live in listed if live is not None}

    def _server_version(self) -> str:
        data = self._get("/version", what="read the server version")
        info = json.loads(data) if data is not None else {}
        return str(info.get("gitVersion") or "unknown")

    def _list_kind(
        self, api_version: str, kind: str, *, label_selector: str | None = None
    ) -> list[LiveObject] | None:
        """Every object of a kind in all namespaces; None when the kind is not served."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return None
        return self._list(
            resource.path(),
            label_selector=label_selector,
            what=f"list {kind}",
            transform=lambda item: LiveObject.from_manifest(with_type(item, api_version, kind)),
        )

    def _list_nodes(self) -> tuple[dict[str, Any], ...]:
        nodes = self._list("/api/v1/nodes", what="list nodes", transform=node_facts)
        return tuple(nodes or ())

    def _list(
        self,
        path: str,
        *,
        what: str,
        transform: Callable[[dict[str, Any]], Any],
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Any] | None:
        """A paginated list, each item transformed as its page arrives; None on 404 (not served).
        An expired continue token (410) starts the list over, a bounded number of times."""
        selectors = (label_selector, field_selector)
        for _ in range(self._retry.attempts):
            try:
                return self._list_pages(path, what=what, transform=transform, selectors=selectors)
            except _ListExpired:
                log.debug("%s: continue token expired, listing again", what)
        raise TransientProviderError(
            f"{what}: the list kept changing faster than it could be read",
            detail=self.endpoint.describe(),
            hint="try again",
        )

    def _list_pages(
        self,
        path: str,
        *,
        what: str,
        transform: Callable[[dict[str, Any]], Any],
        selectors: tuple[str | None, str | None],
    ) -> list[Any] | None:
        items: list[Any] = []
        token: str | None = None
        label_selector, field_selector = selectors
        while True:
            query = [("limit", str(PAGE_SIZE))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            data = self._get(path, query, what=what, expire_ok=token is not None)
            if data is None:
                if token is not None:
                    raise ProviderError(f"{what}: the collection disappeared while it was read")
                return None
            page = json.loads(data)
            items.extend(transform(item) for item in page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue") or None
            del page, data  # one page at a time: a 5000-node list never sits in memory whole
            if not token:
                return items

    def _resource(self, api_version: str, kind: str) -> Resource | None:
        """Discovery, once per group-version: plural and scope of a kind, None if not served."""
        with self._mutex:
            discovering = self._discovering.setdefault(api_version, threading.Lock())
        with discovering:  # the refresh's threads: one of them asks, the others wait for its answer
            return self._discover(api_version).get(kind)

    def _discover(self, api_version: str) -> dict[str, Resource]:
        if api_version not in self._discovered:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            data = self._get(path, what=f"discover {api_version}")
            resources: dict[str, Resource] = {}
            for entry in (json.loads(data).get("resources") or []) if data is not None else []:
                if "/" not in entry.get("name", "") and entry.get("kind"):
                    resources[entry["kind"]] = Resource(
                        api_version, entry["kind"], entry["name"], bool(entry.get("namespaced"))
                    )
            self._discovered[api_version] = resources
        return self._discovered[api_version]

    # ------------------------------------------------------------------------------------------ transport

    def _api(self) -> ApiClient:
        if self._client is None:
            self._client, self._endpoint = load_client(self._kubeconfig, self._context)
        return self._client

    def _get(
        self, path: str, query: Sequence[tuple[str, str]] = (), *, what: str, expire_ok: bool = False
    ) -> bytes | None:
        """GET with bounded retries of transient failures; None on 404; raises mapped errors."""
        self._api()  # the endpoint named in errors comes with the client
        endpoint = self.endpoint
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._request(Request("GET", path, tuple(query)))
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status == 410 and expire_ok:
                    raise _ListExpired() from exc
                error = map_api_exception(exc, endpoint=endpoint, what=what)
                if not isinstance(error, TransientProviderError) or attempt >= self._retry.attempts:
                    raise error from exc
                delay = self._retry.delay(attempt, error.retry_after)
                log.debug("%s: %s, attempt %d, retrying in %.2fs", what, exc.status, attempt, delay)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                cause = classify_transport_error(exc)
                if not isinstance(cause, NetworkTransient) or attempt >= self._retry.attempts:
                    raise unreachable(cause, endpoint=endpoint, attempts=attempt) from exc
                delay = self._retry.delay(attempt, None)
                log.debug("%s: %s, attempt %d, retrying in %.2fs", what, type(exc).__name__, attempt, delay)
            self._sleep(delay)

    def _count_request(self) -> None:
        with self._mutex:  # the refresh lists on two threads
            self.request_count += 1

    def _request(self, request: Request) -> bytes:
        """One HTTP request through the official client, content not deserialised (counted): the one request
        path of every read, list, proxy GET and write; raises ApiException on a non-2xx answer."""
        client = self._api()
        self._count_request()
        headers = {"Accept": "application/json", **request.extra}
        if request.content_type:
            headers["Content-Type"] = request.content_type
        method, url, header_params, body, post_params = client.param_serialize(
            method=request.method,
            resource_path=request.path,
            query_params=list(request.query),
            header_params=headers,
            body=request.body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(
            method,
            url,
            header_params=header_params,
            body=body,
            post_params=post_params,
            _request_timeout=self._timeout,
        )
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        release = getattr(getattr(response, "response", None), "release_conn", None)
        if callable(release):
            release()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
            )
        return data
