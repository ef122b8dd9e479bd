"""What every component module renders the same way: metadata and labels, RBAC, volumes, DaemonSets.

Used by the component modules; pure functions of the config and :class:`StackContext`.

Node selection, in two shapes (``daemonsets.podTemplate``). The GPU Operator's DaemonSets select
``nvidia.com/gpu.deploy.<operand>=true``, a label its NodeLabelingReconciler writes on every GPU node where
the node has no value for it (``addGPUStateLabels``, NVIDIA/gpu-operator controllers/state_manager.go).

- ``gpuplan`` (the default, a fresh install): nobody writes those labels before the pods are due, so the
  nodeSelector is Node Feature Discovery's ``feature.node.kubernetes.io/pci-10de.present=true`` (NVIDIA's PCI
  vendor id; ``spec.nodeSelector``, overridable per component). The operator's label protocol still matters:
  k8s-driver-manager and mig-manager evict operands by flipping ``nvidia.com/gpu.deploy.<operand>`` to
  ``paused-for-...`` / ``false`` / ``pre-installed``. A required node affinity ``NotIn`` those values keeps
  that working: an absent label matches, a flipped one evicts the pod, as the operator's ``=true`` selector.
- ``gpu-operator`` (what ``init --from-clusterpolicy`` writes, so ``takeover`` restarts no pod): the
  operator's template. gpuplan is the node labeller: each DaemonSet asks for its deploy label where absent
  on the nodes of ``spec.nodeSelector`` (``modules/node_labels.py``, ``Spec.label_rules``), written before
  its gate. No NotIn affinity: a flipped label unschedules the pod by itself.
  ``nvidia.com/gpu.deploy.operands=false`` stops nothing then (the operator's labeller reacts to it by
  removing the deploy labels; gpuplan only labels at apply).

Every object carries ``app.kubernetes.io/managed-by: gpuplan``, ``gpuplan.io/component`` and
``gpuplan.io/stack`` in its metadata, so refresh finds all managed objects with one label selector; pod
templates carry them in gpuplan's shape only, and the stack's pods are found through their DaemonSets
(selector, ownerReferences). Maps are emitted with sorted keys; list order is kept where Kubernetes gives it
meaning (containers, env, init order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuplan.modules.base import Address, ComponentConfig, DesiredObject, StackContext
from gpuplan.modules.node_labels import NodeLabels
from gpuplan.modules.values import Toleration

Json = dict[str, Any]

MANAGED_BY = "gpuplan"
COMPONENT_LABEL = "gpuplan.io/component"
POOL_LABEL = "gpuplan.io/pool"
STACK_LABEL = "gpuplan.io/stack"
VALIDATIONS_DIR = "/run/nvidia/validations"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
EVICTED_VALUES = ("false", "paused-for-driver-upgrade", "paused-for-mig-change", "pre-installed")
DAEMONSET_IMMUTABLE = ("spec.selector",)
# Fields the API server refuses to change in place: a change means delete and create (replace).
IMMUTABLE_BY_KIND: Mapping[str, tuple[str, ...]] = {
    "DaemonSet": DAEMONSET_IMMUTABLE,
    "RoleBinding": ("roleRef",),
    "ClusterRoleBinding": ("roleRef",),
    "RuntimeClass": ("handler",),
    # ValidateCustomResourceDefinitionUpdate (apiextensions-apiserver): group and scope never change
    "CustomResourceDefinition": ("spec.group", "spec.scope"),
}


# Where gpuplan's operand DaemonSets deliberately differ from what the GPU Operator v26.7.0 renders (path in
# the DaemonSet, or ("env", NAME) for a variable of any container -> why), in each pod-template shape
# (daemonsets.podTemplate). Everything else of their selector and pod template is the operator's, field by
# field: tests/modules/test_operator_fidelity.py holds both shapes against the operands of
# sim/scenarios/gpu-operator.yaml and gpu-operator-bare.yaml.
_TEMPLATE = ("spec", "template")
_POD_LABELS = (*_TEMPLATE, "metadata", "labels")
OPERATOR_DIFFERENCES: Mapping[tuple[str, ...], str] = {
    ("env", "DRIVER_CONFIG_DIGEST"): "the operator hashes its Go structs (FNV-32a); gpuplan hashes the same "
    "inputs as JSON (sha256): same name and meaning, another value",
}
"""The differences of the operator's shape (``daemonsets.podTemplate: gpu-operator``)."""
GPUPLAN_SHAPE_DIFFERENCES: Mapping[tuple[str, ...], str] = {
    (*_TEMPLATE, "spec", "nodeSelector"): "a fresh install has no node labeller writing "
    "nvidia.com/gpu.deploy.<operand>=true before its pods are due; NFD's PCI vendor label selects GPU nodes",
    (*_TEMPLATE, "spec", "affinity", "nodeAffinity"): "keeps the operator's per-node eviction protocol "
    "working (nvidia.com/gpu.deploy.<operand> set to false or paused-* evicts the pod) without its selector",
    (*_POD_LABELS, "app.kubernetes.io/managed-by"): "gpuplan, not gpu-operator: the pods say who runs them",
    (*_POD_LABELS, COMPONENT_LABEL): "gpuplan's own label: the component of the pod",
    (*_POD_LABELS, STACK_LABEL): "gpuplan's own label: the stack of the pod",
    (*_POD_LABELS, "helm.sh/chart"): "the operator's chart labels operands through daemonsets.labels; "
    "gpuplan is no Helm chart",
    (
        "env",
        "DRAIN_TIMEOUT_SECONDS",
    ): "gpuplan hands its upgradePolicy's drain settings to k8s-driver-manager "
    "(default 300s); the operator leaves the asset's 0s there and drains from its upgrade controller",
    **OPERATOR_DIFFERENCES,
}
"""The differences of gpuplan's own shape (``daemonsets.podTemplate: gpuplan``, a fresh install's)."""


