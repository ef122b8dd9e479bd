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
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gpuplan.errors import ConfigError
from gpuplan.fileio import SPEC_LIMIT, read_text_bounded
from gpuplan.modules import catalog, common, mig_manager
from gpuplan.modules.base import (
    DEFAULT_NODE_SELECTOR,
    ComponentConfig,
    ComponentName,
    DesiredObject,
    HealthCheck,
    StackContext,
)
from gpuplan.modules.dcgm_exporter import DcgmExporterConfig
from gpuplan.modules.device_plugin import CONFIG_NODE_LABEL, DevicePluginConfig, config_file
from gpuplan.modules.driver import DriverConfig
from gpuplan.modules.gfd import GfdConfig
from gpuplan.modules.mig_manager import MigManagerConfig
from gpuplan.modules.node_labels import NodeLabels, gpu_present
from gpuplan.modules.toolkit import ToolkitConfig
from gpuplan.modules.validator import ValidatorConfig
from gpuplan.modules.values import (
    CONFIG_MAP,
    INLINE_CONFIG_KEY,
    DaemonSetSettings,
    DnsLabel,
    LabelMap,
    Model,
    SharingConfig,
)
from gpuplan.planner.facts import NodeFacts, stack_platform
from gpuplan.planner.pools import POOL_LABEL, LabelRule, PoolSelector
from gpuplan.planner.spec import pools as pool_rules
from gpuplan.planner.spec import problems as spec_errors
from gpuplan.planner.spec import yamlpos
from gpuplan.planner.spec.ignore import IgnoreRule
from gpuplan.planner.spec.pools import NodePool
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


def _mig_manager_left_out() -> MigManagerConfig:
    """The mig-manager of a spec without the section: off, its owner a default the spec did not write (the
    plan leaves such a component out of its table)."""
    return MigManagerConfig.model_construct(_fields_set=set(), owner="none")


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
    mig_manager: MigManagerConfig = Field(default_factory=_mig_manager_left_out)
    """The MIG manager (needed for mig.config): off when left out; migManager: {} runs it, as {} does for
    every component."""
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Thresholds of the drift report's GPU telemetry (temperature, utilisation, XID, memory)."""
    state: StateSettings = Field(default_factory=StateSettings)
    """Where the state lives: beside the spec (local, the default) or in the cluster (kubernetes)."""
    ignore: tuple[IgnoreRule, ...] = ()
    """Declared deviations: fields of an object, or checks on some nodes, whose differences are shown as
    ignored and never reverted (Terraform's ignore_changes)."""

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

    node_pools: tuple[NodePool, ...] = ()
    """Sets of nodes with their own driver, device plugin or MIG settings; nodes in no pool take the
    stack's. A node may be in one pool only."""

    @field_validator("node_pools")
    @classmethod
    def _unique_pools(cls, pools: tuple[NodePool, ...]) -> tuple[NodePool, ...]:
        pool_rules.check_unique(pools)
        return pools

    @model_validator(mode="after")
    def _pool_configs_are_inline(self) -> StackSpec:
        for pool in self.node_pools:
            sharing = pool.device_plugin.config if pool.device_plugin is not None else None
            if sharing is not None and sharing.name is not None:
                raise ValueError(
                    f"node pool {pool.name}: devicePlugin.config must be timeSlicing or mps; the pools' "
                    "configs are keys of the one config ConfigMap gpuplan renders"
                )
            stack_names = self.device_plugin.config is not None and self.device_plugin.config.name is not None
            if (
                pool.device_plugin is not None
                and "config" in pool.device_plugin.model_fields_set
                and stack_names
            ):
                raise ValueError(
                    f"node pool {pool.name} sets devicePlugin.config, but devicePlugin.config.name names "
                    "a ConfigMap gpuplan does not render: add the pool's config to it as a key and "
                    "label the nodes, or use an inline config for the stack"
                )
        return self

    @model_validator(mode="after")
    def _pools_fit_node_affinity(self) -> StackSpec:
        for component in POOLED_COMPONENTS:
            pool_rules.exclusion_terms(own_daemonset_pools(self, component))
        return self


POOLED_COMPONENTS: tuple[ComponentName, ...] = ("driver", "devicePlugin")
"""The components a node pool can override (each pool that does gets its own DaemonSet of them)."""


