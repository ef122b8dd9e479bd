"""Pod status as a kubelet writes it: phase, conditions, container and init-container statuses.

The kubelet rules (``gpuplan.sim.kubelet.rules``) decide *what* a pod's containers do on a node (a
``PodOutcome``: phase, ready, how many init containers finished, the waiting reason and message); this module
turns that into the ``status`` a real kubelet reports, so ``kubectl get pods`` shows ``Init:0/1``,
``ContainerCreating``, ``CrashLoopBackOff`` or ``1/1 Running`` as on a real cluster, and clients reading
``containerStatuses`` find ready, restartCount, state, image, imageID and containerID.

Pure functions; called by ``gpuplan.sim.kubelet.runtime`` (which writes the result through the pods' status
subresource as field manager ``kubelet``).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from gpuplan.sim.api import strategy
from gpuplan.sim.kubelet import crash_loop

Obj = dict[str, Any]

FAILING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "RunContainerError",
        "CreateContainerConfigError",
        "InvalidImageName",
    }
)


class Outcome(Protocol):
    """The fields of ``gpuplan.sim.kubelet.rules.PodOutcome`` this module reads."""

    @property
    def phase(self) -> str: ...
    @property
    def ready(self) -> bool: ...
    @property
    def init_done(self) -> int: ...
    @property
    def waiting_reason(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def exit_code(self) -> int | None: ...


@dataclass(frozen=True)
class Placement:
    """Where and since when the pod runs: what the kubelet knows besides the outcome."""

    host_ip: str
    pod_ip: str
    start_time: str  # RFC 3339, when the kubelet first saw the pod
    now: str  # RFC 3339, this write
    restarts: int  # restarts of the failing container so far
    backoff_step: int = 0  # how far its crash-loop back-off went (crash_loop.BackOff.step; 0: restarts)
    last_exit_code: int | None = None  # how the main container's run before its current state ended


@functools.lru_cache(maxsize=1024)
def image_id(image: str) -> str:
    """``repo@sha256:<digest>`` as containerd reports a pulled image (a stable digest per image): one string
    per image, which every status that reports it shares."""
    repo = image.split("@")[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    if "/" not in repo.split(":")[0] or "." not in repo.split("/")[0]:
        repo = f"docker.io/{repo if '/' in repo else 'library/' + repo}"
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_id(pod: Obj, container: str, restarts: int) -> str:
    seed = f"{pod['metadata'].get('uid', '')}/{container}/{restarts}".encode()
    return f"containerd://{hashlib.sha256(seed).hexdigest()}"


def pending_status(pod: Obj, at: Placement) -> Obj:
    """What the kubelet reports right after it accepts a pod: sandbox not ready, containers being created."""
    inits = _containers(pod, "initContainers")
    mains = _containers(pod, "containers")
    first_reason = "PodInitializing" if inits else "ContainerCreating"
    status: Obj = {
        "phase": "Pending",
        "hostIP": at.host_ip,
        "hostIPs": [{"ip": at.host_ip}],
        "startTime": at.start_time,
        "qosClass": _qos_class(pod),
        "containerStatuses": [
            _waiting(c, "ContainerCreating" if not inits else "PodInitializing", None, 0) for c in mains
        ],
    }
    if inits:
        status["initContainerStatuses"] = [_waiting(c, first_reason, None, 0) for c in inits]
    status["conditions"] = _conditions(pod, status, at.now, sandbox=False, init_done=0, ready=False)
    return status


def outcome_status(pod: Obj, outcome: Outcome, at: Placement) -> Obj:
    """The status for a pod the rules evaluated to ``outcome``."""
    inits = _containers(pod, "initContainers")
    mains = _containers(pod, "containers")
    init_done = min(outcome.init_done, len(inits))
    reason = outcome.waiting_reason
    status: Obj = {
        "phase": outcome.phase,
        "hostIP": at.host_ip,
        "hostIPs": [{"ip": at.host_ip}],
        "startTime": at.start_time,
        "qosClass": _qos_class(pod),
    }
    if reason != "ContainerCreating":
        status["podIP"] = at.pod_ip
        status["podIPs"] = [{"ip": at.pod_ip}]
    if inits:
        status["initContainerStatuses"] = [
            _init_status(pod, c, i, init_done, outcome, at) for i, c in enumerate(inits)
        ]
    status["containerStatuses"] = [
        _main_status(pod, c, i, init_done >= len(inits), outcome, at) for i, c in enumerate(mains)
    ]
    if outcome.phase in ("Failed", "Succeeded") and outcome.message and outcome.exit_code is None:
        status["message"] = outcome.message
    terminal = outcome.phase if outcome.phase in ("Failed", "Succeeded") else None
    status["conditions"] = _conditions(
        pod,
        status,
        at.now,
        sandbox=reason != "ContainerCreating" and terminal is None,
        init_done=init_done,
        ready=outcome.ready,
        terminal=terminal,
    )
    return status


def keep_transition_times(new: Obj, old: Obj | None) -> Obj:
    """A condition's lastTransitionTime changes only when its status does, as on a real kubelet."""
    before = {c["type"]: c for c in (old or {}).get("conditions") or []}
    for cond in new.get("conditions") or []:
        prev = before.get(cond["type"])
        if prev is not None and prev.get("status") == cond["status"] and prev.get("lastTransitionTime"):
            cond["lastTransitionTime"] = prev["lastTransitionTime"]
    return new


