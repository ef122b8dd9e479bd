"""Pod status as a kubelet writes it, from a rules outcome: what kubectl and clients read."""

from __future__ import annotations

from typing import Any

from gpuplan.sim.kubelet import pods
from gpuplan.sim.kubelet.outcomes import PodOutcome

AT = pods.Placement(
    host_ip="10.0.0.5",
    pod_ip="10.128.0.9",
    start_time="2026-01-01T00:00:00Z",
    now="2026-01-01T00:00:05Z",
    restarts=0,
)


def pod(inits: int = 0, containers: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "initContainers": [
                {"name": f"init-{i}", "image": "nvcr.io/nvidia/gpu-operator:v26.7.0"} for i in range(inits)
            ],
            "containers": [
                {"name": f"c{i}", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0"}
                for i in range(containers)
            ],
        },
    }


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_pending_status_right_after_binding() -> None:
    status = pods.pending_status(pod(), AT)
    assert status["phase"] == "Pending" and status["hostIP"] == "10.0.0.5" and "podIP" not in status
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert cond(status, "PodScheduled")["status"] == "True"
    assert cond(status, "Ready") == {
        "type": "Ready",
        "status": "False",
        "reason": "ContainersNotReady",
        "message": "containers with unready status: [c0]",
        "lastProbeTime": None,
        "lastTransitionTime": AT.now,
    }


def test_running_and_ready() -> None:
    status = pods.outcome_status(pod(inits=1), PodOutcome("Running", True, 1), AT)
    assert status["phase"] == "Running" and status["podIP"] == "10.128.0.9"
    main = status["containerStatuses"][0]
    assert main["ready"] and main["started"] and main["restartCount"] == 0
    assert main["state"] == {"running": {"startedAt": AT.start_time}}
    assert main["imageID"].startswith("nvcr.io/nvidia/k8s/dcgm-exporter@sha256:")
    assert main["containerID"].startswith("containerd://")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert all(cond(status, t)["status"] == "True" for t in ("Initialized", "ContainersReady", "Ready"))


def test_init_progress_shows_the_running_init_container() -> None:
    """Init:1/3: the first init container finished, the second runs, the third waits."""
    status = pods.outcome_status(
        pod(inits=3), PodOutcome("Pending", False, 1, "PodInitializing", "waiting"), AT
    )
    states = [s["state"] for s in status["initContainerStatuses"]]
    assert "terminated" in states[0] and "running" in states[1]
    assert states[2] == {"waiting": {"reason": "PodInitializing"}}
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert cond(status, "Initialized")["message"] == "containers with incomplete status: [init-1 init-2]"


def test_crash_loop_in_an_init_container_counts_restarts() -> None:
    at = pods.Placement(**{**AT.__dict__, "restarts": 3})
    outcome = PodOutcome("Pending", False, 0, "CrashLoopBackOff", "driver is in use", True)
    status = pods.outcome_status(pod(inits=2), outcome, at)
    init = status["initContainerStatuses"][0]
    assert init["state"]["waiting"] == {"reason": "CrashLoopBackOff", "message": "driver is in use"}
    assert init["restartCount"] == 3 and init["lastState"]["terminated"]["exitCode"] == 1


