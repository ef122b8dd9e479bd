"""What a simulated container answers on a TCP port: the pod proxy, the service proxy and port-forward ask
here, through ``KubeletRuntime.serve_proxy``.

- The DCGM exporter: ``/metrics`` and ``/health`` on its listen port (``gpuplan.sim.kubelet.dcgm``).
- The node-status exporter (the validator image with ``COMPONENT=metrics``, the GPU Operator's
  ``nvidia-node-status-exporter``): the validation gauges on ``METRICS_PORT`` (8000) at ``/metrics``, as
  gpu-operator validator/metrics.go publishes them from ``/run/nvidia/validations``: driver, toolkit, CUDA and
  plugin readiness and the devices counted. Here they are read off the node's simulated state.
- Any port a scenario declares (``ports:`` in the scenario file): a fixed answer for pods of an image.

Anything else is refused as the API server reports a refused dial (503 ``connection refused``).

:func:`listening` names the ports a pod's process listens on, for the pod network
(``gpuplan.sim.kubelet.pod_network``), which serves the same answers on the pod's own IP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.sim.kubelet import dcgm, images
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.state import NVIDIA_HANDLERS, NodeGpuState

Answer = tuple[int, str, bytes]
TEXT = "text/plain; charset=utf-8"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NODE_STATUS_PORT = 8000  # the validator's METRICS_PORT default


@dataclass(frozen=True)
class DeclaredPort:
    """A scenario's ``ports`` entry: pods whose image starts with ``image`` answer ``port``."""

    image: str
    port: int
    path: str = "/"
    status: int = 200
    content_type: str = TEXT
    body: str = ""

    def serves(self, pod: Obj, port: int) -> bool:
        container = images.main_container(pod) or {}
        return port == self.port and str(container.get("image", "")).startswith(self.image)


def serve(
    pod: Obj,
    node: NodeGpuState,
    port: int,
    path: str,
    *,
    now: float,
    config_lookup: dcgm.ConfigLookup | None = None,
    declared: Sequence[DeclaredPort] = (),
) -> Answer:
    """The answer of ``pod``'s process on ``port`` to a GET of ``path``."""
    route = "/" + path.lstrip("/")
    for entry in declared:
        if entry.serves(pod, port):
            if route != "/" + entry.path.lstrip("/"):
                return 404, TEXT, b"404 page not found\n"
            return entry.status, entry.content_type, entry.body.encode()
    if _node_status_exporter(pod) and port == _metrics_port(pod):
        if route != "/metrics":
            return 404, TEXT, b"404 page not found\n"
        return 200, METRICS_TYPE, node_status_metrics(node).encode()
    return dcgm.serve(pod, node, port, path, now=now, config_lookup=config_lookup)


def listening(pod: Obj, declared: Sequence[DeclaredPort] = ()) -> set[int]:
    """The TCP ports ``pod``'s process listens on: what :func:`serve` can answer other than refused."""
    found = {entry.port for entry in declared if entry.serves(pod, entry.port)}
    if _node_status_exporter(pod):
        found.add(_metrics_port(pod))
    if images.identify(pod) is images.Role.DCGM_EXPORTER:
        found.add(dcgm.listen_port(pod))
    return found


def refused(answer: Answer) -> bool:
    """Whether :func:`serve` answered as the API server does for a dial nobody accepts."""
    status, _, body = answer
    return status == 503 and body.startswith(b"error trying to reach service: dial tcp")


def node_status_metrics(node: NodeGpuState) -> str:
    """The node-status exporter's gauges (gpu-operator validator/metrics.go), 1 ready / 0 not."""
    driver = node.driver_works()
    toolkit = driver and any(handler in node.runtime_handlers for handler in NVIDIA_HANDLERS)
    devices = int(node.resources.get("nvidia.com/gpu", "0") or 0)
    gauges = [
        ("gpu_operator_node_driver_ready", "1 if the driver validation passed", int(driver)),
        ("gpu_operator_node_toolkit_ready", "1 if the toolkit validation passed", int(toolkit)),
        ("gpu_operator_node_cuda_ready", "1 if the CUDA workload validation passed", int(toolkit)),
        ("gpu_operator_node_plugin_ready", "1 if the device plugin validation passed", int(devices > 0)),
        ("gpu_operator_node_device_plugin_devices_total", "GPUs the device plugin advertises", devices),
        ("gpu_operator_nvidia_pci_devices_total", "NVIDIA PCI devices on the node", len(node.gpus)),
    ]
    lines = []
    for name, help_text, value in gauges:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
    return "\n".join(lines) + "\n"


def _node_status_exporter(pod: Obj) -> bool:
    """The validator's binary in metrics mode (``COMPONENT=metrics``), as images.identify tells it apart."""
    main = images.main_container(pod) or {}
    name = images.parse_image(str(main.get("image", ""))).name
    return (
        name in ("gpu-operator", "gpu-operator-validator")
        and images.env_value(main, "COMPONENT") == "metrics"
    )


def _metrics_port(pod: Obj) -> int:
    port = images.env_value(images.main_container(pod) or {}, "METRICS_PORT") or ""
    return int(port) if port.isdigit() else NODE_STATUS_PORT
