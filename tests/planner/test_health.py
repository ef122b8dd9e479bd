"""Health gates judged purely on hand-made objects: every state of a rollout (progressing, passed, slack,
a node joining), every failure a pod can show, and the node effects with the exact messages users read."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health import nodes as health_nodes
from gpuplan.planner.health.causes import CRASH_RESTARTS
from gpuplan.planner.health.gates import GateStatus, Observation, Scrape, combine, evaluate, parse_time

NOW = parse_time("2026-11-29T18:00:00Z") or 0.0
ROLLOUT = HealthCheck(
    "rollout", {"daemonset": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "timeoutSeconds": 300}
)
DS_UID = "ds-uid-1"
GFD_LABELS = [
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.family",
    "nvidia.com/cuda.driver-version.full",
]


def daemonset(
    *,
    generation: int = 2,
    observed: int = 2,
    desired: int = 1,
    updated: int = 1,
    available: int = 1,
    misscheduled: int = 0,
    strategy: str = "RollingUpdate",
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status = {
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": desired,
        "numberMisscheduled": misscheduled,
        "observedGeneration": observed,
    }
    # the real API omits these when 0 (DaemonSetStatus omitempty)
    status.update(
        {
            key: value
            for key, value in (("updatedNumberScheduled", updated), ("numberAvailable", available))
            if value
        }
    )
    pod_spec: dict[str, Any] = {
        "nodeSelector": node_selector or {"feature.node.kubernetes.io/pci-10de.present": "true"}
    }
    if affinity:
        pod_spec["affinity"] = affinity
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator",
            "generation": generation,
            "uid": DS_UID,
        },
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
            "updateStrategy": {"type": strategy},
            "template": {"spec": pod_spec},
        },
        "status": status,
    }


def pod(
    name: str = "nvidia-dcgm-exporter-x7k2p",
    node: str = "lab-node",
    *,
    ready: bool = True,
    waiting: tuple[str, str] | None = None,
    init_waiting: tuple[str, str] | None = None,
    generation: int = 2,
    owner: str = DS_UID,
    scheduled: tuple[str, str] | None = None,
    deleting: bool = False,
    restarts: int = 0,
) -> dict[str, Any]:
    """``restarts``: how often the waiting container restarted, each run ending with exit code 1."""
    crashed = {"restartCount": restarts, "lastState": {"terminated": {"exitCode": 1}}} if restarts else {}
    main: dict[str, Any] = {
        "name": "nvidia-dcgm-exporter",
        "ready": ready,
        "state": {"running": {}} if ready else {"waiting": {"reason": "ContainerCreating"}},
    }
    if waiting:
        main["state"] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        main.update(crashed)
    init: dict[str, Any] = {
        "name": "toolkit-validation",
        "ready": True,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    if init_waiting:
        init = {
            "name": "toolkit-validation",
            "ready": False,
            "state": {"waiting": {"reason": init_waiting[0], "message": init_waiting[1]}},
            **crashed,
        }
    conditions = [
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "message": "" if ready else "containers with unready status: [nvidia-dcgm-exporter]",
        },
        {"type": "PodScheduled", "status": "True"},
    ]
    if scheduled:
        conditions[1] = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient cpu.",
            "lastTransitionTime": scheduled[1],
        }
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "gpu-operator",
        "labels": {"app": "nvidia-dcgm-exporter", "pod-template-generation": str(generation)},
        "ownerReferences": [{"kind": "DaemonSet", "uid": owner, "controller": True}],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T17:59:00Z"
    spec = {"nodeName": node} if node and not scheduled else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "phase": "Running" if ready else "Pending",
            "conditions": conditions,
            "initContainerStatuses": [init],
            "containerStatuses": [main],
        },
    }


def node(
    name: str = "lab-node",
    *,
    gfd: bool = True,
    allocatable: str | None = "1",
    count: str = "1",
    driver: str = "580.105.08",
    handlers: tuple[str, ...] = ("runc", "nvidia"),
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    node_labels = {"kubernetes.io/hostname": name, "feature.node.kubernetes.io/pci-10de.present": "true"}
    if gfd:
        major, minor, revision = driver.split(".")
        node_labels.update(
            {
                "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060",
                "nvidia.com/gpu.count": count,
                "nvidia.com/gpu.family": "ampere",
                "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "6",
                "nvidia.com/cuda.driver-version.full": driver,
                "nvidia.com/cuda.driver-version.major": major,
                "nvidia.com/cuda.driver-version.minor": minor,
                "nvidia.com/cuda.driver-version.revision": revision,
            }
        )
    node_labels.update(labels or {})
    status: dict[str, Any] = {
        "allocatable": {"cpu": "16"},
        "runtimeHandlers": [{"name": h} for h in handlers],
    }
    if allocatable is not None:
        status["allocatable"]["nvidia.com/gpu"] = allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"taints": taints} if taints else {},
        "status": status,
    }


def metrics(*gpus: int, metric: str = "DCGM_FI_DEV_GPU_UTIL") -> str:
    lines = [f"# HELP {metric} GPU utilization (in %).", f"# TYPE {metric} gauge"]
    lines += [
        f'{metric}{{gpu="{gpu}",modelName="NVIDIA GeForce RTX 3060",hostname="lab-node",'
        f'DCGM_FI_DRIVER_VERSION="580.105.08"}} 0'
        for gpu in gpus
    ]
    return "\n".join(lines) + "\n"


def observe(**kwargs: Any) -> Observation:
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("daemonset", daemonset())
    kwargs.setdefault("pods", (pod(),))
    kwargs.setdefault("nodes", (node(),))
    return Observation(**kwargs)


# ------------------------------------------------------------------------------------------------ rollout


def test_a_complete_rollout_passes() -> None:
    status = evaluate(ROLLOUT, observe())
    assert (status.state, status.gate, status.ready, status.desired) == ("passed", "rollout", 1, 1)
    assert status.message == "DaemonSet gpu-operator/nvidia-dcgm-exporter: 1/1 pods updated and available"


def test_an_unobserved_generation_is_progressing() -> None:
    status = evaluate(ROLLOUT, observe(daemonset=daemonset(generation=3, observed=2)))
    assert status.state == "progressing"
    assert "generation 3 not yet observed (observed 2)" in status.message


def test_pods_not_yet_updated_are_progressing() -> None:
    status = evaluate(
        ROLLOUT,
        observe(
            daemonset=daemonset(desired=2, updated=1, available=2),
            pods=(pod(), pod("nvidia-dcgm-exporter-aaaaa", "gpu-1")),
        ),
    )
    assert (status.state, status.ready, status.desired) == ("progressing", 1, 2)
    assert status.message.endswith("1/2 pods updated, 2/2 available")


def test_no_slack_one_unavailable_pod_is_not_healthy() -> None:
    """Helm's legacy wait passes with maxUnavailable pods unready; the gate does not."""
    status = evaluate(ROLLOUT, observe(daemonset=daemonset(desired=2, updated=2, available=1)))
    assert status.state == "progressing"
    assert status.message.endswith("2/2 pods updated, 1/2 available")


