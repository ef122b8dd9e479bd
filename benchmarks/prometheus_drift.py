"""Benchmark: ``gpuplan drift report`` with its GPU telemetry from a Prometheus server, beside the same report
scraping every DCGM exporter through the API server's pod proxy.

For each fleet size (``fleet-200`` by default) the child process of ``drift_bench.py`` starts the simulator
and puts the stack in place (4 pods per GPU node, every exporter Ready). Debian's ``prometheus`` then runs
here, scraping every exporter at its pod IP as in a cluster (``tests/prometheus_server.py``: the relabelling
of docs/drift.md, file SD standing in for Kubernetes SD, which Debian's build lacks) every
``--scrape-interval``; once it holds a series from every exporter, each report runs in its own process:

- ``drift report --format json --telemetry-max-nodes N``: one scrape per node (N at least the fleet);
- ``drift report --format json --prometheus URL``: a fixed number of PromQL instant queries.

It prints, for each, wall time, API server requests, Prometheus queries and peak RSS, then the ratio of the
wall times and of the requests, and checks that both reports saw every node and agree on the findings.
Prometheus keeps scraping during both reports (as it would in production), so both share the simulator with
it. Wall-clock figures depend on the machine and are never asserted.

Run: ``python benchmarks/prometheus_drift.py [--nodes 200 500] [--scrape-interval 30s]``.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from drift_bench import SIMULATOR
from fleet import (
    BENCH_SPEC,
    Measured,
    Row,
    fleet_simulator,
    gpuplan_command,
    measure,
    nodes_parser,
    run_fleets,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from prometheus_server import PrometheusServer  # noqa: E402

QUERIES = re.compile(r"telemetry read from Prometheus at \S+ \((\d+) queries\)")


def prometheus_for(kubeconfig: Path, folder: Path, interval: str) -> PrometheusServer:
    """A Prometheus scraping every exporter of the cluster ``kubeconfig`` names at its pod IP."""
    seconds = int(interval.rstrip("s"))
    return PrometheusServer(
        folder,
        kubeconfig=kubeconfig,
        interval=interval,
        timeout=f"{max(1, seconds * 2 // 3)}s",
    )


def figures(label: str, measured: Measured, nodes: int) -> tuple[Row, dict[str, Any], int]:
    document: dict[str, Any] = json.loads(measured.stdout)
    assert document["summary"]["nodes"] == nodes, f"the report saw {document['summary']['nodes']} nodes"
    queries = next((int(m.group(1)) for note in document["notes"] if (m := QUERIES.search(note))), 0)
    judged = sum(1 for node in document["nodes"] if node["telemetry"]["gpus"])
    row = (
        f"fleet-{nodes}: drift report {label}",
        f"{measured.seconds:7.2f} s  {document['api_requests']:5d} API requests  {queries:2d} Prometheus "
        f"queries  peak {measured.peak_mib:5.0f} MiB  ({len(document['findings'])} findings, "
        f"{judged} nodes' GPUs judged)",
    )
    return row, document, document["api_requests"] + queries


def bench_fleet(nodes: int, folder: Path, interval: str) -> list[Row]:
    kubeconfig, spec = folder / "kubeconfig", folder / "gpustack.yaml"
    spec.write_text(BENCH_SPEC)
    began = time.perf_counter()
    with fleet_simulator(SIMULATOR, nodes, kubeconfig, str(spec), stop_s=300):
        prometheus = prometheus_for(kubeconfig, folder / "prometheus", interval).start()
        try:
            exporters = prometheus.discover()
            prometheus.wait_for_nodes(exporters, timeout=max(300.0, 10.0 * int(interval.rstrip("s"))))
            print(
                f"fleet-{nodes}: stack ready and {exporters} exporters in Prometheus after "
                f"{time.perf_counter() - began:.0f} s",
                flush=True,
            )
            report = gpuplan_command(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json")
            scrape_row, scraped, scrape_cost = figures(
                "(scraping)", measure([*report, "--telemetry-max-nodes", str(nodes)], folder), nodes
            )
            query_row, queried, query_cost = figures(
                "--prometheus", measure([*report, "--prometheus", prometheus.url], folder), nodes
            )
        finally:
            prometheus.stop()
    assert queried["findings"] == scraped["findings"], "both sources must find the same"
    scrape_s, query_s = (float(row[1].split()[0]) for row in (scrape_row, query_row))
    ratio = (
        f"wall {scrape_s:.2f} s -> {query_s:.2f} s ({scrape_s / query_s:.1f}x), requests {scrape_cost} -> "
        f"{query_cost} ({scrape_cost / query_cost:.0f}x fewer)"
    )
    return [scrape_row, query_row, (f"fleet-{nodes}: Prometheus vs scraping", ratio)]


def main(argv: list[str] | None = None) -> int:
    if shutil.which("prometheus") is None:
        raise SystemExit(
            "prometheus is not installed (Debian's prometheus package: apt-get install prometheus)"
        )
    parser = nodes_parser(__doc__.split("\n\n")[0])
    parser.set_defaults(nodes=[200])
    parser.add_argument(
        "--scrape-interval", default="30s", help="Prometheus's scrape interval, whole seconds (30s)"
    )
    args = parser.parse_args(argv)
    run_fleets(
        args.nodes,
        "gpuplan-prometheus-drift-",
        lambda nodes, folder: bench_fleet(nodes, folder, args.scrape_interval),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
