"""Admission of pods and priority classes, as four plugins a real API server enables by default run it,
in the server's plugin order.

- **ServiceAccount** (plugin/pkg/admission/serviceaccount/admission.go), on pod create (mirror pods
  excepted): ``spec.serviceAccountName`` defaults to ``default``; the account's ``imagePullSecrets`` are
  copied to a pod that names none; unless ``automountServiceAccountToken`` is false (the pod's, else the
  account's), a projected volume ``kube-api-access-<5 random>`` (``TokenVolumeSource``: a
  ``serviceAccountToken`` of 3607 s at ``token``, ``ca.crt`` of the ``kube-root-ca.crt`` ConfigMap, the
  namespace from the downward API, mode 0644) is added, and mounted read-only at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` in every container and init container that has no
  mount there yet. Unlike the real plugin, a pod naming a ServiceAccount that does not exist is admitted
  (the real one refuses it with ``error looking up service account NS/NAME``): scenario objects and
  hand-written manifests often name accounts they do not create.

- **Priority**: on create, ``spec.priority`` (and ``preemptionPolicy``) come from the pod's
  ``priorityClassName``, looked up among the stored PriorityClasses (the system classes
  ``system-node-critical`` (2000001000) and ``system-cluster-critical`` (2000000000) are stored at start,
  see ``SYSTEM_PRIORITY_CLASSES``, and count even where the kind is not served); without a class name the
  global default class applies, or priority 0. An unknown class, or a ``priority`` that differs from the
  computed one, is 403 Forbidden with the plugin's words. On update the old values are kept when the new
  object leaves them out. For PriorityClass writes the plugin refuses a second ``globalDefault`` class.
- **DefaultTolerationSeconds**: a pod that tolerates neither ``node.kubernetes.io/not-ready`` nor
  ``node.kubernetes.io/unreachable`` (NoExecute) gets a toleration of 300 s for each (create and update).
  DaemonSet pods already carry both, without a time limit (the DaemonSet controller adds them).
- **RuntimeClass**: on create, a pod naming ``spec.runtimeClassName`` gets that RuntimeClass's ``overhead``
  (``spec.overhead``; a different overhead the pod already carries is refused) and its ``scheduling``:
  the node selector merged into the pod's (a conflicting value is refused) and the tolerations merged as
  ``tolerations.MergeTolerations`` does (duplicates and tolerations another one covers dropped). An unknown
  class is ``403 pod rejected: RuntimeClass "nvidia" not found``; a pod with ``spec.overhead`` but no class
  overhead is refused as the plugin's validating half does.

As ``admission.NewForbidden`` words it, a refused create names the object by its name, else its
``generateName`` (admission runs before the name is generated), else ``Unknown``.

Admission runs after field management, so what it adds belongs to no field manager, and before validation.
Caller: ``sim.api.writes`` for writes of the main resource (never a subresource), with lookups of the
stored PriorityClasses and RuntimeClasses.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from gpuplan.sim.api import errors, validation
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
# The classes kube-apiserver's bootstrap hook stores at start (scheduling.SystemPriorityClasses()).
SYSTEM_PRIORITY_CLASSES: dict[str, Obj] = {
    name: {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": validation.SYSTEM_PRIORITY_VALUES[name],
        "description": description,
        "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
    }
    for name, description in (
        (
            "system-node-critical",
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            "Used for system critical pods that must run in the cluster, but can be moved to another node if "
            "necessary.",
        ),
    )
}
DEFAULT_TOLERATION_SECONDS = 300
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"

SCHEDULING_GROUP = "scheduling.k8s.io"

# The stored PriorityClass objects (the system classes are added here); empty where the kind is not served.
PriorityClasses = Callable[[], list[Obj]]
# The stored RuntimeClass of that name, or None.
RuntimeClassLookup = Callable[[str], "Obj | None"]


# The stored ServiceAccount (namespace, name), or None.
ServiceAccountLookup = Callable[[str, str], "Obj | None"]


def _no_runtime_class(name: str) -> Obj | None:
    return None


def _no_service_account(namespace: str, name: str) -> Obj | None:
    return None


def admit(
    rt: ResourceType,
    obj: Obj,
    old: Obj | None,
    priority_classes: PriorityClasses,
    runtime_class: RuntimeClassLookup = _no_runtime_class,
    service_account: ServiceAccountLookup = _no_service_account,
) -> None:
    """Run the plugins on a create (``old`` None) or an update of ``obj`` in place; 403 ``ApiError`` when a
    plugin refuses."""
    if (rt.group, rt.kind) == (SCHEDULING_GROUP, "PriorityClass"):
        _check_global_default(rt, obj, priority_classes)
        return
    if (rt.group, rt.kind) != ("", "Pod"):
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if old is None:
        _admit_service_account(obj, spec, service_account)
        _set_priority(rt, obj, spec, priority_classes)
    else:
        old_spec = old.get("spec") or {}
        for field in ("priority", "preemptionPolicy"):
            if spec.get(field) is None and old_spec.get(field) is not None:
                spec[field] = old_spec[field]
    _default_tolerations(spec)
    if old is None:
        _apply_runtime_class(rt, obj, spec, runtime_class)


def request_name(obj: Obj) -> str:
    """How ``admission.NewForbidden`` names the object of a refused create or update."""
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "Unknown")


# ----------------------------------------------------------------------------------------- ServiceAccount

DEFAULT_SERVICE_ACCOUNT = "default"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
# serviceaccount.WarnOnlyBoundTokenExpirationSeconds: what the kubelet asks for (it refreshes the token)
TOKEN_VOLUME_EXPIRATION_SECONDS = 3607
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# names.SimpleNameGenerator's alphabet (no vowels, no look-alike digits)
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _admit_service_account(pod: Obj, spec: Obj, service_account: ServiceAccountLookup) -> None:
    meta = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
        return
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"] = DEFAULT_SERVICE_ACCOUNT
    account = service_account(str(meta.get("namespace") or ""), str(spec["serviceAccountName"])) or {}
    if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": s.get("name")} for s in account["imagePullSecrets"]]
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is not False:
        _mount_service_account_token(spec)


def _mount_service_account_token(spec: Obj) -> None:
    """``mountServiceAccountToken``: reuse a ``kube-api-access-`` volume, else name a new one."""
    volumes = spec.get("volumes") or []
    existing = next(
        (v["name"] for v in volumes if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)), None
    )
    name = existing or TOKEN_VOLUME_PREFIX + "".join(random.choices(_NAME_ALPHABET, k=5))
    needed = False
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            mounts = container.get("volumeMounts") or []
            if any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                continue
            container["volumeMounts"] = [
                *mounts,
                {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH},
            ]
            needed = True
    if needed and existing is None:
        spec["volumes"] = [*volumes, {"name": name, "projected": token_volume_source()}]


def token_volume_source() -> Obj:
    """``TokenVolumeSource()`` of the ServiceAccount admission plugin."""
    return {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": TOKEN_VOLUME_EXPIRATION_SECONDS, "path": "token"}},
            {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
        "defaultMode": 420,
    }


# ---------------------------------------------------------------------------------------------- Priority


def _check_global_default(rt: ResourceType, pc: Obj, priority_classes: PriorityClasses) -> None:
    """Only one PriorityClass may be the global default (the plugin's check on PriorityClass writes)."""
    if pc.get("globalDefault") is not True:
        return
    name = (pc.get("metadata") or {}).get("name")
    for other in priority_classes():
        other_name = (other.get("metadata") or {}).get("name")
        if other.get("globalDefault") is True and other_name != name:
            raise errors.forbidden(
                rt,
                request_name(pc),
                f"PriorityClass {other_name} is already marked as default. Only one default can exist",
            )


def _set_priority(rt: ResourceType, pod: Obj, spec: Obj, priority_classes: PriorityClasses) -> None:
    name = request_name(pod)
    classes: dict[str, Obj] = dict(SYSTEM_PRIORITY_CLASSES)
    classes.update({str((c.get("metadata") or {}).get("name")): c for c in priority_classes()})
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
        raise errors.forbidden(
            rt,
            name,
            f"the integer value of priority ({spec['priority']}) must not be "
            f"provided in pod spec; priority admission controller computed "
            f"{value} from the given PriorityClass name",
        )
    if spec.get("preemptionPolicy") not in (None, policy):
        raise errors.forbidden(
            rt,
            name,
            f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) "
            f"must not be provided in pod spec; priority admission controller "
            f"computed {policy} from the given PriorityClass name",
        )
    spec["priority"] = value
    spec["preemptionPolicy"] = policy