def test_misscheduled_pods_keep_the_rollout_progressing() -> None:
    status = evaluate(ROLLOUT, observe(daemonset=daemonset(misscheduled=1)))
    assert status.state == "progressing" and "1 pod(s) on nodes it no longer targets" in status.message


def test_a_node_joining_is_progress_not_failure() -> None:
    """Desired grows from 1 to 2 while the new node's pod starts: progressing, and done once it is there."""
    joined = observe(
        daemonset=daemonset(desired=2, updated=1, available=1),
        pods=(pod(), pod("nvidia-dcgm-exporter-n3w11", "gpu-new", ready=False)),
        nodes=(node(), node("gpu-new", gfd=False, allocatable=None)),
    )
    status = evaluate(ROLLOUT, joined)
    assert (status.state, status.ready, status.desired) == ("progressing", 1, 2)
    settled = observe(
        daemonset=daemonset(desired=2, updated=2, available=2),
        pods=(pod(), pod("nvidia-dcgm-exporter-n3w11", "gpu-new")),
    )
    assert evaluate(ROLLOUT, settled).state == "passed"


def test_a_missing_daemonset_is_progressing() -> None:
    status = evaluate(ROLLOUT, observe(daemonset=None, pods=()))
    assert status.state == "progressing" and "does not exist yet" in status.message


