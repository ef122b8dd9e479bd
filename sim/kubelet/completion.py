"""Containers that end: what the pod's ``restartPolicy`` makes of an exit, as the kubelet decides it.

A run-to-completion image (``workloads``: the CUDA vectoradd sample; ``processes``: gpuplan's own image)
ends its run with an exit code. The kubelet then (``kuberuntime``'s ``computePodActions`` and
``getPhase`` in kubernetes/kubernetes pkg/kubelet):

=================  ======================================  ==============================================
restartPolicy      exit 0                                  exit != 0
=================  ======================================  ==============================================
Never              terminated Completed, phase Succeeded   terminated Error, phase Failed
OnFailure          terminated Completed, phase Succeeded   restarted after the crash-loop back-off
                                                           (CrashLoopBackOff, lastState terminated Error)
Always (default)   restarted (lastState Completed)         restarted (lastState Error)
=================  ======================================  ==============================================

A restarting pod stays in phase Running, not ready. Under ``Never`` a main container that cannot start
(``RunContainerError``: the NVIDIA hook failed) is not retried either: it ends terminated with exit code 128,
reason ``StartError``, and the pod Failed; any other crash loop of the main container ends as exit 1.

Pure; called by the kubelet runtime on every fresh outcome of the rules, before ``pods.outcome_status``.
"""

from __future__ import annotations

import dataclasses

from gpuplan.sim.kubelet import images
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.outcomes import PodOutcome

START_ERROR_EXIT = 128  # what containerd reports for a container whose start failed


def restart_policy(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def settle(pod: Obj, outcome: PodOutcome) -> PodOutcome:
    """``outcome`` with the restartPolicy applied to an exit (or, under Never, to a crash loop)."""
    policy = restart_policy(pod)
    main_ran = outcome.init_done >= len(images.init_containers(pod))
    if outcome.exit_code is None:
        if policy == "Never" and outcome.crash_looping and main_ran:
            start_error = outcome.waiting_reason == "RunContainerError"
            code = START_ERROR_EXIT if start_error else 1
            return dataclasses.replace(outcome, phase="Failed", crash_looping=False, exit_code=code)
        return outcome
    if outcome.exit_code == 0 and policy != "Always" or policy == "Never":
        phase = "Succeeded" if outcome.exit_code == 0 else "Failed"
        return dataclasses.replace(outcome, phase=phase, ready=False, crash_looping=False, message=None)
    return dataclasses.replace(
        outcome, phase="Running", ready=False, waiting_reason="CrashLoopBackOff", crash_looping=True
    )


def is_terminal(outcome: PodOutcome | None) -> bool:
    """The pod is done: the kubelet never runs its containers again."""
    return outcome is not None and outcome.phase in ("Succeeded", "Failed")


def exit_reason(outcome: PodOutcome) -> str:
    """The terminated state's reason: Completed, Error, or StartError for a start that failed."""
    if outcome.exit_code == 0:
        return "Completed"
    return "StartError" if outcome.waiting_reason == "RunContainerError" else "Error"


def grace_period(pod: Obj) -> float:
    """How long a deleted pod's processes get between SIGTERM and SIGKILL: the DELETE's period, else the
    pod's ``terminationGracePeriodSeconds`` (30 by default)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    configured = spec.get("terminationGracePeriodSeconds")
    period = float(30 if configured is None else configured)
    asked = meta.get("deletionGracePeriodSeconds")
    return min(period, float(asked)) if asked else period
