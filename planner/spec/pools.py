"""Node pools (``spec.nodePools``, design §7.1): the model, and each pool's effective component configs.

A pool names a set of nodes by ``matchLabels`` and overrides the driver, device plugin or MIG settings for
them. Its effective config is the stack's config with the pool's keys merged over it, key by key (a pool's
``driver: {upgradePolicy: {maxParallelUpgrades: 2}}`` keeps the stack's other upgradePolicy keys), so a
pool states only what differs. Owners are the stack's: a pool cannot make a component external or absent
on its nodes (one lifecycle owner per component, design §3.1).

The default objects (those of nodes in no pool) must not land on a pool's nodes, so their required node
affinity excludes every pool whose own object replaces them: a node is outside a pool when one of the
pool's labels differs, so "outside every pool" is an AND of ORs, which node affinity (terms ORed,
expressions ANDed) takes only once expanded: one term per choice of one label per pool.
:data:`MAX_EXCLUSION_TERMS` bounds that expansion. A pool that selects by GPU model is excluded by the one
label gpuplan writes on its members instead (:meth:`NodePool.placement`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import Field, model_validator

from gpuplan.modules.base import ComponentConfig
from gpuplan.modules.device_plugin import DevicePluginConfig
from gpuplan.modules.driver import DriverConfig
from gpuplan.modules.values import DnsLabel, LabelMap, Model
from gpuplan.planner.pools import IDENTITY_LABELS, POOL_LABEL, PoolSelector

MAX_EXCLUSION_TERMS = 64
"""Node selector terms the default DaemonSets may carry to stay off the pools' nodes (the product of the
sizes of the excluded pools' selectors); past it, the spec is refused."""

Config = TypeVar("Config", bound=ComponentConfig)


class PoolMig(Model):
    """The MIG geometry of a pool's GPUs."""

    config: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.+]*[A-Za-z0-9])?$")
    """A mig-parted config name, e.g. all-1g.10gb or all-disabled; written to the pool's nodes as the label
    nvidia.com/mig.config, which the mig-manager applies."""


class NodePool(Model):
    """A set of nodes, chosen by labels, with their own driver, device plugin or MIG settings."""

    name: DnsLabel = Field(max_length=40)
    """Name of the pool (a DNS label, unique); its objects are named <object>-<pool> and labelled
    gpuplan.io/pool=<name>."""
    node_selector: LabelMap = Field(min_length=1)
    """Labels a node must carry to be in the pool (matchLabels): GFD's, NFD's or your own."""
    driver: DriverConfig | None = None
    """Driver settings of the pool's nodes, over the stack's (version, kernelModuleType, upgradePolicy,
    ...)."""
    device_plugin: DevicePluginConfig | None = None
    """Device plugin settings of the pool's nodes, over the stack's (config: time-slicing or MPS)."""
    mig: PoolMig | None = None
    """MIG geometry of the pool's GPUs."""

    @model_validator(mode="after")
    def _owners_are_the_stacks(self) -> NodePool:
        for key, section in (("driver", self.driver), ("devicePlugin", self.device_plugin)):
            if section is not None and "owner" in section.model_fields_set:
                raise ValueError(
                    f"{key}.owner cannot be set in a node pool: a component has one owner for the whole "
                    "stack (set it in spec." + key + ")"
                )
        return self

    def selector(self) -> PoolSelector:
        return PoolSelector(self.name, dict(self.node_selector))

    def placed_by_label(self) -> bool:
        """Whether the pool's own DaemonSets select its nodes by gpuplan's ``gpuplan.io/pool`` node label
        rather than by ``nodeSelector``: it selects a GPU identity label (``nvidia.com/gpu.product``, ...),
        which GFD writes only once a driver runs and renames as the GPUs are shared, while membership is
        decided from the node's GPU identity (:mod:`gpuplan.planner.pools`); the label is that decision."""
        return any(key in IDENTITY_LABELS for key in self.node_selector)

    def placement(self) -> PoolSelector:
        """The labels the pool's own DaemonSets select (and the stack's exclude): ``gpuplan.io/pool=<name>``
        for a pool :meth:`placed_by_label`, else its ``nodeSelector``."""
        if self.placed_by_label():
            return PoolSelector(self.name, {POOL_LABEL: self.name})
        return self.selector()


def check_unique(pools: Sequence[NodePool]) -> Sequence[NodePool]:
    """Pool names are unique (they name objects and label values)."""
    seen: set[str] = set()
    for pool in pools:
        if pool.name in seen:
            raise ValueError(f"node pool name '{pool.name}' is used twice; pool names must be unique")
        seen.add(pool.name)
    return pools


def effective(base: Config, override: Config | None) -> Config:
    """``base`` with the keys ``override`` sets merged over it (nested sections key by key)."""
    if override is None:
        return base
    merged = _deep_merge(_set_keys(base), _set_keys(override))
    return type(base).model_validate(merged, by_alias=True, by_name=False)


def _set_keys(config: ComponentConfig) -> dict[str, Any]:
    dumped: dict[str, Any] = config.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dumped


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def exclusion_terms(pools: Sequence[PoolSelector]) -> list[list[dict[str, Any]]]:
    """The node selector terms (each a list of ``matchExpressions``) that hold exactly on the nodes outside
    every pool of ``pools``: one NotIn per pool, for every combination of the pools' labels. Raises
    ValueError past :data:`MAX_EXCLUSION_TERMS`."""
    if not pools:
        return []
    count = 1
    for pool in pools:
        count *= len(pool.match_labels)
    if count > MAX_EXCLUSION_TERMS:
        names = ", ".join(pool.name for pool in pools)
        raise ValueError(
            f"keeping the default DaemonSets off node pools {names} takes {count} node selector terms "
            f"(the product of the pools' label counts), more than {MAX_EXCLUSION_TERMS}"
        )
    choices = [sorted(pool.match_labels.items()) for pool in pools]
    terms = []
    for combination in itertools.product(*choices):
        expressions: dict[str, set[str]] = {}
        for key, value in combination:
            expressions.setdefault(key, set()).add(value)
        terms.append(
            [
                {"key": key, "operator": "NotIn", "values": sorted(values)}
                for key, values in expressions.items()
            ]
        )
    return _unique(terms)


def _unique(terms: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    seen: list[list[dict[str, Any]]] = []
    for term in terms:
        if term not in seen:
            seen.append(term)
    return seen
