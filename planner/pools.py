"""Which node pool each node belongs to: one fact for plan, apply gates, drift and inventory.

A pool (``spec.nodePools``, design §7.1) selects its nodes with ``matchLabels``; a node matched by no pool
takes the stack defaults, a node matched by two pools is refused, as the GPU Operator refuses two
NVIDIADriver CRs whose selectors match one node ("multiple NVIDIADrivers match the same node", fleet facts
§6). Pure: pool selectors and node labels in, nothing read from the cluster.

A pool is matched against a node's *pool labels* (design §8.3), not its live labels: the live labels with
the GPU identity keys (:data:`IDENTITY_LABELS`) replaced by the node's GPU identity. GFD writes those keys
only once it runs, and renames the product as the node's GPUs are shared (``<product>-SHARED``) or
partitioned under the single MIG strategy (``<product>-MIG-<profile>``): a pool selecting
``nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB`` would then match no node before GFD and lose its nodes to
the sharing it configures. The identity is the base product (the rename undone) and GFD's family and
compute capability, or before GFD the same values from NFD's PCI device id (``modules/pci_ids.py``). A plan
decides every node's pool once from those labels (:class:`PlannedPools` carries it into the apply); a node
whose other labels someone changes during the apply is a move the gates report at once
(:meth:`PlannedPools.moved`), not a node their pool silently loses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.modules.node_labels import NodeLabels
from gpuplan.modules.pci_ids import PciGpu

POOL_LABEL = "gpuplan.io/pool"
"""The label every per-pool object (and its pods) carries, beside the operator's ``app`` label."""


PRODUCT_LABEL = "nvidia.com/gpu.product"
FAMILY_LABEL = "nvidia.com/gpu.family"
CC_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
CC_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
IDENTITY_LABELS = (PRODUCT_LABEL, FAMILY_LABEL, CC_MAJOR_LABEL, CC_MINOR_LABEL)
"""GFD's labels that name the GPU model and that NFD's PCI id names too, for every GPU of the table. GFD's
``gpu.memory`` and ``gpu.count`` are not among them: the single MIG strategy rewrites both to the MIG
device's, and the PCI table knows the memory of few boards; a pool selecting them (or ``gpu.machine``, which
no PCI id tells) matches the live labels, that is only once GFD has run."""
_RENAMED = re.compile(r"-(SHARED|MIG-.*)$")


def base_product(product: str) -> str:
    """GFD's product without the suffix sharing (``-SHARED``) or the single MIG strategy (``-MIG-1g.10gb``,
    ``-MIG-INVALID``) adds."""
    return _RENAMED.sub("", product)


def identity_of(labels: Mapping[str, str], pci: PciGpu | None = None) -> dict[str, str]:
    """A node's GPU identity labels: GFD's, with the product's rename undone, or before GFD has run the
    values of ``pci`` (the GPU NFD's PCI device id names); empty when neither tells."""
    product = labels.get(PRODUCT_LABEL)
    if product:
        known = {key: labels[key] for key in IDENTITY_LABELS[1:] if labels.get(key)}
        return {PRODUCT_LABEL: base_product(product), **known}
    if pci is None:
        return {}
    major, minor = pci.cc
    return {
        PRODUCT_LABEL: pci.product,
        FAMILY_LABEL: pci.family,
        CC_MAJOR_LABEL: str(major),
        CC_MINOR_LABEL: str(minor),
    }


def pool_labels(labels: Mapping[str, str], identity: Mapping[str, str]) -> dict[str, str]:
    """The labels pool selectors are matched against: ``labels`` with the identity keys taken from
    ``identity`` (a key it lacks is absent, whatever the live labels say)."""
    rest = {key: value for key, value in labels.items() if key not in IDENTITY_LABELS}
    return {**rest, **identity}


@dataclass(frozen=True)
class PoolSelector:
    """A pool as membership sees it: its name and its ``matchLabels``."""

    name: str
    match_labels: Mapping[str, str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.match_labels.items())


@dataclass(frozen=True)
class Overlap:
    """A node two (or more) pools select."""

    node: str
    pools: tuple[str, ...]

    def message(self) -> str:
        names = " and ".join(f"'{pool}'" for pool in self.pools)
        return f"node {self.node} is selected by node pools {names}; a node may belong to one pool only"


