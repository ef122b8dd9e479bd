"""The live display against a terminal that keeps its screen: one line per component in flight, redrawn in
place with cursor moves, never wider than the terminal, at most about ten redraws a second, and each
replaced by a one-line result that stays in the scrollback; the summary at the end."""

from __future__ import annotations

import re
from dataclasses import replace

from fake_terminal import FakeTerminal

from gpuplan.planner.apply.model import ApplyEvent
from gpuplan.planner.health.wait import PoolProgress
from gpuplan.views import progress
from gpuplan.views.colour import Palette
from gpuplan.views.live import LiveDisplay

PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
EXPORTER = "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def start(address: str, action: str = "update") -> ApplyEvent:
    return ApplyEvent(
        "change_start", address=address, component=address.split("/")[0], action=action, message=""
    )


def complete(address: str, action: str = "update") -> ApplyEvent:
    component = address.split("/")[0]
    return ApplyEvent("change_complete", address=address, component=component, action=action, elapsed=0.5)


def waiting(component: str, gate: str, ready: int, desired: int, elapsed: float, **more: str) -> ApplyEvent:
    node = more.get("node")
    message = more.get("message", f"{node}: no metrics yet" if node else "pods starting")
    return ApplyEvent(
        "progress",
        message,
        component=component,
        gate=gate,
        state=more.get("state", "progressing"),
        ready=ready,
        desired=desired,
        elapsed=elapsed,
        node=node,
    )


def display(width: int = 80, *, colour: bool = False) -> tuple[LiveDisplay, FakeTerminal, Clock]:
    terminal, clock = FakeTerminal(), Clock()
    return LiveDisplay(terminal, Palette(colour), width=width, clock=clock), terminal, clock


