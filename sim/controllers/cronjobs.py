"""The CronJob controller: Jobs on a cron schedule, as kube-controller-manager's cronjob controller v2 does.

pkg/controller/cronjob/cronjob_controllerv2.go (``syncCronJob``) and utils.go, on the batch clock
(``cron.BatchClock``):

- The Jobs a CronJob controls are matched to ``status.active``: a finished one leaves it (event
  ``SawCompletedJob``), a gone one too, a running one not listed is an ``UnexpectedJob`` warning (a manual
  run); ``lastSuccessfulTime`` is the latest ``completionTime`` of its
  Jobs. Finished Jobs beyond ``successfulJobsHistoryLimit`` (3) / ``failedJobsHistoryLimit`` (1) are
  deleted, oldest first (``SuccessfulDelete``).
- Unless the CronJob is suspended or being deleted, the most recent scheduled time since
  ``lastScheduleTime`` (else its creation; no earlier than now - ``startingDeadlineSeconds``) is run once:
  more than 100 missed times is a ``TooManyMissedTimes`` warning; a time older than the starting deadline
  is ``MissSchedule``; ``concurrencyPolicy`` Forbid skips it while a Job is active (``JobAlreadyActive``),
  Replace deletes the active Jobs first, Allow runs beside them.
- The Job is ``<cronjob>-<scheduled time in minutes since the epoch>``, with the template's labels and
  annotations plus ``batch.kubernetes.io/cronjob-scheduled-timestamp`` (RFC 3339 in the CronJob's zone), a
  controlling ownerReference, and the template's spec (event ``SuccessfulCreate``); it is added to
  ``status.active`` and ``lastScheduleTime`` becomes the scheduled time.
- ``spec.timeZone`` is an IANA zone (``UnknownTimeZone`` otherwise); without one, the controller's zone,
  UTC here. An unparseable schedule is an ``UnparseableSchedule`` warning.
- The CronJob is synced again at its next scheduled time (a loop timer on the batch clock).

``run_now(namespace, name)`` makes the Job ``kubectl create job --from=cronjob/NAME`` makes (client-side in
kubectl: the template, annotation ``cronjob.kubernetes.io/instantiate: manual``, the CronJob as controller
owner); it is not added to ``status.active``, as with kubectl. Events as ``cronjob-controller``.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers import jobs as jobs_mod
from gpuplan.sim.controllers.cache import Obj, controller_uid, key_of, resource_type
from gpuplan.sim.controllers.cron import BatchClock, CronError, Schedule, parse
from gpuplan.sim.controllers.events import NORMAL, WARNING, Source
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.controllers.owners import OwnerQueue

MANAGER = "kube-controller-manager"
SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
INSTANTIATE = "cronjob.kubernetes.io/instantiate"
EVENT_SOURCE = Source("cronjob-controller")
MAX_MISSED = 100
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def job_name(cronjob: str, scheduled: datetime) -> str:
    """getJobName: the scheduled time in minutes since the epoch."""
    return f"{cronjob}-{int(scheduled.timestamp()) // 60}"


class CronJobController(OwnerQueue):
    """Creates every CronJob's Jobs on schedule and keeps its status."""

    kind = "cronjobs"
    child_kind = "jobs"

    def __init__(self, loop: Loop, clock: BatchClock) -> None:
        super().__init__(loop, clock)
        reg = loop.store.registry
        self._jobs_rt = resource_type(reg, "batch/v1", "Job")
        self._cronjobs_rt = resource_type(reg, "batch/v1", "CronJob")

    # -- manual runs ---------------------------------------------------------------------------------
    def run_now(self, namespace: str, name: str, job: str | None = None) -> Obj:
        """The Job ``kubectl create job JOB --from=cronjob/NAME`` creates (JOB defaults to
        ``NAME-manual-xxxxx``)."""
        cronjob = self.store.get(self._cronjobs_rt, namespace, name)
        template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
        meta = template.get("metadata") or {}
        annotations = {**(meta.get("annotations") or {}), INSTANTIATE: "manual"}
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job or f"{name}-manual-{''.join(secrets.choice(_NAME_ALPHABET) for _ in range(5))}",
                "labels": dict(meta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [_owner(cronjob)],
            },
            "spec": template.get("spec") or {},
        }
        return self.store.create(self._jobs_rt, body, namespace=namespace, manager=MANAGER)

    # -- one CronJob ---------------------------------------------------------------------------------
    def sync(self, cronjob: Obj) -> None:
        now = self.clock.now()
        status = dict(cronjob.get("status") or {})
        children = [
            j for j in self.loop.cache.jobs.values() if controller_uid(j) == cronjob["metadata"]["uid"]
        ]
        self._track(cronjob, status, children)
        self._prune(cronjob, children)
        spec = cronjob.get("spec") or {}
        if not cronjob["metadata"].get("deletionTimestamp") and not spec.get("suspend"):
            self._schedule(cronjob, spec, status, now)
        self.write_status(self._cronjobs_rt, cronjob, status, MANAGER)

    def _track(self, cronjob: Obj, status: Obj, children: list[Obj]) -> None:
        by_uid = {j["metadata"]["uid"]: j for j in children}
        active = []
        for ref in status.get("active") or []:
            job = by_uid.get(ref.get("uid"))
            if job is None:
                continue
            if jobs_mod.finished(job):
                kind = jobs_mod.finished(job)
                self.loop.events.record(
                    cronjob,
                    NORMAL,
                    "SawCompletedJob",
                    f"Saw completed job: {job['metadata']['name']}, condition: {kind}",
                    EVENT_SOURCE,
                )
                continue
            active.append(ref)
        listed = {ref.get("uid") for ref in active}
        for job in children:
            if job["metadata"]["uid"] not in listed and not jobs_mod.finished(job):
                self.loop.events.record(
                    cronjob,
                    WARNING,
                    "UnexpectedJob",
                    f"Saw a job that the controller did not create or forgot: {job['metadata']['name']}",
                    EVENT_SOURCE,
                )
        if active:
            status["active"] = active
        else:
            status.pop("active", None)
        completions = [
            t for j in children if (t := jobs_mod.parse_time((j.get("status") or {}).get("completionTime")))
        ]
        last = jobs_mod.parse_time(status.get("lastSuccessfulTime"))
        if completions and (last is None or max(completions) > last):
            status["lastSuccessfulTime"] = jobs_mod.rfc3339(max(completions))

    def _prune(self, cronjob: Obj, children: list[Obj]) -> None:
        spec = cronjob.get("spec") or {}
        for kind, limit in (
            ("Complete", spec.get("successfulJobsHistoryLimit")),
            ("Failed", spec.get("failedJobsHistoryLimit")),
        ):
            if limit is None:
                continue
            ended = sorted(
                (j for j in children if jobs_mod.finished(j) == kind),
                key=lambda j: (j.get("status") or {}).get("startTime") or j["metadata"]["creationTimestamp"],
            )
            for job in ended[: max(len(ended) - int(limit), 0)]:
                self._delete_job(cronjob, job)

    def _schedule(self, cronjob: Obj, spec: Obj, status: Obj, now: datetime) -> None:
        key = key_of(cronjob)
        zone = self._zone(cronjob, spec)
        if zone is None:
            return
        try:
            schedule = parse(str(spec.get("schedule") or ""))
        except CronError as error:
            self.loop.events.record(
                cronjob,
                WARNING,
                "UnparseableSchedule",
                f"unparseable schedule: {spec.get('schedule')!r} : {error}",
                EVENT_SOURCE,
            )
            return
        scheduled, missed = self._most_recent(cronjob, spec, status, schedule, zone, now)
        self.wake_at(key, schedule.next(now, zone))
        if scheduled is None:
            return
        if missed > MAX_MISSED:
            self.loop.events.record(
                cronjob,
                WARNING,
                "TooManyMissedTimes",
                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock "
                "skew",
                EVENT_SOURCE,
            )
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None and scheduled + timedelta(seconds=int(deadline)) < now:
            self.loop.events.record(
                cronjob,
                WARNING,
                "MissSchedule",
                f"Missed scheduled time to start a job: {scheduled.astimezone(zone).isoformat()}",
                EVENT_SOURCE,
            )
            return
        name = job_name(cronjob["metadata"]["name"], scheduled)
        if any(ref.get("name") == name for ref in status.get("active") or []) or status.get(
            "lastScheduleTime"
        ) == jobs_mod.rfc3339(scheduled):
            return
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy == "Forbid" and status.get("active"):
            self.loop.events.record(
                cronjob,
                NORMAL,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
                EVENT_SOURCE,
            )
            return
        if policy == "Replace":
            for ref in status.pop("active", None) or []:
                job = self.loop.cache.jobs.get((ref.get("namespace") or "", ref.get("name") or ""))
                if job is not None:
                    self._delete_job(cronjob, job)
        created = self._create_job(cronjob, spec, name, scheduled, zone)
        if created is None:
            return
        meta = created["metadata"]
        status["active"] = [
            *(status.get("active") or []),
            {
                "kind": "Job",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "batch/v1",
                "resourceVersion": meta["resourceVersion"],
            },
        ]
        status["lastScheduleTime"] = jobs_mod.rfc3339(scheduled)

    def _zone(self, cronjob: Obj, spec: Obj) -> tzinfo | None:
        name = spec.get("timeZone")
        if not name:
            return UTC
        try:
            return ZoneInfo(str(name))
        except (ZoneInfoNotFoundError, ValueError):
            self.loop.events.record(
                cronjob,
                WARNING,
                "UnknownTimeZone",
                f"invalid timeZone: {name!r}: unknown time zone {name}",
                EVENT_SOURCE,
            )
            return None

    @staticmethod
    def _most_recent(
        cronjob: Obj, spec: Obj, status: Obj, schedule: Schedule, zone: tzinfo, now: datetime
    ) -> tuple[datetime | None, int]:
        """mostRecentScheduleTime: the latest scheduled time in (earliest, now] and how many there were."""
        earliest = jobs_mod.parse_time(status.get("lastScheduleTime")) or jobs_mod.parse_time(
            cronjob["metadata"].get("creationTimestamp")
        )
        assert earliest is not None
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None:
            earliest = max(earliest, now - timedelta(seconds=int(deadline)))
        latest, missed = None, 0
        moment = schedule.next(earliest, zone)
        while moment is not None and moment <= now:
            latest, missed = moment, missed + 1
            moment = schedule.next(moment, zone)
        return latest, missed

    # -- writes --------------------------------------------------------------------------------------
    def _create_job(
        self, cronjob: Obj, spec: Obj, name: str, scheduled: datetime, zone: tzinfo
    ) -> Obj | None:
        template = spec.get("jobTemplate") or {}
        meta = template.get("metadata") or {}
        annotations = {
            **(meta.get("annotations") or {}),
            SCHEDULED_TIMESTAMP: scheduled.astimezone(zone).isoformat().replace("+00:00", "Z"),
        }
        body: dict[str, Any] = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "labels": dict(meta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [_owner(cronjob)],
            },
            "spec": template.get("spec") or {},
        }
        namespace = cronjob["metadata"]["namespace"]
        try:
            created = self.store.create(self._jobs_rt, body, namespace=namespace, manager=MANAGER)
        except store_mod.ApiError as error:
            if error.code == 409:
                return None  # created before (the status write was lost): the next sync adopts its time
            self.loop.events.record(
                cronjob, WARNING, "FailedCreate", f"Error creating job: {error.message}", EVENT_SOURCE
            )
            return None
        self.loop.observe("jobs", created)
        self.loop.events.record(cronjob, NORMAL, "SuccessfulCreate", f"Created job {name}", EVENT_SOURCE)
        return created

    def _delete_job(self, cronjob: Obj, job: Obj) -> None:
        meta = job["metadata"]
        try:
            self.store.delete(self._jobs_rt, meta["namespace"], meta["name"], propagation="Background")
        except store_mod.ApiError as error:
            if error.code != 404:
                raise
            return
        self.loop.events.record(
            cronjob, NORMAL, "SuccessfulDelete", f"Deleted job {meta['name']}", EVENT_SOURCE
        )


def _owner(cronjob: Obj) -> Obj:
    meta = cronjob["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