def same_status(a: Obj | None, b: Obj | None) -> bool:
    """Equal apart from timestamps that a rewrite would refresh (what decides whether to write). Most
    re-evaluations rebuild the stored status exactly: compared at once, before the walk that skips times."""
    a, b = a or {}, b or {}
    return a == b or _equal_apart_from_times(a, b)


def status_patch(status: Obj, old: Obj | None) -> Obj:
    """The merge patch that turns the stored status ``old`` into ``status``: the fields that changed, null
    for those gone. A real kubelet's status manager sends a two-way patch of the old and new status too
    (kubernetes pkg/util/pod/pod.go, ``PatchPodStatus``); the fields it leaves out stay the stored ones, so
    the write neither copies nor re-shares them. The kubelet builds each field with the same types every
    time, so ``==`` (which takes ``1`` for ``True``) tells a changed field."""
    before = old or {}
    patch: Obj = {k: None for k in before if k not in status}
    patch.update((k, v) for k, v in status.items() if k not in before or before[k] != v)
    return patch


def _init_status(pod: Obj, c: Obj, index: int, init_done: int, outcome: Outcome, at: Placement) -> Obj:
    if index < init_done:
        return _terminated(pod, c, 0, "Completed", None, at)
    if index > init_done:
        return _waiting(c, "PodInitializing", None, 0)
    reason = outcome.waiting_reason
    if reason in FAILING_REASONS:
        return _failing(pod, c, reason, outcome.message, at)
    if reason == "ContainerCreating":
        return _waiting(c, "PodInitializing", None, 0)
    return _running(pod, c, ready=False, at=at, restarts=0)


def _main_status(pod: Obj, c: Obj, index: int, inits_done: bool, outcome: Outcome, at: Placement) -> Obj:
    reason = outcome.waiting_reason
    if not inits_done:
        return _waiting(c, "PodInitializing", None, 0)
    if outcome.phase in ("Succeeded", "Failed"):
        code = outcome.exit_code if outcome.exit_code is not None else int(outcome.phase == "Failed")
        restarts = at.restarts if index == 0 else 0
        status = _terminated(
            pod, c, code, _exit_reason(code, reason), outcome.message, at, ready=False, restarts=restarts
        )
        if index == 0 and at.restarts > 0:
            status["lastState"] = _last_state(pod, c, _previous_exit(at), at)
        return status
    if index == 0 and reason in FAILING_REASONS:
        status = _failing(pod, c, reason, outcome.message, at)
        if outcome.exit_code is not None:  # the run that just ended
            status["lastState"] = _last_state(pod, c, outcome.exit_code, at)
        return status
    if index == 0 and reason is not None:
        return _waiting(c, reason, outcome.message, 0)
    # the main container follows the outcome (its restartCount stays after a crash loop healed); sidecars
    # (config-manager, ...) just run
    ready = outcome.ready or (index > 0 and outcome.phase == "Running")
    status = _running(pod, c, ready=ready, at=at, restarts=at.restarts if index == 0 else 0)
    if index == 0 and at.restarts > 0 and at.last_exit_code is not None:  # restarted after it exited
        status["lastState"] = _last_state(pod, c, at.last_exit_code, at)
    return status


def _failing(pod: Obj, c: Obj, reason: str, message: str | None, at: Placement) -> Obj:
    if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
        if message is None:
            message = (
                f'Back-off pulling image "{c.get("image", "")}"'
                if reason == "ImagePullBackOff"
                else f'failed to pull and unpack image "{c.get("image", "")}"'
            )
        return _waiting(c, reason, message, 0)
    status = _waiting(
        c, reason, message or _backoff_message(pod, c, at.backoff_step or at.restarts), at.restarts
    )
    status["imageID"] = image_id(c.get("image", ""))
    if at.restarts > 0:
        status["lastState"] = _last_state(pod, c, _previous_exit(at), at)
        status["containerID"] = container_id(pod, c["name"], at.restarts - 1)
    return status


def _last_state(pod: Obj, c: Obj, code: int, at: Placement) -> Obj:
    """The run before the current one (``lastState``): how it ended."""
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": at.start_time,
            "finishedAt": at.now,
            "containerID": container_id(pod, c["name"], max(at.restarts - 1, 0)),
        }
    }


def _previous_exit(at: Placement) -> int:
    return 1 if at.last_exit_code is None else at.last_exit_code


def _exit_reason(code: int, waiting_reason: str | None) -> str:
    if code == 0:
        return "Completed"
    return "StartError" if waiting_reason == "RunContainerError" else "Error"


