"""``gpuplan demo``: a guided tour on the built-in simulated ``lab`` cluster, end to end (``--scenario
mixed``: the second tour, node pools on a heterogeneous cluster, :mod:`gpuplan.commands.demo_pools`).

The single-node lab of design §1 is started in this process (a real Kubernetes API on 127.0.0.1), and the
tour runs the real commands against it, in a temporary folder, printing what each one prints:

1. the node as the API reports it and the device plugin deployed by hand into kube-system;
2. a ``gpustack.yaml`` for the lab (driver and toolkit external, gpuplan owning the device plugin, GFD, DCGM
   exporter and validator);
3. ``gpuplan plan``, which finds the hand-deployed device plugin in the way (a conflict) and suggests
   ``gpuplan import``; the tour runs the command the plan suggests;
4. ``gpuplan apply --auto-approve`` with its progress lines and health gates;
5. the seed checks, read through the Kubernetes API as ``kubectl get`` shows them: capacity
   ``nvidia.com/gpu`` 1, the GFD labels, and the DCGM metrics through the API server's pod proxy;
6. a manual change (the device plugin's image set by hand, as ``kubectl set image`` does it: a patch under
   the field manager ``kubectl-set``), then ``gpuplan drift report``, which names the change and who made it
   and exits 2 (what cron alerts on); ``gpuplan apply`` puts the configuration back.

Nothing is faked: each step runs the command a user would type, in its own process against the simulator's
API server (the kubeconfig is written to the temporary folder). It finishes by itself (under a minute) and
exits 0; a step that does not do what the tour says stops it with an error. The temporary folder goes with
the tour, so the closing hint gets the spec back with ``gpuplan demo --print-spec``, which prints it and
exits. The simulator and the engine are imported inside the command, so ``gpuplan --help`` never loads them.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpuplan import errors
from gpuplan.context import self_command

SCENARIO = "lab"
NODE = "lab-node"
PLUGIN = ("kube-system", "nvidia-device-plugin-daemonset")
NAMESPACE = "gpu-operator"
SETTLE_SECONDS = 15.0
COMMAND_TIMEOUT = 180.0
DRIFT_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"
GFD_LABELS = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    "nvidia.com/cuda.driver-version.full",
)
SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: lab
spec:
  namespace: gpu-operator
  driver:
    owner: external            # installed on the host
    version: "580.105.08"      # the version every GPU node must report
  toolkit:
    owner: external            # installed on the host
  devicePlugin:
    version: v0.20.1
  gfd:
    version: v0.20.1
  dcgmExporter:
    version: 4.6.0-4.8.3-distroless
  validator: {}
"""
"""The lab's gpustack.yaml as the tour writes it and ``--print-spec`` prints it; the tests' full lab stack too
(tests/lab_stack.py imports it), so the tour and the tests plan and apply the same file."""


class DemoError(errors.GpuplanError):
    """The demo cluster did not reach the state the tour shows."""


@click.command("demo")
@click.option(
    "--scenario",
    type=click.Choice(["lab", "mixed"]),
    default=SCENARIO,
    show_default=True,
    help="lab: the one-node lab tour; mixed: four GPU models run with node pools.",
)
@click.option(
    "--print-spec",
    is_flag=True,
    help="Print the tour's gpustack.yaml and exit (e.g. gpuplan demo --print-spec > gpustack.yaml).",
)
def command(scenario: str, print_spec: bool) -> int:
    """A guided tour on a built-in simulated GPU cluster (no real cluster needed)."""
    from gpuplan.commands import demo_pools

    if print_spec:
        click.echo(demo_pools.SPEC if scenario == demo_pools.SCENARIO else SPEC, nl=False)
        return errors.EXIT_OK
    from gpuplan.sim.cluster import Simulator

    click.echo(
        f"Starting the built-in {scenario!r} scenario: a simulated Kubernetes cluster in this process."
    )
    with Simulator(scenario) as sim, tempfile.TemporaryDirectory(prefix="gpuplan-demo-") as folder:
        click.echo(
            f"  API server: {sim.url} (a real Kubernetes REST API; `gpuplan sim start` keeps one running)"
        )
        if scenario == demo_pools.SCENARIO:
            sim.wait_idle(SETTLE_SECONDS)
            demo_pools.run(sim, Path(folder), _Tour)
            return errors.EXIT_OK
        if not sim.wait_for(lambda: _gpu_capacity(sim) == "1", SETTLE_SECONDS):
            raise DemoError(
                "the simulated lab did not advertise nvidia.com/gpu in time",
                hint="run with GPUPLAN_LOG=debug and report it: this is a bug in the simulator",
            )
        sim.wait_idle(SETTLE_SECONDS)
        tour = _Tour(sim, Path(folder))
        tour.run()
    return errors.EXIT_OK


