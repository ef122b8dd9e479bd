"""Adoption: ownership conflicts with their resolutions, and the state records of adopted or applied objects.

One lifecycle owner per component (design §1). When gpuplan is to own a component that another owner already
runs (the lab's hand-deployed device plugin, a GPU Operator ClusterPolicy and its DaemonSets, a Helm release,
another gpuplan stack), :func:`conflicts` names the objects, their owner and the ways out: ``gpuplan import``
(adopt the object; the next plan replaces it with gpuplan's own), or removing the other owner first (the exact
kubectl / helm command), or leaving the component to that owner (``owner: external``).

:func:`import_target` checks what ``gpuplan import`` is asked to adopt and :func:`record_imported` writes its
record with the object's live identity (the state's address is derived from that identity, so an object
adopted from kube-system is recorded under its kube-system address and the plan pairs it with the desired
object of the same component and kind). :func:`record_applied` is the record apply writes after it applied
a desired object (and what tests use to set up a state "as apply would").

Callers: :mod:`gpuplan.planner.plan.build` (conflicts), the ``import`` command, and apply. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuplan.errors import ConfigError, StateError
from gpuplan.modules.base import Address, DesiredObject
from gpuplan.planner.diff import normalize
from gpuplan.providers.snapshot import ForeignObject, LiveObject, ObjectKey
from gpuplan.state import credentials
from gpuplan.state.model import ResourceRecord, StateFile, make_address


class Resolution(BaseModel):
    """One way out of a conflict: what it does and the command that does it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    summary: str
    command: str


class Conflict(BaseModel):
    """An object of another owner doing the job of a component gpuplan is to own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    component: str
    object: str
    """``apiVersion/Kind/namespace/name`` of the other owner's object."""
    kind: str
    namespace: str | None
    name: str
    owner: str
    """Who owns it, as a phrase: "no tool (deployed by hand)", "Helm release nvdp", ..."""
    owner_kind: str
    """``manual``, ``helm``, ``gpu-operator`` or ``gpuplan`` (another stack)."""
    owner_name: str | None = None
    address: str | None = None
    """The address of gpuplan's object the other one stands in for (what ``gpuplan import`` adopts it as)."""
    resolutions: tuple[Resolution, ...]


def owner_phrase(other: ForeignObject) -> str:
    return "nobody: it was deployed by hand" if other.owner == "manual" else other.describe_owner()


