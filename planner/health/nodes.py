"""The effect gates: what a component must have done on every node it targets (pure, like its caller).

Called by :func:`gpuplan.planner.health.gates.evaluate` for every gate kind but ``rollout``. The targeted
nodes are those the component's DaemonSet can run on (its pod template's nodeSelector, required node affinity
and tolerations, with the tolerations the DaemonSet controller adds itself); a component without a DaemonSet
(an external owner) is checked on the nodes of the stack's node selector. Each gate judges one node at a time
and names exactly what is missing there ("lab-node: label nvidia.com/gpu.product missing"); the first node
with a problem (by name) is the message, and the count of good nodes is the progress. Effects that are not
there yet are "progressing": the waiter's deadline turns the last message into the failure, unless its cause
is permanent (:mod:`gpuplan.planner.health.causes`: a host without the runtime handler fails at once, so do
capacity and GFD labels missing on a node whose device plugin or GFD pod has long been Ready, a driver
version other than the one asked for once two rounds report it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuplan.modules.base import HealthCheck
from gpuplan.planner import placement
from gpuplan.planner.facts import family_of
from gpuplan.planner.health import causes
from gpuplan.planner.health.gates import (
    GateState,
    GateStatus,
    Obj,
    Observation,
    condition_of,
    current_pods,
    expected_driver_on,
    latest_pods,
    matches,
    node_of,
    pod_name,
    pod_ready,
    pool_labels,
)
from gpuplan.providers.snapshot import label_managers

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client import Metric

DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
COUNT_LABEL = "nvidia.com/gpu.count"
PRODUCT_LABEL = "nvidia.com/gpu.product"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
GFD_MANAGERS = frozenset({"nfd-master", "gpu-feature-discovery"})
"""Who writes GFD's labels: nfd-master from GFD's NodeFeature object (v0.20 publishes through NFD), or GFD
itself under its own name (the simulated cluster, which runs no NFD)."""
DEFAULT_METRIC = "DCGM_FI_DEV_GPU_UTIL"
NODE_LABELS = ("node", "Hostname", "hostname")
"""The labels that name a DCGM series' node, in the order they are trusted: a scrape job's relabelling of
Kubernetes SD's ``__meta_kubernetes_pod_node_name``, else the exporter's own ``Hostname`` (``hostname`` from
exporter 4.6.0-4.8.3), whose value is the ``NODE_NAME`` the operator sets to the node's name (facts §6)."""
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
# Taints every DaemonSet pod tolerates: the DaemonSet controller adds these tolerations itself.

Judge = Callable[[Mapping[str, Any], Obj, Observation], "str | None"]


def effect(check: HealthCheck, observation: Observation) -> GateStatus:
    """The verdict of an effect gate over every targeted node."""
    if check.kind == "validator-ready" and not observation.pods_read:
        return validators_counted(observation)
    if check.kind == "validator-ready":
        ds = observation.daemonset
        pods = (
            latest_pods(ds, current_pods(ds, observation.pods)) if ds is not None else list(observation.pods)
        )
        if observation.ignore:
            skipped = {_name(node) for node in observation.nodes if observation.waives(check.kind, node)}
            pods = [pod for pod in pods if node_of(pod) not in skipped]
        failure = causes.pod_verdict(
            pods, observation.now, observation.unschedulable_grace, observation.exits
        )
        if failure is not None:
            return failure
    judge = JUDGES[check.kind]
    targets, waived = _judged(check, observation)
    if check.kind == "mig-config" and (refused := mig_refused(check.params, targets)) is not None:
        return refused
    problems = [(node, problem) for node in targets if (problem := judge(check.params, node, observation))]
    ready, desired = len(targets) - len(problems), len(targets)
    if problems:
        return _problem_status(check, problems, observation, ready, desired)
    notes = (_waived_note(check, waived),) if waived else ()
    if not targets:
        return GateStatus("passed", f"{check.kind}: no node is targeted", notes=notes)
    return GateStatus(
        "passed", f"{check.kind}: {desired}/{desired} node(s)", ready=desired, desired=desired, notes=notes
    )


def _judged(check: HealthCheck, observation: Observation) -> tuple[list[Obj], list[str]]:
    """The targeted nodes ``check`` is judged on, and the names of those ``spec.ignore`` waives it on."""
    targets = sorted(targeted_nodes(observation), key=_name)
    if not observation.ignore:
        return targets, []
    judged: list[Obj] = []
    waived: list[str] = []
    for node in targets:
        if observation.waives(check.kind, node):
            waived.append(_name(node))
        else:
            judged.append(node)
    return judged, waived