def sorted_map(values: Mapping[str, str]) -> dict[str, str]:
    return {key: values[key] for key in sorted(values)}


def gpuplan_labels(stack: StackContext, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        COMPONENT_LABEL: component,
        STACK_LABEL: stack.stack_name,
    }


def metadata(
    stack: StackContext,
    component: str,
    name: str,
    *,
    namespaced: bool = True,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Json:
    """Object metadata with gpuplan's labels merged over the component's own (``app`` stays the
    component's)."""
    merged = {**(labels or {}), **gpuplan_labels(stack, component)}
    meta: Json = {"name": name}
    if namespaced:
        meta["namespace"] = stack.namespace
    meta["labels"] = sorted_map(merged)
    if annotations:
        meta["annotations"] = sorted_map(annotations)
    return meta


def desired(component: str, manifest: Json) -> DesiredObject:
    """Address ``manifest`` and name the fields of its kind that cannot change in place."""
    meta = manifest["metadata"]
    address = Address(component, manifest["kind"], meta.get("namespace"), meta["name"])
    return DesiredObject(
        address=address, manifest=manifest, immutable_paths=IMMUTABLE_BY_KIND.get(manifest["kind"], ())
    )


def service_account(stack: StackContext, component: str, name: str, *, automount: bool | None = None) -> Json:
    manifest: Json = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(stack, component, name),
    }
    if automount is not None:
        manifest["automountServiceAccountToken"] = automount
    return manifest


def rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str]) -> Json:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


def role_and_binding(
    stack: StackContext,
    component: str,
    name: str,
    rules: list[Json],
    *,
    cluster: bool,
    account: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> tuple[Json, Json]:
    """A (Cluster)Role ``name`` with ``rules`` and the binding of the same name that grants it to the
    ServiceAccount ``account`` (default: ``name``)."""
    kind = "ClusterRole" if cluster else "Role"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(stack, component, name, namespaced=not cluster, labels=labels),
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": metadata(stack, component, name, namespaced=not cluster, labels=labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account or name, "namespace": stack.namespace}],
    }
    return role, binding


def env(name: str, value: str) -> Json:
    """An env item; an empty value is left out, as the API server stores it (EnvVar.Value is ``omitempty``,
    k8s.io/api core/v1 types.go), so what gpuplan records is what it reads back. The container sees the
    variable set to "" either way."""
    return {"name": name, "value": value} if value else {"name": name}


