"""The ``GPUStack`` CustomResourceDefinition (``gpustacks.gpuplan.io``, design §7.3): where the stack's status
lives in the cluster, so ``kubectl get gpustacks`` answers what ``kubectl get clusterpolicy`` answers for the
GPU Operator.

The CRD is cluster configuration gpuplan owns, so it is one of the plan's objects: the validator renders it
(``validator/CustomResourceDefinition/gpustacks.gpuplan.io``), since the validator is the component whose job
is to say whether the stack works, and an address under an existing component keeps every address of design
§3.3 valid (no pseudo-component the spec, the graph and the drift matrix would have to know). A stack whose
validator is not gpuplan's renders no CRD; its status write is then a ``Warning:`` unless another stack's
validator installed it. The objects (one per stack, named after ``metadata.name``) are not planned: they hold
only status, which ``apply``, ``rollback`` and ``drift report`` write through the status subresource
(:mod:`gpuplan.providers.stack_status`).

Printer columns READY, DRIFTED, SERIAL and AGE read the conditions ``Ready`` and ``Drifted`` and the state
serial. Conditions are a map list keyed by ``type``, as Kubernetes' own ``metav1.Condition`` lists are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan.modules import common
from gpuplan.modules.base import ComponentConfig, ComponentName, DesiredObject, StackContext

GROUP = "gpuplan.io"
VERSION = "v1alpha1"
KIND = "GPUStack"
PLURAL = "gpustacks"
CRD_NAME = f"{PLURAL}.{GROUP}"
API_VERSION = f"{GROUP}/{VERSION}"

Json = dict[str, Any]


def _string(description: str, **extra: Any) -> Json:
    return {"type": "string", "description": description, **extra}


def _integer(description: str) -> Json:
    return {"type": "integer", "format": "int64", "minimum": 0, "description": description}


CONDITION: Json = {
    "type": "object",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": _string("Ready or Drifted."),
        "status": _string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
        "reason": _string("One CamelCase word for the status: Applied, ApplyFailed, DriftFound, ..."),
        "message": _string("What is not ready or what drifted, by component and node count."),
        "lastTransitionTime": _string(
            "When the status last changed (not when it was last written).", format="date-time"
        ),
    },
}
COMPONENT: Json = {
    "type": "object",
    "properties": {
        "owner": _string(
            "gpuplan, external or none (the spec's owner).", enum=["gpuplan", "external", "none"]
        ),
        "version": _string("The version the spec asks for (its image tag, or an external driver's version)."),
        "nodesReady": _integer("Nodes where the component runs and is healthy."),
        "nodesDesired": _integer("Nodes the component should run on."),
    },
}
STATUS: Json = {
    "type": "object",
    "description": "Written by gpuplan apply, rollback and drift report (field manager gpuplan).",
    "properties": {
        "conditions": {
            "type": "array",
            "items": CONDITION,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        "serial": _integer("The state serial the stack is at."),
        "lastApplied": {
            "type": "object",
            "description": "The last apply or rollback.",
            "properties": {
                "time": _string("When it ended.", format="date-time"),
                "by": _string("Who ran it: user@host."),
                "operation": _string("apply, rollback or remediate."),
            },
        },
        "lastChecked": _string("When the last drift report ran.", format="date-time"),
        "components": {
            "type": "object",
            "description": "Per component (the spec's keys): its owner, version and nodes ready / desired.",
            "additionalProperties": COMPONENT,
        },
    },
}
SCHEMA: Json = {
    "type": "object",
    "description": "The status of one gpuplan stack (gpustack.yaml's metadata.name). gpuplan reads the "
    "stack's spec from gpustack.yaml, never from here.",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "description": "Where the stack lives (informational).",
            "properties": {"namespace": _string("The stack's namespace (spec.namespace).")},
        },
        "status": STATUS,
    },
}


def _column(name: str, kind: str, path: str, description: str) -> Json:
    return {"name": name, "type": kind, "jsonPath": path, "description": description}


PRINTER_COLUMNS = [
    _column("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "Every component healthy."),
    _column("Drifted", "string", '.status.conditions[?(@.type=="Drifted")].status', "The last drift report."),
    _column("Serial", "integer", ".status.serial", "The state serial."),
    _column("Age", "date", ".metadata.creationTimestamp", "When the stack was first applied."),
]


def crd(stack: StackContext, component: str) -> DesiredObject:
    """The CustomResourceDefinition, as one of ``component``'s objects."""
    manifest: Json = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": common.metadata(stack, component, CRD_NAME, namespaced=False),
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "gpustack"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": SCHEMA},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }
    return common.desired(component, manifest)


# ------------------------------------------------------------------------------------ the status written

NodeCounts = tuple[int, int]
"""(nodes ready, nodes desired) of one component."""


def condition(kind: str, status: str, reason: str, message: str) -> Json:
    """A condition as written (its ``lastTransitionTime`` is set by the writer, only when it flips)."""
    return {"type": kind, "status": status, "reason": reason, "message": message}


def components(
    configs: Mapping[ComponentName, ComponentConfig],
    nodes: Mapping[str, NodeCounts],
    versions: Mapping[str, str] | None = None,
    running: Mapping[str, str] | None = None,
) -> Json:
    """Per component: owner, version (``versions``: what its DaemonSet runs, else what the spec asks for;
    for a component gpuplan does not own, ``running``: what its nodes report, when they were read, so never
    the spec's promise in its place), nodes ready / desired where they were counted."""
    entries: Json = {}
    for name, config in configs.items():
        entry: Json = {"owner": config.owner}
        version = config.version if config.owner == "gpuplan" else config.explicit_version()
        if config.owner == "gpuplan" and versions and name in versions:
            version = versions[name]
        if config.owner != "gpuplan" and running is not None:
            version = running.get(name)
        if version and config.owner != "none":
            entry["version"] = version
        if name in nodes and config.owner != "none":
            entry["nodesReady"], entry["nodesDesired"] = nodes[name]
        entries[name] = entry
    return entries


def host_versions(driver_versions: Iterable[str | None]) -> dict[str, str]:
    """What the GPU nodes report of the components gpuplan may leave to the host: the driver's versions
    (GFD's label, or DCGM's), each once. A host toolkit reports no version (only the nvidia runtime
    handler), so it has none here."""
    seen = sorted({version for version in driver_versions if version})
    return {"driver": ", ".join(seen)} if seen else {}


def not_ready(entries: Mapping[str, Any]) -> list[str]:
    """``devicePlugin: 0/1 nodes ready`` for each component short of its desired nodes."""
    return [
        f"{name}: {entry['nodesReady']}/{entry['nodesDesired']} nodes ready"
        for name, entry in entries.items()
        if "nodesDesired" in entry and entry["nodesReady"] < entry["nodesDesired"]
    ]


def healthy_words(entries: Mapping[str, Any]) -> str:
    """``devicePlugin 1/1 nodes, gfd 1/1 nodes; external: driver 580.105.08, toolkit``."""
    counted = [
        f"{name} {entry['nodesReady']}/{entry['nodesDesired']} nodes"
        for name, entry in entries.items()
        if "nodesDesired" in entry
    ]
    external = [
        f"{name} {entry['version']}" if "version" in entry else name
        for name, entry in entries.items()
        if entry["owner"] == "external"
    ]
    return "; ".join(
        part for part in (", ".join(counted), f"external: {', '.join(external)}" if external else "") if part
    )
