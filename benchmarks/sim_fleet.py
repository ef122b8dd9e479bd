"""Benchmark: the simulated cluster at fleet scale (``fleet-5000`` by default).

Starts the simulator in this process, then measures what gpuplan and its users do against a big cluster:

- start-up time (store, 5,000 Node objects, kubelets, API server) and the time until the cluster settles;
- ``kubectl get nodes -o json`` (the real kubectl; it pages with limit=500 on its own), with the list requests
  it made (counted from kubectl's ``-v=6`` request log; discovery is warmed first);
- the official Python client's paginated list (``list_node(limit=500)`` following ``continue``), with its
  pages;
- the process's peak resident memory (``resource.getrusage``).

Run: ``python benchmarks/sim_fleet.py [--nodes N] [--limit 500]``. It prints figures and asserts only that
every node came back; wall-clock numbers depend on the machine and are never asserted.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import kubectl_binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000, help="number of nodes (scenario fleet-N)")
    parser.add_argument("--limit", type=int, default=500, help="page size of the Python client's list")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpuplan-bench-") as folder:
        work = Path(folder)
        began = time.perf_counter()
        sim = Simulator(f"fleet-{args.nodes}")
        sim.start()
        try:
            started = time.perf_counter() - began
            settled_ok = sim.wait_idle(300)
            settled = time.perf_counter() - began
            kubeconfig = sim.write_kubeconfig(work / "kubeconfig")
            rows = [
                ("scenario", f"fleet-{args.nodes}"),
                ("start-up", f"{started:.2f} s"),
                ("settled", f"{settled:.2f} s" + ("" if settled_ok else " (not settled after 300 s)")),
            ]
            rows += _kubectl_get_nodes(kubeconfig, work, args.nodes)
            rows += _python_client_list(kubeconfig, args.limit, args.nodes)
        finally:
            sim.stop()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
    rows.append(("peak memory (RSS)", f"{peak_mib:.0f} MiB"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def _kubectl_get_nodes(kubeconfig: Path, work: Path, expected: int) -> list[tuple[str, str]]:
    command = [
        kubectl_binary(),
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={work / 'cache'}",
        "get",
        "nodes",
        "-o",
        "json",
        "-v=6",
    ]
    subprocess.run(command[:-1] + ["--request-timeout=60s", "version"], capture_output=True, timeout=120)
    began = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
    elapsed = time.perf_counter() - began
    items = result.stdout.count('"kind": "Node"')
    requests = len(re.findall(r'"Response" verb="[A-Z]+" url="[^"]*/api/v1/nodes', result.stderr))
    assert items == expected, f"kubectl returned {items} nodes, expected {expected}"
    return [
        (
            "kubectl get nodes -o json",
            f"{elapsed:.2f} s ({items} nodes, {requests} requests, {len(result.stdout) / 1e6:.1f} MB)",
        )
    ]


def _python_client_list(kubeconfig: Path, limit: int, expected: int) -> list[tuple[str, str]]:
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))  # type: ignore[no-untyped-call]
    began = time.perf_counter()
    pages, names, token = 0, 0, None
    while True:
        page = api.list_node(limit=limit, _continue=token) if token else api.list_node(limit=limit)
        pages += 1
        names += len(page.items)
        token = page.metadata._continue if page.metadata is not None else None
        if not token:
            break
    elapsed = time.perf_counter() - began
    api.api_client.close()
    assert names == expected, f"the Python client listed {names} nodes, expected {expected}"
    return [(f"python client list_node(limit={limit})", f"{elapsed:.2f} s ({names} nodes, {pages} requests)")]


if __name__ == "__main__":
    sys.exit(main())