class _Tour:
    """The steps, each printing a heading, the command it runs and what the command prints."""

    def __init__(self, sim: Any, folder: Path) -> None:
        self.sim = sim
        self.folder = folder
        self.kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
        self.spec = folder / "gpustack.yaml"

    def run(self) -> None:
        self.step("1. The lab as it is", self.show_lab)
        self.step("2. The desired stack: gpustack.yaml", self.write_spec)
        self.step("3. gpuplan plan: the hand-deployed device plugin is in the way", self.plan_and_resolve)
        self.step("4. gpuplan apply: ordered, health-gated, rolled back on failure", self.apply)
        self.step("5. The seed checks, through the Kubernetes API", self.seed_checks)
        self.step("6. A manual change, and the drift report that catches it", self.drift)
        # The tour's folder is deleted on exit, so the hint recreates the spec where the user is.
        click.echo(
            "\nThe tour is over (its temporary folder is gone). Try the cluster yourself:\n"
            "  gpuplan demo --print-spec > gpustack.yaml\n"
            "  gpuplan sim start --kubeconfig ./sim.kubeconfig --detach\n"
            "  gpuplan --kubeconfig ./sim.kubeconfig plan -f gpustack.yaml\n"
            "  gpuplan sim stop --kubeconfig ./sim.kubeconfig"
        )

    @staticmethod
    def step(title: str, body: Callable[[], None]) -> None:
        click.echo(f"\n=== {title}\n")
        body()

    def gpuplan(self, *args: str, expect: tuple[int, ...] = (0,)) -> int:
        """Run a gpuplan command as a user would: its own process, the simulator's kubeconfig, in the
        temporary folder with paths relative to it; its output goes straight to ours."""
        relative = [arg.replace(f"{self.folder}/", "") for arg in args]
        shown = " ".join(shlex.quote(arg) for arg in relative)
        click.echo(f"$ gpuplan {shown}")
        sys.stdout.flush()
        command = self_command("--kubeconfig", str(self.kubeconfig), "--no-color", *relative)
        code = subprocess.run(
            command, cwd=self.folder, stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT, check=False
        ).returncode
        click.echo(f"(exit code {code})")
        if code not in expect:
            raise DemoError(
                f"`gpuplan {shown}` exited {code}, the tour expected {' or '.join(map(str, expect))}",
                hint="this is a bug in gpuplan or its simulator; please report it",
            )
        return code

    # -- the steps ------------------------------------------------------------------------------------------
    def show_lab(self) -> None:
        node = _get(self.sim, "v1", "Node", None, NODE)
        click.echo(_node_section(self.sim, node))
        click.echo("")
        click.echo(_plugin_section(self.sim))
        click.echo(f"   {NODE} advertises nvidia.com/gpu = {_gpu_capacity(self.sim)}, through that plugin.")

    def write_spec(self) -> None:
        self.spec.write_text(SPEC)
        click.echo(f"Written to {self.spec.name} in a temporary folder:\n")
        click.echo("\n".join(f"  {line}" for line in SPEC.splitlines()))

    def plan_and_resolve(self) -> None:
        from gpuplan.planner.plan import planfile

        saved = self.folder / "lab.plan"
        self.gpuplan("plan", "-f", str(self.spec), "--out", str(saved))
        commands = [
            resolution.command
            for conflict in planfile.read(saved).conflicts
            for resolution in conflict.resolutions
            if resolution.command.startswith("gpuplan import ")
        ]
        if not commands:
            raise DemoError("the plan found no conflict with an import resolution, as the tour expects")
        click.echo(
            "\nThe plan will not be applied while the conflict stands. Its first resolution adopts the\n"
            "hand-deployed plugin into gpuplan's state, so gpuplan replaces it with its own:\n"
        )
        self.gpuplan(*shlex.split(commands[0])[1:])

    def apply(self) -> None:
        self.gpuplan("apply", "-f", str(self.spec), "--auto-approve")
        click.echo("")
        self.gpuplan("plan", "-f", str(self.spec), "--detailed-exitcode")

    def seed_checks(self) -> None:
        from gpuplan.providers.kubernetes_write import KubernetesWriter

        with KubernetesWriter(kubeconfig=str(self.kubeconfig)) as reader:
            assert isinstance(reader, KubernetesWriter)
            node = reader.list_nodes().items[0].manifest
            capacity = (node.get("status") or {}).get("capacity", {}).get("nvidia.com/gpu")
            click.echo(
                f"$ kubectl get node {NODE} -o jsonpath='{{.status.capacity.nvidia\\.com/gpu}}'\n{capacity}"
            )
            labels = (node.get("metadata") or {}).get("labels") or {}
            click.echo(f"\n$ kubectl get node {NODE} --show-labels   (the GFD labels)")
            for key in GFD_LABELS:
                click.echo(f"  {key}={labels.get(key)}")
            exporters = reader.list_pods(namespace=NAMESPACE, label_selector="app=nvidia-dcgm-exporter")
            pod = exporters.items[0].key.name
            text = reader.proxy_get(NAMESPACE, pod, 9400, "/metrics").decode("utf-8", "replace")
        samples = [
            line
            for line in text.splitlines()
            if line.startswith(("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL"))
        ]
        click.echo(
            f"\n$ kubectl get --raw /api/v1/namespaces/{NAMESPACE}/pods/{pod}:9400/proxy/metrics | grep GPU_"
        )
        click.echo("\n".join(f"  {line}" for line in samples[:4]))
        missing = [key for key in GFD_LABELS if not labels.get(key)]
        if capacity != "1" or missing or not samples:
            raise DemoError(
                f"a seed check failed: capacity {capacity}, missing labels {missing}, "
                f"{len(samples)} DCGM samples"
            )
        click.echo("\nAll three pass: one GPU allocatable, GFD's labels, a DCGM sample for the GPU.")

    def drift(self) -> None:
        name = "nvidia-device-plugin-daemonset"
        click.echo(f"$ kubectl -n {NAMESPACE} set image daemonset/{name} nvidia-device-plugin={DRIFT_IMAGE}")
        _set_image_as_kubectl(self.sim, NAMESPACE, name, "nvidia-device-plugin", DRIFT_IMAGE)
        click.echo(f"daemonset.apps/{name} image updated\n")
        self.gpuplan("drift", "report", "-f", str(self.spec), expect=(2,))
        click.echo(
            "\nExit code 2 is drift: what a cron job alerts on. "
            "`gpuplan apply` puts the configuration back:\n"
        )
        self.gpuplan("apply", "-f", str(self.spec), "--auto-approve")


