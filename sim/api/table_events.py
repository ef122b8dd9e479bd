"""``as=Table`` printers for core/v1 Events and scheduling.k8s.io/v1 PriorityClasses, as the real apiserver's.

Events (``printEvent`` of ``pkg/printers/internalversion``): LAST SEEN, TYPE, REASON, OBJECT (``kind/name``,
the kind lower-cased), MESSAGE, and the ``-o wide`` columns SUBOBJECT (the fieldPath), SOURCE (``component,
host``), FIRST SEEN, COUNT and NAME. The server always sends every cell (its printer runs wide); kubectl hides
the priority-1 columns. A missing lastTimestamp shows the first one; a missing count shows 1.

PriorityClasses: NAME, VALUE, GLOBAL-DEFAULT, AGE, PREEMPTIONPOLICY.

Registered in :data:`gpuplan.sim.api.tables._PRINTERS` (``PRINTERS`` here); pure functions of plain dicts.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

Obj = Mapping[str, Any]
Column = dict[str, Any]
RowCells = Callable[[Obj, datetime.datetime], list[Any]]


def _column(
    name: str, kind: str = "string", description: str = "", priority: int = 0, fmt: str = ""
) -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


EVENT_COLUMNS = [
    _column(
        "Last Seen", description="The time at which the most recent occurrence of this event was recorded."
    ),
    _column(
        "Type", description="Type of this event (Normal, Warning), new types could be added in the future."
    ),
    _column(
        "Reason",
        description="This should be a short, machine understandable string that gives the reason "
        "for this event being generated.",
    ),
    _column("Object", description="The object that this event is about."),
    _column("Subobject", priority=1, description="The object that this event is about."),
    _column("Source", priority=1, description="The component reporting this event."),
    _column("Message", description="A human-readable description of the status of this operation."),
    _column("First Seen", priority=1, description="The time at which the event was first recorded."),
    _column("Count", priority=1, description="The number of times this event has occurred."),
    _column("Name", priority=1, fmt="name", description="Name must be unique within a namespace."),
]

PRIORITY_CLASS_COLUMNS = [
    _column("Name", fmt="name", description="Name must be unique within a namespace."),
    _column("Value", "integer", "value represents the integer value of this priority class."),
    _column(
        "Global-Default",
        "boolean",
        "globalDefault specifies whether this PriorityClass should be "
        "considered as the default priority for pods that do not have any "
        "priority class.",
    ),
    _column(
        "Age",
        description="CreationTimestamp is a timestamp representing the server time when this "
        "object was created.",
    ),
    _column(
        "PreemptionPolicy",
        description="preemptionPolicy is the Policy for preempting pods with lower priority.",
    ),
]


def _since(value: Any, now: datetime.datetime) -> str:
    """``translateTimestampSince``: a human duration, or ``<unknown>`` for no time."""
    from gpuplan.sim.api import tables  # tables registers these printers: import it when first used

    if not value:
        return "<unknown>"
    try:
        moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return tables.human_duration((now - moment).total_seconds())


def event_source(event: Obj) -> str:
    """``formatEventSource``: component (or reportingComponent), then ``, host`` when there is one."""
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return f"{component}, {instance}" if instance else str(component)


def event_cells(event: Obj, now: datetime.datetime) -> list[Any]:
    first = _since(event.get("firstTimestamp") or event.get("eventTime"), now)
    last = _since(event.get("lastTimestamp"), now) if event.get("lastTimestamp") else first
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        event_source(event),
        str(event.get("message") or "").strip(),
        first,
        int(event.get("count") or 1),
        (event.get("metadata") or {}).get("name", ""),
    ]


def priority_class_cells(pc: Obj, now: datetime.datetime) -> list[Any]:
    meta = pc.get("metadata") or {}
    return [
        meta.get("name", ""),
        pc.get("value", 0),
        bool(pc.get("globalDefault")),
        _since(meta.get("creationTimestamp"), now),
        pc.get("preemptionPolicy", ""),
    ]


PRINTERS: dict[tuple[str, str], tuple[list[Column], RowCells]] = {
    ("", "events"): (EVENT_COLUMNS, event_cells),
    ("scheduling.k8s.io", "priorityclasses"): (PRIORITY_CLASS_COLUMNS, priority_class_cells),
}
