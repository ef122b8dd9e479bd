"""``gpuplan drift cronjob``: the drift report as a Kubernetes CronJob, with read-only RBAC, as YAML.

Called by :mod:`gpuplan.commands.drift`. Renders, in apply order: a ServiceAccount; a ClusterRole that can
only read (get/list/watch on nodes, pods, daemonsets, services, namespaces, every kind gpuplan manages for the
stack, ClusterPolicies; get on pods/proxy for the DCGM scrape; the discovery URLs), plus the report's one
write, the stack's GPUStack status (get and create gpustacks, patch gpustacks/status), and its binding; a
ConfigMap holding the spec; the CronJob (``concurrencyPolicy: Forbid``, no retries: exit 2 "drift found" fails
the Job, which is the alert) running ``gpuplan drift report`` with the spec from the ConfigMap and the state
from a Secret the user creates (``kubectl create secret generic gpuplan-state
--from-file=gpuplan.state.json``;
docs/drift.md). The container runs as non-root with a read-only root filesystem: the report writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

NAME = "gpuplan-drift"
IMAGE_NAME = "gpuplan"  # what deploy/Dockerfile's documented build command tags
SPEC_KEY = "gpustack.yaml"
STATE_KEY = "gpuplan.state.json"
SPEC_DIR = "/etc/gpuplan"
STATE_DIR = "/var/lib/gpuplan"
READ = ["get", "list", "watch"]
# plurals of the kinds gpuplan renders; a kind not listed is lower-cased with an "s" (Kubernetes' own rule)
PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "RuntimeClass": "runtimeclasses",
    "DaemonSet": "daemonsets",
    "Service": "services",
    "ConfigMap": "configmaps",
    "ServiceMonitor": "servicemonitors",
    "PriorityClass": "priorityclasses",
    "Namespace": "namespaces",
}
BASE_READS: tuple[tuple[str, str], ...] = (
    ("", "nodes"),
    ("", "pods"),
    ("", "services"),
    ("", "namespaces"),
    ("apps", "daemonsets"),
    ("nvidia.com", "clusterpolicies"),
)


@dataclass(frozen=True)
class Options:
    namespace: str
    schedule: str
    image: str
    output_format: str = "json"
    state_secret: str = "gpuplan-state"


def objects(spec_text: str, kinds: Sequence[tuple[str, str]], options: Options) -> list[dict[str, Any]]:
    """The manifests, in the order ``kubectl apply -f`` should create them."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpuplan"}
    meta = {"name": NAME, "namespace": options.namespace, "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": labels},
            "rules": rules(kinds),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": options.namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**meta, "name": f"{NAME}-spec"},
            "data": {SPEC_KEY: spec_text},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": meta,
            "spec": _cronjob_spec(options, labels),
        },
    ]


def rules(kinds: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Read-only rules: one per API group, the resources sorted; pods/proxy get; the GPUStack status write;
    discovery URLs."""
    groups: dict[str, set[str]] = {}
    for group, resource in BASE_READS:
        groups.setdefault(group, set()).add(resource)
    for api_version, kind in kinds:
        group = api_version.rpartition("/")[0]
        groups.setdefault(group, set()).add(PLURALS.get(kind, kind.lower() + "s"))
    found: list[dict[str, Any]] = [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(READ)}
        for group, resources in sorted(groups.items())
    ]
    found.append({"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]})
    # the report's one write: the stack's GPUStack object and its status (design §7.3)
    found.append({"apiGroups": ["gpuplan.io"], "resources": ["gpustacks"], "verbs": ["get", "create"]})
    found.append({"apiGroups": ["gpuplan.io"], "resources": ["gpustacks/status"], "verbs": ["patch"]})
    found.append({"nonResourceURLs": ["/version", "/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]})
    return found


def _cronjob_spec(options: Options, labels: dict[str, str]) -> dict[str, Any]:
    command = [
        "gpuplan",
        "drift",
        "report",
        "-f",
        f"{SPEC_DIR}/{SPEC_KEY}",
        "--state",
        f"{STATE_DIR}/{STATE_KEY}",
        "--format",
        options.output_format,
    ]
    container = {
        "name": "report",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "workingDir": "/tmp",
        "env": [{"name": "GPUPLAN_DEBUG_LOG", "value": "/tmp/gpuplan-debug.log"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod = {
        "serviceAccountName": NAME,
        "restartPolicy": "Never",
        "containers": [container],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [
            {"name": "spec", "configMap": {"name": f"{NAME}-spec"}},
            {
                "name": "state",
                "secret": {
                    "secretName": options.state_secret,
                    "items": [{"key": STATE_KEY, "path": STATE_KEY}],
                },
            },
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    return {
        "schedule": options.schedule,
        "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {
            "metadata": {"labels": labels},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": 1800,
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        },
    }


def render(spec_text: str, kinds: Sequence[tuple[str, str]], options: Options) -> str:
    header = (
        "# gpuplan drift report as a CronJob (docs/drift.md). Create the state Secret first:\n"
        f"#   kubectl -n {options.namespace} create secret generic {options.state_secret} "
        f"--from-file={STATE_KEY}=gpuplan.state.json\n"
    )
    return header + yaml.dump_all(
        objects(spec_text, kinds, options), Dumper=_PlainDumper, sort_keys=False, explicit_start=True
    )


class _PlainDumper(yaml.SafeDumper):
    """Writes a mapping used twice (the labels of the CronJob, its job and its pod) out each time: anchors
    and aliases are valid YAML but unreadable to a reviewer, and some tools mishandle them."""

    def ignore_aliases(self, data: object) -> bool:
        return True
