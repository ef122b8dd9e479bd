"""The store's write verbs: from a request (create, update, patch, server-side apply) to the object to store.

The order is the real API server's, because what clients observe depends on it:

1. decode: the body's kind and version are checked, unknown fields refused under ``fieldValidation=Strict``,
   and the kind's defaults applied (``sim.api.defaults``), for the main resource only, never for the
   status subresource;
2. field management: an Update (create, PUT, non-apply patch) owns what it set or changed, defaulted fields
   included; an Apply owns exactly the applied fields;
3. admission (``sim.api.admission``: pod priority, default tolerations and RuntimeClass; one global default
   PriorityClass), before a ``generateName`` is turned into a name, then validation (422);
4. the strategy (``sim.api.strategy``): server-set status on create, allocated Service values, namespace
   finalizers; then storage (``lifecycle.Lifecycle._replace`` for updates).

Defaults run on the new object of every update as they did on the stored one at its create, so a write that
only leaves defaults out changes nothing: no new resourceVersion, no generation bump.

The system PriorityClasses are stored when the store is built (``Writes.__init__``), as kube-apiserver's
bootstrap hook does, so they come before the seeded namespaces (resourceVersions 1 and 2).

Part of ``sim.api.store.Store`` (see ``sim.api.core`` for the layers).
"""

from __future__ import annotations

import random
from typing import Any

from gpuplan.sim.api import (
    admission,
    defaults,
    errors,
    managed,
    patch,
    registry,
    roundtrip,
    strategy,
    validation,
)
from gpuplan.sim.api.core import PRIORITY_CLASSES
from gpuplan.sim.api.lifecycle import Lifecycle, is_crd
from gpuplan.sim.api.objects import Obj, as_version, meta
from gpuplan.sim.api.registry import ResourceType

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
RUNTIME_CLASSES = ("node.k8s.io", "v1", "runtimeclasses")
# Version-4 UUIDs from a generator of the store's own (seeded from os.urandom once, untouched by a test's
# random.seed): uuid4() reads os.urandom on every call, slow enough to show in a fleet rollout.
_UIDS = random.Random()
_SERVER_METADATA = ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")


