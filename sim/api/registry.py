"""The resource kinds the simulated API server serves: data, not code.

A ``ResourceType`` says what a kube-apiserver's discovery says about a resource (group, version, plural,
kind, scope, short names, categories, subresources). ``Registry`` holds them; ``Registry.builtin()`` has the
kinds gpuplan renders and reads plus scheduling.k8s.io/v1 PriorityClass (``pc``) and policy/v1
PodDisruptionBudget (``pdb``), and the store registers the
kinds a CustomResourceDefinition defines when it is created (``from_crd``) and unregisters them when it is
deleted.

Callers: ``sim.api.store`` (every verb resolves a ResourceType first), ``sim.api.server`` and
``sim.api.discovery`` (URL routing and discovery documents), controllers and kubelets (to name the kinds they
write). Thread-safe: the kinds are kept in a dict replaced under a lock, so readers never see a half-built
state.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

from gpuplan.sim.api import table_custom


@dataclass(frozen=True)
class ResourceType:
    """One resource of one group version, as discovery lists it.

    ``tracks_generation``: whether objects of the kind carry ``metadata.generation`` (bumped on changes
    outside metadata and status), as the real registry strategies decide: DaemonSets, Deployments, Pods
    (1.34+), CRDs and custom resources do; Nodes, Namespaces, ConfigMaps, Secrets, RBAC objects do not.
    A PriorityClass gets generation 1 on create (its strategy sets it) and keeps it: no update bumps it
    (``strategy.bumps_generation``).

    ``schema``: a custom resource's ``openAPIV3Schema`` of this version, as canonical JSON text (hashable,
    and equal exactly when the schema is), for its OpenAPI document and field validation; "" for built-ins.
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    tracks_generation: bool = True
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    schema: str = ""
    columns: str = ""
    """A custom resource's ``additionalPrinterColumns`` of this version, as canonical JSON text (``[]`` when
    it declares none); "" for built-ins, whose columns are the printers of ``sim.api.tables``."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_resource(self) -> str:
        """``daemonsets.apps`` or ``pods``: how error messages name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> tuple[str, str]:
        """Objects of every served version of one resource share one storage slot, as in etcd."""
        return (self.group, self.plural)


def _core(kind: str, plural: str, namespaced: bool, short: tuple[str, ...] = (), **kw: Any) -> ResourceType:
    return ResourceType("", "v1", kind, plural, kind.lower(), namespaced, short, **kw)


def _grp(
    group: str, kind: str, plural: str, namespaced: bool, short: tuple[str, ...] = (), **kw: Any
) -> ResourceType:
    return ResourceType(group, "v1", kind, plural, kind.lower(), namespaced, short, **kw)


RBAC = "rbac.authorization.k8s.io"

_REVIEW: dict[str, Any] = {"verbs": ("create",), "tracks_generation": False}

# Groups that would be in discovery without a top-level resource of their own in this simulator (none now:
# policy/v1, which kubectl drain looks up for pods/eviction, serves PodDisruptionBudgets).
_EMPTY_GROUPS: tuple[tuple[str, str], ...] = ()

