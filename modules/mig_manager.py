"""The MIG manager (``nvidia-mig-manager``, fleet facts §4.2, §4.4): partitions MIG-capable GPUs into the
geometry a node's ``nvidia.com/mig.config`` label names.

Renders ServiceAccount, ClusterRole/Binding (it watches and relabels its Node), Role/Binding (it deletes
the operand and validator pods on its node and publishes ConfigMaps in the stack namespace), the
ConfigMaps ``default-mig-parted-config`` (the operator's config for the GPUs gpuplan knows,
``modules.mig_parted``; not rendered when ``config.name`` names the user's own) and ``default-gpu-clients``
(unless ``gpuClientsConfig.name`` names one), and the DaemonSet, mounted as the operator's
``TransformMIGManager`` mounts them: the default config as ``config-default.yaml`` with
``DEFAULT_CONFIG_FILE``, a custom one as ``config.yaml`` with ``CONFIG_FILE``.

Placement, as the operator's: the DaemonSet selects ``nvidia.com/gpu.deploy.mig-manager=true`` (within the
stack's node selector). The operator's node labeller writes that label on the nodes GFD labels
``nvidia.com/mig.capable=true``; gpuplan does the same (:func:`node_labels`, written per node pool by the
walker and recorded in the state): on the stack's nodes with ``nvidia.com/mig.capable=true`` it sets
``nvidia.com/gpu.deploy.mig-manager=true`` and ``nvidia.com/mig.config`` (the node pool's ``mig.config``, else
``spec.mig.config``), once the gates of the component's dependencies passed (GFD has labelled the nodes).
Selecting on GFD's label directly would not do: GFD's labels go while a reconfiguration pauses GFD, and the
mig-manager must stay. Its gate is ``nvidia.com/mig.config.state=success`` on its nodes;
``failed`` fails it at once. A node whose config gpuplan changes is labelled
``nvidia.com/mig.config.state=pending`` with it, so the old config's ``success`` cannot pass the gate.

Owned as every other component when the spec names it (``migManager: {}``, design §8.3), and off when the
spec leaves it out (:class:`gpuplan.planner.spec.model.StackSpec`): a seventh DaemonSet on every GPU node
would change every existing plan.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from gpuplan.modules import common, gfd, mig_parted
from gpuplan.modules.base import (
    IMAGE_DOC,
    REPOSITORY_DOC,
    VERSION_DOC,
    ComponentConfig,
    ComponentName,
    DesiredObject,
    HealthCheck,
    Owner,
    StackContext,
)
from gpuplan.modules.common import Json, env, env_field, host_path, mount
from gpuplan.modules.node_labels import NodeLabels
from gpuplan.modules.values import DnsLabel, Model

NAME = "nvidia-mig-manager"
ACCOUNT = "nvidia-mig-manager"
DEFAULT_CONFIG_MAP = "default-mig-parted-config"
DEFAULT_CLIENTS_MAP = "default-gpu-clients"
CONFIG_DIR = "/mig-parted-config"
CLIENTS_DIR = "/gpu-clients"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"


class ConfigMapRef(Model):
    """An existing ConfigMap in the stack namespace."""

    name: DnsLabel | None = None
    """Its name; unset: gpuplan renders the operator's default one."""


