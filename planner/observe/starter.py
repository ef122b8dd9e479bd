"""What a starter ``gpustack.yaml`` says about a live cluster (``gpuplan init --from-cluster``, design §7.4).

From a :class:`~gpuplan.planner.observe.shape.ClusterShape`: the GPU nodes and their models, the host
drivers and toolkits found, and the NVIDIA components another owner runs. Each component gets an owner
that plans cleanly as the cluster is:

- a component another owner runs (a hand-deployed DaemonSet, a Helm release, a GPU Operator ClusterPolicy)
  is ``external``, with the ways out :func:`gpuplan.planner.observe.adopt.conflicts` names (import, remove
  the other owner first, or keep it external) as comments;
- the driver is ``external`` where the GPU nodes show a host driver (GFD's driver label, the
  ``pre-installed`` label, or a host toolkit's runtime handler); with its ``version`` when every GPU node
  reports the same one, without it when they differ (an external driver without ``version`` takes each
  node's host driver as it is) or when no node reports one yet;
- the toolkit is ``external`` where GPU nodes report the ``nvidia`` runtime handler;
- everything else is gpuplan's, at the defaults ``gpuplan plan`` shows.

Pure; the command reads the shape and the view renders these facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuplan.modules.base import COMPONENTS
from gpuplan.planner.observe import adopt
from gpuplan.planner.observe.shape import PRE_INSTALLED, ClusterShape, NodeGroup
from gpuplan.planner.spec import model as spec_mod
from gpuplan.providers.snapshot import ForeignObject

DEFAULT_NAMESPACE = "gpu-operator"


@dataclass(frozen=True)
class Component:
    name: str
    owner: str  # gpuplan | external
    version: str | None = None
    notes: tuple[str, ...] = ()
    """Comment lines above the component's section."""


@dataclass(frozen=True)
class DriverGroup:
    """GPU nodes with one host driver version (None: not reported yet)."""

    version: str | None
    nodes: int
    names: tuple[str, ...]


@dataclass(frozen=True)
class Starter:
    name: str
    gpu_summary: tuple[str, ...]
    components: tuple[Component, ...]
    driver_groups: tuple[DriverGroup, ...] = field(default=())

    @property
    def drivers_differ(self) -> bool:
        return len({group.version for group in self.driver_groups if group.version}) > 1


def gpu_groups(shape: ClusterShape) -> list[NodeGroup]:
    return [group for group in shape.groups if group.shape.gpu_model or group.shape.note]


def _nodes(group: NodeGroup) -> str:
    names = ", ".join(group.names)
    return f"{names}, ..." if group.count > len(group.names) else names


def summarise_gpus(shape: ClusterShape) -> list[str]:
    """One line per GPU model: the catalog key (or GFD's product), GPUs per node, nodes and their names."""
    lines = []
    for group in gpu_groups(shape):
        model = group.shape.gpu_model or group.shape.product or "a GPU no label names yet"
        lines.append(f"{model} x{group.shape.gpu_count}: {group.count} node(s) ({_nodes(group)})")
    return lines


def _driver_groups(groups: Sequence[NodeGroup]) -> list[DriverGroup]:
    by_version: dict[str | None, list[NodeGroup]] = {}
    for group in groups:
        by_version.setdefault(group.shape.driver, []).append(group)
    return [
        DriverGroup(
            version,
            sum(g.count for g in members),
            tuple(name for g in members for name in g.names)[:3],
        )
        for version, members in sorted(by_version.items(), key=lambda item: item[0] or "")
    ]


def _host_driver(group: NodeGroup) -> bool:
    shape = group.shape
    return bool(shape.driver or shape.toolkit or dict(shape.labels).get(PRE_INSTALLED) == "pre-installed")


def build(shape: ClusterShape, *, name: str, spec_file: str) -> Starter:
    gpus = gpu_groups(shape)
    others = [f for f in shape.foreign if (f.owner, f.owner_name) != ("gpuplan", name)]  # not its own
    owned = _foreign_notes(others, name=name, spec_file=spec_file)
    drivers = _driver_groups(gpus)
    components = []
    for component in COMPONENTS:
        if component in owned:
            components.append(Component(component, "external", notes=tuple(owned[component])))
        elif component == "driver":
            components.append(_driver(gpus, drivers))
        elif component == "toolkit":
            components.append(_toolkit(gpus))
        else:
            components.append(Component(component, "gpuplan"))
    return Starter(name, tuple(summarise_gpus(shape)), tuple(components), tuple(drivers))


def _driver(gpus: Sequence[NodeGroup], drivers: Sequence[DriverGroup]) -> Component:
    if not gpus or not any(_host_driver(g) for g in gpus):
        return Component(
            "driver", "gpuplan", notes=("no GPU node shows a host driver: gpuplan installs one",)
        )
    versions = [group.version for group in drivers]
    if len(versions) == 1 and versions[0]:
        return Component(
            "driver", "external", versions[0], notes=(f"the host driver of every GPU node: {versions[0]}",)
        )
    notes = [f"{g.version or 'not reported yet'}: {g.nodes} node(s) ({', '.join(g.names)})" for g in drivers]
    if len({v for v in versions if v}) > 1:
        head = "host drivers differ across the GPU nodes; without version an external driver takes each "
        tail = "node's host driver as it is (spec.nodePools, below, could pin one per group):"
    else:
        head = "a host driver is there, but not every GPU node reports its version yet (GFD labels it); "
        tail = "without version each node's host driver is taken as it is:"
    return Component("driver", "external", notes=(head + tail, *notes))


def _toolkit(gpus: Sequence[NodeGroup]) -> Component:
    with_handler = [g for g in gpus if g.shape.toolkit]
    if not with_handler:
        return Component("toolkit", "gpuplan")
    notes = ["a host container toolkit: the nvidia runtime handler is on the GPU nodes"]
    missing = [name for g in gpus if not g.shape.toolkit for name in g.names]
    if missing:
        notes.append(f"not on {', '.join(missing)}: give those nodes the host toolkit, or let gpuplan own it")
    return Component("toolkit", "external", notes=tuple(notes))


def _foreign_notes(found: Sequence[ForeignObject], *, name: str, spec_file: str) -> dict[str, list[str]]:
    """component -> comment lines: who runs it, and the choices (adopt / remove first / keep external)."""
    minimal = f"apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {{name: {name}}}\nspec: {{}}\n"
    desired = spec_mod.parse_spec(minimal, filename=spec_file).desired_objects()
    notes: dict[str, list[str]] = {}
    for component in COMPONENTS:
        for conflict in adopt.conflicts(component, found, desired, adopted=set(), spec_file=spec_file):
            lines = notes.setdefault(component, [])
            where = adopt.describe(conflict.kind, conflict.namespace, conflict.name)
            lines.append(f"runs already: {where}, owned by {conflict.owner}; kept external. Or:")
            for resolution in conflict.resolutions:
                if "owner: external" not in resolution.summary:  # the choice the spec already makes
                    lines += [f"  {resolution.summary}:", f"    {resolution.command}"]
            lines.append(f"  or not at all: owner: none (gpuplan then reports {where} as foreign)")
    return notes
