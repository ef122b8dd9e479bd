"""The contract between the planner and the component modules.

A module (one per component: driver, toolkit, devicePlugin, gfd, dcgmExporter, validator, migManager) has a
config model, declares the components it depends on, renders the Kubernetes objects it wants
(:class:`DesiredObject`, addressed by :class:`Address`, design §3.3) and names the health checks apply waits
for after a change. Rendering is pure: it reads only its config and the :class:`StackContext`.

Callers: :mod:`gpuplan.modules.catalog` registers the modules; :mod:`gpuplan.planner.spec.model` builds
configs and the context; :mod:`gpuplan.planner.graph` orders modules; diff, plan and apply consume the
rendered objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, get_args

from pydantic import BaseModel, Field, field_validator

from gpuplan.errors import ConfigError
from gpuplan.modules.node_labels import NodeLabels
from gpuplan.modules.values import (
    DaemonSetSettings,
    EnvVar,
    LabelMap,
    Model,
    Resources,
    SharingConfig,
    check_version,
)

ComponentName = Literal["driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator", "migManager"]
Owner = Literal["gpuplan", "external", "none"]
COMPONENTS: tuple[ComponentName, ...] = get_args(ComponentName)
CLUSTER_SCOPED_KINDS = frozenset(
    {"ClusterRole", "ClusterRoleBinding", "RuntimeClass", "Namespace", "Node", "CustomResourceDefinition"}
)

_GPUPLAN: Owner = "gpuplan"

# NFD labels every node with an NVIDIA PCI device; without the GPU Operator nobody writes the
# nvidia.com/gpu.deploy.* labels the operator's DaemonSets select on (see modules/common.py).
DEFAULT_NODE_SELECTOR: Mapping[str, str] = {"feature.node.kubernetes.io/pci-10de.present": "true"}


@dataclass(frozen=True, order=True)
class Address:
    """Where a managed object lives: ``<component>/<Kind>/<namespace>/<name>``.

    The namespace is omitted for cluster-scoped kinds (``toolkit/RuntimeClass/nvidia``). Orders by its parts.
    """

    component: str
    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        parts = [self.component, self.kind, self.namespace, self.name]
        return "/".join(p for p in parts if p is not None)

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse the text form; a malformed address is a :class:`ConfigError` that shows the expected
        shape."""
        parts = text.split("/")
        hint = (
            "an address is <component>/<Kind>/<namespace>/<name>, or <component>/<Kind>/<name> for "
            "cluster-scoped kinds, e.g. devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
        )
        if len(parts) not in (3, 4) or not all(parts):
            raise ConfigError(f"malformed address '{text}'", hint=hint)
        component, kind = parts[0], parts[1]
        if component not in COMPONENTS:
            raise ConfigError(
                f"unknown component '{component}' in address '{text}'",
                hint=f"components are {', '.join(COMPONENTS)}",
            )
        if not kind[0].isupper():
            raise ConfigError(
                f"kind '{kind}' in address '{text}' must be a Kubernetes kind such as DaemonSet", hint=hint
            )
        scoped = kind in CLUSTER_SCOPED_KINDS
        if scoped and len(parts) == 4:
            raise ConfigError(
                f"{kind} is cluster-scoped: address '{text}' must not name a namespace", hint=hint
            )
        if not scoped and len(parts) == 3:
            raise ConfigError(f"{kind} is namespaced: address '{text}' needs a namespace", hint=hint)
        return cls(component, kind, parts[2] if len(parts) == 4 else None, parts[-1])


@dataclass(frozen=True)
class DesiredObject:
    """One object a module wants in the cluster, fully rendered."""

    address: Address
    manifest: Mapping[str, Any]
    """The full object to apply: apiVersion, kind, metadata, spec/data/..."""
    immutable_paths: tuple[str, ...] = ()
    """Dotted paths whose change forces a replace (delete and create), e.g. ``spec.selector``."""
    node_labels: NodeLabels = field(default_factory=NodeLabels)
    """The labels a DaemonSet's pods need on their nodes, which gpuplan writes (``Spec.label_rules``)."""


VERSION_DOC = "Image tag (or sha256: digest). For an external owner, the version every node must report."
REPOSITORY_DOC = "Image registry and path, e.g. nvcr.io/nvidia."
IMAGE_DOC = "Image name within the repository."

HealthKind = Literal[
    "rollout",
    "driver-version",
    "runtime-handler",
    "allocatable",
    "gfd-labels",
    "dcgm-metrics",
    "validator-ready",
    "mig-config",
]


@dataclass(frozen=True)
class HealthCheck:
    """What apply waits for after a component changed (or, for external owners, what must already hold)."""

    kind: HealthKind
    params: Mapping[str, Any]
    """Kind-specific: e.g. {"daemonset": ..., "namespace": ..., "timeoutSeconds": ...}."""


