"""The stack spec, ``gpustack.yaml`` (design §3.1): model, loader with precise errors, JSON Schema.

:func:`load_spec` / :func:`parse_spec` turn the file into a frozen :class:`Spec`. Unknown keys, wrong types,
bad versions and enum values are :class:`ConfigError` naming ``file:line:column`` of the offending key or
value, the field path (``spec.devicePlugin.versoin``) and a hint (did-you-mean against the valid keys, the
allowed values, or the expected version format). Keys are matched by their camelCase names only, so that
``device_plugin`` is rejected rather than silently accepted.

Callers: the ``validate``, ``schema`` and ``graph`` commands, and later plan and apply (which render the
spec's components through :meth:`Spec.context` and :mod:`gpuplan.modules.catalog`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from gpuplan.errors import ConfigError
from gpuplan.fileio import SPEC_LIMIT, read_text_bounded
from gpuplan.modules import catalog
from gpuplan.modules.base import (
    DEFAULT_NODE_SELECTOR,
    ComponentConfig,
    ComponentName,
    DesiredObject,
    StackContext,
)
from gpuplan.modules.dcgm_exporter import DcgmExporterConfig
from gpuplan.modules.device_plugin import DevicePluginConfig
from gpuplan.modules.driver import DriverConfig
from gpuplan.modules.gfd import GfdConfig
from gpuplan.modules.mig_manager import MigManagerConfig
from gpuplan.modules.toolkit import ToolkitConfig
from gpuplan.modules.validator import ValidatorConfig
from gpuplan.modules.values import DaemonSetSettings, DnsLabel, LabelMap, Model
from gpuplan.planner.facts import NodeFacts, stack_platform
from gpuplan.planner.spec import problems as spec_errors
from gpuplan.planner.spec import yamlpos
from gpuplan.planner.spec.telemetry import TelemetrySettings

API_VERSION = "gpuplan.io/v1alpha1"
KIND = "GPUStack"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "https://gpuplan.io/schemas/gpustack-v1alpha1.json"
SPEC_CONFLICT = "spec_conflict"
"""The error type of a rule between two sections; its context names the path to point at and the hint."""


class MigSettings(Model):
    """How MIG devices are exposed (GPU Operator `mig` section)."""

    strategy: Literal["none", "single", "mixed"] = "single"
    """none: MIG devices hidden; single: every GPU of a node uses one MIG profile, advertised as
    nvidia.com/gpu;
    mixed: nvidia.com/mig-<profile> resources."""
    config: str = Field(default="all-disabled", pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    """The mig-parted config (e.g. all-1g.10gb) gpuplan labels the mig-manager's nodes with
    (nvidia.com/mig.config); needs migManager.owner gpuplan or external."""


class CdiSettings(Model):
    """Container Device Interface (GPU Operator `cdi` section)."""

    enabled: bool = True
    """Inject GPUs through CDI specs rather than the legacy runtime hook."""


class Metadata(Model):
    """Identity of the stack."""

    name: DnsLabel
    """Name of the stack; every managed object is labelled gpuplan.io/stack=<name>."""


class StateSettings(Model):
    """Where the state lives (design §7.2); ``--state`` on the command line wins over it."""

    backend: Literal["local", "kubernetes"] = "local"
    """local: gpuplan.state.json beside the spec; kubernetes: a Secret and a Lease in the cluster."""
    namespace: DnsLabel | None = None
    """kubernetes: the namespace of the state's Secret and Lease."""
    name: DnsLabel | None = None
    """kubernetes: the state's name (Secret gpuplan-state-<name>, Lease gpuplan-lock-<name>)."""
    lease_duration_seconds: int = Field(default=60, ge=1, le=3600)
    """kubernetes: how long the lock's Lease holds without a renewal (the run renews it every third)."""

    @model_validator(mode="after")
    def _kubernetes_needs_its_names(self) -> StateSettings:
        if self.backend == "kubernetes" and (self.namespace is None or self.name is None):
            raise ValueError("the kubernetes backend needs namespace and name")
        if self.backend == "local" and (self.namespace is not None or self.name is not None):
            raise ValueError("namespace and name belong to the kubernetes backend")
        return self


def _default_node_selector() -> dict[str, str]:
    return dict(DEFAULT_NODE_SELECTOR)


