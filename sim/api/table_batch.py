"""``as=Table`` printers for batch/v1 Jobs and CronJobs, as the real apiserver's (``printJob`` and
``printCronJob`` of pkg/printers/internalversion/printers.go).

Jobs: NAME, STATUS (Complete, Failed, Terminating, Suspended, FailureTarget, SuccessCriteriaMet or Running, in
that order), COMPLETIONS (``succeeded/completions``; without completions ``n/1``, or ``n/1 of P`` when
parallelism P > 1), DURATION (start to completion, or to now while running), AGE; wide: CONTAINERS, IMAGES,
SELECTOR. CronJobs: NAME, SCHEDULE, TIMEZONE (``<none>``), SUSPEND, ACTIVE, LAST SCHEDULE (``<none>``), AGE;
wide: CONTAINERS, IMAGES, SELECTOR (of the job template).

Registered in :data:`gpuplan.sim.api.tables._PRINTERS` (``PRINTERS`` here); its formatting functions are
imported from there inside the functions (tables imports this module).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

Obj = Mapping[str, Any]
Column = dict[str, Any]
RowCells = Callable[[Obj, datetime.datetime], list[Any]]

_AGE_DOC = "CreationTimestamp is a timestamp representing the server time when this object was created."
_STATUS_ORDER = ("Complete", "Failed", "Terminating", "Suspended", "FailureTarget", "SuccessCriteriaMet")


def _column(
    name: str, kind: str = "string", description: str = "", priority: int = 0, fmt: str = ""
) -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_WIDE = [
    _column("Containers", priority=1, description="Names of each container in the template."),
    _column("Images", priority=1, description="Images referenced by each container in the template."),
    _column("Selector", priority=1, description="A label query over pods that should match the pod count."),
]
JOB_COLUMNS = [
    _column("Name", fmt="name", description="Name must be unique within a namespace."),
    _column("Status", description="Status of the job."),
    _column("Completions", description="The number of pods which reached phase Succeeded."),
    _column("Duration", description="Time required to complete the job."),
    _column("Age", description=_AGE_DOC),
    *_WIDE,
]
CRONJOB_COLUMNS = [
    _column("Name", fmt="name", description="Name must be unique within a namespace."),
    _column("Schedule", description="The schedule in Cron format."),
    _column("Timezone", description="The time zone name for the given schedule."),
    _column("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions."),
    _column("Active", "integer", "A list of pointers to currently running jobs."),
    _column(
        "Last Schedule", description="Information when was the last time the job was successfully scheduled."
    ),
    _column("Age", description=_AGE_DOC),
    *_WIDE,
]


def _true(obj: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def job_status(job: Obj) -> str:
    for kind in _STATUS_ORDER:
        if kind == "Terminating":
            if (job.get("metadata") or {}).get("deletionTimestamp"):
                return kind
        elif _true(job, kind):
            return kind
    return "Running"


def _completions(job: Obj) -> str:
    spec, succeeded = job.get("spec") or {}, int((job.get("status") or {}).get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = int(spec.get("parallelism") or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _duration(job: Obj, now: datetime.datetime) -> str:
    from gpuplan.sim.api import tables

    status = job.get("status") or {}
    started = tables._parse_time(status.get("startTime"))
    if started is None:
        return ""
    ended = tables._parse_time(status.get("completionTime")) or now
    return tables.human_duration((ended - started).total_seconds())


def _wide(spec: Obj) -> list[Any]:
    from gpuplan.sim.api import tables

    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        tables.format_label_selector(spec.get("selector")),
    ]


def _job_cells(job: Obj, now: datetime.datetime) -> list[Any]:
    from gpuplan.sim.api import tables

    spec = job.get("spec") or {}
    return [
        tables._name(job),
        job_status(job),
        _completions(job),
        _duration(job, now),
        tables._age(job, now),
        *_wide(spec),
    ]


def _cronjob_cells(cronjob: Obj, now: datetime.datetime) -> list[Any]:
    from gpuplan.sim.api import tables

    spec, status = cronjob.get("spec") or {}, cronjob.get("status") or {}
    suspend = spec.get("suspend")
    last = status.get("lastScheduleTime")
    return [
        tables._name(cronjob),
        spec.get("schedule", ""),
        spec.get("timeZone") or "<none>",
        "<unset>" if suspend is None else str(bool(suspend)),
        len(status.get("active") or []),
        tables._since(last, now) if last else "<none>",
        tables._age(cronjob, now),
        *_wide((spec.get("jobTemplate") or {}).get("spec") or {}),
    ]


PRINTERS: dict[tuple[str, str], tuple[list[Column], RowCells]] = {
    ("batch", "jobs"): (JOB_COLUMNS, _job_cells),
    ("batch", "cronjobs"): (CRONJOB_COLUMNS, _cronjob_cells),
}
