"""Benchmark: ``gpuplan plan`` on big simulated fleets, beside ``kubectl get nodes,daemonsets -A -o json``.

For each fleet size (``fleet-1000`` and ``fleet-5000`` by default) a simulator runs in a child process, and
two commands are measured against it, each in its own process so that its peak memory is its own (read from
``/proc/<pid>/status`` while it runs, fleet.PeakRss):

- ``gpuplan plan -f SPEC --json`` (the lab-style spec of fleet.py: driver and toolkit external, the other four
  components owned by gpuplan): wall time, the API requests it reports (``api_requests`` of the plan), and
  peak resident memory;
- ``kubectl get nodes,daemonsets -A -o json``: wall time, API requests (counted from kubectl's ``-v=6``
  log, discovery cache warmed first), peak resident memory.

Run: ``python benchmarks/plan_bench.py [--nodes 1000 5000]``. It prints figures and asserts only that both
commands succeeded and saw every node; wall-clock numbers depend on the machine and are never asserted.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from fleet import (
    BENCH_SPEC,
    Row,
    fleet_simulator,
    gpuplan_command,
    measure,
    nodes_parser,
    run_fleets,
    simulator_script,
)

from gpuplan.sim.testing import kubectl_binary

SIMULATOR = simulator_script(settle_s=600)


def bench_fleet(nodes: int, folder: Path) -> list[Row]:
    kubeconfig, spec = folder / "kubeconfig", folder / "gpustack.yaml"
    with fleet_simulator(SIMULATOR, nodes, kubeconfig, stop_s=120):
        spec.write_text(BENCH_SPEC)
        plan = measure(gpuplan_command(kubeconfig, "plan", "-f", str(spec), "--json"), folder)
        document = json.loads(plan.stdout)
        assert document["nodes_total"] == nodes, f"the plan saw {document['nodes_total']} nodes, not {nodes}"
        kubectl = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={folder / 'cache'}"]
        measure([*kubectl, "api-resources"], folder)  # warm the discovery cache, as a user's kubectl has it
        listed = measure([*kubectl, "get", "nodes,daemonsets", "-A", "-o", "json", "-v=6"], folder)
        items = json.loads(listed.stdout)["items"]
        assert sum(1 for item in items if item["kind"] == "Node") == nodes
        requests = len(re.findall(r'"Response" verb="[A-Z]+"', listed.stderr))
    return [
        (
            f"fleet-{nodes}: gpuplan plan --json",
            f"{plan.seconds:6.2f} s  {document['api_requests']:3d} API requests  peak {plan.peak_mib:5.0f} "
            "MiB  "
            f"({len(document['changes'])} changes)",
        ),
        (
            f"fleet-{nodes}: kubectl get nodes,daemonsets -A -o json",
            f"{listed.seconds:6.2f} s  {requests:3d} API requests  peak {listed.peak_mib:5.0f} MiB  "
            f"({len(listed.stdout) / 1e6:.1f} MB of JSON)",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    args = nodes_parser(__doc__.split("\n\n")[0]).parse_args(argv)
    run_fleets(args.nodes, "gpuplan-plan-bench-", bench_fleet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