def env_field(name: str, path: str) -> Json:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def merge_env(defaults: Iterable[Json], config: ComponentConfig) -> list[Json]:
    """Defaults in their order, a user variable replacing a default of the same name, new ones appended."""
    overrides = {var.name: var.value for var in config.env}
    merged = [
        env(item["name"], overrides[item["name"]]) if item["name"] in overrides else item for item in defaults
    ]
    known = {item["name"] for item in merged}
    merged += [env(var.name, var.value) for var in config.env if var.name not in known]
    return merged


def host_path(name: str, path: str, kind: str | None = None) -> Json:
    source: Json = {"path": path}
    if kind:
        source["type"] = kind
    return {"name": name, "hostPath": source}


def mount(
    name: str,
    path: str,
    *,
    read_only: bool = False,
    propagation: str | None = None,
    sub_path: str | None = None,
) -> Json:
    item: Json = {"name": name, "mountPath": path}
    if read_only:
        item["readOnly"] = True
    if propagation:
        item["mountPropagation"] = propagation
    if sub_path:
        item["subPath"] = sub_path
    return item


PRIVILEGED: Json = {"privileged": True}


def toolkit_validation_volumes(stack: StackContext) -> list[Json]:
    """The ``run-nvidia-validations`` volume :func:`toolkit_validation_init` mounts, for operands that read
    the marker through it and have no ``run-nvidia`` volume (the mig-manager, as its asset does)."""
    if not stack.owned("validator"):
        return []
    return [host_path("run-nvidia-validations", VALIDATIONS_DIR, "DirectoryOrCreate")]


def toolkit_validation_init(stack: StackContext, *, via_run_nvidia: bool = False) -> list[Json]:
    """The init container that holds an operand until the validator wrote ``toolkit-ready`` (facts §2.3).

    Only rendered when gpuplan runs the validator: nobody else writes the marker, so without it the operand
    would wait forever. As in the operator's assets it reads the marker through the operand's
    ``run-nvidia`` volume (GFD, DCGM exporter: ``via_run_nvidia``) or its ``run-nvidia-validations`` one;
    ``transformValidationInitContainer`` (controllers/object_controls.go, v26.7.0) adds ``runAsUser: 0``.
    """
    if not stack.owned("validator"):
        return []
    marker_mount = (
        mount("run-nvidia", "/run/nvidia", propagation="HostToContainer")
        if via_run_nvidia
        else mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="HostToContainer")
    )
    return [
        {
            "name": "toolkit-validation",
            "image": stack.validator_image,
            "imagePullPolicy": stack.validator_image_pull_policy,
            "command": ["sh", "-c"],
            "args": [
                f"until [ -f {VALIDATIONS_DIR}/toolkit-ready ]; do echo waiting for nvidia container "
                "stack to be setup; sleep 5; done"
            ],
            "securityContext": {**PRIVILEGED, "runAsUser": 0},
            "volumeMounts": [marker_mount],
        }
    ]


@cache
def _operator_scripts() -> dict[str, str]:
    loaded: dict[str, str] = yaml.safe_load(Path(__file__).with_name("operator_scripts.yaml").read_text())
    return loaded


