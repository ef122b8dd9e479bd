"""Small API answers from the simulator, with Nagle's algorithm off (as served) and on (the baseline).

    python benchmarks/small_requests.py            # 50 GETs of one small object each way
    python benchmarks/small_requests.py --gets 200

The simulator wrote an answer's headers and body separately; with Nagle's algorithm on, the body waited for
the client's delayed ACK of the headers, about 40 ms per small answer on Linux. It now writes both at once,
so Nagle's algorithm no longer matters for a small answer (TCP_NODELAY stays on for watch streams). The lab
scenario runs in-process; gpuplan's own provider reads a Namespace over HTTPS, keep-alive, after one warm-up
read.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.api import wire
from gpuplan.sim.cluster import Simulator


def per_get(gets: int, *, nodelay: bool) -> float:
    """Milliseconds per GET of a small object against a fresh lab simulator."""
    wire.Handler.disable_nagle_algorithm = nodelay
    sim = Simulator("lab")
    sim.start()
    try:
        kubeconfig = sim.write_kubeconfig(Path(tempfile.mkdtemp(prefix="gpuplan-bench-")) / "kubeconfig")
        key = ObjectKey("v1", "Namespace", None, "kube-system")
        with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
            writer.read(key)
            start = time.perf_counter()
            for _ in range(gets):
                writer.read(key)
            return (time.perf_counter() - start) * 1000 / gets
    finally:
        sim.stop()
        wire.Handler.disable_nagle_algorithm = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=50)
    args = parser.parse_args()
    served, baseline = per_get(args.gets, nodelay=True), per_get(args.gets, nodelay=False)
    print(f"{'small GET':34} {'ms each':>8}")
    print(f"{'TCP_NODELAY (as served)':34} {served:8.1f}")
    print(f"{'Nagle on (baseline)':34} {baseline:8.1f}")
    print(f"{'speed-up':34} {baseline / served:7.0f}x")


if __name__ == "__main__":
    main()
