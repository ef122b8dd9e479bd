"""Mutating admission of pods, as two plugins a real API server enables by default run it.

- **Priority**: on create, ``spec.priority`` (and ``preemptionPolicy``) come from the pod's
  ``priorityClassName``: the system classes ``system-node-critical`` (2000001000) and
  ``system-cluster-critical`` (2000000000) always exist, other classes are looked up in the store; without a
  class name the global default class applies, or priority 0. An unknown class, or a ``priority`` that
  differs from the computed one, is 403 Forbidden with the plugin's words. On update the old values are kept
  when the new object leaves them out.
- **DefaultTolerationSeconds**: a pod that tolerates neither ``node.kubernetes.io/not-ready`` nor
  ``node.kubernetes.io/unreachable`` (NoExecute) gets a toleration of 300 s for each (create and update).
  DaemonSet pods already carry both, without a time limit (the DaemonSet controller adds them).

Admission runs after field management, so what it adds belongs to no field manager, and before validation.
Caller: ``sim.api.writes`` for writes of the pods resource itself (never a subresource).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.sim.api import errors
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
SYSTEM_PRIORITY_CLASSES: dict[str, Obj] = {
    name: {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
           "value": value, "preemptionPolicy": PREEMPT_LOWER_PRIORITY}
    for name, value in (("system-node-critical", 2000001000), ("system-cluster-critical", 2000000000))}
DEFAULT_TOLERATION_SECONDS = 300
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"

# The stored PriorityClass objects (the system classes are added here); empty where the kind is not served.
PriorityClasses = Callable[[], list[Obj]]


def admit(rt: ResourceType, obj: Obj, old: Obj | None, priority_classes: PriorityClasses) -> None:
    """Run the plugins on a create (``old`` None) or an update of ``obj`` in place; 403 ``ApiError`` when
    the Priority plugin refuses."""
    if (rt.group, rt.kind) != ("", "Pod"):
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if old is None:
        _set_priority(rt, obj, spec, priority_classes)
    else:
        old_spec = old.get("spec") or {}
        for field in ("priority", "preemptionPolicy"):
            if spec.get(field) is None and old_spec.get(field) is not None:
                spec[field] = old_spec[field]
    _default_tolerations(spec)


def _set_priority(rt: ResourceType, pod: Obj, spec: Obj, priority_classes: PriorityClasses) -> None:
    name = (pod.get("metadata") or {}).get("name") or ""
    classes: dict[str, Obj] = {str((c.get("metadata") or {}).get("name")): c for c in priority_classes()}
    classes.update(SYSTEM_PRIORITY_CLASSES)
    wanted = spec.get("priorityClassName")
    if wanted:
        found = classes.get(wanted)
        if found is None:
            raise errors.forbidden(rt, name, f"no PriorityClass with name {wanted} was found")
    else:
        found = next((c for c in classes.values() if c.get("globalDefault") is True), None)
        if found is not None:
            spec["priorityClassName"] = found["metadata"]["name"]
    value = int(found.get("value") or 0) if found is not None else 0
    policy = (found.get("preemptionPolicy") if found is not None else None) or PREEMPT_LOWER_PRIORITY
    if spec.get("priority") is not None and spec["priority"] != value:
        raise errors.forbidden(rt, name, f"the integer value of priority ({spec['priority']}) must not be "
                                         f"provided in pod spec; priority admission controller computed "
                                         f"{value} from the given PriorityClass name")
    if spec.get("preemptionPolicy") not in (None, policy):
        raise errors.forbidden(rt, name, f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) "
                                         f"must not be provided in pod spec; priority admission controller "
                                         f"computed {policy} from the given PriorityClass name")
    spec["priority"] = value
    spec["preemptionPolicy"] = policy


def _default_tolerations(spec: Obj) -> None:
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        return      # malformed: validation's business
    present = [t for t in tolerations or [] if isinstance(t, dict)]
    added = [_toleration(key) for key in (NOT_READY, UNREACHABLE)
             if not any(_tolerates_no_execute(t, key) for t in present)]
    if added:
        spec["tolerations"] = list(tolerations or []) + added


def _tolerates_no_execute(toleration: Obj, key: str) -> bool:
    """As the plugin judges it: the key matches (or is empty) and the effect is NoExecute (or empty)."""
    return toleration.get("key") in (None, "", key) and toleration.get("effect") in (None, "", "NoExecute")


def _toleration(key: str) -> Obj:
    return {"key": key, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}