def script_config_map(
    stack: StackContext, component: str, name: str, key: str, labels: Mapping[str, str]
) -> Json:
    """The operator's ConfigMap ``name`` holding one operand script under ``key`` (operator_scripts.yaml)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(stack, component, name, labels=labels),
        "data": {key: _operator_scripts()[name]},
    }


def script_volume(name: str) -> Json:
    """The volume of a script ConfigMap, executable by its owner only (0700), as the operator mounts it."""
    return {"name": name, "configMap": {"name": name, "defaultMode": 448}}


def mig_env(stack: StackContext) -> list[Json]:
    """applyMIGConfiguration (controllers/object_controls.go, v26.7.0): the strategy, and the MIG monitor
    devices unless the strategy is ``none``."""
    variables = [env("MIG_STRATEGY", stack.mig_strategy)]
    if stack.mig_strategy != "none":
        variables.append(env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
    return variables


def scc_role_and_binding(
    stack: StackContext,
    component: str,
    name: str,
    extra: list[Json],
    *,
    labels: Mapping[str, str] | None = None,
) -> tuple[Json, Json]:
    """The operator's namespaced Role ``name`` (use of the OpenShift ``privileged`` SCC, plus ``extra``) and
    its binding (assets/state-device-plugin/0200_role.yaml, state-dcgm-exporter/0200_role.yaml, v26.7.0).
    The SCC rule grants nothing off OpenShift; the Role is rendered so an adopted stack keeps its objects."""
    scc = {
        **rule(["security.openshift.io"], ["securitycontextconstraints"], ["use"]),
        "resourceNames": ["privileged"],
    }
    return role_and_binding(stack, component, name, [scc, *extra], cluster=False, labels=labels)


def main_container(config: ComponentConfig, base: Json) -> Json:
    """Apply the component's image, pull policy, extra env, args and resources to its main container."""
    container = dict(base)
    container["imagePullPolicy"] = config.image_pull_policy
    if "env" in container:
        container["env"] = merge_env(container["env"], config)
    elif config.env:
        container["env"] = merge_env([], config)
    if config.args:
        container["args"] = list(config.args)
    if config.resources is not None:
        resources = {part: sorted_map(getattr(config.resources, part)) for part in ("limits", "requests")}
        container["resources"] = {part: value for part, value in resources.items() if value}
    return container


def toleration(item: Toleration) -> Json:
    return item.model_dump(by_alias=True, exclude_none=True)


