"""gpuplan's speed goals, each a ratio of two commands run side by side: measured, and judged met or missed.

    python benchmarks/goals.py                          # every row (fleet-5000 rows take many minutes)
    python benchmarks/goals.py --only plan startup      # some rows
    python benchmarks/goals.py --only apply --apply-nodes 1000 --pairs 3

Each pair runs the two commands one after the other (interleaved, so that a busy machine slows both alike);
a row's ratio is the ratio of the two medians. Peak memory is each command's own (``VmHWM`` of its
``/proc/<pid>/status``, fleet.PeakRss), requests are what each command sent: ``api_requests`` for plan and
drift, an HTTP request count for apply (:data:`COUNTED`), ``-v=6`` responses for kubectl.

- apply: ``apply --auto-approve`` of ``BENCH_SPEC`` on a fresh detached ``fleet-N``, beside ``kubectl apply``
  of the same rendered objects and ``kubectl rollout status`` of each DaemonSet, on another fresh one;
- plan: ``plan --json`` beside ``kubectl get nodes,daemonsets -A -o json`` (discovery cache warmed);
- drift: ``drift report --prometheus URL`` (telemetry of every node, Prometheus scraping every exporter at its
  pod IP) on the stack in place, beside ``kubectl get nodes,daemonsets,pods -A -o json``;
- startup: ``gpuplan --help`` beside ``python -c pass``.

The plan and apply rows also run on the real control plane (``--kube-nodes``; rows marked ``kube``): a
detached ``gpuplan sim start --control-plane kube`` (kube-apiserver, etcd, the real DaemonSet controller and
scheduler, the GPU nodes simulated through the API), gpuplan and kubectl measured against the same server.
They need ``controlplane/build``'s programs (or ``$GPUPLAN_KUBE_BIN``) and root or user namespaces; the
apply there waits on the real controllers, so its stack's gates get ``KUBE_HEALTH_TIMEOUT_S``.

The gpuplan commands run with their bytecode cached (``PYTHONPYCACHEPREFIX`` in a temporary folder, one
warm-up run first), as an installed package has it: ``pip install`` compiles it, while a checkout run with
``PYTHONDONTWRITEBYTECODE`` set would compile every module on every run. Wall-clock figures are never
asserted; the script prints them.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from fleet import BENCH_SPEC, Measured, fleet_simulator, gpuplan_command, measure, simulator_script

import gpuplan
from gpuplan.sim.testing import kubectl_binary

COUNTED = """\
import os, sys
import urllib3.connectionpool
sent = [0]
urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen
def counted(self, *args, **kwargs):
    sent[0] += 1
    return urlopen(self, *args, **kwargs)
urllib3.connectionpool.HTTPConnectionPool.urlopen = counted
from gpuplan import cli
exit_now = cli._exit_without_teardown
def report_then_exit(code):
    print(f"http-requests {sent[0]}", file=sys.stderr)
    exit_now(code)
