"""Ctrl-C while a command makes a plan or reads the cluster: exit 130 and one line saying nothing changed.

Each command runs as a process against the lab simulator, whose API latency fault holds every resource
request until the test lets it go (the latency goes through the simulator's injectable sleep, so the test
knows, without a clock, that the command is waiting on the cluster); the test then sends SIGINT."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_stack import LAB_SPEC

from gpuplan import cli
from gpuplan.context import self_command
from gpuplan.sim.cluster import Simulator

WAIT = 60  # seconds a step may take before the test gives up (never reached when things work)
PLANNING = "Error: interrupted while planning; nothing was changed"
READING = "Error: interrupted while reading the cluster; nothing was changed"


class HeldRequests:
    """The simulator's latency, made to wait for the test: ``arrived`` is set by the first held request."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.arrived.set()
        self.released.wait(WAIT)


@pytest.fixture
def held(lab_sim: Simulator) -> Iterator[HeldRequests]:
    requests = HeldRequests()
    lab_sim.api_faults.sleep = requests.sleep
    yield requests
    requests.released.set()  # the server's threads finish before the simulator stops
    lab_sim.api_faults.update(latency_ms=0)


@pytest.fixture
def spec(tmp_path: Path, kubeconfig: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(LAB_SPEC)
    hand = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    plugin = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
    assert cli.run(["--kubeconfig", str(kubeconfig), "import", "-f", str(path), plugin, hand]) == 0, (
        "a state, for drift report to compare with"
    )
    return path


def interrupted(lab_sim: Simulator, held: HeldRequests, kubeconfig: Path, *argv: str) -> tuple[int, str, str]:
    """Run ``gpuplan ARGV``, send SIGINT once it waits on the cluster, and return its exit code and output."""
    lab_sim.api_faults.update(latency_ms=1)  # every resource request from now on is held
    process = subprocess.Popen(
        self_command("--kubeconfig", str(kubeconfig), *argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.arrived.wait(WAIT), "the command never asked the cluster"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["plan"], PLANNING),
        (["apply", "--auto-approve"], PLANNING),
        (["drift", "report"], READING),
        (["inventory"], READING),
    ],
    ids=["plan", "apply", "drift report", "inventory"],
)
def test_ctrl_c_while_waiting_on_the_cluster_exits_130_saying_nothing_changed(
    argv: list[str], line: str, lab_sim: Simulator, held: HeldRequests, kubeconfig: Path, spec: Path
) -> None:
    state_before = (spec.parent / "gpuplan.state.json").read_text()
    code, out, err = interrupted(lab_sim, held, kubeconfig, *argv, "-f", str(spec))
    assert code == 130, err
    assert err.splitlines() == [line], "one line: no traceback, no click 'Aborted.'"
    assert out == ""
    assert (spec.parent / "gpuplan.state.json").read_text() == state_before
    assert not list(spec.parent.glob("*.lock")), "the state lock is released"
