"""What a scenario's objects may leave to the simulator: their owners' uids and the status their controller
would have written.

A scenario describes a cluster some controller already reconciled (the GPU Operator's operands, owned by its
ClusterPolicy), but cannot know the uids the API server will assign. So an ``ownerReferences`` entry
without ``uid`` names an object of the same scenario, created earlier (kind and name, in the dependent's
namespace or cluster-scoped); its uid is filled in before the create, as the owning controller's
``SetControllerReference`` would have. And a custom resource's ``status`` is dropped on create when its
kind has a status subresource (a real API server's strategy), so the status the scenario gives is written
afterwards through that subresource, as the controller's status update would.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from gpuplan.sim.api import patch, registry
from gpuplan.sim.api.object_store import ObjectStore
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]
STATUS_MANAGER = "scenario-status"


Created = dict[tuple[str, str, str], str]
"""The uids of the scenario's objects created so far: (kind, namespace or "", name) -> uid."""


def create(
    store: ObjectStore, rt: ResourceType, obj: Obj, namespace: str | None, created: Created, *, manager: str
) -> None:
    """Create ``obj`` with its owners' uids, write the status it gives, and record its uid in ``created``.
    Raises KeyError for an owner that is not in ``created``, ApiError for what the API server refuses."""
    stored = store.create(rt, resolve_owners(obj, created, namespace), namespace=namespace, manager=manager)
    meta = stored["metadata"]
    status = status_to_write(rt, obj)
    if status is not None:
        store.patch(
            rt, namespace, meta["name"], status, patch.MERGE, manager=STATUS_MANAGER, subresource="status"
        )
    created[(str(obj.get("kind")), namespace or "", str(meta["name"]))] = str(meta["uid"])


def resolve_owners(obj: Obj, created: Created, namespace: str | None) -> Obj:
    """``obj`` with the uid of each of its uid-less ownerReferences filled in from ``created``
    (a reference to an object not in it raises KeyError)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    if all(ref.get("uid") for ref in refs):
        return obj
    resolved = copy.deepcopy(obj)
    for ref in resolved["metadata"]["ownerReferences"]:
        if not ref.get("uid"):
            ref["uid"] = _owner_uid(ref, created, namespace)
    return resolved


def _owner_uid(ref: Obj, created: Created, namespace: str | None) -> str:
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    for key in ((kind, namespace or "", name), (kind, "", name)):
        if key in created:
            return created[key]
    raise KeyError(f"ownerReference to {kind} {name}: no such object earlier in the scenario")


def status_to_write(rt: ResourceType, obj: Obj) -> bytes | None:
    """The merge patch that writes ``obj``'s status through the status subresource, when the create dropped
    it; None otherwise."""
    status = obj.get("status")
    if not status or "status" not in rt.subresources or rt in registry.BUILTIN:
        return None
    return json.dumps({"status": status}).encode()
