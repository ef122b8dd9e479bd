"""Benchmark: ``gpuplan drift report`` on big simulated fleets with the stack in place.

For each fleet size (``fleet-1000`` and ``fleet-5000`` by default) a simulator runs in a child process; the
child also puts the lab-style stack in place as apply will (the spec's objects server-side applied with
KubernetesWriter, recorded in a state file) and waits until every pod of the four DaemonSets has settled,
so the report reads a fleet where the stack's pods really exist (4 per GPU node). Then, each in its own
process so that its peak memory is its own (``VmHWM`` of its ``/proc/<pid>/status``, fleet.PeakRss):

- ``drift report --no-telemetry --format json``: the cluster part alone, whose API requests must not grow
  with the nodes except for list pages (500 items a page: nodes, and the stack's pods);
- ``drift report --format json --telemetry-max-nodes N``: with telemetry, one DCGM scrape per node (capped),
  which is per node by nature.

It prints wall time, API requests (the report's ``api_requests``) and peak RSS, and asserts only that the
report saw every node; wall-clock numbers depend on the machine and are never asserted.

Run: ``python benchmarks/drift_bench.py [--nodes 1000 5000] [--telemetry-max-nodes 1000]``.
"""

from __future__ import annotations

import json
import sys
import time
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

STACK_IN_PLACE = """\
from gpuplan.planner.observe import adopt
from gpuplan.planner.observe import refresh
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile
from pathlib import Path

spec_file = Path(sys.argv[3])
spec = load_spec(spec_file)
with KubernetesWriter(kubeconfig=kubeconfig) as writer:
    writer.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.spec.namespace}})
    # the external toolkit's RuntimeClass, which the operands' pods name (a lab has it; fleet-N does not)
    writer.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                  "handler": "nvidia"})
    facts = refresh.node_facts(refresh.refresh(writer, spec, None))
    stack = spec.context_for(facts)
    records = [adopt.record_applied(obj, writer.apply(dict(obj.manifest)), serial=1)
               for obj in spec.desired_objects(stack)]
state_file = spec_file.parent / "gpuplan.state.json"
LocalFileBackend(state_file).write(StateFile.new().with_records(records).next_serial())
if not sim.wait_idle(1800):
    raise SystemExit("the stack's pods did not settle")
"""
"""The child's setup once the fleet has settled: the spec's objects applied and recorded as apply would."""
SIMULATOR = simulator_script(settle_s=900, setup=STACK_IN_PLACE)


def bench_fleet(nodes: int, folder: Path, max_nodes: int) -> list[Row]:
    kubeconfig, spec = folder / "kubeconfig", folder / "gpustack.yaml"
    spec.write_text(BENCH_SPEC)
    began = time.perf_counter()
    rows = []
    with fleet_simulator(SIMULATOR, nodes, kubeconfig, str(spec), stop_s=300):
        print(
            f"fleet-{nodes}: simulator with the stack ready in {time.perf_counter() - began:.0f} s",
            flush=True,
        )
        report = gpuplan_command(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json")
        for label, extra in (
            ("--no-telemetry", ["--no-telemetry"]),
            (f"--telemetry-max-nodes {max_nodes}", ["--telemetry-max-nodes", str(max_nodes)]),
        ):
            measured = measure([*report, *extra], folder)
            document = json.loads(measured.stdout)
            assert document["summary"]["nodes"] == nodes, (
                f"the report saw {document['summary']['nodes']} nodes"
            )
            scraped = sum(1 for node in document["nodes"] if node["telemetry"]["gpus"])
            rows.append(
                (
                    f"fleet-{nodes}: drift report {label}",
                    f"{measured.seconds:7.2f} s  {document['api_requests']:5d} API requests  "
                    f"peak {measured.peak_mib:5.0f} MiB  ({len(document['findings'])} findings, "
                    f"{scraped} nodes scraped)",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = nodes_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--telemetry-max-nodes", type=int, default=1000, help="the report's scrape cap")
    args = parser.parse_args(argv)
    run_fleets(
        args.nodes,
        "gpuplan-drift-bench-",
        lambda nodes, folder: bench_fleet(nodes, folder, args.telemetry_max_nodes),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
