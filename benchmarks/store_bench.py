"""Benchmark: the simulated cluster's store under write load (``gpuplan.sim.api.store.Store``).

Two measurements, each in this process:

- **pods**: a bare ``Store`` (no subscribers, no server) takes ``--pods`` pod creates, then as many status
  patches (a merge patch of the status subresource, as a kubelet writes), then as many gets; it prints
  writes (or reads) per second for each phase;
- **rollout**: ``Simulator("fleet-N", serve=False)`` (store, controllers and kubelets, no HTTP server) rolls
  the lab's device-plugin DaemonSet out onto every node: the time from the create until the cluster is idle
  (every pod Ready), the CPU time this process spent on it (all threads: steadier than wall time on a
  shared machine), and the store writes it took (the resourceVersion's growth) per second.

Run: ``python benchmarks/store_bench.py [--pods 30000] [--nodes 5000] [--skip-rollout]``. It prints figures
and asserts only that every pod was written and every node got its pod; wall-clock numbers depend on the
machine and are never asserted.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import yaml

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import Store
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.scenario import BUILTIN_DIR

MERGE = "application/merge-patch+json"


def _pod(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"bench-{i}",
            "namespace": "default",
            "labels": {"app": "bench", "n": str(i % 7)},
        },
        "spec": {
            "nodeName": f"node-{i % 500}",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.4",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                }
            ],
        },
    }


def _status(i: int) -> dict[str, Any]:
    return {
        "status": {
            "phase": "Running",
            "podIP": f"10.128.{i // 250 % 250}.{i % 250 + 2}",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
            ],
        }
    }


def bench_pods(count: int) -> dict[str, float]:
    store = Store(Registry.builtin())
    pods = store.registry.for_kind("v1", "Pod")
    assert pods is not None
    try:
        began = time.perf_counter()
        for i in range(count):
            store.create(pods, _pod(i), manager="bench")
        created = time.perf_counter()
        for i in range(count):
            store.patch(
                pods, "default", f"bench-{i}", _status(i), MERGE, manager="kubelet", subresource="status"
            )
        patched = time.perf_counter()
        for i in range(count):
            store.get(pods, "default", f"bench-{i}")
        read = time.perf_counter()
        assert len(store.list(pods, namespace="default").items) == count
    finally:
        store.close()
    return {
        "creates/s": count / (created - began),
        "status patches/s": count / (patched - created),
        "gets/s": count / (read - patched),
    }


def bench_rollout(nodes: int) -> dict[str, float]:
    plugin = yaml.safe_load((BUILTIN_DIR / "lab.yaml").read_text())["objects"][0]
    plugin["metadata"]["namespace"] = "default"
    sim = Simulator(f"fleet-{nodes}", serve=False)
    began = time.perf_counter()
    sim.start()
    try:
        assert sim.wait_idle(600)
        started, cpu_started = time.perf_counter(), time.process_time()
        ds = sim.store.registry.for_kind("apps/v1", "DaemonSet")
        assert ds is not None
        rv_before = sim.store.resource_version
        sim.store.create(ds, plugin, namespace="default", manager="bench")
        assert sim.wait_idle(1200)
        done, cpu_done = time.perf_counter(), time.process_time()
        status = sim.store.get(ds, "default", plugin["metadata"]["name"])["status"]
        assert status["numberReady"] == status["desiredNumberScheduled"] == nodes, status
        writes = sim.store.resource_version - rv_before
    finally:
        sim.stop()
    return {
        "start s": started - began,
        "rollout s": done - started,
        "rollout CPU s": cpu_done - cpu_started,
        "rollout writes": float(writes),
        "rollout writes/s": writes / (done - started),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=30000, help="pods created, then status-patched and read")
    parser.add_argument("--nodes", type=int, default=5000, help="fleet size of the DaemonSet rollout")
    parser.add_argument("--skip-rollout", action="store_true", help="measure the bare store only")
    args = parser.parse_args(argv)

    for name, value in bench_pods(args.pods).items():
        print(f"pods     {name:<18} {value:>12,.0f}")
    if not args.skip_rollout:
        for name, value in bench_rollout(args.nodes).items():
            print(f"fleet-{args.nodes} {name:<18} {value:>12,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
