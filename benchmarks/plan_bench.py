"""Benchmark: ``gpuplan plan`` on big simulated fleets, beside ``kubectl get nodes,daemonsets -A -o json``.

For each fleet size (``fleet-1000`` and ``fleet-5000`` by default) a simulator runs in a child process, and two
commands are measured against it, each in its own process so that its peak memory is its own
(``os.wait4`` returns the child's resource usage):

- ``gpuplan plan -f SPEC --json`` (the lab-style spec below: driver and toolkit external, the other four
  components owned by gpuplan): wall time, the API requests it reports (``api_requests`` of the plan), and
  peak resident memory;
- ``kubectl get nodes,daemonsets -A -o json``: wall time, API requests (counted from kubectl's ``-v=6``
  log, discovery cache warmed first), peak resident memory.

Run: ``python benchmarks/plan_bench.py [--nodes 1000 5000]``. It prints figures and asserts only that both
commands succeeded and saw every node; wall-clock numbers depend on the machine and are never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpuplan.sim.testing import kubectl_binary

SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: bench}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
"""
SIMULATOR = """\
import sys
from gpuplan.sim.cluster import Simulator
sim = Simulator(sys.argv[1]).start()
try:
    if not sim.wait_idle(600):
        raise SystemExit("the simulator did not settle")
    sim.write_kubeconfig(sys.argv[2])
    print("ready", flush=True)
    sys.stdin.read()  # runs until the benchmark closes our stdin
finally:
    sim.stop()
"""


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_mib: float
    stdout: str
    stderr: str


def measure(command: list[str], folder: Path) -> Measured:
    """Run ``command`` in its own process; wall time and that process's peak RSS (ru_maxrss, KiB on Linux)."""
    out_path, err_path = folder / "stdout", folder / "stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        began = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - began
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
    stdout, stderr = out_path.read_text(), err_path.read_text()
    if process.returncode not in (0, 2):
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}:\n{stderr[-2000:]}")
    return Measured(elapsed, usage.ru_maxrss / 1024, stdout, stderr)


def bench_fleet(nodes: int, folder: Path) -> list[tuple[str, str]]:
    kubeconfig = folder / "kubeconfig"
    simulator = subprocess.Popen([sys.executable, "-c", SIMULATOR, f"fleet-{nodes}", str(kubeconfig)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert simulator.stdout is not None and simulator.stdout.readline().strip() == "ready"
        spec = folder / "gpustack.yaml"
        spec.write_text(SPEC)
        plan = measure([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), "plan", "-f", str(spec),
                        "--json"], folder)
        document = json.loads(plan.stdout)
        assert document["nodes_total"] == nodes, f"the plan saw {document['nodes_total']} nodes, not {nodes}"
        kubectl = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={folder / 'cache'}"]
        measure([*kubectl, "api-resources"], folder)  # warm the discovery cache, as a user's kubectl has it
        listed = measure([*kubectl, "get", "nodes,daemonsets", "-A", "-o", "json", "-v=6"], folder)
        items = json.loads(listed.stdout)["items"]
        assert sum(1 for item in items if item["kind"] == "Node") == nodes
        requests = len(re.findall(r'"Response" verb="[A-Z]+"', listed.stderr))
    finally:
        if simulator.stdin is not None:
            simulator.stdin.close()
        simulator.wait(120)
        if simulator.stdout is not None:
            simulator.stdout.close()
    return [(f"fleet-{nodes}: gpuplan plan --json",
             f"{plan.seconds:6.2f} s  {document['api_requests']:3d} API requests  peak {plan.peak_mib:5.0f} MiB  "
             f"({len(document['changes'])} changes)"),
            (f"fleet-{nodes}: kubectl get nodes,daemonsets -A -o json",
             f"{listed.seconds:6.2f} s  {requests:3d} API requests  peak {listed.peak_mib:5.0f} MiB  "
             f"({len(listed.stdout) / 1e6:.1f} MB of JSON)")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000], help="fleet sizes (fleet-N)")
    args = parser.parse_args(argv)
    rows: list[tuple[str, str]] = []
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix="gpuplan-plan-bench-") as folder:
            rows += bench_fleet(nodes, Path(folder))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