def test_on_delete_waits_for_every_pod_of_the_current_generation() -> None:
    check = HealthCheck("rollout", {**ROLLOUT.params, "strategy": "OnDelete"})
    # OnDelete: the controller's counters look complete while the old pod still runs the old template
    ds = daemonset(strategy="OnDelete")
    ds["spec"]["template"]["spec"]["containers"] = [{"name": "ctr", "image": "driver:595"}]
    stale = pod(generation=1)
    stale["spec"]["containers"] = [{"name": "ctr", "image": "driver:580"}]
    old = observe(daemonset=ds, pods=(stale,))
    status = evaluate(check, old)
    assert status.state == "progressing"
    assert (
        "0/1 pods of the current template (generation 2) ready; still on an older template: "
        "nvidia-dcgm-exporter-x7k2p"
    ) in status.message
    restarted = observe(daemonset=daemonset(strategy="OnDelete"), pods=(pod(generation=2),))
    assert evaluate(check, restarted).state == "passed"
    unready = observe(daemonset=daemonset(strategy="OnDelete"), pods=(pod(generation=2, ready=False),))
    assert evaluate(check, unready).state == "progressing"


def test_on_delete_after_a_restore_counts_pods_current_by_revision_hash_or_what_they_run() -> None:
    """Restoring the old template makes generation 3; the pods that never left it still say generation 1.
    The gate judges them as the driver rollout does (health.in_sync): by revision hash, else by containers."""
    check = HealthCheck("rollout", {**ROLLOUT.params, "strategy": "OnDelete"})
    ds = daemonset(generation=3, observed=3, strategy="OnDelete")
    ds["spec"]["template"]["spec"]["containers"] = [{"name": "ctr", "image": "driver:580"}]
    restored = pod(generation=1)
    restored["metadata"]["labels"]["controller-revision-hash"] = "old-hash"
    restored["spec"]["containers"] = [{"name": "ctr", "image": "driver:580"}]
    assert (
        evaluate(check, observe(daemonset=ds, pods=(restored,), revision_hash="old-hash")).state == "passed"
    )
    assert (
        evaluate(check, observe(daemonset=ds, pods=(restored,))).state == "passed"
    )  # no hash: the containers
    assert (
        evaluate(check, observe(daemonset=ds, pods=(restored,), revision_hash="new-hash")).state
        == "progressing"
    )
    restored["spec"]["containers"] = [{"name": "ctr", "image": "driver:595"}]
    assert evaluate(check, observe(daemonset=ds, pods=(restored,))).state == "progressing"


# ------------------------------------------------------------------------------------------- pod failures


@pytest.mark.parametrize(
    "reason",
    [
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "RunContainerError",
    ],
)
def test_a_pod_that_cannot_start_fails_at_once(reason: str) -> None:
    """A crash loop counts once it has restarted CRASH_RESTARTS times the same way (see the crash tests)."""
    message = f"back-off 10s restarting failed container=nvidia-dcgm-exporter ({reason})"
    broken = observe(
        daemonset=daemonset(updated=1, available=0),
        pods=(pod(ready=False, waiting=(reason, message), restarts=CRASH_RESTARTS),),
    )
    status = evaluate(ROLLOUT, broken)
    assert status.state == "failed"
    assert (status.node, status.pod, status.container, status.reason) == (
        "lab-node",
        "nvidia-dcgm-exporter-x7k2p",
        "nvidia-dcgm-exporter",
        reason,
    )
    crashes = "; 3 restarts, each ended with exit code 1" if reason == "CrashLoopBackOff" else ""
    assert status.message == f"nvidia-dcgm-exporter-x7k2p on lab-node: {reason} ({message}){crashes}"


