"""Validation of batch/v1 Jobs and CronJobs, as ``ValidateJob`` and ``ValidateCronJobCreate`` word their
causes (pkg/apis/batch/validation/validation.go): the pod template's restartPolicy OnFailure or Never, the
counts not negative, ``activeDeadlineSeconds`` above 0, a CronJob's name at most 52 characters (its Jobs
add 11), its ``schedule`` as robfig/cron parses it and without ``TZ=``, its ``timeZone`` a known zone.

Registered in :data:`gpuplan.sim.api.validation._KIND_CHECKS`; the cause constructors are imported from there
inside the functions (validation imports this module).
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuplan.sim.controllers.cron import CronError, parse

Obj = dict[str, Any]
_RESTART_POLICIES = ("OnFailure", "Never")
CRONJOB_NAME_MAX = 52


def job(obj: Obj) -> list[dict[str, str]]:
    return job_spec(obj.get("spec") or {}, "spec")


def job_spec(spec: Obj, path: str) -> list[dict[str, str]]:
    from gpuplan.sim.api import validation

    causes = []
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if isinstance(value, int) and value < 0:
            causes.append(validation.invalid(f"{path}.{field}", value, "must be greater than or equal to 0"))
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and deadline <= 0:
        causes.append(validation.invalid(f"{path}.activeDeadlineSeconds", deadline, "must be greater than 0"))
    policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
    if policy not in _RESTART_POLICIES:
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "message": f'Unsupported value: "{policy or ""}": supported values: "OnFailure", "Never"',
                "field": f"{path}.template.spec.restartPolicy",
            }
        )
    return causes


def cronjob(obj: Obj) -> list[dict[str, str]]:
    from gpuplan.sim.api import validation

    name = str((obj.get("metadata") or {}).get("name") or "")
    causes = []
    if len(name) > CRONJOB_NAME_MAX:
        causes.append(
            validation.invalid("metadata.name", name, f"must be no more than {CRONJOB_NAME_MAX} characters")
        )
    spec = obj.get("spec") or {}
    causes += _schedule(spec)
    zone = spec.get("timeZone")
    if zone is not None and not _known_zone(str(zone)):
        causes.append(validation.invalid("spec.timeZone", zone, f"unknown time zone {zone}"))
    return causes + job_spec((spec.get("jobTemplate") or {}).get("spec") or {}, "spec.jobTemplate.spec")


def _schedule(spec: Obj) -> list[dict[str, str]]:
    from gpuplan.sim.api import validation

    schedule = spec.get("schedule")
    if not schedule:
        return [validation.required("spec.schedule")]
    if "TZ" in str(schedule):
        return [
            validation.invalid(
                "spec.schedule", schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            )
        ]
    try:
        parse(str(schedule))
    except CronError as error:
        return [validation.invalid("spec.schedule", schedule, str(error))]
    return []


def _known_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return name == name.strip() and bool(name)
