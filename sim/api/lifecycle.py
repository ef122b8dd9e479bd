"""How stored objects change after a request is decided: replace, delete, propagation and cascades.

- ``_replace`` stores an updated object: validation (422), generation bump on a change outside metadata and
  status (``strategy.bumps_generation``), managedFields of an Update (unless the caller computed them, as
  server-side apply does), no-op detection (same content and managedFields: the old resourceVersion, no
  event), and the real deletion once an object marked for deletion loses its last finalizer.
- ``_delete_requested``: a DELETE of a pod bound to a node gets a grace period (``graceful``:
  deletionTimestamp and deletionGracePeriodSeconds, Terminating until its kubelet deletes it with grace 0);
  the rest goes to
- ``_delete_locked``: immediate unless the object has finalizers (then ``deletionTimestamp``); Background and
  Foreground delete the dependents (objects whose ``ownerReferences`` name the owner's uid) in the same call,
  recursively, instead of after a garbage-collector pass; Orphan strips that ownerReference. Deleting a
  Namespace deletes its contents at once; deleting a CRD its custom objects, kinds and watches. ``default``,
  ``kube-system`` and ``kube-public`` cannot be deleted (403).

Part of ``sim.api.store.Store`` (see ``sim.api.core`` for the layers); every method runs under the lock.
"""

from __future__ import annotations

from typing import Any

from gpuplan.sim.api import errors, graceful, managed, registry, strategy, validation
from gpuplan.sim.api.core import StoreCore
from gpuplan.sim.api.objects import Obj, as_version, copy_json, meta, without_bookkeeping
from gpuplan.sim.api.registry import ResourceType

ManagedFields = list[dict[str, Any]]
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
GC_MANAGER = "kube-controller-manager"


def is_crd(rt: ResourceType) -> bool:
    return rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io"


def _is_namespace(rt: ResourceType) -> bool:
    return rt.kind == "Namespace" and not rt.group