cli._exit_without_teardown = report_then_exit
sys.argv[0] = "gpuplan"
sys.exit(cli.main())
"""
"""``gpuplan`` with every HTTP request it sends counted (watches included), printed to stderr as it exits
(``cli.main`` ends the process without the interpreter's teardown, so no ``atexit`` handler would run)."""

RENDER = """\
import sys, yaml
from gpuplan.planner.observe import refresh
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter

spec = load_spec(sys.argv[2])
with KubernetesWriter(kubeconfig=sys.argv[1]) as reader:
    facts = refresh.node_facts(refresh.refresh(reader, spec, None))
objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.spec.namespace}}]
objects += [dict(obj.manifest) for obj in spec.desired_objects(spec.context_for(facts))]
yaml.safe_dump_all(objects, sys.stdout)
"""
"""The objects apply would create for ``BENCH_SPEC`` on this fleet, as one YAML stream (namespace first)."""

RESPONSES = re.compile(r'"Response" verb="[A-Z]+"')


@dataclass(frozen=True)
class Goal:
    row: str
    ratio: float | None
    """gpuplan's median over the baseline's; None where the row has no ratio goal."""
    ratio_goal: float | None
    figures: str
    peak_mib: float = 0.0
    peak_goal: float | None = None

    def met(self) -> bool:
        ratio_ok = self.ratio_goal is None or (self.ratio is not None and self.ratio <= self.ratio_goal)
        return ratio_ok and (self.peak_goal is None or self.peak_mib <= self.peak_goal)

    def line(self) -> str:
        ratio = f"{self.ratio:5.2f}x" if self.ratio is not None else "     -"
        goal = f"<= {self.ratio_goal:g}x" if self.ratio_goal is not None else ""
        if self.peak_goal is not None:
            goal += f"{', ' if goal else ''}<= {self.peak_goal:g} MiB"
        return f"{self.row:<22} {ratio}  {goal:<22} {'met' if self.met() else 'MISSED':<6}  {self.figures}"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def kubectl_requests(measured: Measured) -> int:
    return len(RESPONSES.findall(measured.stderr))


def counted_requests(measured: Measured) -> int:
    found = re.search(r"http-requests (\d+)", measured.stderr)
    return int(found.group(1)) if found else 0


# -- apply ---------------------------------------------------------------------------------------------------
KUBE_HEALTH_TIMEOUT_S = 1800


def bench_spec(plane: str) -> str:
    """``BENCH_SPEC``, with gates that outwait the real controllers on ``kube``."""
    if plane == "builtin":
        return BENCH_SPEC
    timeout = f"{{healthTimeoutSeconds: {KUBE_HEALTH_TIMEOUT_S}}}"
    return BENCH_SPEC + "".join(f"  {c}: {timeout}\n" for c in ("devicePlugin", "gfd", "dcgmExporter"))


@contextmanager
def detached_fleet(nodes: int, folder: Path, plane: str = "builtin") -> Iterator[Path]:
    """A fresh ``gpuplan sim start --scenario fleet-N --detach`` on the ``plane`` control plane; stopped on
    exit."""
    kubeconfig = folder / "kubeconfig"
    sim = [sys.executable, "-m", "gpuplan", "sim"]
    subprocess.run(
        [*sim, "start", "--scenario", f"fleet-{nodes}", "--detach", "--kubeconfig", str(kubeconfig)]
        + ["--control-plane", plane],
        check=True,
        capture_output=True,
    )
    try:
        yield kubeconfig
    finally:
        subprocess.run([*sim, "stop", "--kubeconfig", str(kubeconfig)], check=False, capture_output=True)


def apply_once(nodes: int, folder: Path, plane: str) -> Measured:
    spec = folder / "gpustack.yaml"
    spec.write_text(bench_spec(plane))
    with detached_fleet(nodes, folder, plane) as kubeconfig:
        command = [sys.executable, "-c", COUNTED, "--kubeconfig", str(kubeconfig)]
        return measure([*command, "apply", "--auto-approve", "-f", str(spec)], folder)


def kubectl_apply_once(nodes: int, folder: Path, plane: str) -> Measured:
    spec, objects = folder / "gpustack.yaml", folder / "objects.yaml"
    spec.write_text(bench_spec(plane))
    with detached_fleet(nodes, folder, plane) as kubeconfig:
        rendered = subprocess.run(
            [sys.executable, "-c", RENDER, str(kubeconfig), str(spec)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        objects.write_text(rendered)
        kubectl = shlex.join([kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={folder}/cache"])
        subprocess.run(f"{kubectl} api-resources >/dev/null", shell=True, check=True)
        statuses = [
            f"{kubectl} rollout status -v=6 --timeout=3600s -n {obj['metadata']['namespace']} "
            f"daemonset/{obj['metadata']['name']}"
            for obj in yaml.safe_load_all(rendered)
            if obj["kind"] == "DaemonSet"
        ]
        script = " && ".join([f"{kubectl} apply -v=6 -f {shlex.quote(str(objects))} >/dev/null", *statuses])
        return measure(["bash", "-c", script], folder)


def apply_goal(nodes: int, pairs: int, plane: str = "builtin") -> Goal:
    runs: list[tuple[Measured, Measured]] = []
    for _ in range(pairs):
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
            runs.append((apply_once(nodes, Path(one), plane), kubectl_apply_once(nodes, Path(two), plane)))
    ours, theirs = median([r[0].seconds for r in runs]), median([r[1].seconds for r in runs])
    peak = max(r[0].peak_mib for r in runs)
    figures = (
        f"apply {ours:6.1f} s ({counted_requests(runs[-1][0])} requests, peak {peak:.0f} MiB) vs kubectl "
        f"{theirs:6.1f} s ({kubectl_requests(runs[-1][1])} requests); runs "
        + ", ".join(f"{a.seconds:.1f}/{b.seconds:.1f}" for a, b in runs)
    )
    peak_goal = 200.0 if nodes >= 5000 else None
    return Goal(f"apply fleet-{nodes}{row_suffix(plane)}", ours / theirs, 1.3, figures, peak, peak_goal)


def row_suffix(plane: str) -> str:
    return "" if plane == "builtin" else f" ({plane})"


# -- plan ----------------------------------------------------------------------------------------------------
def plan_goal(nodes: int, pairs: int, plane: str = "builtin") -> Goal:
    import json

    goal = 1.0 if nodes < 5000 else 0.7
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        kubeconfig, spec = folder / "kubeconfig", folder / "gpustack.yaml"
        spec.write_text(BENCH_SPEC)
        running = (
            fleet_simulator(simulator_script(settle_s=600), nodes, kubeconfig, stop_s=120)
            if plane == "builtin"
            else detached_fleet(nodes, folder, plane)
        )
        with running:
            plan = gpuplan_command(kubeconfig, "plan", "-f", str(spec), "--json")
            kubectl = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={folder / 'cache'}"]
            measure([*kubectl, "api-resources"], folder)
            measure(plan, folder)  # warm-up: the bytecode cache, the server's first answers
            runs = [
                (
                    measure(plan, folder),
                    measure([*kubectl, "get", "nodes,daemonsets", "-A", "-o", "json", "-v=6"], folder),
                )
                for _ in range(pairs)
            ]
    ours, theirs = median([r[0].seconds for r in runs]), median([r[1].seconds for r in runs])
    requests = json.loads(runs[-1][0].stdout)["api_requests"]
    figures = (
        f"plan {ours:5.2f} s ({requests} requests, peak {max(r[0].peak_mib for r in runs):.0f} MiB) vs "
        f"kubectl {theirs:5.2f} s ({kubectl_requests(runs[-1][1])} requests, peak "
        f"{max(r[1].peak_mib for r in runs):.0f} MiB)"
    )
    return Goal(f"plan fleet-{nodes}{row_suffix(plane)}", ours / theirs, goal, figures)


# -- drift ---------------------------------------------------------------------------------------------------
def drift_goal(nodes: int, pairs: int, interval: str) -> Goal:
    import json

    from drift_bench import SIMULATOR
    from prometheus_drift import QUERIES, prometheus_for

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        kubeconfig, spec = folder / "kubeconfig", folder / "gpustack.yaml"
        spec.write_text(BENCH_SPEC)
        with fleet_simulator(SIMULATOR, nodes, kubeconfig, str(spec), stop_s=600):
            prometheus = prometheus_for(kubeconfig, folder / "prometheus", interval).start()
            try:
                exporters = prometheus.discover()
                prometheus.wait_for_nodes(exporters, timeout=max(600.0, 10.0 * int(interval.rstrip("s"))))
                report = gpuplan_command(
                    kubeconfig, "drift", "report", "-f", str(spec), "--format", "json"
                ) + ["--prometheus", prometheus.url]
                kubectl = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={folder / 'cache'}"]
                measure([*kubectl, "api-resources"], folder)
                listing = [*kubectl, "get", "nodes,daemonsets,pods", "-A", "-o", "json", "-v=6"]
                runs = [(measure(report, folder), measure(listing, folder)) for _ in range(pairs)]
            finally:
                prometheus.stop()
    document = json.loads(runs[-1][0].stdout)
    judged = sum(1 for node in document["nodes"] if node["telemetry"]["gpus"])
    queries = next((int(m.group(1)) for note in document["notes"] if (m := QUERIES.search(note))), 0)
    ours, theirs = median([r[0].seconds for r in runs]), median([r[1].seconds for r in runs])
    peak = max(r[0].peak_mib for r in runs)
    figures = (
        f"drift {ours:6.2f} s ({document['api_requests']} API requests + {queries} queries, {judged} nodes' "
        f"GPUs judged, peak {peak:.0f} MiB) vs kubectl {theirs:6.2f} s ({kubectl_requests(runs[-1][1])} "
        "requests)"
    )
    return Goal(f"drift fleet-{nodes}", ours / theirs, 1.5, figures, peak, 300.0)


# -- startup -------------------------------------------------------------------------------------------------
def startup_goal(runs: int) -> Goal:
    commands = {
        "gpuplan": [sys.executable, "-m", "gpuplan", "--help"],
        "python": [sys.executable, "-c", "pass"],
    }
    subprocess.run(commands["gpuplan"], capture_output=True, check=True)  # warm-up: the bytecode cache
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            began = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times[name].append(time.perf_counter() - began)
    ours, theirs = median(times["gpuplan"]), median(times["python"])
    return Goal("gpuplan --help", ours / theirs, 3.0, f"{ours:.3f} s vs python -c pass {theirs:.3f} s")


ROWS = ("startup", "plan", "apply", "drift")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=ROWS, default=list(ROWS), help="rows to measure")
    parser.add_argument("--pairs", type=int, default=3, help="interleaved pairs per row (3 to 5)")
    parser.add_argument("--plan-nodes", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--apply-nodes", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--drift-nodes", type=int, nargs="+", default=[5000])
    parser.add_argument(
        "--kube-nodes",
        type=int,
        nargs="*",
        default=[1000],
        help="fleet sizes of the plan and apply rows on the real control plane (none: skip them)",
    )
    parser.add_argument("--scrape-interval", default="60s", help="Prometheus's, for the drift row")
    args = parser.parse_args(argv)
    # a SIGTERM unwinds like Ctrl-C does, so every simulator started so far is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    checkout = Path(__file__).resolve().parents[1]
    if not Path(gpuplan.__file__).resolve().is_relative_to(checkout):
        raise SystemExit(f"{sys.executable} imports gpuplan from {gpuplan.__file__}, not from {checkout}")
    with tempfile.TemporaryDirectory(prefix="gpuplan-goals-pyc-") as cache:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = cache
        measures: list[Callable[[], Goal]] = []
        if "startup" in args.only:
            measures.append(lambda: startup_goal(15))
        for nodes in args.plan_nodes if "plan" in args.only else []:
            measures.append(lambda nodes=nodes: plan_goal(nodes, args.pairs))
        for nodes in args.kube_nodes if "plan" in args.only else []:
            measures.append(lambda nodes=nodes: plan_goal(nodes, args.pairs, "kube"))
        for nodes in args.apply_nodes if "apply" in args.only else []:
            measures.append(lambda nodes=nodes: apply_goal(nodes, args.pairs))
        for nodes in args.kube_nodes if "apply" in args.only else []:
            measures.append(lambda nodes=nodes: apply_goal(nodes, args.pairs, "kube"))
        for nodes in args.drift_nodes if "drift" in args.only else []:
            measures.append(lambda nodes=nodes: drift_goal(nodes, args.pairs, args.scrape_interval))
        goals = []
        for run in measures:
            try:
                goals.append(run())
            except Exception as exc:  # noqa: BLE001 - one row's failure is printed, the other rows still run
                goals.append(Goal("(a row failed)", None, 0.0, f"{type(exc).__name__}: {exc}"[:300]))
            print(goals[-1].line(), flush=True)
    print()
    print(f"{'row':<22} {'ratio':>6}  {'goal':<22} {'':<6}  figures")
    for goal in goals:
        print(goal.line())
    return 0 if all(goal.met() for goal in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