@dataclass(frozen=True)
class Membership:
    """node name -> its pool (absent: no pool, the stack defaults), and the nodes more than one pool selects
    (they are in none until the selectors are fixed)."""

    pool_of: Mapping[str, str] = field(default_factory=dict)
    overlaps: tuple[Overlap, ...] = ()

    def nodes_of(self, pool: str | None) -> list[str]:
        """The nodes of ``pool`` (None: the nodes of no pool are not listed here; see :func:`members`)."""
        return sorted(node for node, name in self.pool_of.items() if name == pool)


def membership(pools: Sequence[PoolSelector], nodes: Iterable[tuple[str, Mapping[str, str]]]) -> Membership:
    """The pool of each node of ``nodes`` (name, labels) by the pools' selectors."""
    pool_of: dict[str, str] = {}
    overlaps: list[Overlap] = []
    for name, labels in nodes:
        matched = tuple(pool.name for pool in pools if pool.matches(labels))
        if len(matched) == 1:
            pool_of[name] = matched[0]
        elif len(matched) > 1:
            overlaps.append(Overlap(name, matched))
    return Membership(pool_of, tuple(sorted(overlaps, key=lambda overlap: overlap.node)))


def pool_of_labels(pools: Sequence[PoolSelector], labels: Mapping[str, str]) -> str | None:
    """The one pool whose selector matches ``labels``; None for no pool or more than one."""
    matched = [pool.name for pool in pools if pool.matches(labels)]
    return matched[0] if len(matched) == 1 else None


@dataclass(frozen=True)
class PlannedPools:
    """The node pools as a plan decided them, for the apply's label writes and gates: the GPU identity the
    plan read of each node (node -> :func:`identity_of`) and the pool it put the node in. Empty: no plan
    (a resumed apply, a drift report), each node's identity is read from its live labels."""

    selectors: tuple[PoolSelector, ...] = ()
    identity: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pool_of: Mapping[str, str] = field(default_factory=dict)

    def labels(self, node: str, live: Mapping[str, str]) -> dict[str, str]:
        """``node``'s pool labels now: its live labels with the identity the plan read (a node that joined
        since: its live identity), so that GFD labelling the node or renaming its product moves nothing."""
        identity = self.identity.get(node)
        return pool_labels(live, identity_of(live) if identity is None else identity)

    def moved(self, node: str, live: Mapping[str, str]) -> str | None:
        """Why ``node`` is no longer in the pool the plan put it in (someone changed its labels since), or
        None; a node the plan did not see is not a move."""
        if node not in self.identity:
            return None
        labels = self.labels(node, live)
        matched = tuple(pool.name for pool in self.selectors if pool.matches(labels))
        was = self.pool_of.get(node)
        if (matched == (was,)) if was is not None else not matched:
            return None
        selectors = {pool.name: pool.match_labels for pool in self.selectors}
        keys = sorted({key for name in (was, *matched) if name is not None for key in selectors[name]})
        now = ", ".join(f"{key}={live.get(key, '(none)')}" for key in keys)
        to = " and ".join(f"node pool {name}" for name in matched) or "no node pool"
        since = f"node pool {was}" if was is not None else "no node pool"
        return (
            f"node {node} moved from {since} to {to} during the apply: its labels changed ({now}); "
            "run plan again to place it"
        )


@dataclass(frozen=True)
class LabelWork:
    """One node label of one pool, and the nodes where gpuplan must write (``value``) or remove it (None):
    the plan's "label 12 nodes". ``before`` holds each node's value now (None: absent)."""

    pool: str | None
    label: str
    value: str | None
    before: Mapping[str, str | None]


@dataclass(frozen=True)
class LabelRule:
    """Labels one component wants on the nodes of one pool (None: the nodes of no pool) that its
    ``wanted.selector`` picks. A rule with a selector follows another component's effect (GFD's
    ``nvidia.com/mig.capable``, NFD's GPU label for the operator shape's deploy labels): apply writes it once
    that component's gate passed, just before the ``component``'s own gates. One whose selector is there
    before any component runs (``at_once``: NFD's PCI label for ``nvidia.com/gpu.present``) is written with
    the plan's other labels, first."""

    pool: str | None
    component: str
    wanted: NodeLabels
    at_once: bool = False

    @property
    def follows_gfd(self) -> bool:
        return bool(self.wanted.selector) and not self.at_once


