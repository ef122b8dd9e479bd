"""Scenario files (design §6): the nodes, objects, faults and timing a simulated cluster starts with.

A scenario is YAML checked by the pydantic models below (unknown keys are errors). :func:`load_scenario`
accepts a built-in name (``lab``, ``mixed``, ``upgrade4``, ``drifted``, ``fleet-N`` for any N >= 1) or a
path; every error is a :class:`ScenarioError` naming file:line:column, the field path and a fix hint.
:func:`expand_nodes` turns ``namePrefix`` + ``count`` entries into concrete, deterministic nodes.

Called by ``gpuplan.sim.cluster`` (the Simulator) and the ``gpuplan sim`` CLI; the node facts feed
``gpuplan.sim.nodes`` and ``gpuplan.sim.kubelet.state``. Pure apart from reading the scenario file.
"""

from __future__ import annotations

import difflib
import os
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuplan.errors import ConfigError
from gpuplan.fileio import SCENARIO_LIMIT, overgrown, read_text_bounded
from gpuplan.sim import scenarios
from gpuplan.sim.api.faults import ApiFaults
from gpuplan.sim.catalog import CATALOG, GpuModel

BUILTIN_DIR = scenarios.FOLDER
FLEET = re.compile(r"fleet-([1-9][0-9]*)")
OS_PATTERN = r"^[a-z]+[0-9]+(\.[0-9]+)*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Strict):
    model: str
    count: int = Field(default=1, ge=1, le=16)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in CATALOG:
            raise ValueError(f"unknown GPU model {value!r}; the catalog has: {', '.join(CATALOG)}")
        return value


class Taint(_Strict):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeSpec(_Strict):
    """One node, or ``count`` alike nodes named ``namePrefix`` + zero-padded ordinal."""

    name: str | None = None
    namePrefix: str | None = None
    count: int | None = Field(default=None, ge=1)
    gpu: GpuSpec | None = None  # omitted: a CPU-only node
    os: str = Field(default="ubuntu24.04", pattern=OS_PATTERN)
    kernel: str = "6.8.0-101-generic"
    driver: str | None = None  # pre-installed host driver
    toolkit: str | None = None  # pre-installed host container toolkit
    defaultRuntime: Literal["runc", "nvidia"] | None = (
        None  # containerd's default handler; see default_runtime
    )
    containerRuntime: str = "containerd://2.1.4"
    machine: str | None = None  # DMI product_name (GFD's gpu.machine); a per-model server by default
    instanceType: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False
    nfd: bool = True  # false: no nfd-worker runs on the node (no NodeFeature, no feature.node labels)
    # registry hosts (nvcr.io) the node cannot reach: its resolver has no record of them (an air-gapped node),
    # so every pull of their images fails with the network error (sim/kubelet/registry_network.py)
    unreachableRegistries: list[str] = Field(default_factory=list)
    # kubelet's figures where they differ from the machine's (a snapshot of a real node); device plugins'
    # resources (nvidia.com/gpu) are theirs to add
    capacity: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _named_once(self) -> NodeSpec:
        if (self.name is None) == (self.namePrefix is None):
            raise ValueError("give exactly one of 'name' or 'namePrefix' (with 'count')")
        if (self.namePrefix is None) != (self.count is None):
            raise ValueError("'namePrefix' and 'count' go together")
        return self


class GpuFault(_Strict):
    """A fault on one GPU (``gpu`` index) or on every GPU of the node (``gpu`` omitted)."""

    node: str
    gpu: int | None = Field(default=None, ge=0)
    temperature: int | None = None  # degrees C the GPU reports
    xid: int | None = Field(default=None, ge=0)  # last XID error code
    utilization: int | None = Field(default=None, ge=0, le=100)


class NodeFault(_Strict):
    node: str
    notReady: bool = True


