"""``as=Table`` answers: the meta.k8s.io/v1 Table that kubectl prints, with the columns a real apiserver
sends.

Called by :mod:`gpuplan.sim.api.server` when a GET (list, single object or watch) carries
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``. kubectl only prints what the server puts in the
Table, so the cells here follow the printers of the real apiserver (``pkg/printers/internalversion``): the pod
STATUS is kubectl's computed reason (Init:n/m, CrashLoopBackOff, Completed, Terminating ...), node STATUS
joins Ready/NotReady with SchedulingDisabled, ages read like kubectl's (``5s``, ``3m2s``, ``2d``). Priority-1
columns are the ``-o wide`` ones. Row objects are PartialObjectMetadata by default, which is what
``--show-labels`` reads. Objects are plain dicts; nothing here touches the store.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuplan.sim.api import table_batch, table_custom, table_endpoints, table_events

Obj = Mapping[str, Any]
Column = dict[str, Any]
RowCells = Callable[[Obj, datetime.datetime], list[Any]]

_NAME_DOC = "Name must be unique within a namespace."
_AGE_DOC = "CreationTimestamp is a timestamp representing the server time when this object was created."


def wants_table(accept: str | None) -> bool:
    """True when the Accept header asks for a meta.k8s.io/v1 Table (kubectl get does, first choice)."""
    if not accept:
        return False
    for media in accept.split(","):
        params = {
            p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip() for p in media.split(";")[1:] if "=" in p
        }
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in ("v1", "v1beta1")
        ):
            return True
    return False


def human_duration(seconds: float) -> str:
    """kubectl's ``duration.HumanDuration``: 59s, 2m, 3m2s, 10m, 3h4m, 9h, 2d3h, 30d, 2y5d ..."""
    total = int(seconds)
    if total < -1:
        return "<invalid>"
    if total < 0:
        return "0s"
    if total < 120:
        return f"{total}s"
    minutes = total // 60
    if minutes < 10:
        rest = total % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = total // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _since(value: Any, now: datetime.datetime) -> str:
    moment = _parse_time(value)
    if moment is None:
        return "<unknown>"
    return human_duration((now - moment).total_seconds())


def _age(obj: Obj, now: datetime.datetime) -> str:
    return _since(obj.get("metadata", {}).get("creationTimestamp"), now)


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _column(
    name: str, kind: str = "string", description: str = "", priority: int = 0, fmt: str = ""
) -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_NAME_COLUMN = _column("Name", fmt="name", description=_NAME_DOC)
_AGE_COLUMN = _column("Age", description=_AGE_DOC)


# ---- pods -------------------------------------------------------------------------------------------------

_POD_COLUMNS = [
    _NAME_COLUMN,
    _column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", description="The aggregate status of the containers in this pod."),
    _column(
        "Restarts",
        description="The number of times the containers in this pod have been restarted "
        "and when the last container in this pod has restarted.",
    ),
    _AGE_COLUMN,
    _column("IP", priority=1, description="podIP address allocated to the pod."),
    _column("Node", priority=1, description="NodeName indicates in which node this pod is scheduled."),
    _column(
        "Nominated Node",
        priority=1,
        description="nominatedNodeName is set only when this pod preempts other pods on the node.",
    ),
    _column(
        "Readiness Gates",
        priority=1,
        description="If specified, all readiness gates will be evaluated for pod readiness.",
    ),
]


def _is_restartable_init(container: Obj | None) -> bool:
    return bool(container) and container is not None and container.get("restartPolicy") == "Always"


def _terminated_reason(terminated: Obj, prefix: str) -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