# ------------------------------------------------------------------------------- DefaultTolerationSeconds


def _default_tolerations(spec: Obj) -> None:
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        return  # malformed: validation's business
    present = [t for t in tolerations or [] if isinstance(t, dict)]
    added = [
        _toleration(key)
        for key in (NOT_READY, UNREACHABLE)
        if not any(_tolerates_no_execute(t, key) for t in present)
    ]
    if added:
        spec["tolerations"] = list(tolerations or []) + added


def _tolerates_no_execute(toleration: Obj, key: str) -> bool:
    """As the plugin judges it: the key matches (or is empty) and the effect is NoExecute (or empty)."""
    return toleration.get("key") in (None, "", key) and toleration.get("effect") in (None, "", "NoExecute")


def _toleration(key: str) -> Obj:
    return {
        "key": key,
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
    }


# ------------------------------------------------------------------------------------------- RuntimeClass


def _apply_runtime_class(rt: ResourceType, pod: Obj, spec: Obj, runtime_class: RuntimeClassLookup) -> None:
    """The RuntimeClass plugin's Admit (overhead, scheduling) and Validate (overhead) on a pod create."""
    wanted = spec.get("runtimeClassName")
    found = None
    if wanted:
        found = runtime_class(str(wanted))
        if found is None:
            raise errors.forbidden(rt, request_name(pod), f'pod rejected: RuntimeClass "{wanted}" not found')
    overhead = ((found or {}).get("overhead") or {}).get("podFixed")
    if overhead:
        if spec.get("overhead") and spec["overhead"] != overhead:
            raise errors.forbidden(
                rt,
                request_name(pod),
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
            )
        spec["overhead"] = dict(overhead)
    elif spec.get("overhead"):
        raise errors.forbidden(
            rt,
            request_name(pod),
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        )
    scheduling = (found or {}).get("scheduling")
    if isinstance(scheduling, dict):
        _merge_scheduling(rt, pod, spec, scheduling)


