"""The NVIDIA device plugin (``nvidia-device-plugin-daemonset``, facts §3.4) and its sharing config (§5).

Renders, when gpuplan owns the component: ServiceAccount, ClusterRole/Binding (the config-manager reads its
node's ``nvidia.com/device-plugin.config`` label), the sharing ConfigMap when the spec gives time-slicing or
MPS settings, and the DaemonSet. With a config (inline or the name of an existing ConfigMap) the DaemonSet
gets the operator's ``config-manager-init`` init container and ``config-manager`` sidecar (facts §5.3), which
copy the key selected by the node label (default: ``config.default``) to ``/config/config.yaml``.
GFD reads the same config, see :func:`config_manager_containers`. A config that can select MPS also renders
the MPS control daemon's DaemonSet (:mod:`gpuplan.modules.mps_daemon`), whose rollout is one of the
component's gates.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import yaml
from pydantic import BaseModel, Field

from gpuplan.modules import common, mps_daemon, values
from gpuplan.modules.base import (
    IMAGE_DOC,
    REPOSITORY_DOC,
    VERSION_DOC,
    ComponentConfig,
    ComponentName,
    DesiredObject,
    HealthCheck,
    StackContext,
)
from gpuplan.modules.common import Json, env, env_field, host_path, mount
from gpuplan.modules.values import SharingConfig

NAME = "nvidia-device-plugin-daemonset"
ACCOUNT = "nvidia-device-plugin"
CONFIG_NODE_LABEL = "nvidia.com/device-plugin.config"
# the operator's entrypoint: the plugin starts once the validator wrote driver-ready, with the driver root it
# records there (and GDRCopy/GDS flags from lsmod)
ENTRYPOINT = "nvidia-device-plugin-entrypoint"


class DevicePluginConfig(ComponentConfig):
    """The NVIDIA Kubernetes device plugin: advertises nvidia.com/gpu on every GPU node."""

    version: str = Field(default="v0.20.1", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia", description=REPOSITORY_DOC)
    image: str = Field(default="k8s-device-plugin", description=IMAGE_DOC)
    config: SharingConfig | None = None
    """GPU sharing (time-slicing or MPS), or an existing config ConfigMap; shared with GFD."""


def config_file(config: SharingConfig | None, stack: StackContext) -> str:
    """The device plugin config file (api/config/v1) for inline sharing settings (None: no sharing, the
    default key of a ConfigMap whose node pools share), as YAML."""
    document: Json = {"version": "v1", "flags": {"migStrategy": stack.mig_strategy}}
    if config is None:
        pass
    elif config.time_slicing is not None:
        ts = config.time_slicing
        document["sharing"] = {
            "timeSlicing": {
                "renameByDefault": ts.rename_by_default,
                "failRequestsGreaterThanOne": ts.fail_requests_greater_than_one,
                "resources": [{"name": "nvidia.com/gpu", "replicas": ts.replicas}],
            }
        }
    elif config.mps is not None:  # one of the two, or a ConfigMap's name (nothing inline)
        document["sharing"] = {
            "mps": {
                "renameByDefault": config.mps.rename_by_default,
                "resources": [{"name": "nvidia.com/gpu", "replicas": config.mps.replicas}],
            }
        }
    text: str = yaml.safe_dump(document, sort_keys=True)
    return text


def config_manager_containers(
    sharing: SharingConfig | None, image: str, pull_policy: str, process: str
) -> tuple[list[Json], list[Json], list[Json]]:
    """(init containers, sidecars, volumes) of the operator's config-manager for ``process`` (facts §5.3)."""
    if sharing is None:
        return [], [], []

    def container(name: str, oneshot: bool) -> Json:
        variables = [
            env("ONESHOT", str(oneshot).lower()),
            env("KUBECONFIG", ""),
            env_field("NODE_NAME", "spec.nodeName"),
            env("NODE_LABEL", CONFIG_NODE_LABEL),
            env("CONFIG_FILE_SRCDIR", "/available-configs"),
            env("CONFIG_FILE_DST", "/config/config.yaml"),
            env("DEFAULT_CONFIG", sharing.default_key()),
            env("FALLBACK_STRATEGIES", "empty"),
            env("SEND_SIGNAL", str(not oneshot).lower()),
            env("SIGNAL", "1"),
            env("PROCESS_TO_SIGNAL", process),
        ]
        return {
            "name": name,
            "image": image,
            "imagePullPolicy": pull_policy,
            "command": ["config-manager"],
            "env": variables,
            "securityContext": dict(common.PRIVILEGED),
            "volumeMounts": [mount("available-configs", "/available-configs"), mount("config", "/config")],
        }

    volumes = [
        {"name": "available-configs", "configMap": {"name": sharing.config_map_name()}},
        {"name": "config", "emptyDir": {}},
    ]
    return [container("config-manager-init", True)], [container("config-manager", False)], volumes