class MigManagerConfig(ComponentConfig):
    """The MIG manager: applies the nvidia.com/mig.config label's mig-parted config to a node's GPUs."""

    owner: Owner = "gpuplan"
    """As for every component, gpuplan runs it when the section is there (needed for spec.mig.config);
    without the section it is off (none)."""
    version: str = Field(default="v0.15.0", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia/cloud-native", description=REPOSITORY_DOC)
    image: str = Field(default="k8s-mig-manager", description=IMAGE_DOC)
    config: ConfigMapRef = Field(default_factory=ConfigMapRef)
    """A custom mig-parted config (key config.yaml); unset: the operator's default-mig-parted-config."""
    gpu_clients_config: ConfigMapRef = Field(default_factory=ConfigMapRef)
    """Host GPU clients to stop around a MIG mode change (key clients.yaml); unset: default-gpu-clients."""
    health_timeout_seconds: int = Field(default=900, ge=1, le=86400)
    """How long apply waits for the nodes' MIG config to be applied (a mode change can reset GPUs)."""


def node_labels(config: MigManagerConfig, stack: StackContext) -> NodeLabels:
    """Which nodes gpuplan labels for the mig-manager (the MIG-capable ones), and with what: ``stack``'s
    MIG config (a node pool's context carries the pool's)."""
    selector = config.node_selector if config.node_selector is not None else stack.node_selector
    return NodeLabels(
        selector=common.sorted_map({**selector, MIG_CAPABLE_LABEL: "true"}),
        labels={DEPLOY_LABEL: "true", CONFIG_LABEL: stack.mig_config},
        # a new config is pending until the mig-manager takes it up: its "success" for the old one must not
        # pass the gate (the mig-manager rewrites the state for every change of the config label)
        on_change={STATE_LABEL: "pending"},
    )


def _rbac(stack: StackContext) -> list[DesiredObject]:
    component = "migManager"
    cluster_rules = [common.rule([""], ["nodes"], ["get", "list", "watch", "update", "patch"])]
    ns_rules = [
        common.rule([""], ["pods"], ["get", "list", "watch", "delete"]),
        common.rule([""], ["configmaps"], ["get", "list", "watch", "create", "update", "patch", "delete"]),
        common.rule(["apps"], ["daemonsets"], ["get", "list", "watch"]),
    ]
    return [
        common.desired(component, m)
        for m in (
            common.service_account(stack, component, ACCOUNT),
            *common.role_and_binding(stack, component, ACCOUNT, cluster_rules, cluster=True),
            *common.role_and_binding(stack, component, ACCOUNT, ns_rules, cluster=False),
        )
    ]


def _config_map(stack: StackContext, name: str, key: str, text: str) -> DesiredObject:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": common.metadata(stack, "migManager", name),
        "data": {key: text},
    }
    return common.desired("migManager", manifest)


def _config_env_and_volume(config: MigManagerConfig) -> tuple[Json, Json]:
    if config.config.name is not None:
        volume = {"name": "mig-parted-config", "configMap": {"name": config.config.name}}
        return env("CONFIG_FILE", f"{CONFIG_DIR}/config.yaml"), volume
    items = [{"key": "config.yaml", "path": "config-default.yaml"}]
    volume = {"name": "mig-parted-config", "configMap": {"name": DEFAULT_CONFIG_MAP, "items": items}}
    return env("DEFAULT_CONFIG_FILE", f"{CONFIG_DIR}/config-default.yaml"), volume


