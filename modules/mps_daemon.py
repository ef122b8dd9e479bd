"""The MPS control daemon (``nvidia-device-plugin-mps-control-daemon``, fleet facts §5): device plugin part.

The GPU Operator deploys it from ``assets/state-mps-control-daemon/0400_daemonset.yaml`` as a state of the
device plugin: one pod per MPS-capable node runs ``nvidia-cuda-mps-control`` for each shared resource
(pipe and log directories under ``/mps/<resource>``, the per-replica memory and thread limits) and creates
``/mps/.ready``, without which the device plugin does not start its MPS resources.

When gpuplan renders it: whenever the device plugin's config can select MPS on some node, that is an inline
``mps`` config, or the name of a ConfigMap gpuplan does not read (any of its keys, picked per node by the
``nvidia.com/device-plugin.config`` label, may share through MPS). An inline time-slicing config and no
config at all never do. The daemon reads its config through the same config-manager init container and
sidecar as the plugin and GFD, so a node gets the daemon config its plugin gets.

Node selection: gpuplan's stack selector (or the device plugin's own ``nodeSelector``) plus
``nvidia.com/mps.capable=true``, and the device plugin's ``gpu.deploy.device-plugin`` eviction affinity (see
:mod:`gpuplan.modules.common`). The operator selects ``gpu.deploy.device-plugin=true`` plus the same
``mps.capable`` label; gpuplan keeps the selector every one of its DaemonSets uses instead of the operator's
label, which nobody writes without the operator. GFD writes ``mps.capable=true`` only where the node's config
shares through MPS and no GPU is MIG-enabled, so the daemon lands only after GFD labelled the node.
"""

from __future__ import annotations

from gpuplan.modules import common
from gpuplan.modules.base import ComponentConfig, DesiredObject, StackContext
from gpuplan.modules.common import Json, env, env_field, host_path, mount

NAME = "nvidia-device-plugin-mps-control-daemon"
ACCOUNT = "nvidia-device-plugin"
CAPABLE_LABEL = "nvidia.com/mps.capable"
MPS_ROOT = "/run/nvidia/mps"
PROCESS = "/usr/bin/mps-control-daemon"  # what the config-manager sidecar SIGHUPs (fleet facts §5)


def render(
    config: ComponentConfig,
    stack: StackContext,
    *,
    config_managers: tuple[list[Json], list[Json], list[Json]],
) -> DesiredObject:
    """The daemon's DaemonSet; ``config_managers`` are the config-manager containers and volumes for it."""
    image = config.image_ref()
    manager_init, manager_sidecars, config_volumes = config_managers
    mounts_init = {
        "name": "mps-control-daemon-mounts",
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["mps-control-daemon", "mount-shm"],  # a tmpfs on /mps/shm sized from /proc/meminfo
        "securityContext": dict(common.PRIVILEGED),
        "volumeMounts": [mount("mps-root", "/mps", propagation="Bidirectional")],
    }
    daemon = {
        "name": "mps-control-daemon-ctr",
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["mps-control-daemon"],
        "env": [
            env_field("NODE_NAME", "spec.nodeName"),
            env("NVIDIA_VISIBLE_DEVICES", "all"),
            env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
            env("CONFIG_FILE", "/config/config.yaml"),
        ],
        "securityContext": dict(common.PRIVILEGED),
        "volumeMounts": [mount("mps-shm", "/dev/shm"), mount("mps-root", "/mps"), mount("config", "/config")],
    }
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "hostPID": True,  # the config-manager signals the daemon through the host's PID namespace
        "initContainers": [
            *common.toolkit_validation_init(stack, via_run_nvidia=True),
            mounts_init,
            *manager_init,
        ],
        "containers": [daemon, *manager_sidecars],
        "volumes": [
            # toolkit-validation reads the marker through it (assets/state-mps-control-daemon, v26.7.0)
            host_path("run-nvidia", "/run/nvidia", "Directory"),
            host_path("mps-root", MPS_ROOT, "DirectoryOrCreate"),
            host_path("mps-shm", f"{MPS_ROOT}/shm"),
            *config_volumes,
        ],
    }
    if (runtime_class := common.runtime_class(stack)) is not None:
        pod["runtimeClassName"] = runtime_class
    return common.daemonset(
        stack,
        "devicePlugin",
        config,
        name=NAME,
        labels={"app": NAME},
        deploy_label="device-plugin",
        pod=pod,
        extra_selector={CAPABLE_LABEL: "true"},
    )
