"""A pod's effect on its node, written as the real components write it: labels as a metadata merge patch with
the effect's own field manager (GFD writes as ``gpu-feature-discovery``), capacity/allocatable and
runtimeHandlers through the node status subresource as ``kubelet``; the node's ``NodeGpuState`` learns the
same (labels, resources, runtime handlers, the container driver). Only what differs is written.

Called on the loop thread by ``gpuplan.sim.kubelet.runtime.KubeletRuntime.apply_effect`` (the outcomes'
effects and the removal effects of deleted pods).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers.cache import Obj, resource_type
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.kubelet.outcomes import NodeEffect
from gpuplan.sim.kubelet.state import NodeGpuState

MANAGER = "kubelet"
MERGE = "application/merge-patch+json"


def apply(loop: Loop, state: NodeGpuState, effect: NodeEffect) -> bool:
    """Apply ``effect`` to ``state``'s node and to ``state``; True when anything changed."""
    node = loop.cache.node(state.node.name)
    if node is None:
        return False
    changed = _apply_labels(loop, node, effect, state)
    changed |= _apply_node_status(loop, node, effect, state)
    if effect.container_driver is not Ellipsis and effect.container_driver != state.container_driver:
        state.container_driver = effect.container_driver
        changed = True
    return changed


def _apply_labels(loop: Loop, node: Obj, effect: NodeEffect, state: NodeGpuState) -> bool:
    # the node as it will be once the writes still behind the loop land: a pod that restarts (GFD's old
    # pod removes its labels, the new one writes them) must not take the cache's old labels for its own
    known: dict[str, str | None] = {**(node["metadata"].get("labels") or {}), **state.pending_labels}
    patch = {k: v for k, v in effect.labels.items() if known.get(k) != v}
    if not patch:
        return False
    # the state learns the labels first, so the write-through below is not taken for someone else's edit
    state.labels = {k: v for k, v in {**known, **patch}.items() if v is not None}
    state.pending_labels.update(patch)

    def landed() -> None:  # the cache has the server's answer now
        for key, value in patch.items():
            if key in state.pending_labels and state.pending_labels[key] == value:
                del state.pending_labels[key]

    _patch_node(loop, node, {"metadata": {"labels": patch}}, effect.manager, subresource=None, done=landed)
    return True


def _apply_node_status(loop: Loop, node: Obj, effect: NodeEffect, state: NodeGpuState) -> bool:
    status = node.get("status") or {}
    patch: Obj = {}
    for field_name in ("capacity", "allocatable"):
        current = status.get(field_name) or {}
        diff = {
            k: v
            for k, v in effect.resources.items()
            if current.get(k) != v and (v is not None or k in current)
        }
        if diff:
            patch[field_name] = diff
    handlers = _handlers_after(status.get("runtimeHandlers") or [], effect.runtime_handlers)
    if handlers is not None:
        patch["runtimeHandlers"] = handlers
    for name, present in effect.runtime_handlers.items():
        (state.runtime_handlers.add if present else state.runtime_handlers.discard)(name)
    for name, value in effect.resources.items():
        if value is None:
            state.resources.pop(name, None)
        else:
            state.resources[name] = value
    if not patch:
        return False
    _patch_node(loop, node, {"status": patch}, MANAGER, subresource="status")
    return True


def _patch_node(
    loop: Loop,
    node: Obj,
    body: Obj,
    manager: str,
    *,
    subresource: str | None,
    done: Callable[[], None] = lambda: None,
) -> None:
    """Write behind the loop (``Loop.write_behind``), in order with the node's other writes: a node's
    effects and heartbeats are not held up by every other node's round trips."""
    nodes_rt = resource_type(loop.store.registry, "v1", "Node")
    name = node["metadata"]["name"]

    def write() -> Obj | None:
        try:
            return loop.store.patch(
                nodes_rt,
                None,
                name,
                body,
                MERGE,
                manager=manager,
                subresource=subresource,
                read_only=True,  # only observed
            )
        except store_mod.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    loop.write_behind("nodes", ("nodes", name), write, done)


def _handlers_after(current: list[Obj], wanted: Mapping[str, bool]) -> list[Obj] | None:
    """The node's runtimeHandlers list with ``wanted`` applied; None when unchanged."""
    names = [h.get("name") for h in current]
    features = next((h.get("features") for h in current if h.get("name") == "runc"), None)
    result = [h for h in current if wanted.get(h.get("name", ""), True)]
    for name, present in sorted(wanted.items()):
        if present and name not in names:
            entry: Obj = {"name": name}
            if features is not None:
                entry["features"] = dict(features)
            result.insert(0, entry)
    return None if result == current else result
