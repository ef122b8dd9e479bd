"""Node objects as a real GPU node registers them: kubelet's labels and status, plus NFD's feature labels.

What a node carries before any NVIDIA component runs: the kubelet's well-known labels, NFD's OS / kernel
labels and ``pci-10de.present`` on GPU nodes (facts §2.2; none on a node the scenario gives ``nfd: false``:
no nfd-worker runs there), the scenario's own labels and taints, and a status with conditions, addresses,
capacity / allocatable sized for the machine, nodeInfo and the runtime handlers containerd reports. Never
``nvidia.com/gpu`` capacity (a device plugin adds it) nor GFD labels (GFD adds them), unless the scenario sets
such labels itself.

Pure and fast (fleet-5000 registers 5000 of these); called by ``gpuplan.sim.cluster``. Machine figures per GPU
model (DMI product name, CPU threads and memory of an 8-GPU server) are typical of those servers [assumed].
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from gpuplan.sim.scenario import ConcreteNode

KUBELET_VERSION = "v1.37.1"
NODE_NAMESPACE = uuid.UUID("0b7c4f0e-3f55-5b8e-8f8e-6a3d2c9e1a42")
HANDLER_FEATURES = {"recursiveReadOnlyMounts": True, "userNamespaces": True}

# model key -> (DMI product_name, CPU threads, memory GiB, disk GiB) of an 8-GPU (or, for GeForce, 1-GPU)
# machine
_MACHINES: dict[str | None, tuple[str, int, int, int]] = {
    "rtx-3060": ("MS-7C56", 16, 64, 1000),
    "t4": ("ProLiant DL380 Gen10", 96, 384, 1800),
    "v100": ("DGX-1", 80, 512, 7000),
    "a100-80gb": ("DGXA100 920-23687-2530-000", 256, 2048, 15000),
    "l40s": ("SYS-421GE-TNRT", 128, 1024, 7600),
    "h100-80gb": ("DGXH100", 224, 2048, 30000),
    "h200": ("DGXH200", 224, 2048, 30000),
    "b200": ("DGXB200", 224, 4096, 30000),
    None: ("Standard PC (Q35 + ICH9, 2009)", 16, 64, 200),
}
_OS_IMAGES = {
    "ubuntu20.04": "Ubuntu 20.04.6 LTS",
    "ubuntu22.04": "Ubuntu 22.04.5 LTS",
    "ubuntu24.04": "Ubuntu 24.04.3 LTS",
    "ubuntu26.04": "Ubuntu 26.04 LTS",
}
_OS_NAMES = {
    "rhel": "Red Hat Enterprise Linux",
    "rocky": "Rocky Linux",
    "ol": "Oracle Linux Server",
    "rhcos": "Red Hat Enterprise Linux CoreOS",
    "debian": "Debian GNU/Linux",
    "sles": "SUSE Linux Enterprise Server",
}


def machine_name(node: ConcreteNode) -> str:
    """The node's DMI ``product_name`` (what GFD reads for ``nvidia.com/gpu.machine``)."""
    return node.machine or _MACHINES[node.gpu.key if node.gpu else None][0]


def os_image(node: ConcreteNode) -> str:
    """``nodeInfo.osImage``: PRETTY_NAME of /etc/os-release."""
    if node.os in _OS_IMAGES:
        return _OS_IMAGES[node.os]
    name = _OS_NAMES.get(node.os_id, node.os_id.capitalize())
    return f"{name} {node.os_version}".strip()


def node_object(node: ConcreteNode, *, now: datetime) -> dict[str, Any]:
    """The v1 Node that kubelet and NFD register for ``node`` (no uid / resourceVersion: the store adds
    them)."""
    spec: dict[str, Any] = {"podCIDR": _pod_cidr(node.ordinal), "podCIDRs": [_pod_cidr(node.ordinal)]}
    taints = [dict(taint) for taint in node.taints]
    if node.unschedulable:
        spec["unschedulable"] = True
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node_labels(node),
            "annotations": {
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": node_status(node, now=now),
    }


def node_labels(node: ConcreteNode) -> dict[str, str]:
    """kubelet's well-known labels, NFD's feature labels, then the scenario's labels (which win)."""
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        **(nfd_labels(node) if node.nfd else {}),
    }
    if node.instance_type:
        labels["node.kubernetes.io/instance-type"] = node.instance_type
        labels["beta.kubernetes.io/instance-type"] = node.instance_type
    labels.update(node.labels)
    return labels


