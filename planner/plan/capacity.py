"""The capacity a spec gives each node pool: how many devices of each resource its nodes advertise, and how
that changes from the generation last applied (design §7.1: "inference: nvidia.com/gpu 8 -> 32").

Pure arithmetic over the plan's node facts, never over what the nodes advertise now (a failed GPU or a
rollout in progress would move it): per node, its GPUs (GFD's ``nvidia.com/gpu.count``) times what each GPU
becomes under the node's config (facts §5.1: time-slicing and MPS advertise ``replicas`` devices per GPU, as
``nvidia.com/gpu`` or, renamed, ``nvidia.com/gpu.shared``; fleet facts §4.5: a MIG geometry of the
mig-parted config advertises its instances, as ``nvidia.com/mig-<profile>`` with the mixed strategy and as
``nvidia.com/gpu`` with the single one). The "before" side is the last applied generation's spec over the
same nodes; before the first apply (or for a generation recorded without its spec), the GPUs unshared and
without MIG.

A node whose GPU count no source gave yet (GFD has not run) is not counted; its pool's entry says how many
such nodes it has, and still gives the per-GPU numbers where they need no GPU model (sharing; MIG needs the
model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuplan.modules import mig_parted
from gpuplan.modules.device_plugin import DevicePluginConfig, shared_resource, sharing_mode
from gpuplan.planner import pools
from gpuplan.planner.facts import NodeFacts, gpu_identity, pool_labels
from gpuplan.planner.plan.model import CapacityChange, CapacityTotal
from gpuplan.planner.spec.model import Spec, pool_config
from gpuplan.planner.spec.pools import NodePool

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class NodeCapacity:
    """What one node's config makes of each of its GPUs: resource -> devices per GPU, and how."""

    per_gpu: Mapping[str, int]
    gpus: int | None
    """The node's GPUs; None: not known yet."""
    how: str


def unshared(facts: Sequence[NodeFacts]) -> dict[str, NodeCapacity]:
    """Every GPU node as one ``nvidia.com/gpu`` per GPU: the side before a first apply."""
    return {f.name: NodeCapacity({GPU: 1}, _gpus(f), "no sharing") for f in facts if f.has_nvidia_gpu}


def of_spec(spec: Spec, facts: Sequence[NodeFacts]) -> dict[str, NodeCapacity]:
    """node -> its capacity under ``spec`` (its pool's config, else the stack's), for every GPU node; empty
    when ``spec`` runs no device plugin, or one whose config lives in a ConfigMap gpuplan does not render."""
    stack = spec.spec
    if stack.device_plugin.owner == "none":
        return {}
    by_name = {pool.name: pool for pool in stack.node_pools}
    members = pools.membership(spec.pool_selectors(), ((f.name, pool_labels(f)) for f in facts))
    found: dict[str, NodeCapacity] = {}
    for fact in facts:
        if not fact.has_nvidia_gpu:
            continue
        name = members.pool_of.get(fact.name)
        capacity = _node(spec, by_name[name] if name is not None else None, fact)
        if capacity is None:
            return {}
        found[fact.name] = capacity
    return found


def changes(
    before: Mapping[str, NodeCapacity],
    after: Mapping[str, NodeCapacity],
    members: Mapping[str | None, Sequence[str]],
) -> list[CapacityChange]:
    """Per pool (None: the nodes of no pool) of ``members`` and per resource, the capacity that differs
    between ``before`` and ``after``, in the pools' order and then by resource name."""
    found = []
    for pool, nodes in members.items():
        known = [node for node in nodes if node in before and node in after]
        if not known:
            continue
        resources = sorted({r for node in known for side in (before, after) for r in side[node].per_gpu})
        for resource in resources:
            old = _sum(before, known, resource)
            new = _sum(after, known, resource)
            if old == new:
                continue
            found.append(
                CapacityChange(
                    pool=pool,
                    resource=resource,
                    before=max(before[node].per_gpu.get(resource, 0) for node in known),
                    after=max(after[node].per_gpu.get(resource, 0) for node in known),
                    how=after[known[0]].how,
                    nodes=len(known),
                    total=CapacityTotal(
                        before=old[0],
                        after=new[0],
                        gpus=sum(after[node].gpus or 0 for node in known),
                        uncounted=sorted(node for node in known if after[node].gpus is None),
                    ),
                )
            )
    return found


def _sum(
    side: Mapping[str, NodeCapacity], nodes: Sequence[str], resource: str
) -> tuple[int, tuple[int, ...]]:
    """The devices of the counted nodes, and the per-GPU values of every node (so that a change on nodes whose
    GPUs are not counted yet still shows)."""
    total = sum(side[n].per_gpu.get(resource, 0) * (side[n].gpus or 0) for n in nodes)
    return total, tuple(side[n].per_gpu.get(resource, 0) for n in nodes)


def _gpus(fact: NodeFacts) -> int | None:
    # with the single MIG strategy GFD counts MIG devices in gpu.count, not GPUs (fleet facts §4.6)
    if fact.gpu_count is None or "-MIG-" in (fact.gpu_product or ""):
        return None
    return fact.gpu_count


def _node(spec: Spec, pool: NodePool | None, fact: NodeFacts) -> NodeCapacity | None:
    stack = spec.spec
    plugin = pool_config(stack, pool, "devicePlugin") if pool is not None else stack.device_plugin
    assert isinstance(plugin, DevicePluginConfig)
    mode = sharing_mode(plugin)
    if mode == "unknown":
        return None
    resource, replicas = shared_resource(plugin)
    per_gpu: dict[str, int] = {}
    hows = []
    devices = _mig_devices(spec, pool, fact)
    gpu_devices = 1
    if devices is not None and stack.mig.strategy != "none":
        config = pool.mig.config if pool is not None and pool.mig is not None else stack.mig.config
        if devices:
            hows.append(f"MIG {config}" + (", single strategy" if stack.mig.strategy == "single" else ""))
        if stack.mig.strategy == "mixed" and devices:
            gpu_devices = 0
            for profile, count in devices.items():
                key = f"nvidia.com/mig-{profile.replace('+', '.')}"
                per_gpu[key] = per_gpu.get(key, 0) + count
        elif devices:
            gpu_devices = sum(devices.values())
    if gpu_devices:
        per_gpu[resource] = gpu_devices * replicas
    if replicas > 1:
        hows.append(f"{'MPS' if mode == 'mps' else mode} x{replicas}")
    return NodeCapacity(per_gpu, _gpus(fact), ", ".join(hows) or "no sharing")


def _mig_devices(spec: Spec, pool: NodePool | None, fact: NodeFacts) -> dict[str, int] | None:
    """The MIG devices per GPU the node's mig-parted config asks of its GPU (empty: MIG disabled), or None
    where no MIG config reaches the node (no mig-manager applies one, its GPU is not MIG-capable or not known,
    or the config has no entry for it)."""
    stack = spec.spec
    own = pool.mig.config if pool is not None and pool.mig is not None else None
    manager = stack.mig_manager.owner
    # what label_rules writes: the stack's config only for gpuplan's mig-manager, a pool's own for any
    if manager == "none" or (manager != "gpuplan" and own is None):
        return None
    product = gpu_identity(fact).get(pools.PRODUCT_LABEL)
    gpu = mig_parted.GPUS.get(product or "")
    if gpu is None:
        return None
    return mig_parted.devices_asked(own or stack.mig.config, gpu)