POOLED_GATES: tuple[ComponentName, ...] = (*POOLED_COMPONENTS, "migManager")
"""The components whose gates a node pool can change: those it overrides, and the mig-manager's MIG config."""


def pool_config(stack: StackSpec, pool: NodePool, component: ComponentName) -> ComponentConfig:
    """The effective config of ``component`` on ``pool``'s nodes: the stack's with the pool's keys over it."""
    if component == "driver":
        return pool_driver(stack, pool)
    if component == "devicePlugin":
        return pool_rules.effective(stack.device_plugin, pool.device_plugin)
    if component == "migManager":
        return stack.mig_manager  # a pool sets the MIG config its mig-manager applies, not the mig-manager
    raise KeyError(component)


def pool_driver(stack: StackSpec, pool: NodePool) -> DriverConfig:
    """The effective driver config of ``pool``'s nodes."""
    return pool_rules.effective(stack.driver, pool.driver)


def has_own_daemonset(stack: StackSpec, pool: NodePool, component: ComponentName) -> bool:
    """Whether ``pool`` runs its own DaemonSet of ``component``: it overrides something of it."""
    override = {"driver": pool.driver, "devicePlugin": pool.device_plugin}.get(component)
    if override is None:
        return False
    # a device plugin config alone is a named config of the shared ConfigMap, not a DaemonSet
    return bool(override.model_fields_set - ({"config"} if component == "devicePlugin" else set()))


def has_own_gates(stack: StackSpec, pool: NodePool, component: ComponentName) -> bool:
    """Whether ``pool``'s nodes are judged by gates of their own for ``component``: it has its own DaemonSet,
    or (the device plugin) its own config, so its nodes advertise their own capacity."""
    if component == "migManager":
        return pool.mig is not None
    override = {"driver": pool.driver, "devicePlugin": pool.device_plugin}.get(component)
    return override is not None and bool(override.model_fields_set)


def own_daemonset_pools(stack: StackSpec, component: ComponentName) -> list[PoolSelector]:
    """The placement (:meth:`NodePool.placement`) of each pool with its own DaemonSet of ``component``."""
    return [pool.placement() for pool in stack.node_pools if has_own_daemonset(stack, pool, component)]