def _waived_note(check: HealthCheck, waived: Sequence[str]) -> str:
    shown = ", ".join(waived[:5]) + (f" and {len(waived) - 5} more" if len(waived) > 5 else "")
    return f"{check.kind} not judged on {len(waived)} node(s), as spec.ignore declares: {shown}"


def _problem_status(
    check: HealthCheck, problems: list[tuple[Obj, str]], observation: Observation, ready: int, desired: int
) -> GateStatus:
    """The first node's problem as the gate's message: failed when its cause is permanent (the first such
    node), progressing otherwise; a driver mismatch is progressing with its reason until the waiter has seen
    it twice (:class:`gpuplan.planner.health.causes.Confirmation`)."""
    found = [
        (node, problem, reason)
        for node, problem in problems
        if (reason := causes.effect_cause(check, node, observation, reported_driver(observation, node)))
    ]
    node, problem, reason = found[0] if found else (*problems[0], None)
    others = len(found if found else problems) - 1
    more = f" (and {others} more node(s))" if others else ""
    state: GateState = "failed" if reason in causes.PERMANENT_EFFECTS else "progressing"
    detail = causes.settled_detail(check, node, observation) if reason in causes.PERMANENT_EFFECTS else ""
    return GateStatus(
        state, problem + detail + more, node=_name(node), reason=reason, ready=ready, desired=desired
    )


def reported_driver(observation: Observation, node: Obj) -> str | None:
    """The driver version a node reports: GFD's label, else the DCGM exporter's scrape of it."""
    return _labels(node).get(DRIVER_LABEL) or _scraped_driver(observation, _name(node))


# ----------------------------------------------------------------------------------------------- judges


