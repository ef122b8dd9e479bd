"""What the fleet benchmarks share: a ``fleet-N`` simulator in a child process, commands measured each in its
own process, and the table of figures they print.

Used by plan_bench.py and drift_bench.py (run as ``python benchmarks/X_bench.py``, which puts this folder on
``sys.path``). The simulator runs in a child so that the measured commands' peak memory is their own, read
from each command's ``/proc/<pid>/status`` while it runs (``PeakRss``); the child says ``ready`` on its
stdout once the cluster has settled (and whatever the benchmark's setup does after that has finished), and
stops when its stdin is closed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BENCH_SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: bench}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
"""
"""The lab-style stack the benchmarks plan and report on: driver and toolkit external, the other four
components owned by gpuplan (no driver version, so no node is a mismatch)."""

Row = tuple[str, str]
"""One printed line: what was measured, and its figures."""


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_mib: float
    stdout: str
    stderr: str


def measure(command: list[str], folder: Path) -> Measured:
    """Run ``command`` in its own process; wall time and that process's peak RSS (``PeakRss``). Exit codes 0
    and 2 (changes or drift found) are success; any other stops the benchmark with stderr."""
    out_path, err_path = folder / "stdout", folder / "stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        began = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err)
        peak = PeakRss(process.pid)
        while not peak.sampled_until_exit(process):
            pass
        elapsed = time.perf_counter() - began
    stdout, stderr = out_path.read_text(), err_path.read_text()
    if process.returncode not in (0, 2):
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}:\n{stderr[-2000:]}")
    return Measured(elapsed, peak.kib / 1024, stdout, stderr)


def peak_rss_kib(pid: int | str = "self") -> int:
    """The process's own peak resident set (``VmHWM`` of ``/proc/<pid>/status``, KiB); 0 once it is gone.

    Not ``ru_maxrss`` from ``os.wait4``: Popen starts children with vfork, and exec records the mm the child
    borrowed (the parent's) as the child's maximum, so a small command read as big as its benchmark."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    line = next((line for line in status.splitlines() if line.startswith("VmHWM:")), "VmHWM: 0 kB")
    return int(line.split()[1])


class PeakRss:
    """A child's peak RSS, sampled from ``/proc`` while it runs. A high-water mark never falls, so only the
    growth of its last sampling interval can be missed (10 ms; a zombie has no memory to read)."""

    INTERVAL_S = 0.01

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.kib = 0

    def sampled_until_exit(self, process: subprocess.Popen[bytes]) -> bool:
        """Take one sample, then wait one interval for ``process`` to exit; True once it has."""
        self.kib = max(self.kib, peak_rss_kib(self.pid))
        try:
            process.wait(self.INTERVAL_S)
        except subprocess.TimeoutExpired:
            return False
        return True


def gpuplan_command(kubeconfig: Path, *args: str) -> list[str]:
    """``gpuplan --kubeconfig KUBECONFIG ARGS...`` as this interpreter runs it."""
    return [sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), *args]


def simulator_script(settle_s: int, setup: str = "") -> str:
    """The child's program: ``python -c SCRIPT SCENARIO KUBECONFIG [ARGS...]`` starts the scenario, waits up
    to ``settle_s`` for it to settle, writes the kubeconfig, runs ``setup`` (Python source; ``sim``,
    ``kubeconfig`` and ``sys.argv`` are in scope), says ``ready`` and serves until its stdin is closed."""
    return (
        "import sys\n"
        "from gpuplan.sim.cluster import Simulator\n"
        "sim = Simulator(sys.argv[1]).start()\n"
        "try:\n"
        f"    if not sim.wait_idle({settle_s}):\n"
        "        raise SystemExit('the simulator did not settle')\n"
        "    kubeconfig = sys.argv[2]\n"
        "    sim.write_kubeconfig(kubeconfig)\n"
        + textwrap.indent(textwrap.dedent(setup), "    ")
        + "    print('ready', flush=True)\n"
        "    sys.stdin.read()  # runs until the benchmark closes our stdin\n"
        "finally:\n"
        "    sim.stop()\n"
    )


@contextmanager
def fleet_simulator(script: str, nodes: int, kubeconfig: Path, *args: str, stop_s: float) -> Iterator[None]:
    """The ``fleet-{nodes}`` simulator running ``script`` (see ``simulator_script``) in a child process,
    ready; closing its stdin on exit stops it (waited for up to ``stop_s``)."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, f"fleet-{nodes}", str(kubeconfig), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(stop_s)
        if child.stdout is not None:
            child.stdout.close()


def nodes_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with ``--nodes N...`` (fleet sizes, fleet-1000 and fleet-5000 by default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000], help="fleet sizes (fleet-N)")
    return parser


def run_fleets(sizes: list[int], prefix: str, bench_fleet: Callable[[int, Path], list[Row]]) -> None:
    """``bench_fleet(nodes, folder)`` for each size, in a temporary folder of its own; then the rows of all,
    aligned in one table."""
    rows: list[Row] = []
    for nodes in sizes:
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            rows += bench_fleet(nodes, Path(folder))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