def test_an_init_container_failure_is_named_as_kubectl_shows_it() -> None:
    broken = observe(pods=(pod(ready=False, init_waiting=("CrashLoopBackOff", "back-off 20s"), restarts=4),))
    status = evaluate(ROLLOUT, broken)
    assert (status.state, status.reason, status.container) == (
        "failed",
        "Init:CrashLoopBackOff",
        "toolkit-validation",
    )
    assert status.message == (
        "nvidia-dcgm-exporter-x7k2p on lab-node: Init:CrashLoopBackOff (back-off 20s); 4 restarts, each "
        "ended with exit code 1"
    )


def test_terminating_and_foreign_pods_do_not_fail_the_gate() -> None:
    crashing = ("CrashLoopBackOff", "back-off")
    leftovers = observe(
        pods=(
            pod(),
            pod("old-1", ready=False, waiting=crashing, deleting=True),
            pod("other-owner", ready=False, waiting=crashing, owner="old-ds"),
        )
    )
    assert evaluate(ROLLOUT, leftovers).state == "passed"


def test_an_older_templates_crashing_pod_is_not_the_verdict() -> None:
    """Rolling back from a broken version: until the controller replaces it, the crash-looping pod of the
    previous template is still there; the gate waits for the current template's pod instead of failing."""
    crashing = ("CrashLoopBackOff", "back-off 10s")
    rollback = observe(
        daemonset=daemonset(generation=3, observed=3, updated=0, available=0),
        pods=(pod(ready=False, waiting=crashing, generation=2),),
    )
    status = evaluate(ROLLOUT, rollback)
    assert status.state == "progressing" and status.message.endswith("0/1 pods updated, 0/1 available")
    current = observe(
        daemonset=daemonset(generation=3, observed=3, updated=1, available=0),
        pods=(pod(ready=False, waiting=crashing, generation=3, restarts=CRASH_RESTARTS),),
    )
    assert evaluate(ROLLOUT, current).state == "failed"


def test_unschedulable_fails_only_after_the_grace_period() -> None:
    recent = observe(
        pods=(pod(ready=False, scheduled=("False", "2026-11-29T17:59:50Z")),),
        daemonset=daemonset(available=0),
    )
    assert evaluate(ROLLOUT, recent).state == "progressing"
    stuck = observe(
        pods=(pod(ready=False, scheduled=("False", "2026-11-29T17:59:00Z")),),
        daemonset=daemonset(available=0),
    )
    status = evaluate(ROLLOUT, stuck)
    assert (status.state, status.reason) == ("failed", "Unschedulable")
    assert status.message == (
        "nvidia-dcgm-exporter-x7k2p: Unschedulable for 60s (0/1 nodes are available: 1 Insufficient cpu.)"
    )


# ------------------------------------------------------------------------------------------- node effects


def test_allocatable_names_the_node_the_count_and_the_expectation() -> None:
    check = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
    status = evaluate(check, observe(nodes=(node(allocatable="0"),)))
    assert (status.state, status.node) == ("progressing", "lab-node")
    assert status.message == "lab-node: allocatable nvidia.com/gpu is 0, expected 1"
    assert evaluate(check, observe()).state == "passed"


def test_allocatable_is_gpus_times_replicas() -> None:
    check = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 4})
    assert evaluate(check, observe(nodes=(node(allocatable="4"),))).state == "passed"
    status = evaluate(check, observe(nodes=(node(allocatable="4", count="2"),)))
    assert status.message == "lab-node: allocatable nvidia.com/gpu is 4, expected 8"