def _daemonset(config: MigManagerConfig, stack: StackContext) -> DesiredObject:
    config_env, config_volume = _config_env_and_volume(config)
    clients = config.gpu_clients_config.name or DEFAULT_CLIENTS_MAP
    variables = [
        env_field("NODE_NAME", "spec.nodeName"),
        config_env,
        env("GPU_CLIENTS_FILE", f"{CLIENTS_DIR}/clients.yaml"),
        env("HOST_ROOT_MOUNT", "/host"),
        env("HOST_NVIDIA_DIR", "/usr/local/nvidia"),
        env("HOST_MIG_MANAGER_STATE_FILE", "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf"),
        env("HOST_KUBELET_SYSTEMD_SERVICE", "kubelet.service"),
        env("DEFAULT_GPU_CLIENTS_NAMESPACE", stack.namespace),
        env("WITH_REBOOT", "false"),
        env("WITH_SHUTDOWN_HOST_GPU_CLIENTS", "false" if stack.owned("driver") else "true"),
        env("CDI_ENABLED", str(stack.cdi_enabled).lower()),
        env("DRIVER_ROOT", stack.driver_root()),
    ]
    main = common.main_container(
        config,
        {
            "name": "nvidia-mig-manager",
            "image": config.image_ref(),
            "command": ["nvidia-mig-manager"],
            "env": variables,
            "securityContext": dict(common.PRIVILEGED),
            "volumeMounts": [
                mount("mig-parted-config", CONFIG_DIR),
                mount("gpu-clients", CLIENTS_DIR),
                mount("host-root", "/host", propagation="HostToContainer"),
                mount("host-sys", "/sys"),
                mount("cdi-root", "/var/run/cdi"),
            ],
        },
    )
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "hostPID": True,
        "hostIPC": True,
        "initContainers": common.toolkit_validation_init(stack),
        "containers": [main],
        "volumes": [
            config_volume,
            {"name": "gpu-clients", "configMap": {"name": clients}},
            host_path("host-root", "/"),
            host_path("host-sys", "/sys", "Directory"),
            host_path("cdi-root", "/var/run/cdi", "DirectoryOrCreate"),
            *common.toolkit_validation_volumes(stack),
        ],
    }
    if (runtime_class := common.runtime_class(stack)) is not None:
        pod["runtimeClassName"] = runtime_class
    if not pod["initContainers"]:
        del pod["initContainers"]
    selector = config.node_selector if config.node_selector is not None else stack.node_selector
    placed = config.model_copy(update={"node_selector": {**selector, DEPLOY_LABEL: "true"}})
    return common.daemonset(
        stack, "migManager", placed, name=NAME, labels={"app": NAME}, deploy_label="mig-manager", pod=pod
    )


def render_mig_manager(config: MigManagerConfig, stack: StackContext) -> tuple[DesiredObject, ...]:
    if config.owner != "gpuplan":
        return ()
    objects = _rbac(stack)
    if config.config.name is None:
        objects.append(_config_map(stack, DEFAULT_CONFIG_MAP, "config.yaml", mig_parted.DEFAULT_CONFIG))
    if config.gpu_clients_config.name is None:
        objects.append(
            _config_map(stack, DEFAULT_CLIENTS_MAP, "clients.yaml", mig_parted.DEFAULT_GPU_CLIENTS)
        )
    objects.append(_daemonset(config, stack))
    return tuple(objects)


class MigManager:
    """Module of the MIG manager component."""

    name: ClassVar[ComponentName] = "migManager"
    # after GFD, whose nvidia.com/mig.capable places it (its nodes are labelled once that gate passed), and
    # after the validator, whose pods a reconfiguration deletes (so that gate is judged first)
    depends_on: ClassVar[tuple[ComponentName, ...]] = ("gfd", "validator")
    writes_first: ClassVar[bool] = False
    config_model: ClassVar[type[BaseModel]] = MigManagerConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, MigManagerConfig)
        return render_mig_manager(config, stack)

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, MigManagerConfig)
        timeout = config.health_timeout_seconds
        applied = HealthCheck("mig-config", {"config": stack.mig_config, "timeoutSeconds": timeout})
        # "success" comes before the paused device plugin and GFD are back: wait until the plugin advertises
        # the new devices (an unshared plugin's; a shared one's resources are the device plugin's own gate)
        # and GFD labels the nodes again. Those are the other components' effects, so a mig-manager pod that
        # has long been Ready says nothing of them ("settled": false).
        advertised = (
            (
                HealthCheck(
                    "allocatable",
                    {"resource": "nvidia.com/gpu", "perGpu": 1, "timeoutSeconds": timeout, "settled": False},
                ),
            )
            if stack.owned("devicePlugin") and stack.sharing is None
            else ()
        )
        if stack.owned("gfd"):
            labels = {"labels": list(gfd.HEALTH_LABELS), "timeoutSeconds": timeout, "settled": False}
            advertised = (*advertised, HealthCheck("gfd-labels", labels))
        if config.owner == "gpuplan":
            return HealthCheck("rollout", common.rollout_check(stack, config, NAME)), applied, *advertised
        return (applied, *advertised) if config.owner == "external" else ()