def uses_entrypoint(stack: StackContext) -> bool:
    """The operator's entrypoint waits for driver-ready, which only the validator writes: without a
    validator gpuplan runs, the plugin starts directly with the driver root gpuplan knows from the owners
    (deliberate)."""
    return stack.owned("validator")


def _plugin_env(config: DevicePluginConfig, stack: StackContext) -> list[Json]:
    """The env in the order TransformDevicePlugin (controllers/object_controls.go, v26.7.0) leaves it: the
    asset's, then the config file (handleDevicePluginConfig), the MIG env, then the CDI env."""
    variables = [
        env("PASS_DEVICE_SPECS", "true"),
        env("FAIL_ON_INIT_ERROR", "true"),
        env("DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri" if stack.cdi_enabled else "envvar"),
        env("DEVICE_ID_STRATEGY", "uuid"),
        env("NVIDIA_VISIBLE_DEVICES", "all"),
        env("NVIDIA_DRIVER_CAPABILITIES", "all"),
        env("MPS_ROOT", "/run/nvidia/mps"),
    ]
    if not uses_entrypoint(stack):
        variables += [
            env("NVIDIA_DRIVER_ROOT", stack.driver_root()),
            env("CONTAINER_DRIVER_ROOT", "/driver-root" if stack.owned("driver") else "/host"),
        ]
    if config.config is not None:
        variables.append(env("CONFIG_FILE", "/config/config.yaml"))
    variables += common.mig_env(stack)
    if stack.cdi_enabled:
        variables += [env("CDI_ENABLED", "true"), env("CDI_ANNOTATION_PREFIX", "cdi.k8s.io/")]
        if stack.owned("toolkit"):  # the operator sets the hook path only when it deploys the toolkit
            variables.append(
                env("NVIDIA_CDI_HOOK_PATH", f"{stack.toolkit_install_dir}/toolkit/nvidia-cdi-hook")
            )
    return variables


def _daemonset(config: DevicePluginConfig, stack: StackContext) -> DesiredObject:
    image = config.image_ref()
    init, sidecars, config_volumes = config_manager_containers(
        config.config, image, config.image_pull_policy, "nvidia-device-plugin"
    )
    entrypoint = uses_entrypoint(stack)
    # gpu-operator v26.7.0 assets/state-device-plugin/0500_daemonset.yaml, mounts and volumes in its order
    mounts = [
        *(
            [mount(ENTRYPOINT, "/bin/entrypoint.sh", read_only=True, sub_path="entrypoint.sh")]
            if entrypoint
            else []
        ),
        mount("device-plugin", "/var/lib/kubelet/device-plugins"),
        mount("run-nvidia-validations", common.VALIDATIONS_DIR),
        mount("driver-install-dir", "/driver-root", propagation="HostToContainer"),
        mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
        mount("cdi-root", "/var/run/cdi"),
        mount("mps-shm", "/dev/shm"),
        mount("mps-root", "/mps"),
    ]
    if config.config is not None:
        mounts.append(mount("config", "/config"))
    command: Json = (
        {"command": ["/bin/sh", "-c"], "args": ["/bin/entrypoint.sh"]}
        if entrypoint
        else {"command": ["nvidia-device-plugin"]}
    )
    plugin = common.main_container(
        config,
        {
            "name": "nvidia-device-plugin",
            "image": image,
            **command,
            "env": _plugin_env(config, stack),
            "securityContext": dict(common.PRIVILEGED),
            "volumeMounts": mounts,
        },
    )
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "initContainers": common.toolkit_validation_init(stack) + init,
        "containers": [plugin, *sidecars],
        "volumes": [
            *([common.script_volume(ENTRYPOINT)] if entrypoint else []),
            host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
            host_path("run-nvidia-validations", common.VALIDATIONS_DIR, "DirectoryOrCreate"),
            host_path("driver-install-dir", "/run/nvidia/driver", "DirectoryOrCreate"),
            host_path("host-root", "/"),
            host_path("cdi-root", "/var/run/cdi", "DirectoryOrCreate"),
            host_path("mps-root", "/run/nvidia/mps", "DirectoryOrCreate"),
            host_path("mps-shm", "/run/nvidia/mps/shm"),
            *config_volumes,
        ],
    }
    if sidecars:
        pod["shareProcessNamespace"] = True  # config-manager SIGHUPs the plugin process
    if (runtime_class := common.runtime_class(stack)) is not None:
        pod["runtimeClassName"] = runtime_class
    if not pod["initContainers"]:
        del pod["initContainers"]
    return common.daemonset(
        stack, "devicePlugin", config, name=NAME, labels={"app": NAME}, deploy_label="device-plugin", pod=pod
    )