def _backoff_message(pod: Obj, c: Obj, step: int) -> str:
    """The kubelet's CrashLoopBackOff message, naming the real (unscaled) delay of back-off ``step``."""
    delay = int(crash_loop.delay(crash_loop.REAL_FIRST_DELAY_SECONDS, step))
    meta = pod["metadata"]
    return (
        f"back-off {_duration(delay)} restarting failed container={c['name']} "
        f"pod={meta['name']}_{meta.get('namespace', '')}({meta.get('uid', '')})"
    )


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{seconds}s"


def _running(pod: Obj, c: Obj, *, ready: bool, at: Placement, restarts: int) -> Obj:
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": image_id(c.get("image", "")),
        "containerID": container_id(pod, c["name"], restarts),
        "ready": ready,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": at.start_time}},
    }


def _terminated(
    pod: Obj,
    c: Obj,
    code: int,
    reason: str,
    message: str | None,
    at: Placement,
    *,
    ready: bool = True,
    restarts: int = 0,
) -> Obj:
    """A container that ran to its end (``ready``: an init container that completed reports ready), after
    ``restarts`` restarts."""
    term: Obj = {
        "exitCode": code,
        "reason": reason,
        "startedAt": at.start_time,
        "finishedAt": at.now,
        "containerID": container_id(pod, c["name"], restarts),
    }
    if message:
        term["message"] = message
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": image_id(c.get("image", "")),
        "containerID": container_id(pod, c["name"], restarts),
        "ready": ready and reason == "Completed",
        "started": False,
        "restartCount": restarts,
        "state": {"terminated": term},
    }


def _waiting(c: Obj, reason: str, message: str | None, restarts: int) -> Obj:
    waiting: Obj = {"reason": reason}
    if message:
        waiting["message"] = message
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": restarts,
        "state": {"waiting": waiting},
    }


def _conditions(
    pod: Obj,
    status: Obj,
    now: str,
    *,
    sandbox: bool,
    init_done: int,
    ready: bool,
    terminal: str | None = None,
) -> list[Obj]:
    """``terminal``: the pod's phase when it is Succeeded or Failed (the kubelet's generate.go then gives
    Ready and ContainersReady the reason PodCompleted or PodFailed)."""
    inits = _containers(pod, "initContainers")
    mains = _containers(pod, "containers")
    conds = [_cond("PodReadyToStartContainers", sandbox, now)]
    if terminal is not None:
        done = "PodCompleted" if terminal == "Succeeded" else "PodFailed"
        initialized = "PodCompleted" if terminal == "Succeeded" else None
        return conds + [
            _cond("Initialized", True, now, initialized),
            _cond("Ready", False, now, done),
            _cond("ContainersReady", False, now, done),
            _cond("PodScheduled", True, now),
        ]
    if init_done >= len(inits):
        conds.append(_cond("Initialized", True, now))
    else:
        pending = [c["name"] for c in inits[init_done:]]
        conds.append(
            _cond(
                "Initialized",
                False,
                now,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(pending)}]",
            )
        )
    unready = [s["name"] for s in status.get("containerStatuses", []) if not s.get("ready")]
    if ready and not unready:
        conds += [_cond("Ready", True, now), _cond("ContainersReady", True, now)]
    else:
        names = " ".join(unready or [c["name"] for c in mains])
        message = f"containers with unready status: [{names}]"
        conds += [
            _cond("Ready", False, now, "ContainersNotReady", message),
            _cond("ContainersReady", False, now, "ContainersNotReady", message),
        ]
    conds.append(_cond("PodScheduled", True, now))
    return conds


def _cond(type_: str, ok: bool, now: str, reason: str | None = None, message: str | None = None) -> Obj:
    cond: Obj = {
        "type": type_,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _containers(pod: Obj, field: str) -> list[Obj]:
    return list(pod.get("spec", {}).get(field) or [])


def _qos_class(pod: Obj) -> str:
    """The class the API server set at create (the kubelet's GetPodQOS reads it back: pkg/apis/core/helper/
    qos/qos.go), else the one it would set; only cpu and memory count, so a pod that asks for GPUs alone is
    BestEffort. Another class is refused: status.qosClass is immutable (ValidatePodStatusUpdate)."""
    known = (pod.get("status") or {}).get("qosClass")
    return str(known) if known else strategy.qos_class(pod.get("spec") or {})


_TIMES = frozenset({"lastTransitionTime", "finishedAt", "lastProbeTime"})


def _equal_apart_from_times(a: Any, b: Any) -> bool:
    """``a == b`` with the time keys left out of every map, without copying either (most statuses a pod's
    re-evaluation builds differ from the stored one early on, or are the same object's parts)."""
    if a is b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        keys = [k for k in a if k not in _TIMES]
        if len(keys) != sum(1 for k in b if k not in _TIMES):
            return False
        # a part equal as it is (most are) is told by ``==`` at once; the walk goes on only into the others
        return all(k in b and (a[k] == b[k] or _equal_apart_from_times(a[k], b[k])) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(x == y or _equal_apart_from_times(x, y) for x, y in zip(a, b))
    return bool(a == b)