class _PodSummary:
    """The READY, STATUS and RESTARTS cells, computed as kubectl's printPod does."""

    def __init__(self, pod: Obj) -> None:
        spec, status = pod.get("spec", {}), pod.get("status", {})
        self.reason = str(status.get("reason") or status.get("phase") or "")
        self.restarts = 0
        self.ready = 0
        self.total = len(spec.get("containers", []))
        self.last_restart: datetime.datetime | None = None
        init_specs = {c.get("name"): c for c in spec.get("initContainers", [])}
        self.total += sum(1 for c in init_specs.values() if _is_restartable_init(c))
        initializing = self._scan_init_containers(
            status.get("initContainerStatuses", []), init_specs, len(init_specs)
        )
        if not initializing or _condition_true(status, "Initialized"):
            self._scan_containers(status.get("containerStatuses", []), status)
        if pod.get("metadata", {}).get("deletionTimestamp"):
            if status.get("reason") == "NodeLost":
                self.reason = "Unknown"
            elif status.get("phase") not in ("Succeeded", "Failed"):
                self.reason = "Terminating"

    def _note_restarts(self, container: Obj) -> None:
        self.restarts += int(container.get("restartCount", 0))
        finished = _parse_time(container.get("lastState", {}).get("terminated", {}).get("finishedAt"))
        if finished and (self.last_restart is None or finished > self.last_restart):
            self.last_restart = finished

    def _scan_init_containers(self, statuses: list[Obj], specs: Mapping[Any, Obj], count: int) -> bool:
        for index, container in enumerate(statuses):
            self._note_restarts(container)
            state = container.get("state", {})
            terminated, waiting = state.get("terminated"), state.get("waiting")
            if terminated is not None and int(terminated.get("exitCode", 0)) == 0:
                continue
            if _is_restartable_init(specs.get(container.get("name"))) and container.get("started"):
                self.ready += 1 if container.get("ready") else 0
                continue
            if terminated is not None:
                self.reason = _terminated_reason(terminated, "Init:")
            elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
                self.reason = "Init:" + str(waiting["reason"])
            else:
                self.reason = f"Init:{index}/{count}"
            return True
        return False

    def _scan_containers(self, statuses: list[Obj], status: Obj) -> None:
        # Restarts of regular init containers only count while the pod initialises, as in kubectl.
        self.restarts, self.last_restart = 0, None
        has_running = False
        for container in reversed(statuses):
            self._note_restarts(container)
            state = container.get("state", {})
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                self.reason = str(waiting["reason"])
            elif terminated is not None:
                self.reason = _terminated_reason(terminated, "")
            elif container.get("ready") and state.get("running") is not None:
                has_running = True
                self.ready += 1
        if self.reason == "Completed" and has_running:
            self.reason = "Running" if _condition_true(status, "Ready") else "NotReady"

    def restarts_cell(self, now: datetime.datetime) -> str:
        if self.restarts and self.last_restart is not None:
            return f"{self.restarts} ({human_duration((now - self.last_restart).total_seconds())} ago)"
        return str(self.restarts)