def _set_image_as_kubectl(sim: Any, namespace: str, name: str, container: str, image: str) -> None:
    """What ``kubectl set image`` sends: a strategic merge patch of one container's image, recorded in
    managedFields under kubectl's field manager for that command. The simulator runs in this process, so the
    tour writes through its API store rather than shelling out to a kubectl that may not be installed."""
    rt = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    body = {"spec": {"template": {"spec": {"containers": [{"name": container, "image": image}]}}}}
    sim.store.patch(
        rt, namespace, name, body, "application/strategic-merge-patch+json", manager="kubectl-set"
    )


def _gpu_text(gpu: Any) -> str:
    """``NVIDIA-GeForce-RTX-3060 (12 GiB, ampere)``: the name and memory as inventory and drift say them."""
    from gpuplan.views.gpu import gpu_words

    name, memory = gpu_words(gpu.product, gpu.memory_mib)
    return f"{name} ({memory}, {gpu.family})"


def _node_section(sim: Any, node: dict[str, Any]) -> str:
    state = sim.runtime.states[NODE]
    info = node["status"].get("nodeInfo", {})
    handlers = ", ".join(
        sorted(h.get("name", "") for h in node["status"].get("runtimeHandlers") or [] if h.get("name"))
    )
    gpu = state.gpus[0].model if state.gpus else None
    gpu_text = f"{len(state.gpus)} x {_gpu_text(gpu)}" if gpu else "none"
    labels = node["metadata"].get("labels") or {}
    return "\n".join(
        [
            f"The node {NODE}",
            f"   GPU:              {gpu_text}; NFD sees it: "
            f"feature.node.kubernetes.io/pci-10de.present={labels.get('feature.node.kubernetes.io/pci-10de.present')}",
            f"   OS:               {info.get('osImage')}, kernel {info.get('kernelVersion')}, "
            f"{info.get('containerRuntimeVersion')}",
            f"   NVIDIA driver:    {state.host_driver} (installed on the host, not by a driver pod)",
            f"   Toolkit:          container toolkit {state.host_toolkit} on the host",
            f"   Runtimes:         {handlers} (containerd runtime handlers the kubelet reports)",
        ]
    )


def _plugin_section(sim: Any) -> str:
    namespace, name = PLUGIN
    ds = _get(sim, "apps/v1", "DaemonSet", namespace, name)
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    pods = sim.store.list(pods_rt, namespace=namespace, field_selector=f"spec.nodeName={NODE}").items
    lines = [f"The device plugin deployed by hand: DaemonSet {namespace}/{name}", f"   image {image}"]
    for pod in pods:
        if pod["metadata"]["name"].startswith(name):
            statuses = pod["status"].get("containerStatuses") or []
            ready = sum(1 for s in statuses if s.get("ready"))
            lines.append(
                f"   pod {pod['metadata']['name']} on {pod['spec']['nodeName']}: "
                f"{pod['status'].get('phase')}, ready {ready}/{len(statuses)}"
            )
    return "\n".join(lines)


def _gpu_capacity(sim: Any) -> str | None:
    node = _get(sim, "v1", "Node", None, NODE)
    value: str | None = node.get("status", {}).get("capacity", {}).get("nvidia.com/gpu")
    return value


def _get(sim: Any, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = sim.store.get(sim.store.registry.for_kind(api_version, kind), namespace, name)
    return obj