def test_main_container_crash_loop_and_image_pull_failures() -> None:
    at = pods.Placement(**{**AT.__dict__, "restarts": 2})
    crash = pods.outcome_status(pod(), PodOutcome("Running", False, 0, "CrashLoopBackOff", None, True), at)
    waiting = crash["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CrashLoopBackOff"
    assert waiting["message"].startswith("back-off 20s restarting failed container=c0 pod=p_ns(u-1)")
    pull = pods.outcome_status(pod(), PodOutcome("Pending", False, 0, "ImagePullBackOff", None), AT)
    waiting = pull["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {
        "reason": "ImagePullBackOff",
        "message": 'Back-off pulling image "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0"',
    }
    assert pull["containerStatuses"][0]["restartCount"] == 0


def test_sidecars_run_beside_an_unready_main_container() -> None:
    status = pods.outcome_status(pod(containers=2), PodOutcome("Running", False, 0, None, "not ready"), AT)
    main, sidecar = status["containerStatuses"]
    assert not main["ready"] and sidecar["ready"]
    assert cond(status, "Ready")["message"] == "containers with unready status: [c0]"


def test_the_statuses_of_one_image_share_one_image_id_string() -> None:
    first, second = (pods.outcome_status(pod(), PodOutcome("Running", True, 1), AT) for _ in range(2))
    assert first["containerStatuses"][0]["imageID"] is second["containerStatuses"][0]["imageID"]


def test_transition_times_only_move_when_the_status_does() -> None:
    first = pods.outcome_status(pod(), PodOutcome("Running", True, 0), AT)
    later = pods.Placement(**{**AT.__dict__, "now": "2026-01-01T00:09:00Z"})
    again = pods.keep_transition_times(
        pods.outcome_status(pod(), PodOutcome("Running", True, 0), later), first
    )
    assert cond(again, "Ready")["lastTransitionTime"] == AT.now
    assert pods.same_status(first, again)
    flipped = pods.keep_transition_times(
        pods.outcome_status(pod(), PodOutcome("Running", False, 0), later), first
    )
    assert cond(flipped, "Ready")["lastTransitionTime"] == later.now
    assert not pods.same_status(first, flipped)


def test_a_status_patch_holds_only_what_changed_and_nulls_what_went() -> None:
    from gpuplan.sim.api.patch import merge_patch

    pending = pods.pending_status(pod(), AT)
    running = pods.outcome_status(pod(), PodOutcome("Running", True, 0), AT)
    running.pop("qosClass", None)
    patch = pods.status_patch(running, pending)
    assert "hostIPs" not in patch and "startTime" not in patch  # the same as stored: left out
    assert patch["phase"] == "Running" and patch["containerStatuses"] == running["containerStatuses"]
    assert ("qosClass" in pending) == ("qosClass" in patch) and patch.get("qosClass", None) is None
    merged = merge_patch(pending, patch)
    assert merged == running and list(merged) == [k for k in pending if k in running] + [
        k for k in running if k not in pending
    ]
    assert merged["hostIPs"] is pending["hostIPs"]


def test_command_words_are_split_once_per_command_and_read_as_before() -> None:
    """A template's command and args are split once and kept; what each call answers is its own list, and
    parts that are not strings (1 and True are one key to a cache) are split as they are."""
    from gpuplan.sim.kubelet import images

    container = {"command": ["sh", "-c"], "args": ["nvidia-validator  --component\ndriver"]}
    first = images.command_words(container)
    assert first == ["sh", "-c", "nvidia-validator", "--component", "driver"]
    first.append("changed by a caller")
    assert images.command_words(dict(container)) == ["sh", "-c", "nvidia-validator", "--component", "driver"]
    assert images.command_words({"args": [1]}) == ["1"] and images.command_words({"args": [True]}) == ["True"]
    assert images.command_words({}) == []
    sidecar = {"name": "s", "image": "i", "args": ["config-manager --oneshot"]}
    main = {"name": "m", "image": "i", "args": ["run"]}
    assert images.main_container({"spec": {"containers": [sidecar, main]}}) is main


def test_the_kubelet_reports_the_qos_class_the_server_set() -> None:
    """Only cpu and memory count: a pod asking for GPUs alone is BestEffort (a real API server refuses a
    kubelet's other class: status.qosClass is immutable); a class already set is reported as it is."""
    gpu_only = pod()
    gpu_only["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    assert pods.pending_status(gpu_only, AT)["qosClass"] == "BestEffort"
    assert pods.outcome_status(gpu_only, PodOutcome("Running", True, 0), AT)["qosClass"] == "BestEffort"
    gpu_only["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
    assert pods.pending_status(gpu_only, AT)["qosClass"] == "Guaranteed"