def _condition_true(status: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions", []))


def _readiness_gates(pod: Obj) -> str:
    gates = pod.get("spec", {}).get("readinessGates", [])
    if not gates:
        return "<none>"
    status = pod.get("status", {})
    ready = sum(1 for gate in gates if _condition_true(status, str(gate.get("conditionType"))))
    return f"{ready}/{len(gates)}"


def _pod_cells(pod: Obj, now: datetime.datetime) -> list[Any]:
    summary = _PodSummary(pod)
    status = pod.get("status", {})
    ips = status.get("podIPs") or ([{"ip": status["podIP"]}] if status.get("podIP") else [])
    return [
        _name(pod),
        f"{summary.ready}/{summary.total}",
        summary.reason,
        summary.restarts_cell(now),
        _age(pod, now),
        (ips[0].get("ip") if ips else "") or "<none>",
        pod.get("spec", {}).get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        _readiness_gates(pod),
    ]


# ---- nodes ------------------------------------------------------------------------------------------------

# pkg/printers/internalversion/printers.go: the columns' descriptions are the API types' swagger docs.
_NODE_ADDRESSES_DOC = (
    "List of addresses reachable to the node. Queried from cloud provider, if available. More info: "
    "https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as "
    "mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is "
    "merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an "
    "example. Consumers should assume that addresses can change during the lifetime of a Node. However, "
    "there are some exceptions where this may not be possible, such as Pods that inherit a Node's address "
    "in its own status or consumers of the downward API (status.hostIP)."
)

_NODE_COLUMNS = [
    _NAME_COLUMN,
    _column("Status", description="The status of the node"),
    _column("Roles", description="The roles of the node"),
    _AGE_COLUMN,
    _column("Version", description="Kubelet Version reported by the node."),
    _column("Internal-IP", priority=1, description=_NODE_ADDRESSES_DOC),
    _column("External-IP", priority=1, description=_NODE_ADDRESSES_DOC),
    _column(
        "OS-Image",
        priority=1,
        description="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    _column(
        "Kernel-Version",
        priority=1,
        description="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    _column(
        "Container-Runtime",
        priority=1,
        description="ContainerRuntime Version reported by the node through runtime remote API "
        "(e.g. containerd://1.4.2).",
    ),
]
_ROLE_PREFIX = "node-role.kubernetes.io/"


def node_status_cell(node: Obj) -> str:
    """``Ready``, ``NotReady``, ``Unknown``, with ``,SchedulingDisabled`` for a cordoned node."""
    parts = []
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            parts = ["Ready" if condition.get("status") == "True" else "NotReady"]
    if not parts:
        parts = ["Unknown"]
    if node.get("spec", {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def node_roles_cell(node: Obj) -> str:
    roles = set()
    for key, value in node.get("metadata", {}).get("labels", {}).items():
        if key.startswith(_ROLE_PREFIX) and key[len(_ROLE_PREFIX) :]:
            roles.add(key[len(_ROLE_PREFIX) :])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(node: Obj, kind: str) -> str:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == kind:
            return str(address.get("address"))
    return "<none>"


def _node_cells(node: Obj, now: datetime.datetime) -> list[Any]:
    info = node.get("status", {}).get("nodeInfo", {})
    # printNode appends the architecture to the kernel cell, "<unknown>" included.
    kernel = info.get("kernelVersion") or "<unknown>"
    if info.get("architecture"):
        kernel += f" ({info['architecture']})"
    return [
        _name(node),
        node_status_cell(node),
        node_roles_cell(node),
        _age(node, now),
        info.get("kubeletVersion", ""),
        _node_address(node, "InternalIP"),
        _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        kernel,
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# ---- daemonsets -------------------------------------------------------------------------------------------

_DAEMONSET_COLUMNS = [
    _NAME_COLUMN,
    _column("Desired", "integer", "The desired number of nodes that should be running the daemon pod."),
    _column("Current", "integer", "The number of nodes that are running at least 1 daemon pod."),
    _column(
        "Ready",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or "
        "more of the daemon pod running and ready.",
    ),
    _column("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    _column(
        "Available",
        "integer",
        "The number of nodes that should be running the daemon pod and have one "
        "or more of the daemon pod running and available.",
    ),
    _column(
        "Node Selector",
        description="NodeSelector is a selector which must be true for the pod to fit on a node.",
    ),
    _AGE_COLUMN,
    _column("Containers", priority=1, description="Names of each container in the template."),
    _column("Images", priority=1, description="Images referenced by each container in the template."),
    _column(
        "Selector", priority=1, description="A label query over pods that are managed by the daemon set."
    ),
]


def format_labels(labels: Mapping[str, Any] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` joined by commas, ``<none>`` when empty."""
    if not labels:
        return "<none>"
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def format_label_selector(selector: Obj | None) -> str:
    """``metav1.FormatLabelSelector``: requirements sorted by key, ``<none>`` for an empty selector."""
    if not selector:
        return "<none>"
    requirements: list[tuple[str, str]] = [
        (key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        key, operator, values = (
            expr.get("key", ""),
            expr.get("operator", ""),
            sorted(expr.get("values") or []),
        )
        text = {
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(operator, key)
        requirements.append((key, text))
    return ",".join(text for _, text in sorted(requirements)) or "<none>"


def _daemonset_cells(ds: Obj, now: datetime.datetime) -> list[Any]:
    status, spec = ds.get("status", {}), ds.get("spec", {})
    pod_spec = spec.get("template", {}).get("spec", {})
    containers = pod_spec.get("containers", [])
    return [
        _name(ds),
        int(status.get("desiredNumberScheduled", 0)),
        int(status.get("currentNumberScheduled", 0)),
        int(status.get("numberReady", 0)),
        int(status.get("updatedNumberScheduled", 0)),
        int(status.get("numberAvailable", 0)),
        format_labels(pod_spec.get("nodeSelector")),
        _age(ds, now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        format_label_selector(spec.get("selector")),
    ]


# ---- the rest ---------------------------------------------------------------------------------------------

_NAMESPACE_COLUMNS = [_NAME_COLUMN, _column("Status", description="The status of the namespace"), _AGE_COLUMN]


def _namespace_cells(ns: Obj, now: datetime.datetime) -> list[Any]:
    return [_name(ns), ns.get("status", {}).get("phase", "Active"), _age(ns, now)]


_CONFIGMAP_COLUMNS = [_NAME_COLUMN, _column("Data", "integer", "Number of keys in the data."), _AGE_COLUMN]


def _configmap_cells(cm: Obj, now: datetime.datetime) -> list[Any]:
    return [_name(cm), len(cm.get("data") or {}) + len(cm.get("binaryData") or {}), _age(cm, now)]


_RUNTIMECLASS_COLUMNS = [
    _NAME_COLUMN,
    _column(
        "Handler",
        description="Handler is the name of the underlying runtime and configuration that the CRI "
        "implementation will use to handle pods of this class.",
    ),
    _AGE_COLUMN,
]


def _runtimeclass_cells(rc: Obj, now: datetime.datetime) -> list[Any]:
    return [_name(rc), rc.get("handler", ""), _age(rc, now)]


# printPodDisruptionBudget (pkg/printers/internalversion/printers.go): an unset bound is "N/A"
_PDB_COLUMNS = [
    _NAME_COLUMN,
    _column("Min Available", description="The minimum number of pods that must be available."),
    _column("Max Unavailable", description="The maximum number of pods that may be unavailable."),
    _column(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    _AGE_COLUMN,
]


def _pdb_cells(pdb: Obj, now: datetime.datetime) -> list[Any]:
    spec = pdb.get("spec") or {}
    bounds = [
        "N/A" if spec.get(name) is None else str(spec[name]) for name in ("minAvailable", "maxUnavailable")
    ]
    allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
    return [_name(pdb), *bounds, allowed, _age(pdb, now)]


_DEFAULT_COLUMNS = [_NAME_COLUMN, _AGE_COLUMN]


def _default_cells(obj: Obj, now: datetime.datetime) -> list[Any]:
    return [_name(obj), _age(obj, now)]


# (group, plural) -> columns and the function computing one row's cells.
_PRINTERS: dict[tuple[str, str], tuple[list[Column], RowCells]] = {
    ("", "pods"): (_POD_COLUMNS, _pod_cells),
    ("", "nodes"): (_NODE_COLUMNS, _node_cells),
    ("apps", "daemonsets"): (_DAEMONSET_COLUMNS, _daemonset_cells),
    ("", "namespaces"): (_NAMESPACE_COLUMNS, _namespace_cells),
    ("", "configmaps"): (_CONFIGMAP_COLUMNS, _configmap_cells),
    ("node.k8s.io", "runtimeclasses"): (_RUNTIMECLASS_COLUMNS, _runtimeclass_cells),
    ("policy", "poddisruptionbudgets"): (_PDB_COLUMNS, _pdb_cells),
    **table_events.PRINTERS,
    **table_endpoints.PRINTERS,
    **table_batch.PRINTERS,
}


def _printer(group: str, plural: str, columns: str = "") -> tuple[list[Column], RowCells]:
    if columns:  # a custom resource: its CustomResourceDefinition's columns
        return table_custom.printer(columns, _since)
    return _PRINTERS.get((group, plural), (_DEFAULT_COLUMNS, _default_cells))


def _row_object(obj: Obj, include_object: str) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return dict(obj)
    metadata = {key: value for key, value in obj.get("metadata", {}).items() if key != "managedFields"}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}


def table(
    group: str,
    plural: str,
    objects: Iterable[Obj],
    *,
    list_metadata: Mapping[str, Any] | None = None,
    include_object: str = "Metadata",
    include_columns: bool = True,
    now: datetime.datetime | None = None,
    columns: str = "",
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of ``objects`` (one for a single GET, all items for a list).

    ``include_object`` is the request's ``includeObject`` (Object, Metadata or None); ``include_columns`` is
    False for every watch event after the first, as a real server sends the column definitions only once.
    """
    if include_object not in ("Object", "Metadata", "None"):
        raise ValueError(f"includeObject must be Object, Metadata or None, not {include_object!r}")
    definitions, cells = _printer(group, plural, columns)
    moment = now or datetime.datetime.now(datetime.UTC)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(obj, moment)}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(list_metadata or {}),
        "rows": rows,
    }
    if include_columns:
        result["columnDefinitions"] = [dict(column) for column in definitions]
    return result