def test_allocatable_before_gfd_counted_the_gpus() -> None:
    check = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
    assert evaluate(check, observe(nodes=(node(gfd=False, allocatable="1"),))).state == "passed"
    status = evaluate(check, observe(nodes=(node(gfd=False, allocatable=None),)))
    assert status.message == (
        "lab-node: allocatable nvidia.com/gpu is 0, expected at least 1 "
        "(the GPU count is unknown until GFD labels the node)"
    )


def test_gfd_labels_missing_and_inconsistent() -> None:
    check = HealthCheck("gfd-labels", {"labels": GFD_LABELS})
    assert evaluate(check, observe(expected_driver="580.105.08")).state == "passed"
    missing = evaluate(check, observe(nodes=(node(gfd=False),)))
    assert missing.message.startswith("lab-node: label nvidia.com/gpu.product missing")
    family = evaluate(check, observe(nodes=(node(labels={"nvidia.com/gpu.family": "hopper"}),)))
    assert (
        family.message
        == "lab-node: label nvidia.com/gpu.family is hopper, but compute capability 8.6 is ampere"
    )
    driver = evaluate(check, observe(expected_driver="595.91.07"))
    assert (
        driver.message
        == "lab-node: label nvidia.com/cuda.driver-version.full is 580.105.08, expected 595.91.07"
    )
    invalid = evaluate(
        check,
        observe(
            nodes=(
                node(
                    labels={
                        "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-INVALID",
                        "nvidia.com/gpu.count": "0",
                    }
                ),
            )
        ),
    )
    assert invalid.state == "progressing" and "MIG-INVALID" in invalid.message


def test_dcgm_metrics_need_one_sample_per_gpu() -> None:
    check = HealthCheck("dcgm-metrics", {"port": 9400, "path": "/metrics", "metric": "DCGM_FI_DEV_GPU_UTIL"})
    good = evaluate(check, observe(metrics={"lab-node": Scrape("exp-1", text=metrics(0))}))
    assert good.state == "passed"
    empty = evaluate(check, observe(metrics={"lab-node": Scrape("exp-1", text=metrics())}))
    assert empty.message == "lab-node: DCGM metrics have 0 samples of DCGM_FI_DEV_GPU_UTIL, expected 1"
    short = evaluate(
        check,
        observe(
            nodes=(node(count="2", allocatable="2"),), metrics={"lab-node": Scrape("exp-1", text=metrics(0))}
        ),
    )
    assert short.message == "lab-node: DCGM metrics have 1 samples of DCGM_FI_DEV_GPU_UTIL, expected 2"
    failed = evaluate(check, observe(metrics={"lab-node": Scrape("exp-1", error="503 no endpoints")}))
    assert failed.message == "lab-node: DCGM metrics of exp-1 could not be read: 503 no endpoints"
    assert evaluate(check, observe()).message == "lab-node: no DCGM exporter pod runs there to scrape"


def test_runtime_handler_and_driver_version() -> None:
    handler = HealthCheck("runtime-handler", {"handler": "nvidia"})
    assert evaluate(handler, observe()).state == "passed"
    assert (
        evaluate(handler, observe(nodes=(node(handlers=("runc",)),))).message
        == "lab-node: runtime handler nvidia missing (the node reports: runc)"
    )
    version = HealthCheck("driver-version", {"version": "580.105.08"})
    assert evaluate(version, observe()).state == "passed"
    assert (
        evaluate(version, observe(nodes=(node(driver="570.1.2"),))).message
        == "lab-node: driver 570.1.2, expected 580.105.08"
    )
    # no GFD label: DCGM's DCGM_FI_DRIVER_VERSION sample label reports the driver too (facts §6)
    scraped = observe(nodes=(node(gfd=False),), metrics={"lab-node": Scrape("exp-1", text=metrics(0))})
    assert evaluate(version, scraped).state == "passed"
    assert (
        evaluate(version, observe(nodes=(node(gfd=False),))).message
        == "lab-node: driver version not reported (no label nvidia.com/cuda.driver-version.full)"
    )


