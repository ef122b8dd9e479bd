"""The DCGM exporter (``nvcr.io/nvidia/k8s/dcgm-exporter``, facts §3.6, §6) and the standalone DCGM
hostengine.

The exporter gets Ready once driver and NVIDIA runtime work, then serves on ``DCGM_EXPORTER_LISTEN`` (:9400)
``/metrics`` in the Prometheus text format and ``/health``. Every field of its collectors file becomes one
``# HELP`` / ``# TYPE`` pair and one sample per GPU, labelled exactly as ``render_metrics.go`` does:
``gpu, UUID, pci_bus_id, device, modelName, <hostname label>, <label fields such as DCGM_FI_DRIVER_VERSION>``,
and for XID errors ``err_code`` / ``err_msg``. A GPU in MIG mode has one sample per MIG device instead, with
``GPU_I_PROFILE`` and ``GPU_I_ID`` after ``modelName`` (``gpuplan.sim.kubelet.mig.instances``).
The hostname label is ``Hostname`` up to exporter 4.8.2 and
``hostname`` from the release after it (4.6.0-4.8.3, the v26.7 default; facts §6 dates PR #655 before it);
its value is ``NODE_NAME`` (or the pod's own host name, which is the pod name, when unset).

With ``DCGM_REMOTE_HOSTENGINE_INFO`` (standalone DCGM enabled) it needs a Ready ``nvidia-dcgm`` pod on its
node and crash-loops without one. Collectors: the image's ``default-counters.csv`` /
``dcp-metrics-included.csv`` (identical active sets), or a CSV from a mounted ConfigMap
(``dcgm-metrics.csv``); an unknown field or type there makes the exporter exit. Called by the kubelet rules
(``evaluate``) and the pod proxy (``serve``); pure.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from gpuplan.sim.catalog import version_tuple
from gpuplan.sim.kubelet import checks, images, mig
from gpuplan.sim.kubelet.dcgm_fields import (
    DEFAULT_CSV_FIELDS,
    FIELDS,
    FLOAT_FIELDS,
    LABEL_FIELDS,
    XID_MESSAGES,
    Sample,
)
from gpuplan.sim.kubelet.images import Obj, Role, env_value, main_container
from gpuplan.sim.kubelet.outcomes import PodContext, PodOutcome, crash_loop, running
from gpuplan.sim.kubelet.state import GpuDevice, NodeGpuState

ConfigLookup = Callable[[str, str], Obj | None]
BUILTIN_CSV = ("/etc/dcgm-exporter/default-counters.csv", "/etc/dcgm-exporter/dcp-metrics-included.csv")
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LAST_CAPITAL_HOSTNAME = (4, 8, 2)  # exporter release 4.5.3-4.8.2 still labels "Hostname"


class CollectorsError(ValueError):
    """The collectors file cannot be used; the exporter logs this and exits."""


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The exporter after ``toolkit-validation``: Ready and serving, or crash-looping."""
    init_count = len(images.init_containers(pod))
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    if not checks.has_nvml(pod, node):
        return crash_loop(
            init_count,
            init_count,
            "Failed to initialize NVML: could not load NVML library "
            "(libnvidia-ml.so.1: cannot open shared object file: No such "
            "file or directory)",
        )
    try:
        collectors(pod, node, ctx.config_lookup)
    except CollectorsError as exc:
        return crash_loop(init_count, init_count, str(exc))
    remote = env_value(main_container(pod) or {}, "DCGM_REMOTE_HOSTENGINE_INFO")
    if remote and Role.DCGM not in node.ready_roles:
        # The operator points the exporter at the node-local nvidia-dcgm Service (internalTrafficPolicy
        # Local).
        return crash_loop(
            init_count,
            init_count,
            f"Failed to connect to the DCGM host engine at {remote}: "
            "Host engine connection invalid/disconnected",
        )
    return running(init_count, message=f"Starting webserver on {_listen(pod)}")


