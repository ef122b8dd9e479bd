"""Benchmark: the simulator holding a fleet with the whole GPU stack's pods (``fleet-1000 5000 10000``).

For each fleet size a simulator runs in a child process, alone, so that its peak memory is its own. The
fleet is ``fleet-N``'s pools (same node names, models and counts) on one OS, without the host driver and
toolkit where gpuplan owns them, so that every component's pod can run on every node: the containerised
driver needs a node without a host driver, and its image is built for one OS (``<version>-ubuntu24.04``).
The child settles the bare fleet, then server-side applies the stack as gpuplan (manager ``gpuplan``) straight
into its store: the objects gpuplan's modules render for a spec that owns the chosen components (all six by
default: driver, toolkit, device plugin, GFD, DCGM exporter, validator), rendered here in the parent. It
waits, on loop passes rather than sleeps, until every DaemonSet reports all its pods ready, and prints one
JSON line of figures: the time to start and settle the bare fleet, the time from the first apply until the
stack is ready and the CPU seconds it took (``getrusage``: contention on a shared machine stretches the wall
time, not the CPU time), the pods, and its peak RSS (``VmHWM`` of ``/proc/self/status``).

Run: ``python benchmarks/stack_bench.py [--nodes 1000 5000 10000] [--components devicePlugin gfd ...]``.
It prints figures and the ratio of each against the goal (4 GiB and 2 minutes at 10,000 nodes and 60,000
pods); wall-clock numbers depend on the machine and are never asserted.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet import peak_rss_kib

from gpuplan.modules.catalog import COMPONENTS

GOAL_MIB = 4096
GOAL_SETTLE_S = 120.0
GOAL_PODS = 60000
OS_TAG = "ubuntu24.04"
KERNEL = "6.8.0-101-generic"
DRIVER = "580.105.08"
SECTIONS = {
    "driver": f'{{version: "{DRIVER}"}}',
    "toolkit": "{}",
    "devicePlugin": "{version: v0.20.1}",
    "gfd": "{version: v0.20.1}",
    "dcgmExporter": "{version: 4.6.0-4.8.3-distroless}",
    "validator": "{}",
}
"""Each component's section when gpuplan owns it."""
NOT_OWNED = {"driver": f'{{owner: external, version: "{DRIVER}"}}', "toolkit": "{owner: external}"}
"""A component left out: the host's driver and toolkit (the nodes keep them), the others not run at all."""
HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: bench}\nspec:\n"


def stack_spec(components: list[str]) -> str:
    """A GPUStack spec owning ``components``; the host provides the driver and toolkit otherwise."""
    lines = [
        f"  {name}: {SECTIONS[name] if name in components else NOT_OWNED.get(name, '{owner: none}')}\n"
        for name in SECTIONS
    ]
    return HEADER + "".join(lines)


def stack_manifests(components: list[str]) -> list[dict[str, Any]]:
    """What gpuplan applies for ``stack_spec(components)`` on the bench fleet: its namespace first."""
    from gpuplan.planner.spec.model import parse_spec

    spec = parse_spec(stack_spec(components), filename="bench-gpustack.yaml")
    stack = spec.context(os_tag=OS_TAG, container_runtime="containerd")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.spec.namespace}}
    return [namespace, *(dict(obj.manifest) for obj in spec.desired_objects(stack))]


# -- the child: the simulator ----------------------------------------------------------------------------


def bench_scenario(nodes: int, components: list[str]) -> Any:
    """``fleet-N`` on one OS, without a host driver / toolkit where the stack brings its own."""
    from gpuplan.sim.scenario import fleet_scenario

    fleet = fleet_scenario(nodes)
    update: dict[str, Any] = {"os": OS_TAG, "kernel": KERNEL}
    if "driver" in components:
        update["driver"] = None
    if "toolkit" in components:
        update["toolkit"] = None
    return fleet.model_copy(update={"nodes": [spec.model_copy(update=update) for spec in fleet.nodes]})


def serve_child(nodes: int, components: list[str], manifests_path: str, timeout_s: float) -> None:
    """Start and settle the bench fleet, apply the stack, wait for it, print the figures as JSON."""
    from gpuplan.sim.cluster import Simulator

    began = time.perf_counter()
    sim = Simulator(bench_scenario(nodes, components)).start()
    try:
        if not sim.wait_idle(timeout_s):
            raise SystemExit("the bare fleet did not settle")
        fleet_s = time.perf_counter() - began
        fleet_kib = peak_rss_kib()
        manifests = json.loads(Path(manifests_path).read_text())
        began, cpu_began = time.perf_counter(), cpu_seconds()
        daemonsets = [_apply(sim, manifest) for manifest in manifests]
        daemonsets = [key for key in daemonsets if key is not None]
        ready = sim.wait_for(lambda: _stack_ready(sim, daemonsets, nodes), timeout_s)
        settle_s, settle_cpu_s = time.perf_counter() - began, cpu_seconds() - cpu_began
        pods = sum(_ready_pods(sim, namespace, name) for namespace, name in daemonsets)
        figures = {
            "nodes": nodes,
            "daemonsets": len(daemonsets),
            "pods": pods,
            "ready": ready,
            "fleet_s": fleet_s,
            "fleet_kib": fleet_kib,
            "settle_s": settle_s,
            "settle_cpu_s": settle_cpu_s,
            "peak_kib": peak_rss_kib(),
        }
        print(json.dumps(figures), flush=True)
    finally:
        began = time.perf_counter()
        sim.stop()
        print(f"fleet-{nodes}: stopped in {time.perf_counter() - began:.1f} s", file=sys.stderr)


