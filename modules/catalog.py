"""The registry of component modules, in the order of the spec's keys.

Callers: :mod:`gpuplan.planner.spec.model` (config models per component), :mod:`gpuplan.planner.graph`
(``depends_on``), and the planner's render step (:func:`render_all`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel

from gpuplan.modules.base import COMPONENTS, ComponentName, DesiredObject, HealthCheck, Module, StackContext
from gpuplan.modules.dcgm_exporter import DcgmExporter
from gpuplan.modules.device_plugin import DevicePlugin
from gpuplan.modules.driver import Driver
from gpuplan.modules.gfd import Gfd
from gpuplan.modules.mig_manager import MigManager
from gpuplan.modules.toolkit import Toolkit
from gpuplan.modules.validator import Validator

MODULES: Mapping[ComponentName, Module] = MappingProxyType(
    {
        module.name: module
        for module in (Driver(), Toolkit(), DevicePlugin(), Gfd(), DcgmExporter(), Validator(), MigManager())
    }
)
assert tuple(MODULES) == COMPONENTS, "the catalog lists every component of base.ComponentName, in order"


def get(name: ComponentName) -> Module:
    return MODULES[name]


def render_all(configs: Mapping[ComponentName, BaseModel], stack: StackContext) -> tuple[DesiredObject, ...]:
    """Every object of every component, in catalog order (the planner orders changes by the graph)."""
    return tuple(obj for name, module in MODULES.items() for obj in module.render(configs[name], stack))


def health_checks(
    configs: Mapping[ComponentName, BaseModel], stack: StackContext
) -> Mapping[ComponentName, tuple[HealthCheck, ...]]:
    return {name: module.health_checks(configs[name], stack) for name, module in MODULES.items()}