BUILTIN: tuple[ResourceType, ...] = (
    _core(
        "Namespace",
        "namespaces",
        False,
        ("ns",),
        subresources=("status", "finalize"),
        tracks_generation=False,
    ),
    _core("Node", "nodes", False, ("no",), subresources=("status", "proxy"), tracks_generation=False),
    _core(
        "Pod",
        "pods",
        True,
        ("po",),
        categories=("all",),
        subresources=("status", "eviction", "proxy", "binding", "log", "exec", "portforward"),
    ),
    _core("ConfigMap", "configmaps", True, ("cm",), tracks_generation=False),
    _core("Secret", "secrets", True, (), tracks_generation=False),
    _core(
        "Service",
        "services",
        True,
        ("svc",),
        categories=("all",),
        subresources=("status", "proxy"),
        tracks_generation=False,
    ),
    _core(
        "ServiceAccount", "serviceaccounts", True, ("sa",), subresources=("token",), tracks_generation=False
    ),
    _core("Event", "events", True, ("ev",), tracks_generation=False),
    _core("Endpoints", "endpoints", True, ("ep",), tracks_generation=False),
    _grp("apps", "DaemonSet", "daemonsets", True, ("ds",), categories=("all",), subresources=("status",)),
    _grp(
        "apps",
        "Deployment",
        "deployments",
        True,
        ("deploy",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    # batch/v1: the in-cluster drift report runs as a CronJob (`gpuplan drift cronjob | kubectl apply -f -`).
    # Run by the simulator's Job and CronJob controllers (sim.controllers.jobs / cronjobs).
    _grp("batch", "Job", "jobs", True, categories=("all",), subresources=("status",)),
    _grp("batch", "CronJob", "cronjobs", True, ("cj",), categories=("all",), subresources=("status",)),
    # Answered for the caller, never stored (sim.api.authz): kubectl auth can-i / whoami.
    _grp("authorization.k8s.io", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False, **_REVIEW),
    _grp("authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False, **_REVIEW),
    _grp("authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews", False, **_REVIEW),
    _grp("coordination.k8s.io", "Lease", "leases", True, tracks_generation=False),
    # Written by the endpointslice controller (sim/controllers/endpointslices.py) for selecting Services.
    # Its strategy sets generation 1 and bumps it on any change outside metadata (it has no status).
    _grp("discovery.k8s.io", "EndpointSlice", "endpointslices", True),
    # Its strategy (pkg/registry/policy/poddisruptionbudget/strategy.go) empties the status on create and
    # bumps generation on a spec change; the disruption controller (sim/controllers/disruption.py) writes
    # the status and pods/eviction reads it (sim/api/eviction.py).
    _grp("policy", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",), subresources=("status",)),
    _grp(RBAC, "Role", "roles", True, tracks_generation=False),
    _grp(RBAC, "ClusterRole", "clusterroles", False, tracks_generation=False),
    _grp(RBAC, "RoleBinding", "rolebindings", True, tracks_generation=False),
    _grp(RBAC, "ClusterRoleBinding", "clusterrolebindings", False, tracks_generation=False),
    _grp("node.k8s.io", "RuntimeClass", "runtimeclasses", False, tracks_generation=False),
    _grp("scheduling.k8s.io", "PriorityClass", "priorityclasses", False, ("pc",)),
    _grp(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ("crd", "crds"),
        subresources=("status",),
    ),
)

# Discovery's preferred order of groups on a real server (core first, then the built-in API groups);
# custom groups follow in registration order.
_GROUP_ORDER = (
    "",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "batch",
    "coordination.k8s.io",
    RBAC,
    "policy",
    "node.k8s.io",
    "discovery.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
)


class Registry:
    """The served kinds, looked up by URL (group, version, plural) or by body (apiVersion, kind)."""

    def __init__(
        self, types: tuple[ResourceType, ...] = (), empty_groups: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self._lock = threading.Lock()
        self._by_url: dict[tuple[str, str, str], ResourceType] = {}
        self._empty_groups = list(empty_groups)
        for rt in types:
            self.register(rt)

    @classmethod
    def builtin(cls) -> Registry:
        return cls(BUILTIN, _EMPTY_GROUPS)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_url.get((group, version, plural))

    def for_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in list(self._by_url.values()):
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def find(self, name: str) -> list[ResourceType]:
        """Kinds a user-typed name means (plural, singular, short name, or Kind), as kubectl resolves them."""
        low = name.lower()
        return [
            rt
            for rt in self.all()
            if low in (rt.plural, rt.singular, rt.kind.lower()) or low in rt.short_names
        ]

    def all(self) -> list[ResourceType]:
        return list(self._by_url.values())

    def groups(self) -> list[tuple[str, list[str]]]:
        """(group, versions) with the preferred version first; the core group is ``""``."""
        versions: dict[str, list[str]] = {}
        for group, version in [(rt.group, rt.version) for rt in self.all()] + list(self._empty_groups):
            seen = versions.setdefault(group, [])
            if version not in seen:
                seen.append(version)
        known = [g for g in _GROUP_ORDER if g in versions]
        custom = [g for g in versions if g not in _GROUP_ORDER]
        return [(g, sorted(versions[g], key=_version_priority)) for g in known + custom]

    def resources(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self.all() if rt.group == group and rt.version == version]

    def served_versions(self, rt: ResourceType) -> list[ResourceType]:
        """Every version under which the objects of ``rt`` are served (one storage slot)."""
        return [other for other in self.all() if other.storage_key == rt.storage_key]

    def register(self, rt: ResourceType) -> None:
        with self._lock:
            by_url = dict(self._by_url)
            by_url[(rt.group, rt.version, rt.plural)] = rt
            self._by_url = by_url

    def unregister(self, rt: ResourceType) -> None:
        with self._lock:
            by_url = dict(self._by_url)
            by_url.pop((rt.group, rt.version, rt.plural), None)
            self._by_url = by_url


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first (v2 > v1 > v1beta1)."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The ResourceTypes a CustomResourceDefinition serves: one per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    plural = names.get("plural", "")
    types = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = tuple(sorted((version.get("subresources") or {}).keys()))
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        types.append(
            ResourceType(
                group=spec.get("group", ""),
                version=version["name"],
                kind=names.get("kind", ""),
                plural=plural,
                singular=names.get("singular") or names.get("kind", "").lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=subresources,
                tracks_generation=True,
                schema=json.dumps(schema, sort_keys=True, separators=(",", ":")) if schema else "",
                columns=table_custom.columns_of(version),
            )
        )
    return types