def driver_version(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    found = reported_driver(observation, node)
    expected = params.get("version")
    if not found:
        return f"{_name(node)}: driver version not reported (no label {DRIVER_LABEL})"
    if expected and found != expected:
        return f"{_name(node)}: driver {found}, expected {expected}"
    return None


def driver_reported(observation: Observation) -> bool:
    """Whether anything reports a driver version on a targeted node: GFD's label or a DCGM scrape (the
    apply walker defers the driver-version gate until then, :mod:`gpuplan.planner.apply.driver_check`)."""
    return any(reported_driver(observation, node) for node in targeted_nodes(observation))


def runtime_handler(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    handler = str(params.get("handler") or "nvidia")
    handlers = [
        str(h.get("name")) for h in (node.get("status") or {}).get("runtimeHandlers") or () if h.get("name")
    ]
    if handler in handlers:
        return None
    reported = ", ".join(handlers) or "none"
    return f"{_name(node)}: runtime handler {handler} missing (the node reports: {reported})"


def gpu_count(node: Obj) -> int | None:
    """The node's GPU count as the gates compare with: GFD's ``nvidia.com/gpu.count``, unless someone other
    than GFD wrote that label and it contradicts the device plugin's capacity; then the capacity's count
    (the label's drift is GFD's cell, not the device plugin's or the exporter's)."""
    labelled = _int(_labels(node).get(COUNT_LABEL))
    advertised = _advertised_gpus(node)
    if labelled is not None and advertised is not None and labelled != advertised and _hand_written(node):
        return advertised
    return labelled


def _advertised_gpus(node: Obj) -> int | None:
    """GPUs the device plugin advertises: capacity ``nvidia.com/gpu`` over GFD's replicas label (time-slicing
    advertises each GPU ``replicas`` times, facts §4); None without a capacity or on a MIG node."""
    labels = _labels(node)
    capacity = _int(((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu"))
    replicas = _int(labels.get(REPLICAS_LABEL)) or 1
    if not capacity or "-MIG-" in labels.get(PRODUCT_LABEL, "") or capacity % replicas:
        return None
    return capacity // replicas


def _hand_written(node: Obj) -> list[str]:
    """The managers other than GFD's that own the count label (a ``kubectl label --overwrite``)."""
    return [m for m in label_writers(node, COUNT_LABEL) if m not in GFD_MANAGERS]


def label_writers(node: Obj, label: str) -> list[str]:
    """The field managers owning the GPU label ``label`` on ``node`` (from its managedFields)."""
    return label_managers(node.get("metadata") or {}).get(label, [])


def allocatable(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    """Allocatable GPUs == GPUs × replicas; before GFD counted the GPUs, at least one GPU's worth."""
    resource = str(params.get("resource") or "nvidia.com/gpu")
    per_gpu = int(params.get("perGpu") or 1)
    mig_devices = _mig_mixed_counts(node)
    if mig_devices and resource == "nvidia.com/gpu":
        return _mig_allocatable(node, mig_devices)
    found = _int((node.get("status") or {}).get("allocatable", {}).get(resource)) or 0
    gpus = gpu_count(node)
    if gpus is not None:
        expected = gpus * per_gpu
        return (
            None
            if found == expected
            else f"{_name(node)}: allocatable {resource} is {found}, expected {expected}"
        )
    if found >= per_gpu and found % per_gpu == 0:
        return None
    return (
        f"{_name(node)}: allocatable {resource} is {found}, expected at least {per_gpu} "
        f"(the GPU count is unknown until GFD labels the node)"
    )


def _mig_mixed_counts(node: Obj) -> dict[str, int]:
    """GFD's ``nvidia.com/mig-<profile>.count`` labels (the mixed strategy, fleet facts §4.6) by resource."""
    return {
        key.removesuffix(".count"): _int(value) or 0
        for key, value in _labels(node).items()
        if key.startswith("nvidia.com/mig-") and key.endswith(".count")
    }


def _mig_allocatable(node: Obj, devices: Mapping[str, int]) -> str | None:
    """On a node partitioned with the mixed strategy each MIG profile is its own resource (§4.5)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource, expected in sorted(devices.items()):
        found = _int(allocatable.get(resource)) or 0
        if found != expected:
            return f"{_name(node)}: allocatable {resource} is {found}, expected {expected}"
    return None


def gfd_labels(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    """The labels are there and agree with each other and with the stack's driver."""
    labels, name = _labels(node), _name(node)
    missing = [key for key in params.get("labels") or () if not labels.get(key)]
    if missing:
        return f"{name}: label {missing[0]} missing" + (
            f" (and {', '.join(missing[1:])})" if missing[1:] else ""
        )
    product = labels.get(PRODUCT_LABEL, "")
    if product.endswith("-MIG-INVALID"):
        return (
            f"{name}: label {PRODUCT_LABEL} is {product}: "
            "the GPUs' MIG layout does not fit the single strategy"
        )
    count = _int(labels.get(COUNT_LABEL))
    if COUNT_LABEL in labels and (count is None or count < 1):
        return f"{name}: label {COUNT_LABEL} is {labels[COUNT_LABEL]}, expected at least 1"
    advertised = gpu_count(node)
    if count is not None and advertised != count:
        return (
            f"{name}: label {COUNT_LABEL} is {count}, but the device plugin advertises {advertised} GPUs; "
            f"the label was written by {', '.join(_hand_written(node))}, not GPU Feature Discovery"
        )
    expected = expected_driver_on(observation, node)
    return _family_mismatch(name, labels) or _driver_mismatch(name, labels, expected)


def dcgm_metrics(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    """A scrape through the exporter pod on the node has a sample of the metric for every GPU."""
    name = _name(node)
    metric = str(params.get("metric") or DEFAULT_METRIC)
    scrape = observation.metrics.get(name)
    if scrape is None or (scrape.pod is None and not scrape.sampled_out):
        return f"{name}: no DCGM exporter pod runs there to scrape"
    if scrape.sampled_out:
        return None  # its Ready pod counts; the sample's scrapes prove the exporters serve metrics
    if scrape.error is not None or scrape.text is None:
        return f"{name}: DCGM metrics of {scrape.pod} could not be read: {scrape.error}"
    try:
        gpus = {sample.labels.get("gpu", "") for sample in _samples(scrape.text, metric)}
    except ValueError as exc:
        return f"{name}: DCGM metrics of {scrape.pod} are not Prometheus text: {exc}"
    labels = _labels(node)
    expected = gpu_count(node)
    if expected is None or "-MIG-" in labels.get(PRODUCT_LABEL, ""):
        return None if gpus else f"{name}: DCGM metrics have 0 samples of {metric}, expected at least 1"
    return (
        None
        if len(gpus) == expected
        else f"{name}: DCGM metrics have {len(gpus)} samples of {metric}, expected {expected}"
    )


def validator_ready(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    name = _name(node)
    pods = pods_by_node(observation.pods).get(name, ())
    if not pods:
        return f"{name}: no validator pod runs there"
    for pod in sorted(pods, key=pod_name):
        if not pod_ready(pod):
            condition = condition_of(pod, "Ready") or {}
            why = " ".join(str(condition.get("message") or condition.get("reason") or "").split())
            init = _init_progress(pod)
            detail = "; ".join(part for part in (init, why) if part)
            return f"{name}: {pod_name(pod)} is not Ready" + (f" ({detail})" if detail else "")
    return None


def validators_counted(observation: Observation) -> GateStatus:
    """validator-ready by the validator DaemonSet's status, when the waiter did not read its pods: a
    validator pod turns Ready only once every init container validated its layer (the driver, the toolkit,
    CUDA, the device plugin), and the status counts the Ready ones, so every targeted node has a Ready
    validator when the status counts as many available pods as there are targeted nodes."""
    status: Obj = (observation.daemonset or {}).get("status") or {}
    available = int(status.get("numberAvailable") or 0)
    desired = len(targeted_nodes(observation))
    if available == desired == int(status.get("desiredNumberScheduled") or 0):
        return GateStatus(
            "passed",
            f"validator-ready: {desired}/{desired} validator pods Ready (the DaemonSet's status)",
            ready=desired,
            desired=desired,
        )
    return GateStatus(
        "progressing",
        f"validator-ready: {available}/{desired} validator pods available (the DaemonSet's status)",
        ready=min(available, desired),
        desired=desired,
    )


def mig_config(params: Mapping[str, Any], node: Obj, observation: Observation) -> str | None:
    """The node is labelled with the stack's MIG config and its mig-manager reports it applied."""
    labels, name, wanted = _labels(node), _name(node), str(params.get("config") or "")
    current, state = labels.get(MIG_CONFIG_LABEL), labels.get(MIG_STATE_LABEL)
    # the mig-manager does not retry a config it failed: say so, whichever config the label names
    failed = (
        f"the mig-manager could not apply MIG config {current} ({MIG_STATE_LABEL}=failed)"
        if current and state == "failed"
        else None
    )
    if current != wanted:
        wrong = f"{name}: label {MIG_CONFIG_LABEL} is {current or 'not set'}, expected {wanted}"
        return f"{wrong}; {failed}" if failed else wrong
    if failed:
        return f"{name}: {failed}"
    if state != "success":
        return f"{name}: MIG config {wanted} not applied yet ({MIG_STATE_LABEL} is {state or 'not set'})"
    return None


def mig_refused(params: Mapping[str, Any], nodes: list[Obj]) -> GateStatus | None:
    """A mig-manager that reports ``failed`` for the stack's config will not retry it: fail at once, naming
    the first such node (fleet facts §4.4: an unknown config name or a geometry the GPUs cannot take)."""
    wanted = str(params.get("config") or "")
    for node in nodes:
        labels = _labels(node)
        if labels.get(MIG_CONFIG_LABEL) == wanted and labels.get(MIG_STATE_LABEL) == "failed":
            return GateStatus(
                "failed",
                f"{_name(node)}: the mig-manager could not apply MIG config {wanted} "
                f"({MIG_STATE_LABEL}=failed); its pod's log on that node says why",
                node=_name(node),
            )
    return None


_BY_NODE: tuple[object, dict[str, list[Obj]]] = ((), {})
"""The last pod collection indexed by :func:`pods_by_node`, and its index."""


def pods_by_node(pods: Sequence[Obj]) -> Mapping[str, Sequence[Obj]]:
    """``pods`` by the node each runs on, in their order. A judge runs once per targeted node on the same
    observation, so the index of its pods is built once and kept for the next node: looking for a node's
    pods among all of them instead cost nodes x pods per round (25 million tests at 5,000 nodes). One
    collection is kept, compared by identity (an observation's pods are a tuple made for it); the pair is
    swapped in one assignment, so gates judged on other threads at once only rebuild it."""
    global _BY_NODE
    seen, index = _BY_NODE
    if seen is not pods:
        index = {}
        for pod in pods:
            index.setdefault(node_of(pod) or "", []).append(pod)
        _BY_NODE = (pods, index)
    return index


JUDGES: Mapping[str, Judge] = {
    "driver-version": driver_version,
    "runtime-handler": runtime_handler,
    "allocatable": allocatable,
    "gfd-labels": gfd_labels,
    "dcgm-metrics": dcgm_metrics,
    "validator-ready": validator_ready,
    "mig-config": mig_config,
}


# ------------------------------------------------------------------------------------ targeted nodes


def targeted_nodes(observation: Observation) -> list[Obj]:
    """The nodes the component's DaemonSet runs on (:func:`gpuplan.planner.placement.runs_on`, the rule the
    plan uses too), or those of the stack's node selector while there is no DaemonSet; a node pool's gates
    only its nodes, the stack's gates of a pooled component none of those pools' nodes."""
    ds = observation.daemonset
    if ds is None:
        selector = observation.node_selector
        found = [node for node in observation.nodes if matches(selector, _labels(node))]
    else:
        found = placement.nodes_of(ds, observation.nodes)
    if not observation.pool_selector and not observation.excluded:
        return found
    return [
        node
        for node in found
        if matches(observation.pool_selector, labels := pool_labels(observation, node))
        and not any(matches(selector, labels) for selector in observation.excluded)
    ]


POOL_MOVED = "NodePoolChanged"
"""The reason of a gate failed because a node left (or joined) its planned node pool during the apply."""


def moved(check: HealthCheck, observation: Observation) -> GateStatus | None:
    """A failed verdict when a node of a pooled component's gates is no longer in the pool the plan put it
    in: its labels changed during the apply, so the objects and node labels the plan chose for it are
    another pool's. Waiting cannot make such a gate pass, nor a timeout name the cause."""
    if not observation.pool_selector and not observation.excluded:
        return None
    for node in observation.nodes:
        metadata = node.get("metadata") or {}
        why = observation.pools.moved(str(metadata.get("name", "")), metadata.get("labels") or {})
        if why is not None:
            return GateStatus("failed", why, node=_name(node), reason=POOL_MOVED)
    return None


# ------------------------------------------------------------------------------------------- helpers


def _family_mismatch(name: str, labels: Mapping[str, str]) -> str | None:
    major, minor = (
        _int(labels.get("nvidia.com/gpu.compute.major")),
        _int(labels.get("nvidia.com/gpu.compute.minor")),
    )
    family = labels.get("nvidia.com/gpu.family")
    if major is None or minor is None or not family or major == 0:
        return None
    expected = family_of(major, minor)
    if family == expected:
        return None
    return (
        f"{name}: label nvidia.com/gpu.family is {family}, "
        f"but compute capability {major}.{minor} is {expected}"
    )


def _driver_mismatch(name: str, labels: Mapping[str, str], expected: str | None) -> str | None:
    full = labels.get(DRIVER_LABEL)
    if full is None:
        return None
    parts = [labels.get(f"nvidia.com/cuda.driver-version.{part}") for part in ("major", "minor", "revision")]
    composed = ".".join(str(part) for part in parts)
    if all(parts) and composed != full:
        return f"{name}: label {DRIVER_LABEL} is {full}, but the major/minor/revision labels say {composed}"
    if expected and full != expected:
        return f"{name}: label {DRIVER_LABEL} is {full}, expected {expected}"
    return None


def metric_families(text: str) -> Iterable[Metric]:
    """The metric families of a Prometheus text exposition (prometheus_client's parser, imported on the first
    scrape: a plan, which scrapes nothing, is spared its import)."""
    from prometheus_client.parser import text_string_to_metric_families

    return text_string_to_metric_families(text)


def _samples(text: str, metric: str) -> list[Any]:
    return [sample for family in metric_families(text) for sample in family.samples if sample.name == metric]


def series_node(labels: Mapping[str, str]) -> str | None:
    """The node a DCGM series belongs to (:data:`NODE_LABELS`), None when it names none."""
    return next((labels[name] for name in NODE_LABELS if labels.get(name)), None)


def _scraped_driver(observation: Observation, node: str) -> str | None:
    """The driver version DCGM reports as a label on its samples (facts §6), when this node was scraped."""
    scrape = observation.metrics.get(node)
    if scrape is None or not scrape.text:
        return None
    try:
        for family in metric_families(scrape.text):
            for sample in family.samples:
                if sample.labels.get("DCGM_FI_DRIVER_VERSION"):
                    return str(sample.labels["DCGM_FI_DRIVER_VERSION"])
    except ValueError:
        return None
    return None


def _init_progress(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or ()
    done = sum(1 for s in statuses if ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0)
    return f"Init:{done}/{len(statuses)}" if statuses and done < len(statuses) else ""


def _labels(obj: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def node_name(node: Obj) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


_name = node_name


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