def test_validator_ready_and_its_failures() -> None:
    check = HealthCheck(
        "validator-ready", {"selector": "app=nvidia-operator-validator", "namespace": "gpu-operator"}
    )
    assert evaluate(check, observe()).state == "passed"
    unready = evaluate(check, observe(pods=(pod("nvidia-operator-validator-abcde", ready=False),)))
    assert unready.message.startswith("lab-node: nvidia-operator-validator-abcde is not Ready (")
    assert evaluate(check, observe(pods=())).message == "lab-node: no validator pod runs there"
    crashing = pod(ready=False, init_waiting=("CrashLoopBackOff", "cuda"), restarts=CRASH_RESTARTS)
    crash = evaluate(check, observe(pods=(crashing,)))
    assert (crash.state, crash.reason) == ("failed", "Init:CrashLoopBackOff")


def test_the_validator_gate_looks_each_pod_up_once_per_round_not_once_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each targeted node's validator pod is found in an index of the round's pods, built once: searching all
    the pods for each node's cost nodes x pods a round (25 million tests at 5,000 nodes)."""
    check = HealthCheck(
        "validator-ready", {"selector": "app=nvidia-operator-validator", "namespace": "gpu-operator"}
    )
    names = [f"gpu-{index:03d}" for index in range(200)]
    fleet = observe(
        daemonset=daemonset(desired=200, updated=200, available=200),
        nodes=tuple(node(name) for name in names),
        pods=tuple(pod(f"nvidia-operator-validator-{name}", name) for name in names),
    )
    looked_up: list[str | None] = []
    node_of = health_nodes.node_of

    def counted(obj: Any) -> str | None:
        looked_up.append(node_of(obj))
        return node_of(obj)

    monkeypatch.setattr(health_nodes, "node_of", counted)
    assert evaluate(check, fleet).message == "validator-ready: 200/200 node(s)"
    assert len([name for name in looked_up if name in names]) <= 2 * len(names)
    unready = replace(
        fleet, pods=(*fleet.pods[:-1], pod("nvidia-operator-validator-gpu-199", "gpu-199", ready=False))
    )
    assert evaluate(check, unready).message.startswith(
        "gpu-199: nvidia-operator-validator-gpu-199 is not Ready"
    )