class Lifecycle(StoreCore):
    """Replace and delete stored objects, with what follows from it."""

    # ------------------------------------------------------------------ replace

    def _replace(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        *,
        manager: str,
        subresource: str | None,
        dry_run: bool,
        managed_fields: ManagedFields | None = None,
        read_only: bool = False,
    ) -> Obj:
        """Validate and store an updated object; a no-op keeps the old resourceVersion. ``read_only``: the
        answer is the subscribers' copy (``Writes.create``)."""
        name = meta(old)["name"]
        causes = validation.validate_object(rt, new) or validation.validate_update(rt, old, new)
        if causes:
            raise errors.invalid(rt, name, causes)
        new_meta = new["metadata"]
        new_meta["resourceVersion"] = meta(old)["resourceVersion"]
        if strategy.bumps_generation(rt, old, new):
            new_meta["generation"] = int(meta(old).get("generation") or 0) + 1
        if managed_fields is None and manager:
            managed_fields = managed.record_update(
                old,
                new,
                new_meta.get("managedFields") or [],
                manager=manager,
                api_version=rt.api_version,
                time=self._now(),
                subresource=subresource,
                part=self._part(rt, subresource),
            )
        if managed_fields is not None:
            new_meta["managedFields"] = managed_fields
        if subresource is None:
            strategy.after_field_management(rt, old, new)
        if without_bookkeeping(new) == without_bookkeeping({**old, "apiVersion": rt.api_version}):
            return self._answer(rt, old, read_only)
        if dry_run:
            return as_version(rt, new)
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return self._delete_locked(rt, new, "Background")  # the last finalizer went: delete for real
        answer = self._commit(rt, "MODIFIED", old, new, read_only=read_only)
        if is_crd(rt):
            self._sync_crd(old, new)
        return answer if answer is not None else as_version(rt, new)

    # ------------------------------------------------------------------ delete

    def _delete_requested(
        self, rt: ResourceType, old: Obj, propagation: str, grace_period: int | None, dry_run: bool
    ) -> Obj:
        """A DELETE verb's effect: a pod with a grace period is marked terminating (``graceful``); anything
        else is deleted as ``_delete_locked`` does."""
        if not graceful.is_pod(rt.kind, rt.group):
            return as_version(rt, old) if dry_run else self._delete_locked(rt, old, propagation)
        period = graceful.grace_period(old, grace_period)
        old_meta = meta(old)
        if old_meta.get("deletionTimestamp") and not graceful.shortens(old, period):
            return as_version(rt, old)  # a pending graceful deletion: only a shorter period changes it
        if period == 0:
            return as_version(rt, old) if dry_run else self._delete_locked(rt, old, propagation)
        marked = copy_json(old)
        marked["metadata"]["deletionTimestamp"] = graceful.deletion_timestamp(self._clock(), period)
        marked["metadata"]["deletionGracePeriodSeconds"] = period
        if not old_meta.get("deletionTimestamp") and old_meta.get("generation"):
            marked["metadata"]["generation"] = int(old_meta["generation"]) + 1  # as BeforeDelete does
        if not dry_run:
            self._commit(rt, "MODIFIED", old, marked)
        return as_version(rt, marked)

    def _check_preconditions(self, rt: ResourceType, obj: Obj, preconditions: dict[str, Any]) -> None:
        found = meta(obj)
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != found.get("uid"):
            raise errors.conflict(
                rt,
                found["name"],
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {found.get('uid')}",
            )
        if rv and rv != found.get("resourceVersion"):
            raise errors.conflict(
                rt,
                found["name"],
                f"Precondition failed: ResourceVersion in precondition: "
                f"{rv}, ResourceVersion in object meta: "
                f"{found.get('resourceVersion')}",
            )

    def _delete_locked(self, rt: ResourceType, old: Obj, propagation: str) -> Obj:
        old_meta = meta(old)
        if _is_namespace(rt) and old_meta["name"] in IMMORTAL_NAMESPACES:
            raise errors.ApiError(
                403,
                "Forbidden",
                f'namespaces "{old_meta["name"]}" is forbidden: this namespace may not be deleted',
                {"name": old_meta["name"], "kind": "namespaces"},
            )
        if old_meta.get("finalizers"):
            if old_meta.get("deletionTimestamp"):
                return as_version(rt, old)
            marked = copy_json(old)
            marked["metadata"]["deletionTimestamp"] = self._now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            self._commit(rt, "MODIFIED", old, marked)
            return as_version(rt, marked)
        if _is_namespace(rt):
            self._delete_namespace_contents(old_meta["name"])
        if is_crd(rt):
            self._unregister_crd(old)
        if propagation == "Orphan":
            self._orphan_dependents(old_meta["uid"])
        elif propagation == "Foreground":
            # Foreground: the owner goes last, after its dependents (as the garbage collector finishes it).
            self._delete_dependents(old_meta["uid"], "Foreground")
        if propagation != "Background":
            return self._remove(rt, old)
        # Background: the owner goes first; the dependents follow at once instead of after a GC pass.
        deleted = self._remove(rt, old)
        self._delete_dependents(old_meta["uid"], "Background")
        return deleted

    def _remove(self, rt: ResourceType, old: Obj) -> Obj:
        current = self._table.get(rt, meta(old).get("namespace"), meta(old)["name"])
        if current is None:
            return as_version(rt, old)
        last = {**old, "metadata": dict(meta(old))}
        self._commit(rt, "DELETED", current, last)
        return as_version(rt, last)

    def _delete_dependents(self, uid: str, propagation: str) -> None:
        for dependent in self._table.dependents(uid, take=True):
            stored = self._table.stored(dependent)
            if stored is not None and any(r.get("uid") == uid for r in meta(stored[1])["ownerReferences"]):
                self._delete_locked(stored[0], stored[1], propagation)

    def _orphan_dependents(self, uid: str) -> None:
        for dependent in self._table.dependents(uid):
            stored = self._table.stored(dependent)
            if stored is None:
                continue
            rt, obj = stored
            new = copy_json(obj)
            refs = [r for r in meta(new).get("ownerReferences", []) if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self._replace(rt, obj, new, manager=GC_MANAGER, subresource=None, dry_run=False)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for storage_key, bucket in list(self._table.objects.items()):
            rt = self._table.types.get(storage_key)
            if rt is None or not rt.namespaced:
                continue
            for found in [k for k in self._table.keys_sorted(rt) if k[0] == namespace]:
                if found in bucket:
                    self._delete_locked(rt, bucket[found], "Background")

    # ------------------------------------------------------------------ CRDs

    def _register_crd(self, crd: Obj) -> None:
        for rt in registry.from_crd(crd):
            self.registry.register(rt)
            self._table.types[rt.storage_key] = rt

    def _sync_crd(self, old: Obj, new: Obj) -> None:
        """An updated CRD serves its new versions and names; versions no longer served go away."""
        served = {(t.group, t.version, t.plural) for t in registry.from_crd(new)}
        for gone in registry.from_crd(old):
            if (gone.group, gone.version, gone.plural) not in served:
                self.registry.unregister(gone)
        self._register_crd(new)

    def _unregister_crd(self, crd: Obj) -> None:
        types = registry.from_crd(crd)
        if not types:
            return
        rt = self._table.types.get(types[0].storage_key, types[0])
        for found in list(self._table.keys_sorted(rt)):
            obj = self._bucket(rt).get(found)
            if obj is not None:
                self._remove(rt, obj)
        for served in types:
            self.registry.unregister(served)
        for watch in self._log.take_watches(rt.storage_key):
            watch.close()  # a real server ends the watches of a resource that is no longer served
        self._table.forget(rt)
