"""gpuplan's start-up beside the bare interpreter's: `gpuplan --help` and `--version` / `python -c pass`.

    python benchmarks/startup_bench.py            # 15 runs of each, interleaved
    python benchmarks/startup_bench.py --runs 40

Each command in its own process, interleaved so that a busy machine slows every row alike; prints the median
and the ratio to ``python -c pass``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    gpuplan = shutil.which("gpuplan") or f"{sys.executable} -P -m gpuplan"
    rows = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "gpuplan --help": [*gpuplan.split(), "--help"],
        "gpuplan --version": [*gpuplan.split(), "--version"],
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, command in rows.items():
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times[name].append(time.perf_counter() - start)
    baseline = statistics.median(times["python -c pass (baseline)"])
    print(f"{'command':28} {'median':>8} {'x baseline':>11}")
    for name, measured in times.items():
        median = statistics.median(measured)
        print(f"{name:28} {median:7.3f}s {median / baseline:10.1f}x")


if __name__ == "__main__":
    main()