def test_effects_are_checked_on_every_targeted_node_only() -> None:
    """A new node without effects yet is progress (1/2); an untargeted or untolerated node does not count."""
    check = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
    joining = evaluate(check, observe(nodes=(node(), node("gpu-new", gfd=False, allocatable=None))))
    assert (joining.state, joining.node, joining.ready, joining.desired) == ("progressing", "gpu-new", 1, 2)
    cpu_only = node("cpu-1", gfd=False, allocatable=None, labels={})
    del cpu_only["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"]
    tainted = node(
        "tainted", allocatable=None, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    )
    paused = node(
        "paused", allocatable=None, labels={"nvidia.com/gpu.deploy.dcgm-exporter": "paused-for-mig-change"}
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.deploy.dcgm-exporter",
                                "operator": "NotIn",
                                "values": ["false", "paused-for-mig-change"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    cordoned = node("cordoned", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    status = evaluate(
        check,
        observe(daemonset=daemonset(affinity=affinity), nodes=(node(), cpu_only, tainted, paused, cordoned)),
    )
    assert (status.state, status.ready, status.desired) == ("passed", 2, 2)
    tolerated = daemonset(affinity=affinity, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    status = evaluate(check, observe(daemonset=tolerated, nodes=(node(), tainted)))
    assert (status.state, status.node) == ("progressing", "tainted")


def test_a_component_without_a_daemonset_uses_the_stack_node_selector() -> None:
    check = HealthCheck("runtime-handler", {"handler": "nvidia"})
    other = node("gpu-b", handlers=("runc",), labels={"pool": "b"})
    status = evaluate(
        check, observe(daemonset=None, nodes=(node(labels={"pool": "a"}), other), node_selector={"pool": "a"})
    )
    assert status.state == "passed"


def test_combine_prefers_failures_then_progress() -> None:
    passed, progressing = GateStatus("passed", "ok"), GateStatus("progressing", "wait")
    failed = GateStatus("failed", "broken")
    assert combine([passed, progressing, failed]) is failed
    assert combine([passed, progressing]) is progressing
    assert combine([passed, passed]).state == "passed"


def tampered(count: str, *, capacity: str, manager: str) -> dict[str, Any]:
    """A node whose gpu.count label ``manager`` wrote last, with the device plugin's ``capacity``."""
    tampered_node = node(count=count, allocatable=capacity)
    tampered_node["status"]["capacity"] = {"nvidia.com/gpu": capacity}
    tampered_node["metadata"]["managedFields"] = [
        {
            "manager": "gpu-feature-discovery",
            "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.product": {}}}},
        },
        {
            "manager": manager,
            "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
        },
    ]
    return tampered_node


def test_a_hand_written_gpu_count_is_gfds_drift_not_the_device_plugins_or_the_exporters() -> None:
    """`kubectl label --overwrite nvidia.com/gpu.count=4` on an 8-GPU node: the GFD gate names the label and
    who wrote it; the device plugin (8 allocatable) and the exporter (8 GPUs scraped) stay healthy."""
    edited = tampered("4", capacity="8", manager="kubectl-label")
    eight = {"lab-node": Scrape("exp-1", text=metrics(*range(8)))}
    gfd = evaluate(HealthCheck("gfd-labels", {"labels": GFD_LABELS}), observe(nodes=(edited,)))
    assert gfd.message == (
        "lab-node: label nvidia.com/gpu.count is 4, but the device plugin advertises 8 GPUs; the label was "
        "written by kubectl-label, not GPU Feature Discovery"
    )
    plugin = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
    assert evaluate(plugin, observe(nodes=(edited,))).state == "passed"
    exporter = HealthCheck(
        "dcgm-metrics", {"port": 9400, "path": "/metrics", "metric": "DCGM_FI_DEV_GPU_UTIL"}
    )
    assert evaluate(exporter, observe(nodes=(edited,), metrics=eight)).state == "passed"


def test_a_count_gfd_wrote_still_holds_the_device_plugin_to_it() -> None:
    """GFD's own label against a device plugin advertising half the GPUs: the device plugin is at fault."""
    short = tampered("8", capacity="4", manager="gpu-feature-discovery")
    gfd = evaluate(HealthCheck("gfd-labels", {"labels": GFD_LABELS}), observe(nodes=(short,)))
    assert gfd.state == "passed"
    plugin = evaluate(
        HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1}), observe(nodes=(short,))
    )
    assert plugin.message == "lab-node: allocatable nvidia.com/gpu is 4, expected 8"


# ------------------------------------------------------------------------------- permanent or transient


