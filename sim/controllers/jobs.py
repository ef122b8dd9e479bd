"""The Job controller: pods from a Job's template until it completes or fails, and the status kubectl shows.

As kube-controller-manager's job controller (pkg/controller/job/job_controller.go, 1.31+) for NonIndexed
Jobs:

- Pods are created with ``generateName: <job>-``, the template's labels plus
  ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name``, ``controller-uid``, ``job-name``,
  a controlling ownerReference and the ``batch.kubernetes.io/job-tracking`` finalizer, and WITHOUT a node:
  the scheduler binds them and the kubelet runs them. The controller only reads pod phases.
- At most ``parallelism`` pods are active, and no more than the completions still missing; with
  ``completions`` unset the Job is done when one pod succeeded and none is active.
- A pod that ended (phase Succeeded or Failed, or deleted before it succeeded) is counted once in
  ``status.succeeded`` / ``status.failed``, then its finalizer is removed (``uncountedTerminatedPods`` stays
  empty: counting and removing happen in one pass here).
- ``failed > backoffLimit`` (6 by default): condition ``FailureTarget`` reason ``BackoffLimitExceeded``, the
  active pods are deleted, and once none is left ``Failed`` with the same reason. ``activeDeadlineSeconds``
  after ``startTime``: the same with ``DeadlineExceeded``. Enough successes: ``SuccessCriteriaMet`` reason
  ``CompletionsReached``, then ``Complete`` and ``completionTime``.
- ``status``: active, succeeded, failed, ready, terminating, startTime, completionTime,
  uncountedTerminatedPods, conditions; written through the status subresource.
- ``spec.suspend``: no pods (the active ones are deleted). Failed pods are replaced after the back-off:
  10 s after the last failure, doubling per failure since the last success, at most 6 minutes (on the batch
  clock).
- ``ttlSecondsAfterFinished``: the ttl-after-finished controller's effect, the finished Job deleted (with its
  pods) that many seconds after it finished. A pod whose Job is gone loses its finalizer (orphan clean-up).

Times come from the batch clock (``cron.BatchClock``); deadlines and TTLs are loop timers. Events as
``job-controller``: SuccessfulCreate, SuccessfulDelete, FailedCreate, Completed, BackoffLimitExceeded,
DeadlineExceeded. Driven by the loop, as ``kube-controller-manager``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers.cache import Change, Key, Obj, controller_uid, key_of, resource_type
from gpuplan.sim.controllers.cron import BatchClock
from gpuplan.sim.controllers.events import NORMAL, WARNING, Source
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.controllers.owners import OwnerQueue

MANAGER = "kube-controller-manager"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
DEFAULT_BACKOFF_LIMIT = 6
EVENT_SOURCE = Source("job-controller")
MERGE = "application/merge-patch+json"
BACKOFF_LIMIT = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS = ("CompletionsReached", "Reached expected number of succeeded pods")
_FINAL = {"FailureTarget": "Failed", "SuccessCriteriaMet": "Complete"}
_RETRY_SECONDS = 1.0
BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 10, 360  # replacing failed pods: 10 s doubling, at most 6 minutes


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def finished(job: Obj) -> str | None:
    """``Complete`` or ``Failed`` when the Job has ended (jobutil.IsJobFinished), else None."""
    for kind in ("Complete", "Failed"):
        if condition(job, kind) is not None:
            return kind
    return None


def finish_time(job: Obj) -> datetime | None:
    kind = finished(job)
    cond = condition(job, kind) if kind else None
    return parse_time(cond.get("lastTransitionTime")) if cond else None


def _is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class JobController(OwnerQueue):
    """Runs every Job's pods and keeps its status."""

    kind = "jobs"
    child_kind = "pods"

    def __init__(self, loop: Loop, clock: BatchClock) -> None:
        super().__init__(loop, clock)
        self._orphans: set[Key] = set()
        # job uid -> (pod failures since the last success, when the last one was counted): the back-off
        self._failures: dict[str, tuple[int, datetime]] = {}
        reg = loop.store.registry
        self._pods_rt = resource_type(reg, "v1", "Pod")
        self._jobs_rt = resource_type(reg, "batch/v1", "Job")

    def on_change(self, change: Change) -> None:
        super().on_change(change)
        pod = change.new
        tracked = pod is not None and TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])
        if change.kind == "pods" and tracked and controller_uid(pod or {}) not in self._by_uid:
            self._orphans.add(change.key)  # its Job is gone (deleted with its pods): release the pod

    def flush(self) -> bool:
        orphans, self._orphans = sorted(self._orphans), set()
        for key in orphans:
            pod = self.loop.cache.pods.get(key)
            if pod is not None:
                self._remove_finalizer(pod)
        return super().flush() or bool(orphans)

    # -- one Job -------------------------------------------------------------------------------------
    def sync(self, job: Obj) -> None:
        pods = self.loop.cache.pods_of(job["metadata"]["uid"])
        status = dict(job.get("status") or {})
        now = self.clock.now()
        if finished(job):
            self._release(pods)
            self._failures.pop(job["metadata"]["uid"], None)
            self._expire(job, now)
            return
        spec = job.get("spec") or {}
        wakes: list[datetime | None] = []
        target = self._target(job, status)
        self._count(job, pods, status, now, counting=target is None)
        running = [p for p in pods if _phase(p) not in ("Succeeded", "Failed")]
        active = [p for p in running if not p["metadata"].get("deletionTimestamp")]
        if not spec.get("suspend") and not status.get("startTime"):
            status["startTime"] = rfc3339(now)
        if target is None:
            target = self._decide(spec, status, active, now)
            if target is not None:
                self._add_condition(status, *target, now)
        if target is not None or spec.get("suspend"):
            self._delete(job, active)  # they stay running (terminating) until their pods are gone
            active = []
        else:
            active, backoff_due = self._scale(job, spec, status, active, now)
            wakes.append(backoff_due)
        if target is not None and not running:
            self._finish(job, status, target, now)
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _is_ready(p))
        status["terminating"] = len(running) - len(active)
        status.setdefault("uncountedTerminatedPods", {})
        self._write_status(job, status)
        wakes.append(self._deadline(spec, status))
        due = [moment for moment in wakes if moment is not None]
        self.wake_at(key_of(job), min(due) if due else None)

    def _target(self, job: Obj, status: Obj) -> tuple[str, str, str] | None:
        """The interim condition already set: (type, reason, message)."""
        for kind in _FINAL:
            cond = condition({"status": status}, kind)
            if cond is not None:
                return kind, str(cond.get("reason", "")), str(cond.get("message", ""))
        return None

    def _count(self, job: Obj, pods: list[Obj], status: Obj, now: datetime, *, counting: bool) -> None:
        """Count each ended pod still holding the tracking finalizer once, then release it; a failure
        lengthens the back-off, a success resets it."""
        uid = job["metadata"]["uid"]
        for pod in pods:
            meta = pod["metadata"]
            if TRACKING_FINALIZER not in (meta.get("finalizers") or []):
                continue
            phase = _phase(pod)
            if phase == "Succeeded":
                outcome = "succeeded"
            elif phase == "Failed" or meta.get("deletionTimestamp"):
                outcome = "failed"
            else:
                continue
            if counting:
                status[outcome] = int(status.get(outcome) or 0) + 1
                failures = self._failures.get(uid, (0, now))[0] + 1 if outcome == "failed" else 0
                self._failures[uid] = (failures, now)
            self._remove_finalizer(pod)

    def _decide(
        self, spec: Obj, status: Obj, active: list[Obj], now: datetime
    ) -> tuple[str, str, str] | None:
        backoff_limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        if int(status.get("failed") or 0) > int(backoff_limit):
            return ("FailureTarget", *BACKOFF_LIMIT)
        deadline = spec.get("activeDeadlineSeconds")
        started = parse_time(status.get("startTime"))
        if deadline is not None and started is not None and now >= started + timedelta(seconds=deadline):
            return ("FailureTarget", *DEADLINE)
        succeeded = int(status.get("succeeded") or 0)
        completions = spec.get("completions")
        if (completions is not None and succeeded >= int(completions)) or (
            completions is None and succeeded > 0 and not active
        ):
            return ("SuccessCriteriaMet", *COMPLETIONS)
        return None

    def _scale(
        self, job: Obj, spec: Obj, status: Obj, active: list[Obj], now: datetime
    ) -> tuple[list[Obj], datetime | None]:
        """The active pods after creating or deleting some, and when a back-off ends that held creations."""
        wanted = int(spec.get("parallelism", 1))
        succeeded = int(status.get("succeeded") or 0)
        completions = spec.get("completions")
        if completions is not None:
            wanted = min(wanted, int(completions) - succeeded)
        elif succeeded > 0:
            wanted = 0
        wanted = max(wanted, 0)
        if len(active) > wanted:
            extra = sorted(active, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
            self._delete(job, extra[: len(active) - wanted])
            return extra[len(active) - wanted :], None
        if wanted > len(active):
            backoff_end = self._backoff_end(job["metadata"]["uid"])
            if backoff_end is not None and now < backoff_end:
                return active, backoff_end
        created = [self._create_pod(job) for _ in range(wanted - len(active))]
        return active + [pod for pod in created if pod is not None], None

    def _backoff_end(self, uid: str) -> datetime | None:
        """When failed pods may be replaced: 10 s after the last failure, doubling per failure since the
        last success, at most 6 minutes (kubernetes.io/docs/concepts/workloads/controllers/job,
        "Pod backoff failure policy")."""
        failures, last = self._failures.get(uid, (0, None))
        if not failures or last is None:
            return None
        delay = min(BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BACKOFF_SECONDS)
        return last + timedelta(seconds=delay)

    def _finish(self, job: Obj, status: Obj, target: tuple[str, str, str], now: datetime) -> None:
        final = _FINAL[target[0]]
        self._add_condition(status, final, target[1], target[2], now)
        if final == "Complete":
            status["completionTime"] = rfc3339(now)
            self.loop.events.record(job, NORMAL, "Completed", "Job completed", EVENT_SOURCE)
        else:
            self.loop.events.record(job, WARNING, target[1], target[2], EVENT_SOURCE)

    @staticmethod
    def _add_condition(status: Obj, kind: str, reason: str, message: str, now: datetime) -> None:
        stamp = rfc3339(now)
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
        conditions.append(
            {
                "type": kind,
                "status": "True",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
        status["conditions"] = conditions

    # -- writes --------------------------------------------------------------------------------------
    def _create_pod(self, job: Obj) -> Obj | None:
        meta = job["metadata"]
        template = (job.get("spec") or {}).get("template") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(
            {
                CONTROLLER_UID: meta["uid"],
                JOB_NAME: meta["name"],
                LEGACY_CONTROLLER_UID: meta["uid"],
                LEGACY_JOB_NAME: meta["name"],
            }
        )
        pod_meta: Obj = {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "finalizers": [TRACKING_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        annotations = (template.get("metadata") or {}).get("annotations")
        if annotations:
            pod_meta["annotations"] = dict(annotations)
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}
        try:
            created = self.store.create(self._pods_rt, body, namespace=meta["namespace"], manager=MANAGER)
        except store_mod.ApiError as error:
            self.loop.events.record(
                job, WARNING, "FailedCreate", f"Error creating: {error.message}", EVENT_SOURCE
            )
            self.loop.call_later(_RETRY_SECONDS, lambda: self.mark(key_of(job)), settling=False)
            return None
        self.loop.observe("pods", created)
        self.loop.events.record(
            job, NORMAL, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}", EVENT_SOURCE
        )
        return created

    def _delete(self, job: Obj, pods: list[Obj]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            try:
                self.store.delete(self._pods_rt, meta["namespace"], meta["name"])
            except store_mod.ApiError as error:
                if error.code != 404:
                    raise
                continue
            self.loop.events.record(
                job, NORMAL, "SuccessfulDelete", f"Deleted pod: {meta['name']}", EVENT_SOURCE
            )

    def _remove_finalizer(self, pod: Obj) -> None:
        meta = pod["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != TRACKING_FINALIZER]
        try:
            patched = self.store.patch(
                self._pods_rt,
                meta["namespace"],
                meta["name"],
                {"metadata": {"finalizers": kept or None}},
                MERGE,
                manager=MANAGER,
            )
        except store_mod.ApiError as error:
            if error.code != 404:
                raise
            return
        if patched.get("metadata", {}).get("deletionTimestamp") and not kept:
            return  # the store removed the pod: its DELETED event updates the cache
        self.loop.observe("pods", patched)

    def _release(self, pods: list[Obj]) -> None:
        for pod in pods:
            if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                self._remove_finalizer(pod)

    def _write_status(self, job: Obj, status: Obj) -> None:
        zero_omitted = (
            "active",
            "succeeded",
            "failed",
        )  # int32 omitempty; ready and terminating are pointers
        clean = {k: v for k, v in status.items() if not (k in zero_omitted and v == 0)}
        self.write_status(self._jobs_rt, job, clean, MANAGER)

    # -- time ----------------------------------------------------------------------------------------
    @staticmethod
    def _deadline(spec: Obj, status: Obj) -> datetime | None:
        """When the active deadline strikes (None: no deadline, or the Job is ending anyway)."""
        deadline = spec.get("activeDeadlineSeconds")
        started = parse_time(status.get("startTime"))
        if deadline is None or started is None or finished({"status": status}):
            return None
        return started + timedelta(seconds=int(deadline))

    def _expire(self, job: Obj, now: datetime) -> None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        ended = finish_time(job)
        if ttl is None or ended is None:
            return
        due = ended + timedelta(seconds=int(ttl))
        meta = job["metadata"]
        if now < due:
            self.wake_at(key_of(job), due)
            return
        try:
            self.store.delete(self._jobs_rt, meta["namespace"], meta["name"], propagation="Background")
        except store_mod.ApiError as error:
            if error.code != 404:
                raise


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")
