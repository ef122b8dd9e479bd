"""The three renderers of apply's events: JSON lines (design §4.1), plain lines that print progress when it
changes gate or state (and every few seconds of a wait: tests/views/test_apply_summary.py), and the live
display (tests/views/test_live_display.py); plus the notes shown before
confirmation of a saved plan (disruptive changes, and deletes and replaces that cannot be undone in place)."""

from __future__ import annotations

import io
import json
from typing import Any

from gpuplan.planner.apply.model import EVENT_TYPES, ApplyEvent
from gpuplan.planner.plan.decide import with_undo
from gpuplan.planner.plan.model import Change, Reason
from gpuplan.views import progress
from gpuplan.views.colour import Palette
from gpuplan.views.event_lines import waiting_text

EVENTS = [
    ApplyEvent("apply_start", "applying 2 change(s) to stack lab", counts={"create": 1, "update": 1}),
    ApplyEvent(
        "change_start",
        "update x",
        address="dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
        component="dcgmExporter",
        action="update",
    ),
    ApplyEvent(
        "change_complete",
        "update x done",
        address="dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
        component="dcgmExporter",
        action="update",
        elapsed=0.123,
        serial=4,
    ),
    ApplyEvent(
        "progress",
        "1/2 updated",
        component="dcgmExporter",
        gate="rollout",
        state="progressing",
        ready=1,
        desired=2,
        elapsed=1.0,
    ),
    ApplyEvent(
        "progress",
        "1/2 updated",
        component="dcgmExporter",
        gate="rollout",
        state="progressing",
        ready=1,
        desired=2,
        elapsed=1.5,
    ),
    ApplyEvent(
        "progress",
        "pod p on n: CrashLoopBackOff",
        component="dcgmExporter",
        gate="rollout",
        state="failed",
        ready=1,
        desired=2,
        elapsed=2.0,
    ),
    ApplyEvent(
        "change_errored",
        "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter: CrashLoopBackOff",
        component="dcgmExporter",
        reason="CrashLoopBackOff",
        node="n",
        pod="p",
    ),
    ApplyEvent("rollback_start", "rolling back 1 change(s)"),
    ApplyEvent(
        "rollback_complete",
        "Apply failed: x. Rolled back: ...",
        rolled_back=True,
        counts={"undone": 1, "left": 0},
    ),
    ApplyEvent("summary", "Apply failed: x. Rolled back: ...", state="failed", serial=8, rolled_back=True),
]


def test_json_lines_are_one_object_per_event_with_only_the_set_fields() -> None:
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=True, palette=Palette(False))
    for event in EVENTS:
        renderer.on_event(event)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["type"] for line in lines] == [event.type for event in EVENTS]
    assert {line["type"] for line in lines} <= set(EVENT_TYPES)
    assert lines[2] == {
        "type": "change_complete",
        "message": "update x done",
        "action": "update",
        "address": "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
        "component": "dcgmExporter",
        "elapsed": 0.12,
        "serial": 4,
    }
    assert lines[6]["reason"] == "CrashLoopBackOff" and lines[6]["pod"] == "p" and lines[6]["node"] == "n"


def test_plain_lines_print_progress_only_when_it_changes() -> None:
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=False, palette=Palette(False))  # StringIO is not a terminal
    assert isinstance(renderer, progress.PlainLines)
    for event in EVENTS:
        renderer.on_event(event)
    text = out.getvalue().splitlines()
    assert text[1] == "~ dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter: update ..."
    assert text[2] == "~ dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter: update complete (0.1s)"
    progress_lines = [line for line in text if line.startswith("  dcgmExporter:")]
    assert progress_lines == ["  dcgmExporter: waiting for rollout: 1/2 nodes ready (1/2 updated) 1.0s"]
    assert "\x1b[" not in out.getvalue()


def test_plain_lines_say_a_failure_once_and_leave_the_verdict_to_the_commands_error() -> None:
    """The failed gate's progress repeats the change_errored line, rollback_complete and a failed summary
    repeat
    the command's final Error: line: each is said once."""
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=False, palette=Palette(False))
    for event in EVENTS:
        renderer.on_event(event)
    text = out.getvalue().splitlines()
    assert sum("CrashLoopBackOff" in line for line in text) == 1
    summary = text.index("Resources: 0 added, 1 changed, 0 replaced, 0 destroyed; 1 undone by the rollback.")
    assert text[summary - 3 : summary] == [
        "! dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter: CrashLoopBackOff",
        "rolling back 1 change(s)",
        "rollback complete: 1 change(s) undone",
    ]
    assert not any("Apply failed" in line for line in text)