@pytest.mark.parametrize(
    ("reason", "message", "state"),
    [
        ("ErrImagePull", 'failed to resolve reference "x:v9": x:v9: not found', "failed"),
        (
            "ErrImagePull",
            "pull access denied, repository does not exist or may require authorization",
            "failed",
        ),
        ("ImagePullBackOff", 'Back-off pulling image "x:v9": ErrImagePull: 401 Unauthorized', "failed"),
        ("ImagePullBackOff", 'Back-off pulling image "x:v9"', "failed"),
        ("ErrImagePull", "dial tcp 10.0.0.1:443: i/o timeout", "progressing"),
        (
            "ImagePullBackOff",
            'Back-off pulling image "x:v9": ErrImagePull: 503 Service Unavailable',
            "progressing",
        ),
        ("ErrImagePull", "dial tcp: lookup nvcr.io on 127.0.0.53:53: no such host", "failed"),
        ("ErrImagePull", "dial tcp: lookup nvcr.io: Temporary failure in name resolution", "progressing"),
    ],
)
def test_a_pull_error_is_permanent_unless_it_names_a_network_hiccup(
    reason: str, message: str, state: str
) -> None:
    broken = observe(
        daemonset=daemonset(updated=1, available=0), pods=(pod(ready=False, waiting=(reason, message)),)
    )
    status = evaluate(ROLLOUT, broken)
    assert (status.state, status.reason) == (state, reason)
    assert message in status.message


def test_a_crash_loop_is_transient_until_it_restarted_enough() -> None:
    crashing = ("CrashLoopBackOff", "back-off 10s")
    early = observe(
        daemonset=daemonset(updated=1, available=0), pods=(pod(ready=False, waiting=crashing, restarts=1),)
    )
    status = evaluate(ROLLOUT, early)
    assert (status.state, status.reason) == ("progressing", "CrashLoopBackOff")
    assert status.message.endswith("restart 1 of 3 before it counts as failed (exit code 1)")


def test_a_pod_no_node_can_take_fails_without_the_grace_period() -> None:
    stuck = pod(ready=False, scheduled=("False", "2026-11-29T17:59:59Z"))
    stuck["status"]["conditions"][1]["message"] = (
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    )
    status = evaluate(ROLLOUT, observe(pods=(stuck,), daemonset=daemonset(available=0)))
    assert (status.state, status.reason) == ("failed", "Unschedulable")
    assert status.message.endswith("didn't match Pod's node affinity/selector.); waiting cannot place it")


# ------------------------------------------------------------------------------------------------ MIG

MIG_GATE = HealthCheck("mig-config", {"config": "all-1g.10gb"})


def _mig_node(config: str | None, state: str | None) -> dict[str, Any]:
    labels = {"nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state}
    return node(labels={k: v for k, v in labels.items() if v is not None})


def test_mig_config_waits_for_the_label_and_success() -> None:
    status = evaluate(MIG_GATE, observe(nodes=(_mig_node(None, None),)))
    assert (status.state, status.message) == (
        "progressing",
        "lab-node: label nvidia.com/mig.config is not set, expected all-1g.10gb",
    )
    status = evaluate(MIG_GATE, observe(nodes=(_mig_node("all-1g.10gb", "pending"),)))
    assert status.message == (
        "lab-node: MIG config all-1g.10gb not applied yet (nvidia.com/mig.config.state is pending)"
    )
    assert evaluate(MIG_GATE, observe(nodes=(_mig_node("all-1g.10gb", "success"),))).state == "passed"


def test_mig_config_failed_fails_at_once_naming_node_and_config() -> None:
    status = evaluate(MIG_GATE, observe(nodes=(_mig_node("all-1g.10gb", "failed"),)))
    assert (status.state, status.node) == ("failed", "lab-node")
    assert "could not apply MIG config all-1g.10gb (nvidia.com/mig.config.state=failed)" in status.message
    # a failure of another config (the label not rewritten yet) is progress, not the verdict
    assert evaluate(MIG_GATE, observe(nodes=(_mig_node("all-disabled", "failed"),))).state == "progressing"


def test_allocatable_on_a_mixed_mig_node_counts_each_profile() -> None:
    check = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
    mixed = node(count="8", allocatable="0", labels={"nvidia.com/mig-1g.10gb.count": "56"})
    mixed["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "56"
    assert evaluate(check, observe(nodes=(mixed,))).state == "passed"
    mixed["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "0"
    status = evaluate(check, observe(nodes=(mixed,)))
    assert status.message == "lab-node: allocatable nvidia.com/mig-1g.10gb is 0, expected 56"