def wanted_labels(
    rules: Sequence[LabelRule], members: Membership, nodes: Iterable[tuple[str, Mapping[str, str]]]
) -> dict[str, dict[str, str]]:
    """node -> the labels the rules of its pool want on it (a node two pools select gets none)."""
    overlapping = {overlap.node for overlap in members.overlaps}
    wanted: dict[str, dict[str, str]] = {}
    for node, labels in nodes:
        if node in overlapping:
            continue
        pool = members.pool_of.get(node)
        for rule in rules:
            if rule.pool == pool and rule.wanted.selects(labels):
                wanted.setdefault(node, {}).update(rule.wanted.written())
    return wanted


def unjudged_labels(
    rules: Sequence[LabelRule], members: Membership, nodes: Iterable[tuple[str, Mapping[str, str]]]
) -> dict[str, frozenset[str]]:
    """node -> the labels a rule of its pool writes whose selector the node cannot be judged by now: a key
    of it is absent (GFD, whose labels most selectors read, removes them while its pod restarts, as when
    mig-manager pauses it). Absence is not a verdict: what gpuplan wrote there stays until the selector
    says no."""
    unjudged: dict[str, frozenset[str]] = {}
    for node, labels in nodes:
        pool = members.pool_of.get(node)
        held = {
            label
            for rule in rules
            if rule.pool == pool and any(key not in labels for key in rule.wanted.selector)
            for label in rule.wanted.written()
        }
        if held:
            unjudged[node] = frozenset(held)
    return unjudged


def if_absent_labels(rules: Sequence[LabelRule]) -> frozenset[str]:
    """The labels the rules set only where a node has no value (the operator shape's deploy labels)."""
    return frozenset(label for rule in rules for label in rule.wanted.if_absent)


def written_with(rules: Sequence[LabelRule], label: str) -> dict[str, str]:
    """The labels written with ``label`` whenever its value changes (the state a component resets)."""
    return {
        key: value
        for rule in rules
        if label in rule.wanted.labels
        for key, value in rule.wanted.on_change.items()
    }


def component_of(rules: Sequence[LabelRule], label: str) -> str:
    """The component that reads ``label`` (the device plugin's config label when no rule names it)."""
    return next((rule.component for rule in rules if label in rule.wanted.written()), "devicePlugin")


def label_work(
    wanted: Mapping[str, Mapping[str, str]],
    members: Membership,
    nodes: Iterable[tuple[str, Mapping[str, str]]],
    written: Mapping[str, Mapping[str, str]],
    if_absent: frozenset[str] = frozenset(),
    unjudged: Mapping[str, frozenset[str]] | None = None,
) -> list[LabelWork]:
    """What the nodes' labels need: ``wanted`` (node -> label -> value: its pool's, or a generation's on
    rollback) on each node, and the labels gpuplan ``written`` before (node -> label -> value, from the state)
    removed where nothing wants them any more. A label of ``if_absent`` is someone else's wherever the node
    has a value gpuplan did not write (the operator's labeller honours it): it is only added where absent and
    only removed where the node still has gpuplan's value. A label of ``unjudged`` (node -> labels,
    :func:`unjudged_labels`) is not removed from that node. A node missing from ``nodes`` (gone) is left
    alone; each change is shown under the node's pool (``members``)."""
    labels_of = dict(nodes)
    work: dict[tuple[str | None, str, str | None], dict[str, str | None]] = {}
    for node, labels in sorted(labels_of.items()):
        pool = members.pool_of.get(node)
        want = dict(wanted.get(node, {}))
        for label, value in sorted(want.items()):
            honoured = label in if_absent and label in labels
            if labels.get(label) != value and not honoured:
                work.setdefault((pool, label, value), {})[node] = labels.get(label)
        ours = written.get(node, {})
        for label in sorted(set(ours) - set(want) - (unjudged or {}).get(node, frozenset())):
            theirs = label in if_absent and labels.get(label) != ours[label]
            if label in labels and not theirs:
                work.setdefault((None, label, None), {})[node] = labels.get(label)
    return [
        LabelWork(pool, label, value, before)
        for (pool, label, value), before in sorted(work.items(), key=lambda item: str(item[0]))
    ]