class StackSpec(Model):
    """The desired GPU stack: where it lives, what all DaemonSets share, and one section per component."""

    namespace: DnsLabel = "gpu-operator"
    """Namespace of gpuplan's objects."""
    node_selector: LabelMap = Field(default_factory=_default_node_selector)
    """Nodes the components run on. Default: NFD's NVIDIA PCI label, present on every GPU node."""
    daemonsets: DaemonSetSettings = Field(default_factory=DaemonSetSettings)
    """Settings every DaemonSet shares."""
    mig: MigSettings = Field(default_factory=MigSettings)
    """MIG strategy."""
    cdi: CdiSettings = Field(default_factory=CdiSettings)
    """CDI settings."""
    driver: DriverConfig = Field(default_factory=DriverConfig)
    """The NVIDIA driver (commonly owner: external, installed on the host)."""
    toolkit: ToolkitConfig = Field(default_factory=ToolkitConfig)
    """The NVIDIA Container Toolkit (commonly owner: external, installed on the host)."""
    device_plugin: DevicePluginConfig = Field(default_factory=DevicePluginConfig)
    """The NVIDIA device plugin."""
    gfd: GfdConfig = Field(default_factory=GfdConfig)
    """GPU Feature Discovery."""
    dcgm_exporter: DcgmExporterConfig = Field(default_factory=DcgmExporterConfig)
    """The DCGM exporter."""
    validator: ValidatorConfig = Field(default_factory=ValidatorConfig)
    """The validator."""
    mig_manager: MigManagerConfig = Field(default_factory=MigManagerConfig)
    """The MIG manager (off by default; needed for mig.config)."""
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Thresholds of the drift report's GPU telemetry (temperature, utilisation, XID, memory)."""
    state: StateSettings = Field(default_factory=StateSettings)
    """Where the state lives: beside the spec (local, the default) or in the cluster (kubernetes)."""

    @model_validator(mode="after")
    def _mig_config_needs_a_mig_manager(self) -> StackSpec:
        """Only a mig-manager applies a MIG config: without one the nodes' label would never take effect."""
        if self.mig.config != "all-disabled" and self.mig_manager.owner == "none":
            raise PydanticCustomError(
                SPEC_CONFLICT,
                "mig.config {config} needs a mig-manager, but migManager.owner is none",
                {
                    "config": self.mig.config,
                    "path": ("mig", "config"),
                    "hint": "set migManager: {owner: gpuplan} (or external, when another one runs), "
                    "or remove mig.config",
                },
            )
        return self


class Spec(Model):
    """gpustack.yaml: the desired NVIDIA GPU software stack of one cluster."""

    api_version: Literal["gpuplan.io/v1alpha1"]
    """Always gpuplan.io/v1alpha1."""
    kind: Literal["GPUStack"]
    """Always GPUStack."""
    metadata: Metadata
    """Name of the stack."""
    spec: StackSpec = Field(default_factory=StackSpec)
    """The desired stack."""

    def components(self) -> Mapping[ComponentName, ComponentConfig]:
        """Each component's config (each with its ``owner``), in catalog order."""
        s = self.spec
        configs: dict[ComponentName, ComponentConfig] = {
            "driver": s.driver,
            "toolkit": s.toolkit,
            "devicePlugin": s.device_plugin,
            "gfd": s.gfd,
            "dcgmExporter": s.dcgm_exporter,
            "validator": s.validator,
            "migManager": s.mig_manager,
        }
        return {name: configs[name] for name in catalog.MODULES}

    def context(
        self,
        *,
        os_tag: str | None = None,
        container_runtime: Literal["containerd", "docker", "crio"] | None = None,
    ) -> StackContext:
        """The rendering context; ``os_tag`` and ``container_runtime`` come from the nodes when known."""
        s = self.spec
        return StackContext(
            stack_name=self.metadata.name,
            namespace=s.namespace,
            node_selector=s.node_selector,
            daemonsets=s.daemonsets,
            owners={name: cfg.owner for name, cfg in self.components().items()},
            mig_strategy=s.mig.strategy,
            mig_config=s.mig.config,
            cdi_enabled=s.cdi.enabled,
            os_tag=os_tag or "ubuntu24.04",
            container_runtime=s.toolkit.runtime or container_runtime or "containerd",
            validator_image=s.validator.image_ref(),
            validator_image_pull_policy=s.validator.image_pull_policy,
            toolkit_install_dir=s.toolkit.install_dir,
            sharing=s.device_plugin.config,
        )

    def context_for(self, nodes: Sequence[NodeFacts]) -> StackContext:
        """The rendering context for a cluster of ``nodes``: the OS tag and runtime of
        :func:`gpuplan.planner.facts.stack_platform`, the one rule plan, apply and drift share."""
        platform = stack_platform(nodes)
        return self.context(os_tag=platform.os_tag, container_runtime=platform.container_runtime)

    def desired_objects(self, stack: StackContext | None = None) -> tuple[DesiredObject, ...]:
        """Every object gpuplan wants for this spec (pure)."""
        return catalog.render_all(self.components(), stack or self.context())


def parse_spec(text: str, *, filename: str) -> Spec:
    """Validate spec text; every problem is a :class:`ConfigError` with ``filename:line:column``."""
    data, positions = yamlpos.load(text, filename=filename)
    if data is None:
        raise ConfigError(
            "the spec is empty",
            where=f"{filename}:1:1",
            hint=f"start with apiVersion: {API_VERSION}, kind: {KIND}, metadata.name and spec",
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"the spec must be a mapping, not a {type(data).__name__}",
            where=positions.where(()),
            hint=f"start with apiVersion: {API_VERSION}, kind: {KIND}, metadata.name and spec",
        )
    try:
        return Spec.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise spec_errors.to_config_error(exc, positions, Spec) from None


def load_spec(path: Path) -> Spec:
    """Read and validate ``path``; an unreadable file is a :class:`ConfigError` too."""
    return parse_spec(read_spec_text(path), filename=str(path))


def read_spec_text(path: Path) -> str:
    """The text of the spec file ``path`` (bounded: :func:`gpuplan.fileio.read_text_bounded`)."""
    try:
        return read_text_bounded(path, limit=SPEC_LIMIT, what="spec", error=ConfigError)
    except ConfigError as exc:
        exc.hint = exc.hint or "pass the stack spec with -f, e.g. gpuplan validate -f gpustack.yaml"
        raise


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of gpustack.yaml, with titles and descriptions, for editors."""
    schema = Spec.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, **schema}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"