def cpu_seconds() -> float:
    """This process's CPU time (user + system, every thread): unlike the settle's wall time, what other work
    on a shared machine does not stretch."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _apply(sim: Any, manifest: dict[str, Any]) -> tuple[str, str] | None:
    """Server-side apply ``manifest`` as gpuplan does; the (namespace, name) of a DaemonSet."""
    rt = sim.store.registry.for_kind(manifest["apiVersion"], manifest["kind"])
    metadata = manifest["metadata"]
    namespace = metadata.get("namespace") if rt.namespaced else None
    body = json.dumps(manifest).encode()
    sim.store.patch(rt, namespace, metadata["name"], body, "application/apply-patch+yaml", manager="gpuplan")
    return (namespace, metadata["name"]) if manifest["kind"] == "DaemonSet" else None


def _daemonset_status(sim: Any, namespace: str, name: str) -> dict[str, Any]:
    rt = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    obj = sim.store.get(rt, namespace, name)
    status: dict[str, Any] = obj.get("status", {})
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return {}
    return status


def _ready_pods(sim: Any, namespace: str, name: str) -> int:
    return int(_daemonset_status(sim, namespace, name).get("numberReady", 0))


def _stack_ready(sim: Any, daemonsets: list[tuple[str, str]], nodes: int) -> bool:
    """Every DaemonSet has a pod on every node, all of the current template and ready."""
    for namespace, name in daemonsets:
        status = _daemonset_status(sim, namespace, name)
        counts = ("desiredNumberScheduled", "currentNumberScheduled", "updatedNumberScheduled", "numberReady")
        if any(status.get(count) != nodes for count in counts):
            return False
    return True


# -- the parent: one child per fleet size, and the table ---------------------------------------------------


def bench_fleet(nodes: int, components: list[str], folder: Path, timeout_s: float) -> dict[str, Any]:
    manifests = folder / "manifests.json"
    manifests.write_text(json.dumps(stack_manifests(components)))
    command = [sys.executable, __file__, "--child", str(nodes), str(manifests), "--timeout", str(timeout_s)]
    command += ["--components", *components]
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"fleet-{nodes}: the child exited {result.returncode} before its figures")
    figures: dict[str, Any] = json.loads(lines[-1])
    if result.returncode != 0:  # the figures were measured; what failed after them is the child's stderr
        print(f"fleet-{nodes}: the child exited {result.returncode} after its figures", file=sys.stderr)
    if not figures["ready"]:
        raise SystemExit(f"fleet-{nodes}: the stack was not ready after {timeout_s:.0f} s: {figures}")
    return figures


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'nodes':>6} {'pods':>6} {'fleet s':>8} {'settle s':>9} {'CPU s':>7} {'peak MiB':>9} "
        f"{'KiB/pod':>8} {'mem/goal':>9} {'settle/goal':>12}"
    )
    print(header)
    for row in rows:
        peak_mib = row["peak_kib"] / 1024
        per_pod = (row["peak_kib"] - row["fleet_kib"]) / max(row["pods"], 1)
        # the goal's figures scaled to this fleet's pods: 4 GiB and 120 s at 60,000
        share = row["pods"] / GOAL_PODS
        print(
            f"{row['nodes']:>6} {row['pods']:>6} {row['fleet_s']:>8.1f} {row['settle_s']:>9.1f} "
            f"{row['settle_cpu_s']:>7.1f} "
            f"{peak_mib:>9.0f} {per_pod:>8.1f} {peak_mib / (GOAL_MIB * share):>9.2f} "
            f"{row['settle_s'] / (GOAL_SETTLE_S * share):>12.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000], help="fleet sizes")
    parser.add_argument(
        "--components", nargs="+", default=list(SECTIONS), choices=list(SECTIONS), help="what gpuplan owns"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for each settle")
    parser.add_argument("--child", nargs=2, metavar=("NODES", "MANIFESTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # the six-component stack of the goal; a component without a section keeps its default (migManager: none)
    assert set(SECTIONS) <= set(COMPONENTS), "a section of a component gpuplan does not have"
    if args.child:
        serve_child(int(args.child[0]), args.components, args.child[1], args.timeout)
        return 0
    rows = []
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix="gpuplan-stack-bench-") as folder:
            rows.append(bench_fleet(nodes, args.components, Path(folder), args.timeout))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