def describe(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def conflicts(
    component: str,
    others: Iterable[ForeignObject],
    desired: Sequence[DesiredObject],
    *,
    adopted: set[ObjectKey],
    spec_file: str,
    owner: str = "gpuplan",
    managed: frozenset[str] = frozenset(),
) -> list[Conflict]:
    """The other owners' objects overlapping ``component``, each with its resolutions; objects already
    adopted into the state (``adopted``) are no longer conflicts. ``owner``: the component's owner in the
    spec (an external toolkit still renders the RuntimeClass; its resolutions differ). ``managed``: the
    addresses the state already holds, which ``gpuplan import`` refuses to adopt another object as."""
    found = []
    for other in others:
        if component not in other.components or other.key in adopted:
            continue
        target = _stand_in_for(other, desired)
        found.append(
            Conflict(
                component=component,
                object=other.key.ref,
                kind=other.key.kind,
                namespace=other.key.namespace,
                name=other.key.name,
                owner=owner_phrase(other),
                owner_kind=other.owner,
                owner_name=other.owner_name,
                address=str(target.address) if target else None,
                resolutions=tuple(
                    _resolutions(
                        component,
                        other,
                        None if target is not None and str(target.address) in managed else target,
                        spec_file,
                        owner,
                    )
                ),
            )
        )
    return found


def _stand_in_for(other: ForeignObject, desired: Sequence[DesiredObject]) -> DesiredObject | None:
    same_kind = [obj for obj in desired if obj.address.kind == other.key.kind]
    same_name = [obj for obj in same_kind if obj.address.name == other.key.name]
    candidates = same_name or same_kind
    return candidates[0] if candidates else None


def _alternative(component: str, kind: str, spec_file: str, owner: str) -> Resolution:
    """Not managing the object at all: the component left to its owner, or, when it already is external
    (the toolkit, whose RuntimeClass gpuplan still creates), the RuntimeClass left alone."""
    if owner == "external" and kind == "RuntimeClass":
        return Resolution(
            summary=f"keep this RuntimeClass and let gpuplan leave it alone: set "
            f"spec.{component}.runtimeClass.create: false",
            command=f"edit {spec_file}",
        )
    return Resolution(
        summary=f"leave {component} to its current owner: set spec.{component}.owner: external",
        command=f"edit {spec_file}",
    )


def _resolutions(
    component: str, other: ForeignObject, target: DesiredObject | None, spec_file: str, owner: str = "gpuplan"
) -> list[Resolution]:
    key = other.key
    ref = "/".join(part for part in (key.kind, key.namespace, key.name) if part)
    namespace_flag = f" -n {key.namespace}" if key.namespace else ""
    external = _alternative(component, key.kind, spec_file, owner)
    if other.owner == "gpu-operator":
        policy = other.owner_name or "cluster-policy"
        patch = json.dumps({"spec": {component: {"enabled": False}}}, separators=(",", ":"))
        return [
            Resolution(
                # the operator deletes every object of a disabled state (NVIDIA/gpu-operator
                # controllers/object_controls.go, "Check if state is disabled and cleanup resource if
                # exists"): the operand's pods stop until gpuplan's run
                summary=f"disable {component} in the GPU Operator's ClusterPolicy {policy} first (the "
                "operator deletes its running DaemonSet and pods: no service until gpuplan's start)",
                command=f"kubectl patch clusterpolicy {policy} --type merge -p '{patch}'",
            ),
            external,
        ]
    if other.owner == "helm":
        release = other.owner_name or "<release>"
        return [
            Resolution(
                summary=f"remove Helm release {release} first",
                command=f"helm uninstall {release}{namespace_flag}",
            ),
            external,
        ]
    resolutions = []
    if target is not None:
        resolutions.append(
            Resolution(
                summary="adopt it into gpuplan's state; the next plan replaces it with gpuplan's object",
                command=f"gpuplan import -f {spec_file} {target.address} {ref}",
            )
        )
    if other.owner == "gpuplan":
        resolutions.append(
            Resolution(
                summary=f"remove it from gpuplan stack {other.owner_name} first: set "
                f"{component}.owner: none there and apply that stack",
                command=f"gpuplan apply -f <the spec of stack {other.owner_name}>",
            )
        )
    else:
        resolutions.append(
            Resolution(
                summary="remove it first",
                command=f"kubectl delete {key.kind.lower()}{namespace_flag} {key.name}",
            )
        )
    return [*resolutions, external]


# ------------------------------------------------------------------------------------------------- records


def _json(value: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(value))
    return result


def record_applied(obj: DesiredObject, live: LiveObject | None, *, serial: int) -> ResourceRecord:
    """The record of a desired object as applied: its rendered manifest (Secrets redacted) and the identity
    the server gave it."""
    manifest = obj.manifest
    api_version, kind = str(manifest["apiVersion"]), str(manifest["kind"])
    return ResourceRecord(
        address=str(obj.address),
        component=obj.address.component,
        api_version=api_version,
        kind=kind,
        namespace=obj.address.namespace,
        name=obj.address.name,
        owned=credentials.redact_owned(api_version, kind, _json(manifest)),
        uid=live.uid if live else None,
        resource_version=live.resource_version if live else None,
        generation=live.generation if live else None,
        applied_serial=serial,
    )


def record_imported(component: str, live: LiveObject, *, serial: int) -> ResourceRecord:
    """The record of an adopted object: its live identity and its fields as its author most likely wrote them
    (server noise and defaults removed), so later drift on it is measured from the moment of the import."""
    key = live.key
    owned = credentials.redact_owned(key.api_version, key.kind, normalize.normalize(live.manifest))
    return ResourceRecord(
        address=make_address(component, key.kind, key.namespace, key.name),
        component=component,
        api_version=key.api_version,
        kind=key.kind,
        namespace=key.namespace,
        name=key.name,
        owned=owned,
        uid=live.uid,
        resource_version=live.resource_version,
        generation=live.generation,
        applied_serial=serial,
    )


def parse_object_ref(text: str, *, api_version: str) -> ObjectKey:
    """``KIND/NAMESPACE/NAME`` or ``KIND/NAME`` (cluster-scoped) -> an ObjectKey of ``api_version``."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ConfigError(
            f"malformed object reference '{text}'",
            hint="write KIND/NAMESPACE/NAME, or KIND/NAME for a cluster-scoped object, e.g. "
            "DaemonSet/kube-system/nvidia-device-plugin-daemonset",
        )
    return ObjectKey(api_version, parts[0], parts[1] if len(parts) == 3 else None, parts[-1])


def import_target(address_text: str, desired: Sequence[DesiredObject]) -> DesiredObject:
    """The desired object ``gpuplan import`` adopts an object as; a clear error lists the valid addresses."""
    address = Address.parse(address_text)
    for obj in desired:
        if obj.address == address:
            return obj
    valid = "\n".join(str(obj.address) for obj in desired) or "(none: no component is owned by gpuplan)"
    raise ConfigError(
        f"{address} is not an object gpuplan manages in this spec",
        detail=f"valid addresses (objects of the components owned by gpuplan):\n{valid}",
        hint="pick one of these; a component must have owner: gpuplan to adopt objects into it",
    )


def check_importable(state: StateFile, target: DesiredObject, record: ResourceRecord) -> None:
    """Refuse an import that would overwrite a record: the address, or the live object, is already managed."""
    for address in dict.fromkeys((str(target.address), record.address)):
        if address in state.resources:
            raise StateError(
                f"{address} is already in the state",
                hint=f"`gpuplan state rm {address}` first if you mean to adopt another object",
            )
    for existing in state.resources.values():
        if (existing.api_version, existing.kind, existing.namespace, existing.name) == (
            record.api_version,
            record.kind,
            record.namespace,
            record.name,
        ):
            raise StateError(
                f"{describe(record.kind, record.namespace, record.name)} is already managed as "
                f"{existing.address}"
            )