def evaluate_hostengine(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The standalone ``nv-hostengine`` (state-dcgm): needs NVML like the exporter, serves DCGM on :5555."""
    init_count = len(images.init_containers(pod))
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    if not checks.has_nvml(pod, node):
        return crash_loop(init_count, init_count, "DCGM Failed to find any GPUs on the node.")
    return running(init_count, message="Started host engine version 4.6.0 using port number: 5555")


def collectors(pod: Obj, node: NodeGpuState, lookup: ConfigLookup | None) -> list[tuple[str, str]]:
    """(field, type) pairs of the exporter's collectors file, in file order."""
    container = main_container(pod) or {}
    path = (
        _flag(container, ("-f", "--collectors"))
        or env_value(container, "DCGM_EXPORTER_COLLECTORS")
        or BUILTIN_CSV[0]
    )
    if path in BUILTIN_CSV or lookup is None:
        # Without a ConfigMap lookup a custom file cannot be read; evaluate() (which has one) already
        # crash-looped the pod on a bad file, so a running exporter is served with the default set.
        return list(DEFAULT_CSV_FIELDS)
    text = mounted_file(pod, container, path, lookup)
    if text is None:
        raise CollectorsError(f"Failed to read the collectors file: open {path}: no such file or directory")
    return parse_csv(text, path)


def parse_csv(text: str, path: str) -> list[tuple[str, str]]:
    """``DCGM FIELD, Prometheus type, help`` lines; ``#`` comments and blank lines skipped."""
    fields = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split(",")]
        name, kind = parts[0], parts[1] if len(parts) > 1 else ""
        if kind not in ("gauge", "counter", "label"):
            raise CollectorsError(
                f"Failed to parse {path}: could not find Prometheus metric type '{kind}' for field {name}"
            )
        if (kind == "label") != (name in LABEL_FIELDS) or (kind != "label" and name not in FIELDS):
            raise CollectorsError(f"Failed to parse {path}: could not find DCGM field {name}")
        fields.append((name, kind))
    return fields


def render_metrics(
    node: NodeGpuState, pod: Obj, *, now: float, config_lookup: ConfigLookup | None = None
) -> str:
    """``/metrics``: HELP, TYPE and one sample per GPU for each field of the collectors file (facts §6)."""
    fields = collectors(pod, node, config_lookup)
    label_fields = [name for name, kind in fields if kind == "label"]
    entities: list[tuple[GpuDevice, mig.MigInstance | None]] = [
        (gpu, instance) for gpu in node.gpus for instance in _instances_or_whole(node, gpu)
    ]
    prefixes = [_label_prefix(node, pod, gpu, label_fields, instance) for gpu, instance in entities]
    samples = [Sample(gpu, now, node.gpu_faults.get(gpu.index)) for gpu, _ in entities]
    lines: list[str] = []
    for name, kind in fields:
        if kind == "label":
            continue
        field = FIELDS[name]
        lines += [f"# HELP {name} {field.help}", f"# TYPE {name} {kind}"]
        for prefix, sample in zip(prefixes, samples):
            labels = prefix
            if name == "DCGM_FI_DEV_XID_ERRORS":
                labels += (
                    f',err_code="{sample.xid}",err_msg="{XID_MESSAGES.get(sample.xid, "Unknown Error")}"'
                )
            value = field.value(sample)
            text = f"{value:f}" if name in FLOAT_FIELDS else str(int(value))
            lines.append(f"{name}{{{labels}}} {text}")
    return "\n".join(lines) + "\n"


def serve(
    pod: Obj,
    node: NodeGpuState,
    port: int,
    path: str,
    *,
    now: float,
    config_lookup: ConfigLookup | None = None,
) -> tuple[int, str, bytes]:
    """What the process in ``pod`` answers on ``port``/``path``: the exporter's /metrics and /health; for
    anything that does not listen there, the API server's "connection refused" answer (503)."""
    refused = (
        503,
        "text/plain; charset=utf-8",
        f"error trying to reach service: dial tcp {_pod_ip(pod)}:{port}: connect: connection "
        "refused".encode(),
    )
    if images.identify(pod) is not Role.DCGM_EXPORTER or port != listen_port(pod) or not _main_running(pod):
        return refused
    route = "/" + path.lstrip("/")
    if route == "/metrics":
        try:
            body = render_metrics(node, pod, now=now, config_lookup=config_lookup)
        except CollectorsError:
            return refused  # the exporter exited on its collectors file
        return 200, METRICS_TYPE, body.encode()
    if route == "/health":
        return 200, "text/plain; charset=utf-8", b"OK"
    return 404, "text/plain; charset=utf-8", b"404 page not found\n"


def hostname_label(pod: Obj) -> str | None:
    """``Hostname`` or ``hostname`` by exporter release; None with ``--no-hostname``."""
    container = main_container(pod) or {}
    if "--no-hostname" in images.command_words(container):
        return None
    match = re.match(r"^\d+\.\d+\.\d+-(\d+\.\d+\.\d+)", images.parse_image(container.get("image", "")).tag)
    if match and version_tuple(match.group(1)) <= LAST_CAPITAL_HOSTNAME:
        return "Hostname"
    return "hostname"


