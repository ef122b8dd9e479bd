"""The dependency graph of the stack's components (design §5).

Nodes are the components, each with its owner from the spec; an edge ``a -> b`` means *b depends on a*
(from each module's ``depends_on``). :meth:`Graph.order` is the topological order that applies walk, with
ties broken by name so that plans are deterministic (the smallest ready name comes first, which yields
driver → toolkit → devicePlugin → gfd → dcgmExporter → validator); deletions walk :meth:`Graph.reverse_order`.

Callers: the ``graph`` command, and plan/apply (ordering and ``--target``).
"""

from __future__ import annotations

import difflib
import graphlib
import heapq
from collections.abc import Iterable, Mapping, Sequence

from gpuplan.errors import ConfigError
from gpuplan.modules import catalog
from gpuplan.modules.base import ComponentName, Owner
from gpuplan.planner.spec.model import Spec


class DependencyCycleError(ConfigError):
    """The modules' ``depends_on`` form a cycle; the message names it (``a -> b -> a``)."""

    def __init__(self, cycle: list[str]) -> None:
        super().__init__(
            f"dependency cycle: {' -> '.join(cycle)}",
            hint="a component cannot depend, directly or through others, on itself",
        )
        self.cycle = cycle


class Graph:
    """Components, their owners and their dependencies; immutable once built."""

    def __init__(
        self,
        owners: Mapping[str, Owner],
        depends_on: Mapping[str, Iterable[str]],
        pools: Mapping[str, Sequence[str]] | None = None,
        pool_labels: Mapping[str, Sequence[str]] | None = None,
        writes_first: Iterable[str] | None = None,
    ) -> None:
        """``pools``: node pool -> the components whose settings it overrides (shown, not ordered: a pool's
        objects are its components' and walk with them); ``pool_labels``: pool -> the node labels
        (``key=value``) gpuplan writes on its nodes; ``writes_first``: the components whose changes must be
        made before a dependent's are (:attr:`writes_after`; None: every one's)."""
        self.pools: Mapping[str, tuple[str, ...]] = {name: tuple(c) for name, c in (pools or {}).items()}
        self.pool_labels = {name: tuple(labels) for name, labels in (pool_labels or {}).items()}
        self.owners: Mapping[str, Owner] = dict(owners)
        self.depends_on: Mapping[str, tuple[str, ...]] = {
            name: tuple(sorted(depends_on.get(name, ()))) for name in self.owners
        }
        for name, deps in self.depends_on.items():
            unknown = [dep for dep in deps if dep not in self.owners]
            if unknown:
                raise ConfigError(f"component '{name}' depends on unknown component(s) {', '.join(unknown)}")
        self._order = self._topological_order()
        first = set(self.owners if writes_first is None else writes_first)
        self.writes_after: Mapping[str, tuple[str, ...]] = {
            name: tuple(sorted(dep for dep in self._ancestors(name) if dep in first)) for name in self.owners
        }
        """Component -> the components whose changes its changes wait for: those it depends on, directly
        or not, that write first (``Module.writes_first``); its gates wait for every dependency's gates."""

    def _ancestors(self, name: str) -> set[str]:
        found: set[str] = set()
        pending = list(self.depends_on[name])
        while pending:
            dep = pending.pop()
            if dep not in found:
                found.add(dep)
                pending.extend(self.depends_on[dep])
        return found

    def _topological_order(self) -> list[str]:
        sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(self.depends_on)
        try:
            sorter.prepare()
        except graphlib.CycleError as exc:
            raise DependencyCycleError(_cycle_in_order(list(exc.args[1]))) from None
        ready = list(sorter.get_ready())
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            name = heapq.heappop(ready)  # smallest ready name first: deterministic, and chains stay together
            order.append(name)
            sorter.done(name)
            for follower in sorter.get_ready():
                heapq.heappush(ready, follower)
        return order

    def order(self) -> list[ComponentName]:
        """Dependencies before dependents; ties by name."""
        return list(self._order)  # type: ignore[arg-type]  # names are the catalog's ComponentNames

    def reverse_order(self) -> list[ComponentName]:
        """Dependents before dependencies: the order deletions take."""
        return self.order()[::-1]

    def dependents(self, name: str) -> tuple[str, ...]:
        return tuple(other for other in self._order if name in self.depends_on[other])

    def with_dependencies(self, targets: Iterable[str]) -> set[ComponentName]:
        """``targets`` and everything they depend on, transitively (``plan --target X``)."""
        wanted: set[str] = set()
        pending = list(targets)
        while pending:
            name = pending.pop()
            if name not in self.owners:
                guess = difflib.get_close_matches(name, list(self.owners), n=1)
                raise ConfigError(
                    f"unknown component '{name}'",
                    hint=(f"did you mean '{guess[0]}'? " if guess else "")
                    + f"components: {', '.join(self._order)}",
                )
            if name not in wanted:
                wanted.add(name)
                pending.extend(self.depends_on[name])
        return wanted  # type: ignore[return-value]  # every name was checked against the graph

    def to_text(self) -> str:
        lines = []
        for name in self._order:
            deps = self.depends_on[name]
            after = f"  after {', '.join(deps)}" if deps else ""
            lines.append(f"{name} ({self.owners[name]}){after}")
        for pool, components in self.pools.items():
            parts = [f"overrides {', '.join(components)}"] if components else []
            parts += [f"labels its nodes {label}" for label in self.pool_labels.get(pool, ())]
            lines.append(f"node pool {pool}: {'; '.join(parts) or 'the stack defaults'}")
        return "\n".join(lines) + "\n"

    def to_dot(self) -> str:
        lines = ["digraph gpustack {", "  rankdir=LR;", "  node [shape=box];"]
        for name in self._order:
            style = ", style=dashed" if self.owners[name] != "gpuplan" else ""
            lines.append(f'  "{name}" [label="{name}\\n({self.owners[name]})"{style}];')
        lines += [f'  "{dep}" -> "{name}";' for name in self._order for dep in self.depends_on[name]]
        for pool, components in self.pools.items():
            lines.append(f'  "pool:{pool}" [label="node pool\\n{pool}", shape=ellipse];')
            lines += [f'  "pool:{pool}" -> "{c}" [style=dotted, arrowhead=none];' for c in components]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_mermaid(self) -> str:
        lines = ["flowchart LR"]
        lines += [f'  {name}["{name} ({self.owners[name]})"]' for name in self._order]
        lines += [f"  {dep} --> {name}" for name in self._order for dep in self.depends_on[name]]
        for pool, components in self.pools.items():
            lines.append(f'  pool_{pool.replace("-", "_")}(["node pool {pool}"])')
            lines += [f"  pool_{pool.replace('-', '_')} -.- {c}" for c in components]
        return "\n".join(lines) + "\n"


def _cycle_in_order(cycle: list[str]) -> list[str]:
    """graphlib reports a cycle with each node a dependency of the next (``b, c, a, b``), as the graph's
    arrows run; start it at its smallest name so the message is stable: ``a -> b -> c -> a``."""
    nodes = cycle[:-1]
    start = nodes.index(min(nodes))
    rotated = nodes[start:] + nodes[:start]
    return rotated + [rotated[0]]


def build(spec: Spec) -> Graph:
    """The graph of the spec's components: all six, with their owners; edges from the modules' depends_on."""
    owners: dict[str, Owner] = {name: config.owner for name, config in spec.components().items()}
    pools = {
        pool.name: [
            key
            for key, section in (("driver", pool.driver), ("devicePlugin", pool.device_plugin))
            if section is not None
        ]
        for pool in spec.spec.node_pools
    }
    labels = {
        pool: [f"{key}={value}" for key, value in sorted(wanted.items())]
        for pool, wanted in spec.node_labels().items()
    }
    return Graph(
        owners,
        {name: module.depends_on for name, module in catalog.MODULES.items()},
        pools,
        labels,
        writes_first=[name for name, module in catalog.MODULES.items() if module.writes_first],
    )