class ApiFaultSpec(_Strict):
    """The keys ``ApiFaults.from_spec`` reads; checked here so a typo is reported with its line."""

    errorRate: float = Field(default=0.0, ge=0.0, le=1.0)
    codes: list[int] = Field(default_factory=lambda: [500])
    latencyMs: float = Field(default=0.0, ge=0.0)
    dropRate: float = Field(default=0.0, ge=0.0, le=1.0)
    retryAfterSeconds: int = Field(default=1, ge=0)
    # writes handled, then their answer lost; None (not 0.0) so a scenario without it dumps without it
    lostResponseRate: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None  # makes the random error/drop choices repeatable


ImageFailure = Literal["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "RunContainerError"]


class Faults(_Strict):
    images: dict[str, ImageFailure] = Field(default_factory=dict)
    slowImages: dict[str, float] = Field(default_factory=dict)  # image -> extra seconds before Ready
    api: dict[str, Any] | None = None
    gpus: list[GpuFault] = Field(default_factory=list)
    nodes: list[NodeFault] = Field(default_factory=list)

    @field_validator("api", mode="before")
    @classmethod
    def _api_keys(cls, value: Any) -> Any:
        if value is None:
            return None
        return ApiFaultSpec.model_validate(value).model_dump(exclude_none=True)


class Timing(_Strict):
    podReadySeconds: float = Field(default=0.1, ge=0.0)
    imagePullSeconds: float = Field(default=0.0, ge=0.0)
    crashLoopBackoffSeconds: float = Field(
        default=0.2, ge=0.0
    )  # first CrashLoop restart delay; doubles, capped 30x
    # simulated seconds per real second of the Job and CronJob controllers' clock (60: a minute a second)
    batchClockSpeed: float = Field(default=1.0, gt=0.0)
    # how long mig-manager takes to apply a MIG geometry once the GPU operands are gone
    migReconfigureSeconds: float = Field(default=0.1, ge=0.0)
    # the wait before each step of a DaemonSet rolling update (deleting the old pods maxUnavailable allows):
    # what a real rollout spends between steps on informers, the work queue and kubelet status reports;
    # 0 takes each step as soon as the previous one's pods are available
    daemonSetRolloutStepSeconds: float = Field(default=0.0, ge=0.0)


class PortSpec(_Strict):
    """A port the pods of an image answer (through the pod and service proxies and port-forward)."""

    image: str = Field(min_length=1)  # the image reference, or a prefix of it ("registry.example.com/app")
    port: int = Field(ge=1, le=65535)
    path: str = "/"
    status: int = Field(default=200, ge=100, le=599)
    contentType: str = "text/plain; charset=utf-8"
    body: str = ""


class Scenario(_Strict):
    description: str = ""
    nodes: list[NodeSpec] = Field(min_length=1)
    objects: list[dict[str, Any]] = Field(default_factory=list)
    ports: list[PortSpec] = Field(default_factory=list)
    faults: Faults = Field(default_factory=Faults)
    timing: Timing = Field(default_factory=Timing)


@dataclass(frozen=True)
class ConcreteNode:
    """One simulated node after ``namePrefix``/``count`` expansion; ``ordinal`` numbers nodes from 0."""

    name: str
    ordinal: int
    gpu: GpuModel | None
    gpu_count: int
    os: str
    kernel: str
    host_driver: str | None
    host_toolkit: str | None
    default_runtime: str
    container_runtime: str
    machine: str | None
    instance_type: str | None
    labels: dict[str, str] = field(hash=False, compare=False)
    taints: tuple[dict[str, str], ...] = field(hash=False, compare=False)
    unschedulable: bool = False
    nfd: bool = True
    """An nfd-worker runs on the node: its NodeFeature and feature labels exist."""
    unreachable_registries: frozenset[str] = frozenset()
    """Registry hosts whose pulls fail on this node for the network (no DNS record)."""
    capacity: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    allocatable: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def os_id(self) -> str:
        """``ubuntu`` of ``ubuntu24.04``: NFD's ``system-os_release.ID``."""
        return re.sub(r"[0-9.]+$", "", self.os)

    @property
    def os_version(self) -> str:
        """``24.04`` of ``ubuntu24.04``: NFD's ``system-os_release.VERSION_ID``."""
        return self.os[len(self.os_id) :]

    @property
    def driver_os_tag(self) -> str:
        """The suffix the GPU Operator appends to driver image tags for this OS (facts §1.4)."""
        if self.os_id in ("rhel", "rocky", "ol"):
            return f"{self.os_id}{self.os_version.split('.')[0]}"
        return self.os


MAX_VALUES = 1_000_000
"""Values a scenario file may expand to (a hand-written 10,000-node fleet stays far below it)."""


class ScenarioError(ConfigError):
    """A scenario that cannot be loaded; ``where`` is ``file:line:column``, ``field`` the path in the file."""

    def __init__(self, summary: str, *, where: str, field: str = "", hint: str = "") -> None:
        super().__init__(f"{field}: {summary}" if field else summary, where=where, hint=hint)
        self.field = field

    def __str__(self) -> str:
        text = f"{self.where}: {self.summary}"
        return f"{text} (hint: {self.hint})" if self.hint else text


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name (``lab``, ``mixed``, ``fleet-5000``, ...) or a scenario YAML file."""
    text_name = str(name_or_path)
    fleet = FLEET.fullmatch(text_name)
    if fleet:
        return fleet_scenario(int(fleet.group(1)))
    builtin = BUILTIN_DIR / f"{text_name}.yaml"
    if "/" not in text_name and not text_name.endswith((".yaml", ".yml")) and builtin.is_file():
        return parse_scenario(builtin.read_text(encoding="utf-8"), source=str(builtin))
    path = Path(name_or_path)
    if not os.path.lexists(path):  # anything else at the path is the bounded reader's to refuse
        raise ScenarioError(
            f"no scenario file or built-in scenario named {text_name!r}",
            where=text_name,
            hint=f"built-ins: {', '.join(builtin_names())}, fleet-N (N >= 1); or a YAML path",
        )
    text = read_text_bounded(path, limit=SCENARIO_LIMIT, what="scenario file", error=ScenarioError)
    return parse_scenario(text, source=str(path))


def builtin_names() -> list[str]:
    return scenarios.names()


def parse_scenario(text: str, *, source: str = "<scenario>") -> Scenario:
    """Parse and check scenario YAML; errors carry the line and column of the offending key or value."""
    data, marks = _load_with_marks(text, source)
    if not isinstance(data, dict):
        raise ScenarioError(
            "a scenario is a mapping with 'nodes' and optional 'objects', 'faults', 'timing'",
            where=f"{source}:1:1",
            hint="start the file with 'nodes:'",
        )
    api = (data.get("faults") or {}).get("api") if isinstance(data.get("faults"), dict) else None
    if api is not None:  # Faults.api stays a plain dict (ApiFaults.from_spec reads it); check it here
        _validate(ApiFaultSpec, api, ("faults", "api"), marks, source)
        _check_api_faults(api, marks, source)
    scenario: Scenario = _validate(Scenario, data, (), marks, source)
    _check_references(scenario, marks, source)
    _check_manifests(scenario, marks, source)
    return scenario


_M = Any  # a pydantic model class


def _validate(model: _M, data: Any, prefix: tuple[str | int, ...], marks: Marks, source: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = prefix + tuple(part for part in error["loc"] if isinstance(part, (str, int)))
        raise _describe(error["type"], error["msg"], loc, model, len(prefix), marks, source) from None


def _describe(
    kind: str, message: str, loc: tuple[str | int, ...], model: _M, skip: int, marks: Marks, source: str
) -> ScenarioError:
    """One pydantic error as a ScenarioError: position, field path, and a hint that says what would fit."""
    field_path = _dotted(loc)
    if kind == "extra_forbidden":
        owner = _model_at(model, loc[skip:-1])
        valid = sorted(owner.model_fields) if owner else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = (f"did you mean {close[0]!r}? " if close else "") + f"valid keys here: {', '.join(valid)}"
        return ScenarioError(
            f"unknown key {loc[-1]!r}", field=field_path, hint=hint, where=marks.where(loc, source, key=True)
        )
    if kind == "missing":
        return ScenarioError(
            f"missing required key {loc[-1]!r}",
            field=field_path,
            where=marks.where(loc[:-1], source),
            hint=f"add '{loc[-1]}:'",
        )
    summary = message.removeprefix("Value error, ")
    hint = (
        "use one of the catalog keys" if loc[-1:] == ("model",) else "see design §6 for the scenario format"
    )
    return ScenarioError(summary, field=field_path, where=marks.where(loc, source), hint=hint)


def _model_at(model: _M, loc: tuple[str | int, ...]) -> _M | None:
    """The pydantic model class that validates the mapping at ``loc`` (for the valid-keys hint)."""
    current: Any = model
    for part in loc:
        current = _unwrap_optional(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str) or part not in current.model_fields:
                return None
            current = current.model_fields[part].annotation
        elif get_origin(current) in (list, dict):
            current = get_args(current)[-1]
        else:
            return None
    current = _unwrap_optional(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


class Marks:
    """Where each key and value of a YAML document starts, by path (``("nodes", 0, "gpu")``)."""

    def __init__(self) -> None:
        self.keys: dict[tuple[str | int, ...], yaml.Mark] = {}
        # the root mark has no buffer, so PyYAML never reads its pointer (0 only satisfies the type)
        self.values: dict[tuple[str | int, ...], yaml.Mark] = {(): yaml.Mark("", 0, 0, 0, None, 0)}

    def where(self, path: tuple[str | int, ...], source: str, *, key: bool = False) -> str:
        """``file:line:column`` (1-based) of ``path``, or of its nearest ancestor present in the file."""
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            mark = self.keys.get(prefix) if key and end == len(path) else None
            mark = mark or self.values.get(prefix)
            if mark is not None:
                return f"{source}:{mark.line + 1}:{mark.column + 1}"
        return f"{source}:1:1"

    def collect(self, node: yaml.Node, path: tuple[str | int, ...], source: str) -> None:
        self.values[path] = node.start_mark
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value
                if path + (key,) in self.keys:
                    line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                    raise ScenarioError(
                        f"key {key!r} appears twice",
                        where=f"{source}:{line}:{column}",
                        field=_dotted(path + (key,)),
                        hint="remove one of them",
                    )
                self.keys[path + (key,)] = key_node.start_mark
                self.collect(value_node, path + (key,), source)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.collect(item, path + (index,), source)


def _load_with_marks(text: str, source: str) -> tuple[Any, Marks]:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        marks = Marks()
        if root is None:
            return None, marks
        grown = overgrown(root, MAX_VALUES)
        if grown is not None:
            raise ScenarioError(
                f"the scenario expands to more than {MAX_VALUES} values through its aliases",
                where=f"{source}:{grown.start_mark.line + 1}:{grown.start_mark.column + 1}",
                hint="write the values out, or describe many nodes with one nodes[] entry and count",
            )
        marks.collect(root, (), source)
        return loader.construct_document(root), marks
    except RecursionError:
        raise ScenarioError("the scenario is nested too deeply", where=source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else f"{source}:1:1"
        raise ScenarioError(
            f"not valid YAML: {exc.problem or exc}", where=where, hint="check indentation and quoting"
        ) from None
    finally:
        loader.dispose()


def _check_references(scenario: Scenario, marks: Marks, source: str) -> None:
    """Node names must be unique, and faults must name nodes (and GPUs) that exist."""
    gpus_by_node: dict[str, int] = {}
    for index, node in enumerate(expand_nodes(scenario)):
        if node.name in gpus_by_node:
            spec_index = _spec_index_of(scenario, index)
            raise ScenarioError(
                f"node name {node.name!r} is used twice",
                field=f"nodes[{spec_index}]",
                where=marks.where(("nodes", spec_index), source),
                hint="node names are unique",
            )
        gpus_by_node[node.name] = node.gpu_count
    by_kind: tuple[tuple[str, list[GpuFault | NodeFault]], ...] = (
        ("gpus", list(scenario.faults.gpus)),
        ("nodes", list(scenario.faults.nodes)),
    )
    for kind, faults in by_kind:
        for index, fault in enumerate(faults):
            path: tuple[str | int, ...] = ("faults", kind, index, "node")
            if fault.node not in gpus_by_node:
                raise ScenarioError(
                    f"fault names unknown node {fault.node!r}",
                    field=_dotted(path),
                    where=marks.where(path, source),
                    hint="use a node name from 'nodes'",
                )
            gpu = getattr(fault, "gpu", None)
            if gpu is not None and gpu >= gpus_by_node[fault.node]:
                gpu_path = ("faults", kind, index, "gpu")
                raise ScenarioError(
                    f"node {fault.node!r} has {gpus_by_node[fault.node]} GPU(s), no GPU {gpu}",
                    field=_dotted(gpu_path),
                    where=marks.where(gpu_path, source),
                    hint="GPU indexes count from 0",
                )


def _check_api_faults(api: Any, marks: Marks, source: str) -> None:
    """The API server's own check of the values (e.g. which status codes it can inject)."""
    try:
        ApiFaults.from_spec(api)
    except ValueError as exc:
        raise ScenarioError(
            str(exc),
            field="faults.api",
            where=marks.where(("faults", "api"), source),
            hint="see ApiFaults in gpuplan.sim.api.faults for the supported values",
        ) from None


def _check_manifests(scenario: Scenario, marks: Marks, source: str) -> None:
    """Each object is a manifest the simulator can create: apiVersion, kind and metadata.name."""
    for index, obj in enumerate(scenario.objects):
        missing = [key for key in ("apiVersion", "kind") if not obj.get(key)]
        if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            missing.append("metadata.name")
        if missing:
            raise ScenarioError(
                f"a manifest needs {', '.join(missing)}",
                field=f"objects[{index}]",
                where=marks.where(("objects", index), source),
                hint="every object needs apiVersion, kind and metadata.name",
            )


def _spec_index_of(scenario: Scenario, node_ordinal: int) -> int:
    seen = 0
    for index, spec in enumerate(scenario.nodes):
        seen += spec.count or 1
        if node_ordinal < seen:
            return index
    return len(scenario.nodes) - 1


def _dotted(path: tuple[str | int, ...]) -> str:
    """``("nodes", 0, "gpu")`` -> ``nodes[0].gpu``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def default_runtime(spec: NodeSpec) -> str:
    """containerd's default handler: ``nvidia`` where a host toolkit is installed, unless the file says.

    The k8s-device-plugin README (the lab's hand-deployed plugin has no runtimeClassName) tells users to
    run ``nvidia-ctk runtime configure --runtime=containerd --set-as-default``, so a host toolkit makes
    ``nvidia`` the default; the GPU Operator's toolkit leaves the default alone (CDI mode, facts §3.2).
    """
    if spec.defaultRuntime is not None:
        return spec.defaultRuntime
    return "nvidia" if spec.toolkit else "runc"


def expand_nodes(scenario: Scenario) -> list[ConcreteNode]:
    """Concrete nodes in file order; ``namePrefix: gpu-`` with ``count: 5000`` gives gpu-0001 ... gpu-5000."""
    nodes: list[ConcreteNode] = []
    for spec in scenario.nodes:
        if spec.name is not None:
            names = [spec.name]
        else:
            width = len(str(spec.count))
            names = [f"{spec.namePrefix}{number:0{width}d}" for number in range(1, (spec.count or 1) + 1)]
        model = CATALOG[spec.gpu.model] if spec.gpu else None
        taints = tuple(taint.model_dump(exclude_none=True) for taint in spec.taints)
        runtime = default_runtime(spec)
        for name in names:
            nodes.append(
                ConcreteNode(
                    name=name,
                    ordinal=len(nodes),
                    gpu=model,
                    gpu_count=spec.gpu.count if spec.gpu else 0,
                    os=spec.os,
                    kernel=spec.kernel,
                    host_driver=spec.driver,
                    host_toolkit=spec.toolkit,
                    default_runtime=runtime,
                    container_runtime=spec.containerRuntime,
                    machine=spec.machine,
                    instance_type=spec.instanceType,
                    labels=dict(spec.labels),
                    taints=taints,
                    unschedulable=spec.unschedulable,
                    nfd=spec.nfd,
                    unreachable_registries=frozenset(spec.unreachableRegistries),
                    capacity=dict(spec.capacity),
                    allocatable=dict(spec.allocatable),
                )
            )
    return nodes


# fleet-N: pools of one model each, in fixed shares (largest remainder keeps the total exact).
_FLEET_POOLS: tuple[tuple[str, str, int, int, str, str], ...] = (
    # prefix, model, GPUs per node, share %, os, kernel
    ("h100-", "h100-80gb", 8, 30, "ubuntu22.04", "5.15.0-139-generic"),
    ("a100-", "a100-80gb", 8, 20, "ubuntu22.04", "5.15.0-139-generic"),
    ("l40s-", "l40s", 8, 15, "ubuntu24.04", "6.8.0-101-generic"),
    ("h200-", "h200", 8, 10, "ubuntu24.04", "6.8.0-101-generic"),
    ("t4-", "t4", 8, 8, "ubuntu22.04", "5.15.0-139-generic"),
    ("b200-", "b200", 8, 7, "ubuntu24.04", "6.8.0-101-generic"),
    ("v100-", "v100", 8, 5, "ubuntu22.04", "5.15.0-139-generic"),
    ("rtx-", "rtx-3060", 1, 5, "ubuntu24.04", "6.8.0-101-generic"),
)
FLEET_DRIVER = (
    "580.105.08"  # R580 drives every catalog GPU, V100 (last branch) and B200 (>= 570.133.20) alike
)
FLEET_TOOLKIT = "1.18.1"


def fleet_counts(total: int) -> list[int]:
    """Nodes per pool for a fleet of ``total`` nodes: fixed shares, rounded by largest remainder."""
    exact = [total * pool[3] / 100 for pool in _FLEET_POOLS]
    counts = [int(value) for value in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return counts


def fleet_scenario(total: int) -> Scenario:
    """``fleet-N``: N nodes in pools of one model each, host driver and toolkit pre-installed."""
    specs = [
        NodeSpec(
            namePrefix=prefix,
            count=count,
            gpu=GpuSpec(model=model, count=gpus),
            os=os_name,
            kernel=kernel,
            driver=FLEET_DRIVER,
            toolkit=FLEET_TOOLKIT,
            labels={"node.kubernetes.io/pool": prefix.rstrip("-")},
        )
        for (prefix, model, gpus, _, os_name, kernel), count in zip(_FLEET_POOLS, fleet_counts(total))
        if count
    ]
    return Scenario(description=f"{total} GPU nodes of mixed models, for scale", nodes=specs)


def gpu_faults_for(scenario: Scenario, node: ConcreteNode) -> dict[int, GpuFault]:
    """The scenario's GPU faults on ``node`` by GPU index (a fault without ``gpu`` hits every GPU)."""
    faults: dict[int, GpuFault] = {}
    for fault in scenario.faults.gpus:
        if fault.node != node.name:
            continue
        indexes = range(node.gpu_count) if fault.gpu is None else (fault.gpu,)
        for index in indexes:
            faults[index] = fault
    return faults