def nfd_labels(node: ConcreteNode) -> dict[str, str]:
    """NFD worker's kernel, OS and PCI labels (the operator's NFD config labels PCI by vendor only)."""
    prefix = "feature.node.kubernetes.io/"
    kernel = node.kernel.split("-")[0].split(".") + ["0", "0"]
    version = node.os_version.split(".")
    labels = {
        f"{prefix}kernel-version.full": node.kernel,
        f"{prefix}kernel-version.major": kernel[0],
        f"{prefix}kernel-version.minor": kernel[1],
        f"{prefix}kernel-version.revision": kernel[2],
        f"{prefix}system-os_release.ID": node.os_id,
        f"{prefix}system-os_release.VERSION_ID": node.os_version,
        f"{prefix}system-os_release.VERSION_ID.major": version[0],
    }
    if len(version) > 1:
        labels[f"{prefix}system-os_release.VERSION_ID.minor"] = version[1]
    if node.gpu is not None:
        labels[f"{prefix}pci-10de.present"] = "true"
    return labels


def node_status(node: ConcreteNode, *, now: datetime) -> dict[str, Any]:
    """Conditions, addresses, capacity / allocatable, nodeInfo, runtime handlers and the kubelet endpoint."""
    capacity, allocatable = resources(node)
    handlers = ["runc"] + (["nvidia"] if node.host_toolkit else [])
    return {
        "conditions": node_conditions(now, ready=True),
        "addresses": [
            {"type": "InternalIP", "address": internal_ip(node.ordinal)},
            {"type": "Hostname", "address": node.name},
        ],
        "capacity": capacity,
        "allocatable": allocatable,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": node_info(node),
        "runtimeHandlers": runtime_handlers(handlers),
        "features": {"supplementalGroupsPolicy": True},
    }


def node_conditions(now: datetime, *, ready: bool) -> list[dict[str, str]]:
    """The four kubelet conditions; ``ready=False`` is what the node lifecycle controller sets when the
    kubelet
    stops posting status (Unknown everywhere)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    healthy = (
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    )
    conditions = []
    for kind, reason, message in healthy:
        status, why, text = (
            ("False", reason, message)
            if ready
            else ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        )
        conditions.append(
            {
                "type": kind,
                "status": status,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
                "reason": why,
                "message": text,
            }
        )
    status, why, text = (
        ("True", "KubeletReady", "kubelet is posting ready status")
        if ready
        else ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    )
    conditions.append(
        {
            "type": "Ready",
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": why,
            "message": text,
        }
    )
    return conditions


def runtime_handlers(names: list[str]) -> list[dict[str, Any]]:
    """``status.runtimeHandlers`` as kubelet copies them from containerd: the default ("") then by name."""
    return [{"name": name, "features": dict(HANDLER_FEATURES)} for name in ["", *sorted(set(names))]]


def resources(node: ConcreteNode) -> tuple[dict[str, str], dict[str, str]]:
    """Capacity and allocatable: kubelet's defaults reserve nothing but the hard eviction thresholds
    (memory.available < 100Mi, nodefs.available < 10%); the scenario's own figures win (a capacity figure
    is allocatable too unless the scenario gives that)."""
    _, threads, memory_gib, disk_gib = _MACHINES[node.gpu.key if node.gpu else None]
    if node.gpu is not None and node.gpu.pci_class == "0302" and node.gpu_count < 8:
        threads = max(8, threads * node.gpu_count // 8)
        memory_gib = max(32, memory_gib * node.gpu_count // 8)
    memory_ki = int(memory_gib * 1024 * 1024 * 0.981)  # the kernel keeps ~2% for itself
    disk_ki = disk_gib * 1024 * 1024
    capacity = {
        "cpu": str(threads),
        "ephemeral-storage": f"{disk_ki}Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_ki}Ki",
        "pods": "110",
    }
    allocatable = {
        **capacity,
        "ephemeral-storage": str(int(disk_ki * 1024 * 0.9)),
        "memory": f"{memory_ki - 100 * 1024}Ki",
        **node.capacity,
        **node.allocatable,
    }
    return {**capacity, **node.capacity}, allocatable


def node_info(node: ConcreteNode) -> dict[str, str]:
    """``status.nodeInfo``; machine, system and boot IDs are uuid5 of the node name (stable per scenario).

    ``kubeProxyVersion`` is empty: the field is deprecated (KEP-4004) and current kubelets no longer fill it.
    """
    return {
        "architecture": "amd64",
        "bootID": str(uuid.uuid5(NODE_NAMESPACE, f"boot/{node.name}")),
        "containerRuntimeVersion": node.container_runtime,
        "kernelVersion": node.kernel,
        "kubeProxyVersion": "",
        "kubeletVersion": KUBELET_VERSION,
        "machineID": uuid.uuid5(NODE_NAMESPACE, f"machine/{node.name}").hex,
        "operatingSystem": "linux",
        "osImage": os_image(node),
        "systemUUID": str(uuid.uuid5(NODE_NAMESPACE, f"system/{node.name}")),
    }


def internal_ip(ordinal: int) -> str:
    """10.0.0.2, 10.0.0.3, ... one per node, 250 to a /24."""
    return f"10.{(ordinal // 64000) % 256}.{(ordinal // 250) % 256}.{ordinal % 250 + 2}"


def _pod_cidr(ordinal: int) -> str:
    return f"10.{128 + (ordinal // 256) % 128}.{ordinal % 256}.0/24"