def node_affinity(deploy_label: str, exclusions: Sequence[Sequence[Mapping[str, Any]]] = ()) -> Json:
    """Keep the operator's per-node eviction labels working (see the module docstring); with
    ``exclusions`` (the node pools' NotIn terms), one term per exclusion term, each with the eviction
    expressions too (terms are ORed, a term's expressions ANDed)."""
    expressions = [
        {"key": f"{DEPLOY_LABEL_PREFIX}{deploy_label}", "operator": "NotIn", "values": list(EVICTED_VALUES)},
        {"key": f"{DEPLOY_LABEL_PREFIX}operands", "operator": "NotIn", "values": ["false"]},
    ]
    terms = [{"matchExpressions": [*expressions, *(dict(e) for e in term)]} for term in exclusions] or [
        {"matchExpressions": expressions}
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def operator_shaped(stack: StackContext) -> bool:
    """Whether the DaemonSets take the GPU Operator's pod templates (``daemonsets.podTemplate``)."""
    return stack.daemonsets.pod_template == "gpu-operator"


def template_ownership(stack: StackContext, component: str) -> dict[str, str]:
    """gpuplan's labels on a pod template: none in the operator's shape, where they would change the
    adopted operands' templates (and so restart their pods); they stay on the DaemonSet, which refresh
    lists, and its pods are found through its selector and ownerReferences."""
    return {} if operator_shaped(stack) else gpuplan_labels(stack, component)


@dataclass(frozen=True)
class _Placement:
    node_selector: dict[str, str]
    affinity: Json
    labelling: NodeLabels


def _placement(
    stack: StackContext,
    deploy_label: str,
    node_selector: Mapping[str, str],
    exclusions: Sequence[Sequence[Mapping[str, Any]]],
    extra_selector: Mapping[str, str],
) -> _Placement:
    """Where a DaemonSet's pods run (see the module docstring for both shapes). In the operator's, the pods
    select ``nvidia.com/gpu.deploy.<operand>=true`` (assets/state-*/0500_daemonset.yaml, v26.7.0), which
    gpuplan writes where absent on the nodes of ``node_selector`` (the pool's too); no NotIn affinity: a
    flipped label already unschedules the pod, as under the operator. The pools' exclusion terms stay."""
    if not operator_shaped(stack):
        selected = {**node_selector, **stack.pool_selector, **extra_selector}
        return _Placement(sorted_map(selected), node_affinity(deploy_label, exclusions), NodeLabels())
    deploy = {f"{DEPLOY_LABEL_PREFIX}{deploy_label}": "true"}
    labelling = NodeLabels(selector=sorted_map({**node_selector, **stack.pool_selector}), if_absent=deploy)
    terms = [{"matchExpressions": [dict(e) for e in term]} for term in exclusions]
    affinity: Json = (
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
        if terms
        else {}
    )
    return _Placement(sorted_map({**deploy, **stack.pool_selector, **extra_selector}), affinity, labelling)


def pooled_name(stack: StackContext, name: str) -> str:
    """The name of a per-pool object: ``<name>-<pool>`` (the stack's own objects keep ``name``)."""
    return f"{name}-{stack.pool}" if stack.pool else name


def runtime_class(stack: StackContext) -> str | None:
    """runtimeClassName of the operands: ``nvidia``, except on CRI-O without CDI where the OCI hook is
    used."""
    if not stack.cdi_enabled and stack.container_runtime == "crio":
        return None
    return "nvidia"


def update_strategy(stack: StackContext, *, on_delete: bool = False) -> Json:
    if on_delete or stack.daemonsets.update_strategy == "OnDelete":
        return {"type": "OnDelete"}
    # applyUpdateStrategyConfig (controllers/object_controls.go, v26.7.0): a number is an int, a percentage
    # a string
    limit = stack.daemonsets.max_unavailable
    return {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": int(limit) if limit.isdigit() else limit},
    }


def daemonset(
    stack: StackContext,
    component: str,
    config: ComponentConfig,
    *,
    name: str,
    labels: Mapping[str, str],
    deploy_label: str,
    pod: Json,
    on_delete: bool = False,
    extra_selector: Mapping[str, str] | None = None,
    template_annotations: Mapping[str, str] | None = None,
) -> DesiredObject:
    """The DaemonSet ``name`` with the shared settings (facts §3 "common to all") around the pod spec
    ``pod``; ``extra_selector`` narrows the stack's (or component's) nodeSelector."""
    settings = stack.daemonsets
    node_selector = config.node_selector if config.node_selector is not None else stack.node_selector
    own_labels = {**settings.labels, **labels}  # user labels never override app / part-of
    selector = selector_labels(labels)  # the operator's selector keys (immutable: adoption needs them)
    if stack.pool:  # the pool's pods keep the operator's app label, so `-l app=...` covers every pool
        own_labels[POOL_LABEL] = selector[POOL_LABEL] = stack.pool
    exclusions = () if stack.pool else stack.exclusions.get(component, ())
    placed = _placement(stack, deploy_label, node_selector, exclusions, extra_selector or {})
    pod_spec: Json = {
        "serviceAccountName": pod.pop("serviceAccountName"),
        "priorityClassName": settings.priority_class_name,
        "nodeSelector": placed.node_selector,
        "affinity": {**placed.affinity, **pod.pop("affinity", {})},
        "tolerations": [toleration(item) for item in settings.tolerations],
        **pod,
    }
    if not pod_spec["affinity"]:
        del pod_spec["affinity"]
    if config.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in config.image_pull_secrets]
    template_meta: Json = {"labels": sorted_map({**own_labels, **template_ownership(stack, component)})}
    if settings.annotations or template_annotations:
        template_meta["annotations"] = sorted_map({**(template_annotations or {}), **settings.annotations})
    manifest: Json = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(
            stack, component, pooled_name(stack, name), labels=own_labels, annotations=settings.annotations
        ),
        "spec": {
            "selector": {"matchLabels": sorted_map(selector)},
            "updateStrategy": update_strategy(stack, on_delete=on_delete),
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }
    return dataclasses.replace(desired(component, manifest), node_labels=placed.labelling)


SELECTOR_KEYS = ("app", "app.kubernetes.io/part-of")


def selector_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The operator's DaemonSet selectors: ``app``, plus ``app.kubernetes.io/part-of`` where its asset has it
    (GFD, validator; gpu-operator ``assets/*/0500_daemonset.yaml``). A selector is immutable, so adopting a
    running operand in place needs exactly this one."""
    return {key: labels[key] for key in SELECTOR_KEYS if key in labels}


def rollout_check(stack: StackContext, config: ComponentConfig, name: str) -> dict[str, Any]:
    return {
        "daemonset": pooled_name(stack, name),
        "namespace": stack.namespace,
        "timeoutSeconds": config.health_timeout_seconds,
    }