def shared_resource(config: DevicePluginConfig) -> tuple[str, int]:
    """The resource name nodes advertise and the replicas per GPU, from the inline sharing settings."""
    sharing = config.config
    mode = None if sharing is None else (sharing.time_slicing or sharing.mps)
    if mode is None:
        return "nvidia.com/gpu", 1
    return ("nvidia.com/gpu.shared" if mode.rename_by_default else "nvidia.com/gpu"), mode.replicas


class DevicePlugin:
    """Module of the device plugin component."""

    name: ClassVar[ComponentName] = "devicePlugin"
    depends_on: ClassVar[tuple[ComponentName, ...]] = ("toolkit",)
    writes_first: ClassVar[bool] = False
    config_model: ClassVar[type[BaseModel]] = DevicePluginConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, DevicePluginConfig)
        if config.owner != "gpuplan":
            return ()
        objects = [common.desired(self.name, common.service_account(stack, self.name, ACCOUNT))]
        rules = [common.rule([""], ["nodes"], ["get", "list", "watch"])]
        objects += [
            common.desired(self.name, m)
            for m in (
                *common.scc_role_and_binding(stack, self.name, ACCOUNT, []),
                *common.role_and_binding(stack, self.name, ACCOUNT, rules, cluster=True),
            )
        ]
        if uses_entrypoint(stack):
            script = common.script_config_map(stack, self.name, ENTRYPOINT, "entrypoint.sh", {"app": NAME})
            objects.append(common.desired(self.name, script))
        if config.config is not None and config.config.name is None:
            data = {values.INLINE_CONFIG_KEY: config_file(config.config, stack)}
            objects.append(
                common.desired(
                    self.name,
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": common.metadata(stack, self.name, values.CONFIG_MAP),
                        "data": data,
                    },
                )
            )
        objects.append(_daemonset(config, stack))
        if runs_mps_daemon(config):
            managers = config_manager_containers(
                config.config, config.image_ref(), config.image_pull_policy, mps_daemon.PROCESS
            )
            objects.append(mps_daemon.render(config, stack, config_managers=managers))
        return tuple(objects)

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, DevicePluginConfig)
        resource, replicas = shared_resource(config)
        allocatable = HealthCheck(
            "allocatable",
            {"resource": resource, "perGpu": replicas, "timeoutSeconds": config.health_timeout_seconds},
        )
        if config.owner == "gpuplan":
            rollouts = [HealthCheck("rollout", common.rollout_check(stack, config, NAME))]
            if runs_mps_daemon(config):  # on the nodes GFD labelled mps.capable (none is no failure)
                rollouts.append(HealthCheck("rollout", common.rollout_check(stack, config, mps_daemon.NAME)))
            return *rollouts, allocatable
        return (allocatable,) if config.owner == "external" else ()


SharingMode = Literal["none", "time-slicing", "mps", "unknown"]


def sharing_mode(config: DevicePluginConfig) -> SharingMode:
    """How GPUs are shared; ``unknown`` when the config lives in a ConfigMap gpuplan does not render."""
    if config.config is None:
        return "none"
    if config.config.name is not None:
        return "unknown"
    return "mps" if config.config.mps is not None else "time-slicing"


def runs_mps_daemon(config: DevicePluginConfig) -> bool:
    """Whether the MPS control daemon is rendered: its config can select MPS on some node
    (:mod:`gpuplan.modules.mps_daemon`)."""
    return sharing_mode(config) in ("mps", "unknown")
