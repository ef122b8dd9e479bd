"""``gpuplan demo --scenario mixed``: the second tour, a heterogeneous cluster run with node pools.

The built-in ``mixed`` scenario (A100 80GB, H100 80GB, L40S and RTX 3060, one node each, host drivers and
toolkits; the A100 still on driver 570.195.03, the others on 580.105.08) is started in this process and the
tour runs the real commands against it, as the lab tour does:

1. the nodes: each one's GPU and host driver, as the API reports them;
2. a ``gpustack.yaml`` with two node pools (design §7.1): ``training`` pins the A100's external driver at
   570 while the stack's is 580, ``inference`` shares the L40S's GPUs four ways by time-slicing;
3. ``gpuplan plan``: the components, the GPUs by the source that identified them, and the "Node pools:"
   section with the pool's capacity change and the node label apply writes;
4. ``gpuplan apply --auto-approve``, then a plan that finds nothing to do;
5. what each node advertises afterwards (``nvidia.com/gpu``: 4 x 4 on the L40S) and ``gpuplan inventory``
   naming each node's pool.

A step that does not do what the tour says stops it with an error (exit 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

SCENARIO = "mixed"
SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: mixed
spec:
  driver:
    owner: external              # installed on each host
    version: "580.105.08"        # what the nodes outside a pool must report
  toolkit:
    owner: external
  nodePools:
    - name: training
      nodeSelector: {kubernetes.io/hostname: a100-node}
      driver: {version: "570.195.03"}           # this pool's hosts stay on R570
    - name: inference
      nodeSelector: {kubernetes.io/hostname: l40s-node}
      devicePlugin:
        config: {timeSlicing: {replicas: 4}}    # each L40S shared four ways
"""
"""The tour's spec, and ``gpuplan demo --scenario mixed --print-spec``'s."""
SHARED_NODE = "l40s-node"
REPLICAS = 4


def run(sim: Any, folder: Path, tour_class: type[Any]) -> None:
    """The mixed tour's steps, with the lab tour's ``step`` and ``gpuplan`` (``tour_class``)."""
    tour = tour_class(sim, folder)
    tour.step("1. The nodes as they are", lambda: show_nodes(sim))
    tour.step("2. The desired stack: gpustack.yaml with two node pools", lambda: write_spec(tour.spec))
    tour.step(
        "3. gpuplan plan: each pool's driver version and capacity",
        lambda: tour.gpuplan("plan", "-f", str(tour.spec)),
    )
    tour.step("4. gpuplan apply", lambda: apply(tour))
    tour.step("5. What each node advertises now", lambda: capacity(sim, tour))
    click.echo(
        "\nThe tour is over. Try it yourself:\n"
        "  gpuplan demo --scenario mixed --print-spec > gpustack.yaml\n"
        "  gpuplan sim start --scenario mixed --kubeconfig ./sim.kubeconfig --detach\n"
        "  gpuplan --kubeconfig ./sim.kubeconfig plan -f gpustack.yaml\n"
        "  gpuplan sim stop --kubeconfig ./sim.kubeconfig"
    )


def show_nodes(sim: Any) -> None:
    for name, state in sorted(sim.runtime.states.items()):
        gpu = state.gpus[0].model if state.gpus else None
        model = f"{len(state.gpus)} x {gpu.product}" if gpu else "no GPU"
        click.echo(f"  {name:<10} {model:<40} host driver {state.host_driver}")


def write_spec(path: Path) -> None:
    path.write_text(SPEC)
    click.echo(f"Written to {path.name} in a temporary folder:\n")
    click.echo("\n".join(f"  {line}" for line in SPEC.splitlines()))


def apply(tour: Any) -> None:
    tour.gpuplan("apply", "-f", str(tour.spec), "--auto-approve")
    click.echo("")
    tour.gpuplan("plan", "-f", str(tour.spec), "--detailed-exitcode")


def capacity(sim: Any, tour: Any) -> None:
    from gpuplan.commands.demo import DemoError

    click.echo(
        "$ kubectl get nodes -o custom-columns=NAME:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu"
    )
    advertised: dict[str, str | None] = {}
    for name, state in sorted(sim.runtime.states.items()):
        node = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, name)
        advertised[name] = (node["status"].get("allocatable") or {}).get("nvidia.com/gpu")
        count = len(state.gpus)
        click.echo(f"  {name:<10} {advertised[name]:<4} ({count} GPU{'s' if count != 1 else ''})")
    shared = len(sim.runtime.states[SHARED_NODE].gpus) * REPLICAS
    if advertised.get(SHARED_NODE) != str(shared):
        raise DemoError(
            f"{SHARED_NODE} advertises nvidia.com/gpu={advertised.get(SHARED_NODE)}, "
            f"the tour expected {shared}",
            hint="this is a bug in gpuplan or its simulator; please report it",
        )
    click.echo("")
    tour.gpuplan("inventory", "-f", str(tour.spec))
