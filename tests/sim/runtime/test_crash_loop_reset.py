"""A crash-looping container's back-off starts over once it has run 10 minutes (scaled: 60 x
crashLoopBackoffSeconds) without crashing, as the kubelet's back-off does; its restartCount keeps growing.
The runtime's clock is injected, so the ten minutes pass without sleeping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.kubelet import runtime

MANIFESTS = Path(__file__).parents[1] / "e2e" / "manifests"
# A real release (the registry has it), made to crash by the scenario's image fault.
BROKEN = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless"
BASE = 0.005
RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "nvidia"},
    "handler": "nvidia",
}
DEPLOY = {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def crash_looping() -> Iterator[tuple[Simulator, FakeClock, list[float]]]:
    """A node whose DCGM exporter crash-loops; the runtime's clock and the restart delays it asked for."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
    exporter = next(yaml.safe_load_all((MANIFESTS / "30-dcgm-exporter.yaml").read_text()))
    exporter["spec"]["template"]["spec"]["containers"][0]["image"] = BROKEN
    node = {
        "name": "n1",
        "gpu": {"model": "a100-80gb", "count": 2},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
        "labels": DEPLOY,
    }
    sim = Simulator(
        {
            "nodes": [node],
            "objects": [namespace, RUNTIME_CLASS, exporter],
            "faults": {"images": {BROKEN: "CrashLoopBackOff"}},
            "timing": {"podReadySeconds": 0.01, "crashLoopBackoffSeconds": BASE},
        },
        serve=False,
    )
    clock = FakeClock()
    sim.runtime.clock = clock
    delays: list[float] = []
    call_later = sim.loop.call_later

    def recording(delay: float, callback: Any, *, settling: bool = True) -> Any:
        if not settling:  # the runtime's only background timer here: the next crash-loop restart
            delays.append(delay)
        return call_later(delay, callback, settling=settling)

    sim.loop.call_later = recording
    sim.start()
    yield sim, clock, delays
    sim.stop()
    assert not sim.errors, sim.errors


def exporter(sim: Simulator) -> dict[str, Any]:
    """The exporter's pod ({} until the DaemonSet controller created it)."""
    pods = sim.store.list(sim.store.registry.for_kind("v1", "Pod"), namespace="gpu-operator").items
    return dict(pods[0]) if pods else {"status": {}}


def restarts(sim: Simulator) -> int:
    statuses = exporter(sim)["status"].get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def waiting_message(sim: Simulator) -> str:
    statuses = exporter(sim)["status"].get("containerStatuses") or [{}]
    return str(statuses[0].get("state", {}).get("waiting", {}).get("message", ""))


def ready(sim: Simulator) -> bool:
    conditions = exporter(sim)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def crash_again(sim: Simulator, delays: list[float]) -> float:
    """Break the healed container again; the delay before its next restart."""
    asked = len(delays)
    sim.set_image_fault(BROKEN, "CrashLoopBackOff")
    assert sim.wait_for(lambda: len(delays) > asked, 10)
    return delays[asked]


def heal(sim: Simulator) -> None:
    sim.set_image_fault(BROKEN, None)
    assert sim.wait_for(lambda: ready(sim), 10)


def test_the_back_off_goes_on_after_a_short_run(
    crash_looping: tuple[Simulator, FakeClock, list[float]],
) -> None:
    sim, clock, delays = crash_looping
    assert sim.wait_for(lambda: restarts(sim) >= 4, 10)
    heal(sim)
    steps = len(delays)
    clock.now += runtime.CRASH_LOOP_RESET_FACTOR * BASE * 0.9  # a run shorter than the kubelet's 10 minutes
    assert crash_again(sim, delays) == runtime.crash_loop_delay(BASE, steps + 1)


def test_the_back_off_starts_over_after_ten_minutes_without_a_crash(
    crash_looping: tuple[Simulator, FakeClock, list[float]],
) -> None:
    sim, clock, delays = crash_looping
    assert sim.wait_for(lambda: restarts(sim) >= 4, 10)
    assert delays[:4] == [BASE * f for f in (1, 2, 4, 8)]
    heal(sim)
    count = restarts(sim)
    clock.now += runtime.CRASH_LOOP_RESET_FACTOR * BASE * 1.001  # the scaled ten minutes (and a bit)
    assert crash_again(sim, delays) == BASE
    assert sim.wait_for(lambda: "back-off 10s restarting failed container" in waiting_message(sim), 10), (
        "the CrashLoopBackOff message names the first real delay again"
    )
    assert sim.wait_for(lambda: restarts(sim) > count, 10)
    assert restarts(sim) > count >= 4, "restartCount is not reset, only the back-off"