def _merge_scheduling(rt: ResourceType, pod: Obj, spec: Obj, scheduling: Obj) -> None:
    class_selector = scheduling.get("nodeSelector") or {}
    pod_selector = spec.get("nodeSelector")
    if pod_selector is None:
        merged = dict(class_selector) or None
    else:
        merged = dict(pod_selector)
        for key, value in class_selector.items():
            if key in merged and merged[key] != value:
                raise errors.forbidden(
                    rt,
                    request_name(pod),
                    f"conflict: runtimeClass.scheduling.nodeSelector"
                    f"[{key}] = {value}; pod.spec.nodeSelector"
                    f"[{key}] = {merged[key]}",
                )
            merged[key] = value
    if merged is not None:
        spec["nodeSelector"] = merged
    tolerations = merge_tolerations(
        list(spec.get("tolerations") or []), list(scheduling.get("tolerations") or [])
    )
    if tolerations:
        spec["tolerations"] = tolerations


def merge_tolerations(first: list[Obj], second: list[Obj]) -> list[Obj]:
    """``tolerations.MergeTolerations``: both lists in order, without a toleration that an earlier kept one
    or a different later one already covers (equal ones: the first is kept)."""
    everything = first + second
    merged: list[Obj] = []
    for i, toleration in enumerate(everything):
        if any(_is_superset(kept, toleration) for kept in merged):
            continue
        if any(later != toleration and _is_superset(later, toleration) for later in everything[i + 1 :]):
            continue
        merged.append(toleration)
    return merged


def _is_superset(ss: Obj, t: Obj) -> bool:
    """Whether toleration ``ss`` tolerates everything ``t`` does (the plugin's ``isSuperset``)."""
    if ss == t:
        return True
    ss_key, t_key = ss.get("key") or "", t.get("key") or ""
    if t_key != ss_key and (ss_key != "" or ss.get("operator") != "Exists"):
        return False  # an empty key with Exists matches every key
    ss_effect = ss.get("effect") or ""
    if (t.get("effect") or "") != ss_effect and ss_effect != "":
        return False  # an empty effect matches every effect
    if (
        ss_effect == "NoExecute"
        and ss.get("tolerationSeconds") is not None
        and (t.get("tolerationSeconds") is None or t["tolerationSeconds"] > ss["tolerationSeconds"])
    ):
        return False
    operator = ss.get("operator") or ""
    if operator in ("Equal", ""):
        # as in Go: t's operator must be spelled Equal (an empty one, also Equal, does not count)
        return bool(t.get("operator") == "Equal" and (t.get("value") or "") == (ss.get("value") or ""))
    return operator == "Exists"