class ComponentConfig(Model):
    """Settings every component has: owner, image and the knobs of its main container."""

    DRIVER_STYLE_VERSION: ClassVar[bool] = False

    owner: Owner = "gpuplan"
    """gpuplan: gpuplan creates, updates and deletes it; external: the host or another tool owns it and
    gpuplan
    only verifies it; none: it must be absent."""
    # version, repository and image are declared by each component's config with its own defaults.
    version: str
    repository: str
    image: str
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Pull policy of the component's containers."""
    image_pull_secrets: tuple[str, ...] = ()
    """Names of Secrets in the stack namespace used to pull the images."""
    env: tuple[EnvVar, ...] = ()
    """Extra environment of the main container; a name that is set by default is overridden."""
    resources: Resources | None = None
    """Requests and limits of the main container."""
    args: tuple[str, ...] = ()
    """Arguments of the main container, replacing the defaults."""
    health_timeout_seconds: int = Field(default=300, ge=1, le=86400)
    """How long apply waits for this component to be healthy after a change."""
    node_selector: LabelMap | None = None
    """Nodes this component runs on; default: the stack's nodeSelector."""

    @field_validator("version")
    @classmethod
    def _real_looking_version(cls, value: str) -> str:
        return check_version(value, driver=cls.DRIVER_STYLE_VERSION)

    def explicit_version(self) -> str | None:
        """The version the user wrote in the spec, or None when it is the default."""
        return self.version if "version" in self.model_fields_set else None

    def image_ref(self, *, suffix: str = "") -> str:
        """``repository/image:version`` (+ suffix), or ``repository/image@sha256:...`` for a digest."""
        if self.version.startswith("sha256:"):
            return f"{self.repository}/{self.image}@{self.version}"
        return f"{self.repository}/{self.image}:{self.version}{suffix}"


class StackContext(Model):
    """What rendering needs beyond a component's own config; built by
    :meth:`gpuplan.planner.spec.model.Spec.context`."""

    stack_name: str
    namespace: str = "gpu-operator"
    node_selector: LabelMap = Field(default_factory=lambda: dict(DEFAULT_NODE_SELECTOR))
    daemonsets: DaemonSetSettings = Field(default_factory=DaemonSetSettings)
    owners: Mapping[ComponentName, Owner] = Field(default_factory=lambda: dict.fromkeys(COMPONENTS, _GPUPLAN))
    mig_strategy: Literal["none", "single", "mixed"] = "single"
    mig_config: str = "all-disabled"
    """The mig-parted config the mig-manager's nodes are labelled with (``nvidia.com/mig.config``)."""
    cdi_enabled: bool = True
    os_tag: str = "ubuntu24.04"
    """Driver image OS suffix; the driver config's osTag overrides it."""
    container_runtime: Literal["containerd", "docker", "crio"] = "containerd"
    validator_image: str = "nvcr.io/nvidia/gpu-operator:v26.7.0"
    """The validator image also runs the validation init containers of other operands."""
    validator_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    toolkit_install_dir: str = "/usr/local/nvidia"
    sharing: SharingConfig | None = None
    """The device plugin's config, which GFD reads too (facts §5.3)."""
    pool: str | None = None
    """The node pool being rendered (design §7.1): its DaemonSets are named <name>-<pool>, labelled
    gpuplan.io/pool=<pool> and select the pool's nodes; None for the stack's default objects."""
    pool_selector: LabelMap = Field(default_factory=dict)
    """The pool's matchLabels, added to the DaemonSets' nodeSelector."""
    exclusions: Mapping[str, tuple[tuple[Mapping[str, Any], ...], ...]] = Field(default_factory=dict)
    """component -> node selector terms (lists of matchExpressions) that keep its default DaemonSet off the
    nodes of the pools that have their own (built by :func:`gpuplan.planner.spec.pools.exclusion_terms`)."""

    def owned(self, component: ComponentName) -> bool:
        """Whether gpuplan renders (and so runs) this component."""
        return self.owners.get(component, "gpuplan") == "gpuplan"

    def driver_root(self) -> str:
        """Where the driver's files are on the host: the driver container's root, or / for a host driver."""
        return "/run/nvidia/driver" if self.owned("driver") else "/"


class Module(Protocol):
    """A component: its config model, its dependencies, its rendered objects and its health checks."""

    name: ClassVar[ComponentName]
    depends_on: ClassVar[tuple[ComponentName, ...]]
    writes_first: ClassVar[bool]
    """Whether its changes must be made before a dependent's objects are written, not only before the
    dependent's gates: an object an API server needs before a pod can name it (the toolkit's RuntimeClass), a
    rollout that must be over on every node first (the driver's). Every other dependent's objects are written
    beside its own, as a ``kubectl apply`` of them all would, its pods waiting on each node for their
    prerequisites (the operands' validation init containers)."""
    config_model: ClassVar[type[BaseModel]]

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        """The objects this component wants; empty unless gpuplan owns it. Pure."""
        ...

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        """What must hold once the component is in place (for external owners: what must already hold)."""
        ...