def _new_uid() -> str:
    """A random version-4 UUID as ``str(uuid.UUID(int=..., version=4))`` writes it, without building the
    UUID object (two of them per pod, with its Events, at fleet scale)."""
    bits = _UIDS.getrandbits(128) & ~(0xC000 << 48) | 0x8000 << 48  # the RFC 4122 variant
    text = "%032x" % (bits & ~(0xF000 << 64) | 4 << 76)  # version 4
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class Writes(Lifecycle):
    """create, update, patch (every patch type) and server-side apply."""

    def __init__(self, served: registry.Registry, **options: Any) -> None:
        super().__init__(served, **options)
        self._bootstrap_priority_classes()

    def _bootstrap_priority_classes(self) -> None:
        """Store the system PriorityClasses, as kube-apiserver's
        ``scheduling/bootstrap-system-priority-classes``
        post-start hook does (only where the kind is served)."""
        rt = self.registry.get(*PRIORITY_CLASSES)
        if rt is None:
            return
        for system_class in admission.SYSTEM_PRIORITY_CLASSES.values():
            self.create(rt, system_class, manager="kube-apiserver")

    def _runtime_class(self, name: str) -> Obj | None:
        """The stored RuntimeClass ``name``, for the RuntimeClass admission plugin (under the lock)."""
        rt = self.registry.get(*RUNTIME_CLASSES)
        return self._table.get(rt, None, name) if rt is not None else None

    def _service_account(self, namespace: str, name: str) -> Obj | None:
        """The stored ServiceAccount, for the ServiceAccount admission plugin (under the lock)."""
        rt = self.registry.get("", "v1", "serviceaccounts")
        return self._table.get(rt, namespace, name) if rt is not None else None

    # ------------------------------------------------------------------ create

    def create(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        namespace: str | None = None,
        manager: str,
        dry_run: bool = False,
        field_validation: str = "Ignore",
        read_only: bool = False,
        answer: bool = True,
        owned: bool = False,
    ) -> Obj:
        """``read_only``: answer with the copy the store's subscribers get of the new object, which shares
        its pooled parts with them (``sharing``): for the simulator's own controllers, which never change
        what they got; every other caller gets its own deep copy. ``answer=False``: the caller reads no
        answer (an event recorder), none is made and ``{}`` returned. ``owned``: ``obj`` was built for this
        write and becomes the store's as it is, without a copy (the caller never changes it, nor any part
        of it, again: an event recorder's body), and the parts it shares with other objects are already one
        instance each (the recorder's involvedObject and source), so the store's pool is not searched for
        them (``sharing``)."""
        obj = self._check_type(rt, obj, owned=owned)
        self._check_served(rt)
        self._check_strict(rt, obj, field_validation)
        defaults.default_object(rt, obj)
        # Ownership comes from the defaulted request, before admission and the strategy (status, ...).
        fields = (
            managed.record_update(
                None,
                obj,
                [],
                manager=manager,
                api_version=rt.api_version,
                time=self._now(),
                part=self._part(rt, None),
            )
            if manager
            else []
        )
        with self._lock:
            self._prepare_create(rt, obj, namespace)
            obj["metadata"]["managedFields"] = fields
            return self._insert(rt, obj, dry_run, read_only, answer, pooled=not owned)

    def _prepare_create(self, rt: ResourceType, obj: Obj, namespace: str | None) -> None:
        """Namespace, name, admission, validation and the server-set fields of a new object (under the
        lock)."""
        new_meta = obj["metadata"]
        if rt.namespaced:
            body_ns = new_meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            new_meta["namespace"] = namespace or body_ns or "default"
        else:
            new_meta.pop("namespace", None)
        # Admission before the name is generated, as on a real server: refusals name the generateName.
        admission.admit(rt, obj, None, self._priority_classes, self._runtime_class, self._service_account)
        if not new_meta.get("name") and new_meta.get("generateName"):
            new_meta["name"] = self._generate_name(
                rt, new_meta["namespace"] if rt.namespaced else "", new_meta["generateName"]
            )
        causes = validation.validate_create(rt, obj)
        if causes:
            raise errors.invalid(rt, new_meta.get("name") or "", causes)
        if rt.namespaced:
            self._require_namespace(rt, new_meta["namespace"])
        if self._exists(rt, obj):
            raise errors.already_exists(rt, new_meta["name"])
        for server_field in _SERVER_METADATA:
            new_meta.pop(server_field, None)
        new_meta["uid"] = _new_uid()
        new_meta["creationTimestamp"] = now = self._now()
        if rt.tracks_generation:
            new_meta["generation"] = 1
        else:
            new_meta.pop("generation", None)
        strategy.prepare_create(rt, obj, now)

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        bucket = self._bucket(rt)
        while True:
            name = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            if (namespace, name) not in bucket:
                return name

    def _insert(
        self,
        rt: ResourceType,
        obj: Obj,
        dry_run: bool,
        read_only: bool = False,
        answer: bool = True,
        *,
        pooled: bool = True,
    ) -> Obj:
        if dry_run:
            return as_version(rt, obj)
        made = self._commit(rt, "ADDED", None, obj, read_only=read_only and answer, pooled=pooled)
        if is_crd(rt):
            self._register_crd(obj)
        if made is not None:
            return made
        return as_version(rt, obj) if answer else {}

    # ------------------------------------------------------------------ update

    def update(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        namespace: str | None,
        name: str,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Ignore",
    ) -> Obj:
        obj = self._check_type(rt, obj)
        self._check_strict(rt, obj, field_validation)
        new_meta = obj["metadata"]
        if new_meta.get("name") and new_meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({new_meta['name']}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and namespace and new_meta.get("namespace") and new_meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        with self._lock:
            old = self._current(rt, namespace, name)
            wanted = new_meta.get("resourceVersion")
            if wanted and wanted != meta(old)["resourceVersion"]:
                raise errors.conflict(rt, name, errors.MODIFIED_WHY)
            new = self._merge_write(rt, old, obj, subresource)
            self._admit_update(rt, old, new, subresource)
            return self._replace(rt, old, new, manager=manager, subresource=subresource, dry_run=dry_run)

    def _merge_write(self, rt: ResourceType, old: Obj, obj: Obj, subresource: str | None) -> Obj:
        """The object a write of ``obj`` produces: server metadata kept, status or main part kept.

        ``obj`` is the store's own copy of the request (every caller made it), so it is taken over, not copied
        again. A status write shares the stored object's other parts: they are never mutated (stored objects
        are immutable) and nothing after this step changes more than the new metadata of a status write."""
        if subresource is not None and subresource not in rt.subresources:
            raise errors.not_served(rt, meta(old)["name"])
        if subresource == "status":
            new = {**old, "apiVersion": rt.api_version, "metadata": dict(meta(old))}
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            return new
        if subresource is not None:
            raise errors.ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        new = obj
        new["apiVersion"] = rt.api_version
        new_meta, old_meta = new.setdefault("metadata", {}), meta(old)
        for field in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if field in old_meta:
                new_meta[field] = old_meta[field]
            else:
                new_meta.pop(field, None)
        if "managedFields" not in new_meta:
            new_meta["managedFields"] = old_meta.get("managedFields", [])
        if "status" in rt.subresources:
            if "status" in old:
                new["status"] = old["status"]  # shared, as above: no step of a main write changes status
            else:
                new.pop("status", None)
        return new

    def _admit_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None) -> None:
        """Defaults, admission and the strategy of an update of the main resource; a status write gets
        none, but its status is decoded into the Go type and encoded again like any write's."""
        if subresource is None:
            defaults.default_object(rt, new)
            admission.admit(rt, new, old, self._priority_classes, self._runtime_class)
            strategy.prepare_update(rt, old, new)
        elif subresource == "status":
            strategy.prepare_status_update(rt, old, new)
            roundtrip.encode_status(rt, new)

    # ------------------------------------------------------------------ patch

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        *,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        field_validation: str = "Ignore",
        read_only: bool = False,
    ) -> Obj:
        """``read_only`` (not for apply patches): answer as ``create`` does with it."""
        try:
            document = patch.decode(body, patch_type, strategic_ok=rt in registry.BUILTIN)
        except patch.PatchError as exc:
            raise errors.ApiError(exc.code, exc.reason, str(exc)) from exc
        if patch_type == patch.APPLY:
            return self._apply(
                rt,
                namespace,
                name,
                document,
                manager=manager,
                subresource=subresource,
                dry_run=dry_run,
                force=force,
                field_validation=field_validation,
            )
        with self._lock:
            old = self._current(rt, namespace, name)
            try:
                patched = patch.apply(
                    self._patch_base(rt, old, patch_type, subresource), document, patch_type
                )
            except patch.PatchError as exc:
                raise errors.ApiError(exc.code, exc.reason, str(exc)) from exc
            patched = self._check_type(rt, patched, owned=True)
            self._check_strict(rt, patched, field_validation)
            self._check_identity(rt, old, patched)
            new = self._merge_write(rt, old, patched, subresource)
            self._admit_update(rt, old, new, subresource)
            return self._replace(
                rt, old, new, manager=manager, subresource=subresource, dry_run=dry_run, read_only=read_only
            )

    @staticmethod
    def _patch_base(rt: ResourceType, old: Obj, patch_type: str, subresource: str | None) -> Obj:
        """What a patch is applied to: a private copy of the stored object, as the rest of a main write
        (defaults, admission, strategy) changes it in place. A merge patch of the status subresource (every
        kubelet and controller status write) reads the stored object as it is: a merge patch never mutates its
        target (it rebuilds the maps on the patch's paths) and a status write changes nothing else in
        place."""
        if subresource == "status" and patch_type == patch.MERGE:
            return {**old, "apiVersion": rt.api_version, "kind": rt.kind}
        return as_version(rt, old)

    def _check_identity(self, rt: ResourceType, old: Obj, patched: Obj) -> None:
        """A patch may not rename the object; a resourceVersion in it is a precondition."""
        new_meta, old_meta = meta(patched), meta(old)
        if new_meta.get("name") != old_meta["name"]:
            raise errors.bad_request(
                f"the name of the object ({new_meta.get('name')}) does not match the name "
                f"on the URL ({old_meta['name']})"
            )
        if new_meta.get("resourceVersion") not in (None, "", old_meta["resourceVersion"]):
            raise errors.conflict(rt, old_meta["name"], errors.MODIFIED_WHY)

    # ------------------------------------------------------------------ server-side apply

    def _apply(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        document: Any,
        *,
        manager: str,
        subresource: str | None,
        dry_run: bool,
        force: bool,
        field_validation: str,
    ) -> Obj:
        """Server-side apply: merge the applied fields, own exactly them, 409 on others' differing values."""
        if not manager:
            raise errors.ApiError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                "Required value: is required for apply patch",
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [validation.required("fieldManager", "is required for apply patch")],
                },
            )
        applied = self._check_type(rt, document)
        self._check_served(rt)
        self._check_strict(rt, applied, field_validation)
        if not meta(applied).get("name"):
            meta(applied)["name"] = name
        if meta(applied)["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta(applied)['name']}) does not match the name "
                f"on the URL ({name})"
            )
        part = self._part(rt, subresource)
        applied_leaves = managed.leaves(applied, part)
        with self._lock:
            old = self._table.get(rt, namespace, name)
            if old is None:
                if subresource is not None:
                    raise errors.not_found(rt, name)
                return self._apply_create(rt, applied, set(applied_leaves), namespace, manager, dry_run)
            # A read-only view: apply_merge copies it before merging, so the stored object is never touched.
            live = {**old, "apiVersion": rt.api_version, "kind": rt.kind}
            mf = meta(live).get("managedFields") or []
            found = managed.conflicts(
                live, applied_leaves, mf, manager=manager, subresource=subresource, part=part
            )
            if found and not force:
                raise errors.apply_conflict(rt, name, found)
            # After the field conflicts, as the real patcher: the update that stores the merge then refuses a
            # resourceVersion (a precondition, as in every patch body) other than the stored one.
            wanted = meta(applied).get("resourceVersion")
            if wanted and wanted != meta(old)["resourceVersion"]:
                raise errors.conflict(rt, name, errors.MODIFIED_WHY)
            merged = patch.apply_merge(live, applied, part)
            # What the manager applied last time and not now is pruned, except the parents of what it
            # applies now: a map applied empty (`data: {}`) and then with keys is still this apply's, as
            # structured-merge-diff's prune adds back the named fields above an owned path
            # (merge/update.go addBackOwnedItems, fieldpath EnsureNamedFieldsAreMembers).
            parents = {leaf[:end] for leaf in applied_leaves for end in range(1, len(leaf))}
            stale = managed.applied_by(mf, manager, subresource) - set(applied_leaves) - parents
            own = (manager, "Apply", subresource or "")
            orphaned = [p for p in stale if not managed.owners_of_path(mf, p, live, exclude=own)]
            patch.remove_paths(merged, orphaned)
            if subresource is None:
                defaults.default_object(rt, merged)  # a field the apply gave up falls back to its default
            new_mf = managed.record_apply(
                live,
                merged,
                mf,
                applied=set(applied_leaves),
                manager=manager,
                api_version=rt.api_version,
                time=self._now(),
                subresource=subresource,
                part=part,
                forced=found,
            )
            meta(merged)["managedFields"] = new_mf
            new = self._merge_write(rt, old, merged, subresource)
            self._admit_update(rt, old, new, subresource)
            return self._replace(
                rt, old, new, manager=manager, subresource=subresource, dry_run=dry_run, managed_fields=new_mf
            )

    def _apply_create(
        self,
        rt: ResourceType,
        applied: Obj,
        paths: set[managed.Path],
        namespace: str | None,
        manager: str,
        dry_run: bool,
    ) -> Obj:
        obj = applied  # _check_type's copy of the request, the store's own
        defaults.default_object(rt, obj)
        self._prepare_create(rt, obj, namespace)
        obj["metadata"]["managedFields"] = managed.record_apply(
            None, obj, [], applied=paths, manager=manager, api_version=rt.api_version, time=self._now()
        )
        return self._insert(rt, obj, dry_run)