def test_a_successful_summary_and_an_incomplete_rollback_are_printed() -> None:
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=False, palette=Palette(False))
    renderer.on_event(
        ApplyEvent(
            "rollback_complete",
            "Apply failed: x. Rollback incomplete: y",
            rolled_back=False,
            counts={"undone": 2, "left": 1},
        )
    )
    renderer.on_event(
        ApplyEvent(
            "rollback_complete",
            "Apply failed: x. Rollback incomplete: z",
            rolled_back=False,
            counts={"undone": 3, "left": 0},
        )
    )
    renderer.on_event(ApplyEvent("summary", "Apply complete: 2 change(s) applied.", state="ok"))
    assert out.getvalue().splitlines() == [
        "rollback incomplete: 2 change(s) undone, 1 could not be (the error says which)",
        "rollback incomplete: 3 change(s) undone, but a restored component is not healthy (the error says "
        "which)",
        "Apply complete: 2 change(s) applied.",
        "Resources: 0 added, 0 changed, 0 replaced, 0 destroyed; 5 undone by the rollback.",
    ]


def test_progress_before_any_pod_is_desired_shows_no_count() -> None:
    event = ApplyEvent(
        "progress",
        "DaemonSet x does not exist yet",
        component="dcgmExporter",
        gate="rollout",
        state="progressing",
        ready=0,
        desired=0,
        elapsed=0.2,
    )
    assert waiting_text(event) == "dcgmExporter: waiting for rollout (DaemonSet x does not exist yet) 0.2s"


OWN: dict[str, Any] = {"metadata": {"labels": {"gpuplan.io/stack": "lab"}}}


def _saved_change(
    address: str,
    action: str,
    *,
    before: dict[str, Any] | None = None,
    replaces: str | None = None,
    disruption: str = "",
) -> dict[str, object]:
    """A change of a saved plan as gpuplan reads it (:func:`gpuplan.planner.plan.planfile.loads` gives every
    delete and replace its undo note)."""
    component, kind, *rest = address.split("/")
    ref = f"apps/v1/{kind}/{'/'.join(rest)}"
    reason = {
        "replace": Reason.REPLACE_BECAUSE_IDENTITY_CHANGED,
        "delete": Reason.DELETE_BECAUSE_OWNER_NONE,
        "update": Reason.UPDATE_BECAUSE_SPEC_CHANGED,
    }[action]
    change = Change(
        address=address,
        component=component,
        kind=kind,
        object=ref,
        action=action,
        reason=reason,
        reason_text="why",
        before=before,
        replaces=replaces,
        disruptive=bool(disruption),
        disruption=disruption,
    )
    dumped: dict[str, object] = with_undo(change).model_dump(mode="json")
    return dumped


def test_undo_notes_name_deletes_of_objects_gpuplan_did_not_create_and_disruptive_changes() -> None:
    document: dict[str, object] = {
        "changes": [
            _saved_change(
                "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
                "replace",
                before={},
                replaces="apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset",
            ),
            _saved_change("gfd/DaemonSet/gpu-operator/gpu-feature-discovery", "delete", before=OWN),
            _saved_change(
                "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset",
                "update",
                disruption="the driver restarts on 2 nodes",
            ),
        ]
    }
    notes = progress.undo_notes(document)
    assert len(notes) == 3
    assert (
        "deletes apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset, which gpuplan did not create"
        in notes[0]
        and "rollback recreates it from its recorded manifest" in notes[0]
    )
    assert notes[1] == (
        "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset: disruptive: the driver restarts on 2 nodes"
    )
    # gpuplan's own DaemonSet: few enough to be named with its note (rollback gives a new one, its pods
    # restart)
    assert notes[2] == (
        "gfd/DaemonSet/gpu-operator/gpu-feature-discovery: cannot be undone in place: if the apply "
        "fails, rollback recreates it from its recorded manifest, a new object (new uid): its pods "
        "restart"
    )


def test_many_deletes_of_gpuplans_own_objects_are_one_counted_note_and_foreign_ones_stay_named() -> None:
    own = [
        _saved_change(f"gfd/{kind}/gpu-operator/gfd-{n}", "delete", before=OWN)
        for n, kind in enumerate(["DaemonSet", "ServiceAccount", "Role", "RoleBinding", "DaemonSet"])
    ]
    foreign = _saved_change("validator/DaemonSet/kube-system/validator", "delete", before={})
    document: dict[str, object] = {"changes": [*own, foreign]}
    notes = progress.undo_notes(document)
    assert len(notes) == 2
    assert notes[0].startswith(
        "validator/DaemonSet/kube-system/validator: deletes apps/v1/DaemonSet/kube-system/"
        "validator, which gpuplan did not create"
    )
    assert notes[1].startswith("5 deletes or replaces of gpuplan's objects cannot be undone in place")
    assert "the pods of 2 DaemonSets restart" in notes[1]
    assert notes[1].endswith(
        "gfd/DaemonSet/gpu-operator/gfd-0, gfd/ServiceAccount/gpu-operator/gfd-1, "
        "gfd/Role/gpu-operator/gfd-2 and 2 more (`gpuplan show PLANFILE` gives each note)"
    )
    # a note the plan carries is said as it is, not recomputed
    carried = {**own[0], "undo": "the plan's own words"}
    assert progress.undo_notes({"changes": [carried]}) == [
        "gfd/DaemonSet/gpu-operator/gfd-0: the plan's own words"
    ]
