"""The spec's ``spec.ignore``: declared deviations (design §8.3), as Terraform's ``ignore_changes``, Argo CD's
``ignoreDifferences`` and driftctl's ``.driftignore``.

Two kinds of rule:

- ``{address: ADDRESS, paths: [FIELD_PATH, ...]}``: a difference on those fields of that managed object
  (a path and everything under it, in the plan's own path syntax, ``spec.template.spec.containers[name=x]
  .image``) is shown as ignored, never reverted;
- ``{nodes: {selector: "k=v,k2!=v,k3,!k4"}, checks: [CHECK, ...]}``: on the nodes the selector matches,
  those health checks (the names of the apply gates, plus ``telemetry``) are not drift, and the apply's
  gates do not judge them there (:meth:`gpuplan.planner.health.gates.Observation.waives`).

Validated here, with the file, line and field of a bad rule (an address no component renders is checked by
:class:`gpuplan.planner.spec.model.Spec`, which knows them); matched by :mod:`gpuplan.planner.drift.report`
and :mod:`gpuplan.planner.plan.build`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import model_validator
from pydantic_core import PydanticCustomError

from gpuplan.modules.values import Model
from gpuplan.planner.spec import selector as label_selector

SPEC_CONFLICT = "spec_conflict"
CHECKS = (
    "allocatable",
    "dcgm-metrics",
    "driver-version",
    "gfd-labels",
    "mig-config",
    "runtime-handler",
    "validator-ready",
    "telemetry",
)
"""The apply gates' kinds (:data:`gpuplan.planner.health.nodes.JUDGES`) and the report's telemetry."""

_SEGMENT = re.compile(r'[A-Za-z_][A-Za-z0-9_-]*|\[\d+\]|\["(?:[^"\\]|\\.)*"\]|\[[A-Za-z_][^\]=]*=[^\]]*\]')


class NodeSelection(Model):
    """Which nodes a check rule covers."""

    selector: str
    """A label selector: ``key=value``, ``key!=value``, ``key`` and ``!key`` terms, comma-separated."""


class IgnoreRule(Model):
    """One declared deviation: an object's fields (``address`` and ``paths``) or checks on some nodes
    (``nodes`` and ``checks``)."""

    address: str | None = None
    """A managed object's address, e.g. gfd/DaemonSet/gpu-operator/gpu-feature-discovery."""
    paths: tuple[str, ...] = ()
    """Field paths of that object whose differences are ignored, e.g. spec.template.spec.containers."""
    nodes: NodeSelection | None = None
    """The nodes whose checks are ignored."""
    checks: tuple[str, ...] = ()
    """Health checks not judged on those nodes: allocatable, dcgm-metrics, driver-version, gfd-labels,
    mig-config, runtime-handler, validator-ready, telemetry."""

    @model_validator(mode="after")
    def _one_kind_well_formed(self) -> IgnoreRule:
        if (self.address is None) == (self.nodes is None):
            _fail(
                (),
                "an ignore rule names either an address (with paths) or nodes (with checks)",
                "write {address: ADDRESS, paths: [...]} or {nodes: {selector: K=V}, checks: [...]}",
            )
        if self.address is not None and not self.paths:
            _fail(("paths",), "an address rule needs paths", "add paths: [spec.template.spec.containers]")
        if self.nodes is not None and not self.checks:
            _fail(("checks",), "a nodes rule needs checks", f"add checks from: {', '.join(CHECKS)}")
        for index, path in enumerate(self.paths):
            if not valid_path(path):
                _fail(
                    ("paths", index),
                    f"field path {path!r} does not parse",
                    "write it as the plan shows paths: spec.template.spec.containers[name=x].image, "
                    'metadata.labels["app.kubernetes.io/name"], or an index [0]',
                )
        for index, check in enumerate(self.checks):
            if check not in CHECKS:
                _fail(("checks", index), f"unknown check {check!r}", f"checks are: {', '.join(CHECKS)}")
        if self.nodes is not None:
            problem = label_selector.problem(self.nodes.selector)
            if problem:
                _fail(
                    ("nodes", "selector"),
                    f"selector {self.nodes.selector!r} does not parse: {problem}",
                    "write key=value, key!=value, key or !key terms separated by commas",
                )
        return self

    def covers_path(self, path: str) -> bool:
        """Whether ``path`` (a plan field path) is one of the rule's paths or below one."""
        return covered(self.paths, path)

    def covers_node(self, labels: Mapping[str, str]) -> bool:
        return self.nodes is not None and label_selector.matcher(self.nodes.selector)(labels)


def _fail(path: tuple[str | int, ...], message: str, hint: str) -> None:
    raise PydanticCustomError(SPEC_CONFLICT, message, {"path": path, "hint": hint})


def valid_path(path: str) -> bool:
    position, segments = 0, 0
    while position < len(path):
        if path[position] == "." and segments and position + 1 < len(path) and path[position + 1] != "[":
            position += 1
        match = _SEGMENT.match(path, position)
        if match is None:
            return False
        position, segments = match.end(), segments + 1
    return segments > 0


def paths_of(rules: Sequence[IgnoreRule], address: str) -> tuple[str, ...]:
    """The field paths the address rules declare for ``address``."""
    return tuple(path for rule in rules if rule.address == address for path in rule.paths)


def covered(paths: Sequence[str], path: str) -> bool:
    """Whether ``path`` (a plan field path) is one of ``paths`` or below one."""
    return any(path == mine or path.startswith((f"{mine}.", f"{mine}[")) for mine in paths)


def checks_on(rules: Sequence[IgnoreRule], labels: Mapping[str, str]) -> frozenset[str]:
    """The checks the nodes rules declare for a node with ``labels``."""
    return frozenset(check for rule in rules if rule.covers_node(labels) for check in rule.checks)
