"""``gpuplan drift cronjob``: the drift report as a Kubernetes CronJob, with least-privilege RBAC, as YAML.

Called by :mod:`gpuplan.commands.drift`. Renders, in apply order: a ServiceAccount; a ClusterRole that reads
the stack (get/list/watch on nodes, pods, daemonsets, services, namespaces, every kind gpuplan manages for the
stack, ClusterPolicies; get on pods/proxy for the DCGM scrape; the discovery URLs) and may write one thing,
the status of the stack's own GPUStack (get on ``gpustacks`` and patch on ``gpustacks/status``, both by
``resourceNames: [<stack>]``), and its binding; a ConfigMap holding the spec; the CronJob
(``concurrencyPolicy: Forbid``, no retries: exit 2 "drift found" fails the Job, which is the alert) running
``gpuplan drift report`` with the spec from the ConfigMap. The container runs as non-root with a read-only
root filesystem: the report writes no file.

Where the state comes from depends on where it lives:

- a ``kubernetes://NS/NAME`` state (:class:`KubernetesLocation`): the job passes that URL to ``--state`` and
  reads the Secrets itself, through a Role in the state's namespace that may only ``get`` Secret
  ``gpuplan-state-<name>`` and its parts ``-part-1`` ... ``-part-N`` by name. Not ``list``: RBAC cannot limit
  a list to a label selector, so a list would show every Secret of the namespace. Parts are named up to
  ``state_parts`` (the bound ``gpuplan state rbac`` uses): the part count grows with the state and cannot be
  known when the YAML is printed. Nothing on the Lease: the report reads the state without the lock
  (:meth:`gpuplan.providers.state_secret.KubernetesStateBackend.read` never touches it), and nothing may
  write a state Secret;
- a local state file: the fallback, a Secret the user copies the file into (``kubectl create secret generic
  gpuplan-state --from-file=gpuplan.state.json``; docs/drift.md), mounted read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gpuplan.state.location import KubernetesLocation
from gpuplan.views.state_rbac import DEFAULT_PARTS

NAME = "gpuplan-drift"
IMAGE_NAME = "gpuplan"  # what deploy/Dockerfile's documented build command tags
SPEC_KEY = "gpustack.yaml"
STATE_KEY = "gpuplan.state.json"
SPEC_DIR = "/etc/gpuplan"
STATE_DIR = "/var/lib/gpuplan"
READ = ["get", "list", "watch"]
STACK_GROUP = "gpuplan.io"  # gpustacks.gpuplan.io: the stack's status object, cluster-scoped
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
    stack: str
    """The spec's ``metadata.name``: the GPUStack whose status the report may write."""
    output_format: str = "json"
    state_secret: str = "gpuplan-state"
    state: KubernetesLocation | None = None
    """The state in the cluster the job reads; None: the state file copied into ``state_secret``."""
    state_parts: int = DEFAULT_PARTS


def objects(spec_text: str, kinds: Sequence[tuple[str, str]], options: Options) -> list[dict[str, Any]]:
    """The manifests, in the order ``kubectl apply -f`` should create them."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpuplan"}
    meta = {"name": NAME, "namespace": options.namespace, "labels": labels}
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": options.namespace}
    state_access = [] if options.state is None else state_role(options.state, options.state_parts, subject)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": labels},
            "rules": rules(kinds) + status_rules(options.stack),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [subject],
        },
        *state_access,
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
    found.append({"nonResourceURLs": ["/version", "/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]})
    return found


def status_rules(stack: str) -> list[dict[str, Any]]:
    """The report's one write: its verdict on the stack's own GPUStack, read and patched by name. No create
    (a create cannot be limited to a name): apply makes the object; a report that finds none, or no CRD,
    says so in a warning and still exits with its verdict."""
    named = {"apiGroups": [STACK_GROUP], "resourceNames": [stack]}
    return [
        {**named, "resources": ["gpustacks"], "verbs": ["get"]},
        {**named, "resources": ["gpustacks/status"], "verbs": ["patch"]},
    ]


def state_secret_names(location: KubernetesLocation, parts: int) -> list[str]:
    """The main Secret and its first ``parts`` part Secrets: the names the job may read."""
    return [location.part_name(index) for index in range(parts + 1)]


def state_role(location: KubernetesLocation, parts: int, subject: dict[str, str]) -> list[dict[str, Any]]:
    """A Role and its binding in the state's namespace: get on the state's Secrets by name, nothing else."""
    name = f"{NAME}-state-{location.name}"
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpuplan"}
    metadata = {"name": name, "namespace": location.namespace, "labels": labels}
    rule = {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": state_secret_names(location, parts),
        "verbs": ["get"],
    }
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata, "rules": [rule]},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
    ]


def _command(options: Options) -> list[str]:
    state = options.state.url if options.state is not None else f"{STATE_DIR}/{STATE_KEY}"
    spec = f"{SPEC_DIR}/{SPEC_KEY}"
    return ["gpuplan", "drift", "report", "-f", spec, "--state", state, "--format", options.output_format]


def _volumes(options: Options) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the spec, /tmp, and the copied state file if any."""
    mounts: list[dict[str, Any]] = [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "spec", "configMap": {"name": f"{NAME}-spec"}}]
    if options.state is None:
        mounts.append({"name": "state", "mountPath": STATE_DIR, "readOnly": True})
        secret = {"secretName": options.state_secret, "items": [{"key": STATE_KEY, "path": STATE_KEY}]}
        volumes.append({"name": "state", "secret": secret})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    volumes.append({"name": "tmp", "emptyDir": {}})
    return volumes, mounts


def _cronjob_spec(options: Options, labels: dict[str, str]) -> dict[str, Any]:
    volumes, mounts = _volumes(options)
    container = {
        "name": "report",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": _command(options),
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
        "volumeMounts": mounts,
    }
    pod = {
        "serviceAccountName": NAME,
        "restartPolicy": "Never",
        "containers": [container],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": volumes,
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


def _header(options: Options) -> str:
    if options.state is not None:
        location = options.state
        return (
            f"# gpuplan drift report as a CronJob (docs/drift.md). It reads the state {location.url} from\n"
            f"# the cluster: Secret {location.secret_name} and its parts up to -part-{options.state_parts}"
            " (--state-parts).\n"
        )
    return (
        "# gpuplan drift report as a CronJob (docs/drift.md). Create the state Secret first:\n"
        f"#   kubectl -n {options.namespace} create secret generic {options.state_secret} "
        f"--from-file={STATE_KEY}=gpuplan.state.json\n"
    )


def render(spec_text: str, kinds: Sequence[tuple[str, str]], options: Options) -> str:
    return _header(options) + yaml.dump_all(
        objects(spec_text, kinds, options), Dumper=_PlainDumper, sort_keys=False, explicit_start=True
    )


class _PlainDumper(yaml.SafeDumper):
    """Writes a mapping used twice (the labels of the CronJob, its job and its pod) out each time: anchors
    and aliases are valid YAML but unreadable to a reviewer, and some tools mishandle them."""

    def ignore_aliases(self, data: object) -> bool:
        return True
