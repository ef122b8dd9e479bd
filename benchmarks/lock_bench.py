"""How long a command takes to refuse a state lock another run holds, beside the CLI's own start-up.

    python benchmarks/lock_bench.py            # 10 runs of each
    python benchmarks/lock_bench.py --runs 30

A child process takes the state lock of a lab spec's state and holds it; then, each in its own process,
``gpuplan --version`` (the baseline: interpreter and CLI start-up) and ``gpuplan plan`` / ``gpuplan apply``
against that state, which must refuse naming the holder. Prints the median and slowest wall time of each and
the refusal's ratio to the baseline. ``--contended`` starts the refusals two at a time, as two operators (or
a cron job and an operator) starting at the same moment do.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOLDER = """
import sys
from pathlib import Path
from gpuplan.state.local import LocalFileBackend
info = LocalFileBackend(Path(sys.argv[1])).lock("apply")
print(info.id, flush=True)
sys.stdin.read()
"""


def gpuplan(*args: str) -> list[str]:
    return [sys.executable, "-P", "-m", "gpuplan", "--kubeconfig", "/nonexistent", *args]


def timed(commands: list[list[str]], expect: int) -> float:
    """Wall seconds until every command in ``commands`` (started together) has exited with ``expect``."""
    start = time.perf_counter()
    running = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in commands
    ]
    for process in running:
        _, err = process.communicate(timeout=120)
        assert process.returncode == expect, err
        assert expect == 0 or "state is locked by pid" in err, err
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--contended", action="store_true", help="start the refusals two at a time")
    args = parser.parse_args()
    from gpuplan.commands.demo import SPEC

    folder = Path(tempfile.mkdtemp(prefix="gpuplan-lock-bench-"))
    spec = folder / "gpustack.yaml"
    spec.write_text(SPEC)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder / "gpuplan.state.json")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip()
    width = 2 if args.contended else 1
    rows = [
        ("gpuplan --version (baseline)", [gpuplan("--version")], 0),
        ("gpuplan plan, lock held", [gpuplan("plan", "-f", str(spec))] * width, 1),
        ("gpuplan apply, lock held", [gpuplan("apply", "-f", str(spec), "--auto-approve")] * width, 1),
    ]
    try:
        results = {name: [timed(cmds, expect) for _ in range(args.runs)] for name, cmds, expect in rows}
    finally:
        holder.kill()
        holder.wait(timeout=30)
    baseline = statistics.median(results[rows[0][0]])
    print(f"{'command':34} {'median':>8} {'slowest':>8} {'x baseline':>11}")
    for name, times in results.items():
        median = statistics.median(times)
        print(f"{name:34} {median:7.2f}s {max(times):7.2f}s {median / baseline:10.1f}x")


if __name__ == "__main__":
    main()