def _instances_or_whole(node: NodeGpuState, gpu: GpuDevice) -> list[mig.MigInstance | None]:
    """The GPU's MIG devices, or None for the GPU itself when it is not partitioned."""
    return [*mig.instances(node, gpu)] or [None]


def _label_prefix(
    node: NodeGpuState, pod: Obj, gpu: GpuDevice, label_fields: list[str], instance: mig.MigInstance | None
) -> str:
    parts = [
        f'gpu="{gpu.index}"',
        f'UUID="{gpu.uuid}"',
        f'pci_bus_id="{gpu.pci_bus_id}"',
        f'device="{gpu.device}"',
        f'modelName="{gpu.model.name}"',
    ]
    if instance is not None:
        # one sample per GPU instance, after modelName (dcgm-exporter's metrics template:
        # {{if $metric.MigProfile}},GPU_I_PROFILE="...",GPU_I_ID="..."{{end}}, NVIDIA/dcgm-exporter
        # pkg/dcgmexporter/const.go)
        parts += [f'GPU_I_PROFILE="{instance.profile.name}"', f'GPU_I_ID="{instance.instance_id}"']
    label = hostname_label(pod)
    if label is not None:
        parts.append(f'{label}="{_hostname(pod, node)}"')
    parts += [f'{name}="{_label_value(name, node, gpu)}"' for name in label_fields]
    return ",".join(parts)


def _label_value(name: str, node: NodeGpuState, gpu: GpuDevice) -> str:
    driver = node.driver_version or ""
    if name == "DCGM_FI_DRIVER_VERSION":
        return driver
    if name == "DCGM_FI_NVML_VERSION":
        return f"{13 if version_tuple(driver)[0] >= 580 else 12}.{driver}"
    if name == "DCGM_FI_DEV_BRAND":
        return "GeForce" if gpu.model.pci_class == "0300" else "NVIDIA"
    if name == "DCGM_FI_DEV_SERIAL":
        return f"1652{int(gpu.uuid[4:12], 16) % 10**9:09d}"
    return gpu.model.name


def _hostname(pod: Obj, node: NodeGpuState) -> str:
    container = main_container(pod) or {}
    from_env = env_value(container, "NODE_NAME", node_name=node.node.name, pod=pod)
    if from_env:
        return from_env
    if (pod.get("spec") or {}).get("hostNetwork"):
        return node.node.name
    return str((pod.get("metadata") or {}).get("name", node.node.name))


def _listen(pod: Obj) -> str:
    container = main_container(pod) or {}
    return _flag(container, ("-a", "--address")) or env_value(container, "DCGM_EXPORTER_LISTEN") or ":9400"


def listen_port(pod: Obj) -> int:
    """The port the exporter listens on (``-a``/``--address``, ``DCGM_EXPORTER_LISTEN``, or 9400)."""
    port = _listen(pod).rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else 9400


def _main_running(pod: Obj) -> bool:
    """Without a status (a pod the kubelet has not reported yet) the process is taken to run."""
    status = pod.get("status")
    if not status:
        return True
    container = main_container(pod) or {}
    for entry in status.get("containerStatuses") or []:
        if entry.get("name") == container.get("name"):
            return "running" in (entry.get("state") or {})
    return False


def _pod_ip(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("podIP") or "0.0.0.0")


def _flag(container: Obj, names: tuple[str, ...]) -> str | None:
    words = images.command_words(container)
    for index, word in enumerate(words):
        for name in names:
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
            if word == name and index + 1 < len(words):
                return words[index + 1]
    return None


def mounted_file(pod: Obj, container: Obj, path: str, lookup: ConfigLookup) -> str | None:
    """The content of ``path`` when it lies in a ConfigMap volume mounted into ``container``."""
    directory, file_name = posixpath.split(path)
    names = {m.get("name"): m for m in container.get("volumeMounts") or []}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        mount = names.get(volume.get("name"))
        source = volume.get("configMap")
        if mount is None or source is None:
            continue
        if mount.get("subPath") and mount.get("mountPath") == path:
            in_volume = str(mount["subPath"])
        elif mount.get("mountPath", "").rstrip("/") == directory:
            in_volume = file_name
        else:
            continue
        key = next((i.get("key") for i in source.get("items") or [] if i.get("path") == in_volume), in_volume)
        namespace = (pod.get("metadata") or {}).get("namespace", "default")
        data = (lookup(namespace, source.get("name", "")) or {}).get("data") or {}
        return str(data[key]) if key in data else None
    return None
