"""The three renderers of apply's events: JSON lines (design §4.1), plain lines that print progress only when
it changes, and the live display that redraws one line per component in place; plus the notes shown before
confirmation for deletes of objects gpuplan did not create."""

from __future__ import annotations

import io
import json

from gpuplan.planner.apply_model import EVENT_TYPES, ApplyEvent
from gpuplan.views import progress
from gpuplan.views.colour import Palette

EVENTS = [
    ApplyEvent("apply_start", "applying 2 change(s) to stack lab", counts={"create": 1, "update": 1}),
    ApplyEvent("change_start", "update x", address="dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
               component="dcgmExporter", action="update"),
    ApplyEvent("change_complete", "update x done", address="dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
               component="dcgmExporter", action="update", elapsed=0.123, serial=4),
    ApplyEvent("progress", "1/2 updated", component="dcgmExporter", gate="rollout", state="progressing", ready=1,
               desired=2, elapsed=1.0),
    ApplyEvent("progress", "1/2 updated", component="dcgmExporter", gate="rollout", state="progressing", ready=1,
               desired=2, elapsed=1.5),
    ApplyEvent("progress", "pod p on n: CrashLoopBackOff", component="dcgmExporter", gate="rollout", state="failed",
               ready=1, desired=2, elapsed=2.0),
    ApplyEvent("change_errored", "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter: CrashLoopBackOff",
               component="dcgmExporter", reason="CrashLoopBackOff", node="n", pod="p"),
    ApplyEvent("rollback_start", "rolling back 1 change(s)"),
    ApplyEvent("rollback_complete", "Apply failed: x. Rolled back: ...", rolled_back=True,
               counts={"undone": 1, "left": 0}),
    ApplyEvent("summary", "Apply failed: x. Rolled back: ...", state="failed", serial=8, rolled_back=True),
]


def test_json_lines_are_one_object_per_event_with_only_the_set_fields() -> None:
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=True, palette=Palette(False))
    for event in EVENTS:
        renderer.on_event(event)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["type"] for line in lines] == [event.type for event in EVENTS]
    assert set(line["type"] for line in lines) <= set(EVENT_TYPES)
    assert lines[2] == {"type": "change_complete", "message": "update x done", "action": "update",
                        "address": "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
                        "component": "dcgmExporter", "elapsed": 0.12, "serial": 4}
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
    assert progress_lines == ["  dcgmExporter: 1/2 ready, 1.0s, rollout progressing: 1/2 updated"]
    assert "\x1b[" not in out.getvalue()


def test_plain_lines_say_a_failure_once_and_leave_the_verdict_to_the_commands_error() -> None:
    """The failed gate's progress repeats the change_errored line, rollback_complete and a failed summary repeat
    the command's final Error: line: each is said once."""
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=False, palette=Palette(False))
    for event in EVENTS:
        renderer.on_event(event)
    text = out.getvalue().splitlines()
    assert sum("CrashLoopBackOff" in line for line in text) == 1
    assert text[-3:] == ["! dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter: CrashLoopBackOff",
                         "rolling back 1 change(s)", "rollback complete: 1 change(s) undone"]
    assert not any("Apply failed" in line for line in text)


def test_a_successful_summary_and_an_incomplete_rollback_are_printed() -> None:
    out = io.StringIO()
    renderer = progress.for_stream(out, as_json=False, palette=Palette(False))
    renderer.on_event(ApplyEvent("rollback_complete", "Apply failed: x. Rollback incomplete: y", rolled_back=False,
                                 counts={"undone": 2, "left": 1}))
    renderer.on_event(ApplyEvent("rollback_complete", "Apply failed: x. Rollback incomplete: z", rolled_back=False,
                                 counts={"undone": 3, "left": 0}))
    renderer.on_event(ApplyEvent("summary", "Apply complete: 2 change(s) applied.", state="ok"))
    assert out.getvalue().splitlines() == [
        "rollback incomplete: 2 change(s) undone, 1 could not be (the error says which)",
        "rollback incomplete: 3 change(s) undone, but a restored component is not healthy (the error says which)",
        "Apply complete: 2 change(s) applied."]


def test_progress_before_any_pod_is_desired_shows_no_count() -> None:
    event = ApplyEvent("progress", "p on n: CrashLoopBackOff", component="dcgmExporter", gate="rollout",
                       state="failed", ready=0, desired=0, elapsed=0.2)
    assert progress.progress_text(event) == "dcgmExporter: 0.2s, rollout failed: p on n: CrashLoopBackOff"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_display_redraws_each_component_line_in_place() -> None:
    out = _Terminal()
    renderer = progress.for_stream(out, as_json=False, palette=Palette(True))
    assert isinstance(renderer, progress.LiveDisplay)
    for event in EVENTS[:5]:
        renderer.on_event(event)
    raw = out.getvalue()
    # the status line was drawn after the first progress event and erased (cursor up, clear) before the next
    assert raw.count("\x1b[1A\x1b[2K") == 1
    assert raw.rstrip("\n").splitlines()[-1].endswith("1/2 ready, 1.5s, rollout progressing: 1/2 updated\x1b[0m")
    for event in EVENTS[5:]:
        renderer.on_event(event)
    # the failed summary is the command's Error: line, not repeated here; every status line was erased
    assert out.getvalue().rstrip("\n").splitlines()[-1] == "rollback complete: 1 change(s) undone"
    assert "Apply failed" not in out.getvalue()


def test_undo_notes_name_deletes_of_objects_gpuplan_did_not_create_and_disruptive_changes() -> None:
    document: dict[str, object] = {"changes": [
        {"address": "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset", "action": "replace",
         "replaces": "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset", "before": {}},
        {"address": "gfd/DaemonSet/gpu-operator/gpu-feature-discovery", "action": "delete",
         "object": "apps/v1/DaemonSet/gpu-operator/gpu-feature-discovery",
         "before": {"metadata": {"labels": {"gpuplan.io/stack": "lab"}}}},
        {"address": "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset", "action": "update", "disruptive": True,
         "disruption": "the driver restarts on 2 nodes"},
    ]}
    notes = progress.undo_notes(document)
    assert len(notes) == 2
    assert "deletes apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset, which gpuplan did not create" \
        in notes[0] and "rollback recreates it from its recorded manifest" in notes[0]
    assert notes[1] == ("driver/DaemonSet/gpu-operator/nvidia-driver-daemonset: disruptive: the driver restarts "
                        "on 2 nodes")
