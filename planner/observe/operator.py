"""The installed GPU Operator as ``gpuplan takeover`` finds it: its Deployment, its ClusterPolicies and the
operands they own, matched against the objects a spec renders.

The Deployment is found by the labels of the chart's templates/operator.yaml
(``app.kubernetes.io/component: gpu-operator``; ``app: gpu-operator`` as the chart's selector, for an
install whose labels were trimmed), not only by its name. An operand is an object whose ``ownerReferences``
name a ClusterPolicy (controllers/object_controls.go sets it on every object a state deploys). The spec
matches the operator when each operand DaemonSet is one the spec renders, for a component owned by gpuplan,
and each DaemonSet such a component renders is one the operator runs: anything else would be a takeover that
creates or orphans pods, and is refused naming the object and the spec key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import ConfigError, ProviderError
from gpuplan.modules.base import DesiredObject
from gpuplan.planner.observe.adopt import describe
from gpuplan.providers.foreign import daemonset_components
from gpuplan.providers.protocols import Reader
from gpuplan.providers.snapshot import LiveObject, ObjectKey

CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")
OPERATOR_SELECTORS = ("app.kubernetes.io/component=gpu-operator", "app=gpu-operator")
HASH_ANNOTATIONS = ("nvidia.com/last-applied-hash",)
"""The annotations the operator compares to decide whether to rewrite an operand (object_controls.go)."""


@dataclass(frozen=True)
class Operand:
    """A desired object of the spec that the operator's ClusterPolicy owns in the cluster."""

    desired: DesiredObject
    live: LiveObject


@dataclass(frozen=True)
class OperatorInstall:
    deployment: LiveObject
    policies: tuple[LiveObject, ...]
    operands: tuple[Operand, ...]

    @property
    def replicas(self) -> int:
        replicas = (self.deployment.manifest.get("spec") or {}).get("replicas", 1)
        return int(replicas)

    @property
    def namespace(self) -> str:
        return str(self.deployment.key.namespace)


def owned_by_policy(live: LiveObject) -> bool:
    return any(ref.get("kind") == CLUSTER_POLICY[1] for ref in live.metadata.get("ownerReferences") or ())


def find_deployment(reader: Reader) -> LiveObject:
    """The operator's Deployment; an error when there is none (or several: which one would be stopped?)."""
    for selector in OPERATOR_SELECTORS:
        found = list(reader.list_objects("apps/v1", "Deployment", label_selector=selector))
        if len(found) > 1:
            names = ", ".join(f"{d.key.namespace}/{d.key.name}" for d in found)
            raise ConfigError(
                f"more than one GPU Operator Deployment ({names})",
                hint="take over one operator at a time: remove the others first",
            )
        if found:
            return found[0]
    raise ProviderError(
        "no GPU Operator found: no Deployment labelled app.kubernetes.io/component=gpu-operator",
        hint="takeover hands an installed GPU Operator's components to gpuplan; without one, use "
        "gpuplan apply",
    )


def find(
    reader: Reader, desired: Sequence[DesiredObject], handover: Mapping[str, Any] | None = None
) -> OperatorInstall:
    """The operator, its ClusterPolicies and the desired objects it owns now (read-only). ``handover``: what
    an unfinished takeover recorded (the state's ``operator_handover``): the objects it adopted already
    count as operands, and a Deployment or ClusterPolicy it deleted already is taken from the record."""
    if handover is not None:
        return _resumed(reader, desired, handover)
    deployment = find_deployment(reader)
    policies = tuple(reader.list_objects(*CLUSTER_POLICY))
    if not policies:
        raise ProviderError(
            f"the GPU Operator's Deployment {deployment.key.namespace}/{deployment.key.name} has no "
            "ClusterPolicy: there are no operands to take over",
            hint="create the ClusterPolicy (helm upgrade) or use gpuplan apply",
        )
    operands = []
    for obj in desired:
        live = reader.read(ObjectKey.of(obj.manifest))
        if live is not None and owned_by_policy(live):
            operands.append(Operand(obj, live))
    daemonsets = [d for d in reader.list_objects("apps/v1", "DaemonSet") if owned_by_policy(d)]
    check_match(daemonsets, desired, operands)
    return OperatorInstall(deployment, policies, tuple(operands))


def check_match(
    operator_daemonsets: Iterable[LiveObject], desired: Sequence[DesiredObject], operands: Sequence[Operand]
) -> None:
    """Refuse a spec that does not render what the operator runs, naming the first mismatch and the key."""
    taken = {operand.live.key for operand in operands}
    for daemonset in operator_daemonsets:
        if daemonset.key in taken:
            continue
        components = daemonset_components(daemonset.manifest) or ("?",)
        component = components[0]
        raise ConfigError(
            "the spec does not match the GPU Operator's components: the operator runs "
            f"{describe('DaemonSet', daemonset.key.namespace, daemonset.key.name)} ({component}), "
            "which the spec does not render",
            hint=f"set spec.{component}.owner: gpuplan (and spec.namespace: {daemonset.key.namespace}), or "
            f"disable {component} in the ClusterPolicy first",
        )
    wanted = [obj for obj in desired if obj.address.kind == "DaemonSet"]
    for obj in wanted:
        if ObjectKey.of(obj.manifest) not in taken:
            component = obj.address.component
            raise ConfigError(
                "the spec does not match the GPU Operator's components: the spec renders "
                f"{describe('DaemonSet', obj.address.namespace, obj.address.name)} ({component}), "
                "which the operator does not run",
                hint=f"set spec.{component}.owner: external (or none) if the operator does not deploy it, "
                "or enable it in the ClusterPolicy first",
            )


def _resumed(
    reader: Reader, desired: Sequence[DesiredObject], handover: Mapping[str, Any]
) -> OperatorInstall:
    def recorded(manifest: Mapping[str, Any]) -> LiveObject:
        key = ObjectKey.of(manifest)
        return reader.read(key) or LiveObject(key, manifest)

    deployment = recorded({**handover["deployment"], "spec": {**handover["deployment"]["spec"],
                                                              "replicas": handover["replicas"]}})  # fmt: skip
    policies = tuple(recorded(policy) for policy in handover["cluster_policies"])
    adopted = {operand["address"] for operand in handover["operands"]}
    operands = []
    for obj in desired:
        live = reader.read(ObjectKey.of(obj.manifest))
        if live is not None and (owned_by_policy(live) or str(obj.address) in adopted):
            operands.append(Operand(obj, live))
    return OperatorInstall(deployment, policies, tuple(operands))
