"""``gpuplan demo``: a short guided tour on the built-in simulated ``lab`` cluster.

For now (issue 2) it shows what exists: the simulated single-node lab of design §1 started in this process,
its node as the API reports it (GPU, host driver and toolkit, runtime handlers), the hand-deployed device
plugin running in kube-system, and the ``nvidia.com/gpu`` capacity it advertises. It says plainly what later
versions will add (plan, apply, drift). It finishes by itself in a few seconds.

The simulator is imported inside the command, so ``gpuplan --help`` never loads it.
"""

from __future__ import annotations

from typing import Any

import click

from gpuplan import errors

SCENARIO = "lab"
NODE = "lab-node"
PLUGIN = ("kube-system", "nvidia-device-plugin-daemonset")
SETTLE_SECONDS = 15.0


class DemoError(errors.GpuplanError):
    """The demo cluster did not reach the state the tour shows."""


@click.command("demo")
def command() -> int:
    """A guided tour on a built-in simulated GPU cluster (no real cluster needed)."""
    from gpuplan.sim.cluster import Simulator

    click.echo(f"Starting the built-in {SCENARIO!r} scenario: a simulated Kubernetes cluster in this process.")
    with Simulator(SCENARIO) as sim:
        click.echo(f"  API server: {sim.url} (a real Kubernetes REST API; `gpuplan sim start` keeps one running)")
        if not sim.wait_for(lambda: _gpu_capacity(sim) == "1", SETTLE_SECONDS):
            raise DemoError("the simulated lab did not advertise nvidia.com/gpu in time",
                            hint="run with GPUPLAN_LOG=debug and report it: this is a bug in the simulator")
        sim.wait_idle(SETTLE_SECONDS)
        node = _get(sim, "v1", "Node", None, NODE)
        click.echo("")
        click.echo(_node_section(sim, node))
        click.echo("")
        click.echo(_plugin_section(sim))
        click.echo("")
        click.echo(f"3. The result: {NODE} advertises nvidia.com/gpu = {_gpu_capacity(sim)} "
                   f"(allocatable {node['status'].get('allocatable', {}).get('nvidia.com/gpu', '0')}), "
                   "so pods can request a GPU.")
    click.echo("")
    click.echo("What comes next: later versions of this tour write a gpustack.yaml for this lab, show\n"
               "`gpuplan plan` taking over the device plugin, GFD, DCGM exporter and validator, `gpuplan apply`\n"
               "rolling them out with health gates, and `gpuplan drift report` catching a manual change.\n"
               "Try the cluster yourself today:\n"
               "  gpuplan sim start --kubeconfig ./sim.kubeconfig --detach\n"
               "  kubectl --kubeconfig ./sim.kubeconfig get pods -A -o wide\n"
               "  gpuplan sim stop --kubeconfig ./sim.kubeconfig")
    return errors.EXIT_OK


def _node_section(sim: Any, node: dict[str, Any]) -> str:
    state = sim.runtime.states[NODE]
    info = node["status"].get("nodeInfo", {})
    handlers = ", ".join(sorted(h.get("name", "") for h in node["status"].get("runtimeHandlers") or []
                                if h.get("name")))
    gpu = state.gpus[0].model if state.gpus else None
    gpu_text = f"{len(state.gpus)} x {gpu.name} ({gpu.memory_mib} MiB, {gpu.family})" if gpu else "none"
    labels = node["metadata"].get("labels") or {}
    return "\n".join([
        f"1. The node {NODE}",
        f"   GPU:              {gpu_text}; NFD sees it: "
        f"feature.node.kubernetes.io/pci-10de.present={labels.get('feature.node.kubernetes.io/pci-10de.present')}",
        f"   OS:               {info.get('osImage')}, kernel {info.get('kernelVersion')}, "
        f"{info.get('containerRuntimeVersion')}",
        f"   NVIDIA driver:    {state.host_driver} (installed on the host, not by a driver pod)",
        f"   Toolkit:          container toolkit {state.host_toolkit} on the host",
        f"   Runtimes:         {handlers} (containerd runtime handlers the kubelet reports)",
    ])


def _plugin_section(sim: Any) -> str:
    namespace, name = PLUGIN
    ds = _get(sim, "apps/v1", "DaemonSet", namespace, name)
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    pods = sim.store.list(pods_rt, namespace=namespace, field_selector=f"spec.nodeName={NODE}").items
    lines = [f"2. The device plugin deployed by hand: DaemonSet {namespace}/{name}", f"   image {image}"]
    for pod in pods:
        if pod["metadata"]["name"].startswith(name):
            statuses = pod["status"].get("containerStatuses") or []
            ready = sum(1 for s in statuses if s.get("ready"))
            lines.append(f"   pod {pod['metadata']['name']} on {pod['spec']['nodeName']}: "
                         f"{pod['status'].get('phase')}, ready {ready}/{len(statuses)}")
    status = ds.get("status", {})
    lines.append(f"   DaemonSet status: desired {status.get('desiredNumberScheduled')}, "
                 f"ready {status.get('numberReady')}, available {status.get('numberAvailable')}")
    return "\n".join(lines)


def _gpu_capacity(sim: Any) -> str | None:
    node = _get(sim, "v1", "Node", None, NODE)
    value: str | None = node.get("status", {}).get("capacity", {}).get("nvidia.com/gpu")
    return value


def _get(sim: Any, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = sim.store.get(sim.store.registry.for_kind(api_version, kind), namespace, name)
    return obj
