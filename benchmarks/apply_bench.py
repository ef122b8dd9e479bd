"""`gpuplan apply --auto-approve` of the lab-style stack on a detached `fleet-N` simulator: its wall time.

    python benchmarks/apply_bench.py               # fleet-200
    python benchmarks/apply_bench.py --nodes 1000 --parallelism 1

Starts ``gpuplan sim start --scenario fleet-N --detach``, writes ``BENCH_SPEC`` (driver and toolkit
external; device plugin, GFD, DCGM exporter and validator owned by gpuplan) and times one apply from nothing,
which rolls the four DaemonSets out to every GPU node and waits for their gates. Prints the wall time and the
apply's last line; stops the simulator. ``--bare`` times, on a fresh simulator, the bare rollout of the same
objects instead (the RuntimeClass and the namespace first, then every object server-side applied at once, as
``kubectl apply`` would, until each DaemonSet reports every scheduled pod updated and ready): no effect
checks, only the pods.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet import BENCH_SPEC, gpuplan_command

BARE = """\
import sys, time
from gpuplan.planner.observe import refresh
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey

spec = load_spec(sys.argv[2])
with KubernetesWriter(kubeconfig=sys.argv[1]) as writer:
    facts = refresh.node_facts(refresh.refresh(writer, spec, None))
    objects = spec.desired_objects(spec.context_for(facts))
    began = time.perf_counter()
    writer.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.spec.namespace}})
    for obj in objects:
        writer.apply(dict(obj.manifest))
    pending = [ObjectKey.of(o.manifest) for o in objects if o.manifest["kind"] == "DaemonSet"]
    while pending:
        time.sleep(0.5)
        status = {key: (writer.read(key).manifest.get("status") or {}) for key in pending}
        pending = [
            key for key, s in status.items()
            if not s.get("desiredNumberScheduled")
            or not s.get("desiredNumberScheduled") == s.get("updatedNumberScheduled") == s.get("numberReady")
        ]
    print(time.perf_counter() - began)
"""
"""The bare rollout, in its own process: apply every object, poll the DaemonSets' status until all ready."""


def bench(nodes: int, parallelism: int, folder: Path, *, bare: bool) -> tuple[float, str]:
    kubeconfig, spec = folder / "kubeconfig", folder / "gpustack.yaml"
    spec.write_text(BENCH_SPEC)
    sim = [sys.executable, "-m", "gpuplan", "sim"]
    subprocess.run(
        [*sim, "start", "--scenario", f"fleet-{nodes}", "--detach", "--kubeconfig", str(kubeconfig)],
        check=True,
    )
    try:
        if bare:
            rollout = subprocess.run(
                [sys.executable, "-c", BARE, str(kubeconfig), str(spec)], capture_output=True, text=True
            )
            if rollout.returncode != 0:
                raise SystemExit(rollout.stderr[-3000:])
            return float(rollout.stdout), "every DaemonSet's pods updated and ready"
        began = time.perf_counter()
        done = subprocess.run(
            gpuplan_command(
                kubeconfig, "apply", "--auto-approve", "-f", str(spec), "--parallelism", str(parallelism)
            ),
            cwd=folder,
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - began
    finally:
        subprocess.run([*sim, "stop", "--kubeconfig", str(kubeconfig)], check=False)
    if done.returncode != 0:
        raise SystemExit(f"apply exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="fleet size (fleet-N)")
    parser.add_argument("--parallelism", type=int, default=4, help="apply --parallelism")
    parser.add_argument("--bare", action="store_true", help="time the bare rollout of the same objects")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuplan-apply-bench-") as folder:
        seconds, last = bench(args.nodes, args.parallelism, Path(folder), bare=args.bare)
    command = (
        "bare rollout" if args.bare else f"gpuplan apply --auto-approve --parallelism {args.parallelism}"
    )
    print(f"fleet-{args.nodes}: {command}  {seconds:.1f} s")
    print(f"  {last}")


if __name__ == "__main__":
    main()