def test_two_components_in_flight_are_two_lines_redrawn_in_place_then_their_results() -> None:
    live, terminal, clock = display(width=100)
    live.on_event(ApplyEvent("apply_start", "applying 2 change(s) to stack lab"))
    for address in (PLUGIN, EXPORTER):
        live.on_event(start(address))
        live.on_event(complete(address))
    for ready in range(0, 1001, 100):
        clock.now += 0.5
        live.on_event(waiting("devicePlugin", "allocatable", ready, 1000, clock.now - 100, node="node-0042"))
        clock.now += 0.5
        live.on_event(waiting("dcgmExporter", "dcgm-metrics", ready // 2, 1000, clock.now - 100))
        assert terminal.lines[-2:] == [
            f"… devicePlugin  allocatable  {ready}/1000 nodes  {clock.now - 100:.1f}s  slowest: node-0042: "
            "no metrics yet",
            f"… dcgmExporter  dcgm-metrics  {ready // 2}/1000 nodes  {clock.now - 100:.1f}s  pods starting",
        ], "every round is shown as it comes, both components at once, in place"
    clock.now = 142.1
    live.on_event(waiting("devicePlugin", "allocatable", 1000, 1000, 42.0, state="passed", message="ok"))
    assert terminal.lines[-2:] == [
        "✓ devicePlugin  healthy  1000/1000 nodes  42.1s",
        "… dcgmExporter  dcgm-metrics  500/1000 nodes  42.1s  pods starting",
    ]
    clock.now = 150.0
    live.on_event(waiting("dcgmExporter", "dcgm-metrics", 1000, 1000, 50.0, state="passed", message="ok"))
    # the deferred driver-version gate: of a component this run did not change, named by its gate
    live.on_event(waiting("driver", "driver-version", 1000, 1000, 0.0, state="passed", message="ok"))
    live.on_event(ApplyEvent("summary", "Apply complete: 2 change(s) applied.", state="ok"))
    assert terminal.lines == [
        "applying 2 change(s) to stack lab",
        f"~ {PLUGIN}: update ...",
        f"~ {PLUGIN}: update complete (0.5s)",
        f"~ {EXPORTER}: update ...",
        f"~ {EXPORTER}: update complete (0.5s)",
        "✓ devicePlugin  healthy  1000/1000 nodes  42.1s",
        "✓ dcgmExporter  healthy  1000/1000 nodes  50.0s",
        "✓ driver  driver-version passed  1000/1000 nodes  0.0s",
        "Apply complete: 2 change(s) applied.",
        "Resources: 0 added, 2 changed, 0 replaced, 0 destroyed.",
        "Gate times (first change to gate passed):",
        "  devicePlugin  42.1s, healthy on 1000/1000 nodes",
        "  dcgmExporter  50.0s, healthy on 1000/1000 nodes",
        "Total time: 50.0s.",
    ]
    raw = terminal.getvalue()
    assert "\x1b[2A" in raw, "the two status lines are redrawn by moving the cursor up over them"
    assert "\x1b[" + "m" not in raw and "\x1b[3" not in raw, "no colour without a palette (--no-color)"


def test_a_status_line_is_cut_to_the_width_and_never_wraps() -> None:
    live, terminal, clock = display(width=40)
    long = "node-0042: " + "the exporter serves no DCGM_FI_DEV_GPU_TEMP for GPU 3 " * 3
    live.on_event(waiting("dcgmExporter", "dcgm-metrics", 812, 1000, 31.0, node="node-0042", message=long))
    [line] = terminal.lines[-1:]
    assert line == "… dcgmExporter  dcgm-metrics  812/1000…" and len(line) == 39
    assert terminal.widest <= 40


def test_a_narrowed_terminal_is_followed_at_the_next_redraw() -> None:
    terminal, clock = FakeTerminal(), Clock()
    columns = [120]
    live = LiveDisplay(terminal, Palette(False), width=lambda: columns[0], clock=clock)
    live.on_event(waiting("dcgmExporter", "dcgm-metrics", 1, 1000, 1.0, node="node-0042"))
    assert terminal.lines[-1].endswith("slowest: node-0042: no metrics yet"), "whole where it fits"
    columns[0] = 30
    clock.now += 1.0
    live.on_event(waiting("dcgmExporter", "dcgm-metrics", 2, 1000, 2.0, node="node-0042"))
    assert terminal.lines == ["… dcgmExporter  dcgm-metrics…"]


def test_rounds_closer_than_a_tenth_of_a_second_are_drawn_at_most_once_in_between() -> None:
    live, terminal, clock = display()
    live.on_event(start(EXPORTER))
    writes = len(terminal.getvalue())
    for ready in range(32):
        clock.now += 1 / 32
        live.on_event(waiting("dcgmExporter", "rollout", ready, 1000, ready / 32))
    raw = terminal.getvalue()[writes:]
    assert raw.count("… dcgmExporter") == 8, "a second of rounds every 31 ms: eight redraws, not 32"
    live.on_event(ApplyEvent("note", "something else"))
    assert terminal.lines[-1].startswith("… dcgmExporter  rollout  31/1000 nodes"), "the last round drawn"


def test_a_failed_component_leaves_its_reason_and_rolled_back_restores_are_said_so() -> None:
    live, terminal, clock = display(colour=True)
    live.on_event(ApplyEvent("apply_start", "applying 1 change(s) to stack lab"))
    live.on_event(start(EXPORTER))
    live.on_event(complete(EXPORTER))
    clock.now += 31.0
    live.on_event(waiting("dcgmExporter", "rollout", 812, 1000, 31.0))
    live.on_event(waiting("dcgmExporter", "rollout", 812, 1000, 31.0, state="failed", message="crash"))
    live.on_event(
        ApplyEvent(
            "change_errored",
            f"{EXPORTER} at the rollout gate: p on node-0042: CrashLoopBackOff",
            component="dcgmExporter",
            reason="CrashLoopBackOff",
        )
    )
    live.on_event(ApplyEvent("rollback_start", "rolling back 1 change(s)"))
    clock.now += 3.0
    live.on_event(waiting("dcgmExporter", "rollout", 1000, 1000, 3.0, state="passed", message="ok"))
    live.on_event(ApplyEvent("rollback_complete", "x", rolled_back=True, counts={"undone": 1, "left": 0}))
    live.on_event(ApplyEvent("summary", "Apply failed: x", state="failed"))
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in terminal.lines]
    assert shown[-8:] == [
        f"✗ dcgmExporter  failed  812/1000 nodes  31.0s  {EXPORTER} at the rollout gate: p on node-0042: "
        "CrashLoopBackOff",
        "rolling back 1 change(s)",
        "✓ dcgmExporter  restored, healthy  1000/1000 nodes  3.0s",
        "rollback complete: 1 change(s) undone",
        "Resources: 0 added, 1 changed, 0 replaced, 0 destroyed; 1 undone by the rollback.",
        "Gate times (first change to gate passed):",
        "  dcgmExporter  failed after 31.0s",
        "Total time: 34.0s.",
    ]
    assert "\x1b[31m✗\x1b[0m dcgmExporter" in terminal.getvalue()
    assert "Apply failed" not in terminal.getvalue(), "the command's Error: line says the verdict"


def test_a_terminal_gets_the_live_display() -> None:
    assert isinstance(progress.for_stream(FakeTerminal(), as_json=False, palette=Palette(False)), LiveDisplay)


def pooled(state: str, plugin: tuple[int, int], training: tuple[int, int], **more: str) -> ApplyEvent:
    """A device plugin gated per node pool: the stack's nodes passed, the training pool's still waiting."""
    pools = (
        PoolProgress(None, "allocatable", "passed", 3, 3),
        PoolProgress("training", more.get("gate", "allocatable"), state, *training),
    )
    return replace(waiting("devicePlugin", "allocatable", *plugin, 12.0, state=state, **more), pools=pools)


def test_a_component_gated_per_node_pool_shows_each_pool_under_it_and_counts_them_all_when_done() -> None:
    live, terminal, clock = display(width=100)
    live.on_event(start(PLUGIN))
    clock.now += 12.0
    live.on_event(pooled("progressing", (10, 20), (10, 20), node="gpu-7"))
    assert terminal.lines[-3:] == [
        "… devicePlugin  allocatable  10/20 nodes  12.0s  slowest: gpu-7: no metrics yet",
        "    (no pool)  passed  3/3 nodes",
        "    training   allocatable  10/20 nodes",
    ]
    clock.now += 1.0
    live.on_event(pooled("passed", (20, 20), (20, 20), message="ok"))
    assert terminal.lines[-1] == "✓ devicePlugin  healthy  23/23 nodes  13.0s", "every pool's nodes"
    assert len(terminal.lines) == 2, "the pools' lines went with the component's"


def test_a_new_gate_is_drawn_at_once_between_redraws() -> None:
    live, terminal, clock = display()
    live.on_event(waiting("dcgmExporter", "rollout", 999, 1000, 1.0))
    clock.now += 0.01
    live.on_event(waiting("dcgmExporter", "dcgm-metrics", 0, 1000, 1.01))
    assert terminal.lines[-1].startswith("… dcgmExporter  dcgm-metrics  0/1000 nodes")
    clock.now += 0.01
    live.on_event(waiting("dcgmExporter", "dcgm-metrics", 5, 1000, 1.02))
    assert terminal.lines[-1].startswith("… dcgmExporter  dcgm-metrics  0/1000 nodes"), "the same gate waits"