def placement_component(stack: StackSpec, pool: NodePool) -> ComponentName | None:
    """The first component ``pool`` runs its own DaemonSet of, when that DaemonSet selects the pool's nodes by
    gpuplan's pool label (:meth:`NodePool.placed_by_label`); None when none does."""
    if not pool.placed_by_label():
        return None
    return next((c for c in POOLED_COMPONENTS if has_own_daemonset(stack, pool, c)), None)


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

    @model_validator(mode="after")
    def _ignored_addresses_exist(self) -> Spec:
        """An address rule names an object this spec renders: a typo would silently ignore nothing."""
        rules = [(index, rule) for index, rule in enumerate(self.spec.ignore) if rule.address is not None]
        if not rules:
            return self
        known = sorted(str(obj.address) for obj in self.desired_objects())
        for index, rule in rules:
            if rule.address not in known:
                near = [a for a in known if a.rsplit("/", 1)[-1] == str(rule.address).rsplit("/", 1)[-1]]
                raise PydanticCustomError(
                    SPEC_CONFLICT,
                    "spec.ignore[{index}]: no object of this spec has the address {address}",
                    {
                        "index": index,
                        "address": rule.address,
                        "path": ("spec", "ignore", index, "address"),
                        "hint": (f"did you mean {near[0]}? " if near else "")
                        + "`gpuplan plan` and `gpuplan state list` show the addresses",
                    },
                )
        return self

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
            sharing=self.rendered_device_plugin().config,
            exclusions={
                component: tuple(
                    tuple(term) for term in pool_rules.exclusion_terms(own_daemonset_pools(s, component))
                )
                for component in POOLED_COMPONENTS
            },
        )

    def pool_context(self, stack: StackContext, pool: NodePool) -> StackContext:
        """The rendering context of ``pool``'s own objects."""
        return stack.model_copy(
            update={"pool": pool.name, "pool_selector": dict(pool.placement().match_labels), "exclusions": {}}
        )

    def pool_components(self, pool: NodePool) -> Mapping[ComponentName, ComponentConfig]:
        """The effective configs of the components ``pool`` runs its own DaemonSet of."""
        return {
            component: pool_config(self.spec, pool, component)
            for component in POOLED_COMPONENTS
            if has_own_daemonset(self.spec, pool, component)
        }

    def pool_selectors(self) -> list[PoolSelector]:
        return [pool.selector() for pool in self.spec.node_pools]

    def recorded_pools(self) -> list[dict[str, Any]]:
        """The node pools as the state's generation keeps them (the keys the spec sets)."""
        return [
            pool.model_dump(mode="json", by_alias=True, exclude_unset=True) for pool in self.spec.node_pools
        ]

    def recorded(self) -> dict[str, Any]:
        """The spec as the state's generation keeps it: the keys it sets, so that :func:`from_recorded` gives
        back the same spec (which keys are set decides, e.g., whether a pool runs its own DaemonSet)."""
        recorded: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        manager = recorded.get("spec", {}).get("migManager")
        if manager is not None:
            # named, so that from_recorded can tell it from a generation of the days {} meant off
            manager["owner"] = self.spec.mig_manager.owner
        return recorded

    def with_pools(self, recorded: Sequence[Mapping[str, Any]]) -> Spec:
        """This spec with the node pools a generation recorded (:meth:`recorded_pools`)."""
        pools = tuple(NodePool.model_validate(pool, by_alias=True, by_name=False) for pool in recorded)
        return self.model_copy(update={"spec": self.spec.model_copy(update={"node_pools": pools})})

    def pool(self, name: str) -> NodePool | None:
        return next((pool for pool in self.spec.node_pools if pool.name == name), None)

    def for_pool(self, pool: NodePool | None) -> Spec:
        """The spec as one pool's nodes see it (None: the nodes of no pool): the pool's effective driver and
        device plugin in the stack's place, and no pools. For the rules that judge a node by the spec
        (:mod:`gpuplan.planner.spec.compat`)."""
        update: dict[str, Any] = {"node_pools": ()}
        if pool is not None:
            update["driver"] = pool_config(self.spec, pool, "driver")
            update["device_plugin"] = pool_config(self.spec, pool, "devicePlugin")
            if pool.mig is not None:
                update["mig"] = self.spec.mig.model_copy(update={"config": pool.mig.config})
        return self.model_copy(update={"spec": self.spec.model_copy(update=update)})

    def pool_drivers(self) -> tuple[tuple[dict[str, str], str], ...]:
        """(selector, driver version) of each pool that sets its own driver version: the version its nodes
        must report (the one gpuplan installs there, or the one an external owner promises)."""
        found = []
        for pool in self.spec.node_pools:
            if pool.driver is None or "version" not in pool.driver.model_fields_set:
                continue
            config = pool_config(self.spec, pool, "driver")
            if config.owner != "none":
                found.append((dict(pool.node_selector), config.version))
        return tuple(found)

    def context_for(self, nodes: Sequence[NodeFacts]) -> StackContext:
        """The rendering context for a cluster of ``nodes``: the OS tag and runtime of
        :func:`gpuplan.planner.facts.stack_platform`, the one rule plan, apply and drift share."""
        platform = stack_platform(nodes)
        return self.context(os_tag=platform.os_tag, container_runtime=platform.container_runtime)

    def sharing_pools(self) -> list[NodePool]:
        """The pools whose device plugin config (time-slicing or MPS) differs from the stack's: each is a
        named config of the one config ConfigMap, selected on its nodes by the node label
        nvidia.com/device-plugin.config (facts §5.3)."""
        return [
            pool
            for pool in self.spec.node_pools
            if pool.device_plugin is not None and "config" in pool.device_plugin.model_fields_set
        ]

    def rendered_device_plugin(self) -> DevicePluginConfig:
        """The device plugin as rendered: with sharing pools and no config of the stack's own, the stack's
        pods read the config ConfigMap's ``default`` key (no sharing) through the config-manager."""
        plugin = self.spec.device_plugin
        if not self.sharing_pools() or plugin.config is not None:
            return plugin
        shared = SharingConfig(name=CONFIG_MAP, default=INLINE_CONFIG_KEY)
        return plugin.model_copy(update={"config": shared})

    def node_labels(self) -> dict[str, dict[str, str]]:
        """pool -> the node labels its nodes get that the nodes of no pool do not (:meth:`label_rules`): the
        device plugin config name of a sharing pool, the mig-parted config of a pool with ``mig``."""
        rules = self.label_rules()
        stack = {
            label: value
            for rule in rules
            if rule.pool is None
            for label, value in rule.wanted.written().items()
        }
        labels: dict[str, dict[str, str]] = {}
        for rule in rules:
            for label, value in rule.wanted.written().items():
                if rule.pool is not None and stack.get(label) != value:
                    labels.setdefault(rule.pool, {})[label] = value
        return labels

    def label_rules(self) -> list[LabelRule]:
        """The node labels gpuplan writes, per node pool (None: the nodes of no pool): the operator's
        ``nvidia.com/gpu.present=true`` on every GPU node (design §8.3); ``gpuplan.io/pool=<name>`` on the
        nodes of a pool whose own DaemonSets select it (:meth:`NodePool.placed_by_label`); a sharing pool's
        device plugin config name; with a gpuplan mig-manager, its deploy label and the MIG config (the pool's
        ``mig.config``, else ``spec.mig.config``) on the MIG-capable nodes (``mig_manager.node_labels``);
        with another owner, a pool's own ``mig.config`` there (that mig-manager reads it, fleet facts
        §4.4); in the operator's pod-template shape, the operands' deploy labels (:meth:`_deploy_rules`)."""
        every_pool = (None, *(pool.name for pool in self.spec.node_pools))
        rules = [LabelRule(pool, "gfd", gpu_present(), at_once=True) for pool in every_pool]
        rules += [
            LabelRule(pool.name, component, NodeLabels(labels={POOL_LABEL: pool.name}), at_once=True)
            for pool in self.spec.node_pools
            if (component := placement_component(self.spec, pool)) is not None
        ]
        rules += [
            LabelRule(pool.name, "devicePlugin", NodeLabels(labels={CONFIG_NODE_LABEL: pool.name}))
            for pool in self.sharing_pools()
        ]
        manager = self.spec.mig_manager
        context = self.context()
        for pool in (None, *self.spec.node_pools):
            own = pool.mig.config if pool is not None and pool.mig is not None else None
            if manager.owner != "gpuplan" and own is None:
                continue
            mig = mig_manager.node_labels(manager, self.mig_context(context, pool))
            if manager.owner != "gpuplan":
                mig = replace(mig, labels={mig_manager.CONFIG_LABEL: mig.labels[mig_manager.CONFIG_LABEL]})
            rules.append(LabelRule(pool.name if pool is not None else None, "migManager", mig))
        return rules + self._deploy_rules()

    def _deploy_rules(self) -> list[LabelRule]:
        """In the GPU Operator's pod-template shape, each DaemonSet's deploy label, written where absent on
        the nodes it asks for (``modules.common``): gpuplan is the operator's node labeller there. The
        stack's DaemonSets run on every pool's nodes too, so their labels go to each pool; a label the rule's
        own selector requires (the mig-manager's, which its MIG rule writes) is never written here."""
        if self.spec.daemonsets.pod_template != "gpu-operator":
            return []
        every_pool = [None, *(pool.name for pool in self.spec.node_pools)]
        rules: list[LabelRule] = []
        for obj in self.desired_objects():
            wanted = obj.node_labels
            absent = {key: value for key, value in wanted.if_absent.items() if key not in wanted.selector}
            if not absent:
                continue
            own = (obj.manifest.get("metadata") or {}).get("labels", {}).get(POOL_LABEL)
            for pool in [own] if own else every_pool:
                rule = LabelRule(pool, obj.address.component, replace(wanted, if_absent=absent))
                if rule not in rules:
                    rules.append(rule)
        return rules

    def mig_context(self, stack: StackContext, pool: NodePool | None) -> StackContext:
        """``stack`` with the MIG config of ``pool``'s nodes (its own ``mig.config``, else the stack's)."""
        if pool is None or pool.mig is None:
            return stack
        return stack.model_copy(update={"mig_config": pool.mig.config})

    def _config_map(self, stack: StackContext) -> DesiredObject:
        """The one device plugin config ConfigMap: the stack's config as ``default``, each sharing pool's
        as a key named after the pool."""
        data = {INLINE_CONFIG_KEY: config_file(self.spec.device_plugin.config, stack)}
        for pool in self.sharing_pools():
            assert pool.device_plugin is not None
            data[pool.name] = config_file(pool.device_plugin.config, stack)
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": common.metadata(stack, "devicePlugin", CONFIG_MAP),
            "data": data,
        }
        return common.desired("devicePlugin", manifest)

    def desired_objects(self, stack: StackContext | None = None) -> tuple[DesiredObject, ...]:
        """Every object gpuplan wants for this spec (pure): the stack's, then each pool's DaemonSets (its
        ServiceAccount and RBAC are the stack's, shared)."""
        context = stack or self.context()
        configs = {**self.components(), "devicePlugin": self.rendered_device_plugin()}
        objects = list(catalog.render_all(configs, context))
        if self.sharing_pools() and self.spec.device_plugin.owner == "gpuplan":
            config_map = self._config_map(context)
            objects = [obj for obj in objects if obj.address != config_map.address]
            index = next(i for i, obj in enumerate(objects) if obj.address.component == "devicePlugin")
            objects.insert(index + 1, config_map)
        for pool in self.spec.node_pools:
            pool_stack = self.pool_context(context, pool)
            for component, config in self.pool_components(pool).items():
                objects += [
                    obj
                    for obj in catalog.get(component).render(config, pool_stack)
                    if obj.address.kind == "DaemonSet"
                ]
        return tuple(objects)

    def health_checks(
        self, stack: StackContext | None = None
    ) -> dict[ComponentName, tuple[HealthCheck, ...]]:
        """Each component's gates: the stack's (on the nodes of no pool that has its own DaemonSet), then
        each such pool's, marked with ``pool`` and its selector so the waiter judges them on the pool's
        nodes (:func:`gpuplan.planner.health.wait.wait`)."""
        context = stack or self.context()
        checks = dict(catalog.health_checks(self.components(), context))
        for component in POOLED_GATES:
            pooled = [p.selector() for p in self.spec.node_pools if has_own_gates(self.spec, p, component)]
            if not pooled:
                continue
            excluded = [dict(pool.match_labels) for pool in pooled]
            own = [
                HealthCheck(check.kind, {**check.params, "excludeSelectors": excluded})
                for check in checks[component]
            ]
            for pool in self.spec.node_pools:
                if not has_own_gates(self.spec, pool, component):
                    continue
                config = pool_config(self.spec, pool, component)
                own_daemonset = has_own_daemonset(self.spec, pool, component)
                own += [
                    HealthCheck(
                        check.kind,
                        {**check.params, "pool": pool.name, "poolSelector": dict(pool.node_selector)},
                    )
                    for check in catalog.get(component).health_checks(
                        config, self.mig_context(self.pool_context(context, pool), pool)
                    )
                    if own_daemonset or check.kind != "rollout"  # the stack's DaemonSet runs there
                ]
            checks[component] = tuple(own)
        return checks


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


def from_recorded(recorded: Mapping[str, Any]) -> Spec:
    """A spec a state's generation recorded (:meth:`Spec.recorded`); one this gpuplan no longer accepts is a
    :class:`ConfigError` that says where it came from. A ``migManager`` section recorded without its owner
    is from the days it meant off (:meth:`Spec.recorded` names it since ``{}`` means owned): it stays off."""
    recorded = dict(recorded)
    section = recorded.get("spec")
    manager = section.get("migManager") if isinstance(section, Mapping) else None
    if isinstance(section, Mapping) and isinstance(manager, Mapping) and "owner" not in manager:
        recorded["spec"] = {**section, "migManager": {**manager, "owner": "none"}}
    try:
        return Spec.model_validate(recorded, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise ConfigError(
            f"the spec the state recorded is not valid for this gpuplan: {exc.errors()[0]['msg']}",
            where="the state's history",
        ) from None


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
    from gpuplan.planner.spec.docstrings import DocumentedSchema

    schema = Spec.model_json_schema(by_alias=True, mode="validation", schema_generator=DocumentedSchema)
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, **schema}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"
