"""The NVIDIA Container Toolkit (``nvidia-container-toolkit-daemonset``, facts §3.2) and RuntimeClass
``nvidia``.

When gpuplan owns the toolkit it renders ServiceAccount, Role/Binding (the ``driver-validation`` init
container looks up the driver DaemonSet in the namespace), the DaemonSet that installs the toolkit and
configures the node's container runtime, and the cluster-scoped RuntimeClass ``nvidia`` (handler
``nvidia``) the operands run with. When the toolkit is ``external`` (installed on the host) it renders only
the RuntimeClass, and only when a component gpuplan owns names ``runtimeClassName: nvidia``: the host toolkit
provides the handler, but the RuntimeClass object is cluster configuration, and without it the API server
rejects those pods ("pod rejected: RuntimeClass "nvidia" not found"). ``toolkit.runtimeClass.create: false``
opts out (the object is then someone else's to create). The health checks expect the ``nvidia`` handler on
every node.

The runtime-specific env and mounts follow the operator's transforms for containerd, docker and CRI-O.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from gpuplan.modules import common, values
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

NAME = "nvidia-container-toolkit-daemonset"
ACCOUNT = "nvidia-container-toolkit"
RUNTIME_CLASS = "nvidia"
Runtime = Literal["containerd", "docker", "crio"]


class RuntimeClassSettings(values.Model):
    """The RuntimeClass ``nvidia`` (handler ``nvidia``) that gpuplan's operands run with."""

    create: bool = True
    """Manage the RuntimeClass object: always when gpuplan owns the toolkit; with an external toolkit, when a
    component gpuplan owns uses it. false: leave it to whoever manages the cluster's RuntimeClasses."""


class ToolkitConfig(ComponentConfig):
    """The NVIDIA Container Toolkit: configures the node's container runtime for GPUs."""

    version: str = Field(default="v1.20.1", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia/k8s", description=REPOSITORY_DOC)
    image: str = Field(default="container-toolkit", description=IMAGE_DOC)
    install_dir: str = Field(default="/usr/local/nvidia", pattern=values.ABSOLUTE_PATH.pattern)
    """Host folder the toolkit is installed into."""
    runtime: Runtime | None = None
    """Container runtime of the nodes; default: the one the nodes report (containerd when unknown)."""
    runtime_class: RuntimeClassSettings = Field(default_factory=RuntimeClassSettings)
    """The RuntimeClass nvidia: whether gpuplan manages it (see RuntimeClassSettings)."""


# runtime -> (config file, host config dir, drop-in file, host drop-in dir, socket, host socket dir)
RUNTIME_FILES: dict[Runtime, tuple[str, str, str | None, str | None, str, str]] = {
    "containerd": (
        "config.toml",
        "/etc/containerd",
        "99-nvidia.toml",
        "/etc/containerd/conf.d",
        "containerd.sock",
        "/run/containerd",
    ),
    "docker": ("daemon.json", "/etc/docker", None, None, "docker.sock", "/var/run"),
    "crio": (
        "config.toml",
        "/etc/crio",
        "99-nvidia.conf",
        "/etc/crio/crio.conf.d",
        "crio.sock",
        "/var/run/crio",
    ),
}


def _runtime_env(runtime: Runtime) -> list[Json]:
    config, _, drop_in, drop_in_dir, socket, _ = RUNTIME_FILES[runtime]
    variables = [env("RUNTIME", runtime), env("RUNTIME_CONFIG", f"/runtime/config-dir/{config}")]
    if drop_in is not None:
        variables += [
            env("RUNTIME_DROP_IN_CONFIG", f"/runtime/config-dir.d/{drop_in}"),
            env("RUNTIME_DROP_IN_CONFIG_HOST_PATH", f"{drop_in_dir}/{drop_in}"),
        ]
    variables.append(env("RUNTIME_SOCKET", f"/runtime/sock-dir/{socket}"))
    if runtime == "containerd":
        variables += [
            env("CONTAINERD_CONFIG", f"/runtime/config-dir/{config}"),
            env("CONTAINERD_SOCKET", f"/runtime/sock-dir/{socket}"),
            env("CONTAINERD_RUNTIME_CLASS", RUNTIME_CLASS),
        ]
    return variables


def _runtime_volumes(runtime: Runtime) -> tuple[list[Json], list[Json]]:
    _, config_dir, _, drop_in_dir, _, socket_dir = RUNTIME_FILES[runtime]
    mounts = [mount("runtime-config", "/runtime/config-dir/"), mount("runtime-socket", "/runtime/sock-dir/")]
    volumes = [host_path("runtime-config", config_dir), host_path("runtime-socket", socket_dir)]
    if drop_in_dir is not None:
        mounts.append(mount("runtime-drop-in-config", "/runtime/config-dir.d/"))
        volumes.append(host_path("runtime-drop-in-config", drop_in_dir, "DirectoryOrCreate"))
    return mounts, volumes


def _toolkit_env(config: ToolkitConfig, stack: StackContext, runtime: Runtime) -> list[Json]:
    variables = [
        env("ROOT", config.install_dir),
        env("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu"),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("TOOLKIT_PID_FILE", "/run/nvidia/toolkit/toolkit.pid"),
        # the operator's entrypoint sources the driver root from driver-ready; gpuplan knows the owner
        env("NVIDIA_DRIVER_ROOT", stack.driver_root()),
        *_runtime_env(runtime),
    ]
    if stack.cdi_enabled:
        variables += [
            env("CDI_ENABLED", "true"),
            env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false"),
            env("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"),
        ]
    if runtime == "crio":
        variables.append(env("CRIO_CONFIG_MODE", "config" if stack.cdi_enabled else "hook"))
    return variables


def _driver_validation(stack: StackContext) -> Json:
    return {
        "name": "driver-validation",
        "image": stack.validator_image,
        "imagePullPolicy": stack.validator_image_pull_policy,
        "command": ["sh", "-c"],
        "args": ["nvidia-validator"],
        "env": [
            env("WITH_WAIT", "true"),
            env("COMPONENT", "driver"),
            env_field("NODE_NAME", "spec.nodeName"),
            env_field("OPERATOR_NAMESPACE", "metadata.namespace"),
        ],
        "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
        "volumeMounts": [
            mount("driver-install-dir", "/run/nvidia/driver", propagation="HostToContainer"),
            mount("run-nvidia-validations", common.VALIDATIONS_DIR, propagation="Bidirectional"),
            mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
            mount("host-dev-char", "/host-dev-char"),
        ],
    }


def _daemonset(config: ToolkitConfig, stack: StackContext) -> DesiredObject:
    runtime: Runtime = config.runtime or stack.container_runtime
    runtime_mounts, runtime_volumes = _runtime_volumes(runtime)
    hooks = "/run/containers/oci/hooks.d" if runtime != "crio" else "/usr/share/containers/oci/hooks.d"
    main = common.main_container(
        config,
        {
            "name": "nvidia-container-toolkit-ctr",
            "image": config.image_ref(),
            "command": ["nvidia-toolkit"],
            "env": _toolkit_env(config, stack, runtime),
            "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
            "volumeMounts": [
                mount("toolkit-root", "/run/nvidia/toolkit"),
                mount("run-nvidia-validations", common.VALIDATIONS_DIR, propagation="Bidirectional"),
                mount("driver-install-dir", "/driver-root", propagation="HostToContainer"),
                mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
                mount("toolkit-install-dir", config.install_dir),
                mount("crio-hooks", hooks),
                mount("cdi-root", "/var/run/cdi"),
                *runtime_mounts,
            ],
        },
    )
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "hostPID": True,
        "initContainers": [_driver_validation(stack)],
        "containers": [main],
        "volumes": [
            host_path("toolkit-root", "/run/nvidia/toolkit", "DirectoryOrCreate"),
            host_path("run-nvidia-validations", common.VALIDATIONS_DIR, "DirectoryOrCreate"),
            host_path("driver-install-dir", "/run/nvidia/driver", "DirectoryOrCreate"),
            host_path("host-root", "/"),
            host_path("toolkit-install-dir", config.install_dir),
            host_path("crio-hooks", hooks),
            host_path("host-dev-char", "/dev/char"),
            host_path("cdi-root", "/var/run/cdi", "DirectoryOrCreate"),
            *runtime_volumes,
        ],
    }
    return common.daemonset(
        stack, "toolkit", config, name=NAME, labels={"app": NAME}, deploy_label="container-toolkit", pod=pod
    )


def _runtime_class(stack: StackContext) -> Json:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": common.metadata(stack, "toolkit", RUNTIME_CLASS, namespaced=False),
        "handler": RUNTIME_CLASS,
    }


OPERANDS: tuple[ComponentName, ...] = ("devicePlugin", "gfd", "dcgmExporter", "validator")


def _operands_need_runtime_class(config: ToolkitConfig, stack: StackContext) -> bool:
    """An external toolkit's RuntimeClass is rendered when an operand gpuplan owns runs with it."""
    return (
        config.runtime_class.create
        and common.runtime_class(stack) == RUNTIME_CLASS
        and any(stack.owned(component) for component in OPERANDS)
    )


class Toolkit:
    """Module of the container toolkit component."""

    name: ClassVar[ComponentName] = "toolkit"
    depends_on: ClassVar[tuple[ComponentName, ...]] = ("driver",)
    config_model: ClassVar[type[BaseModel]] = ToolkitConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, ToolkitConfig)
        if config.owner == "external":
            return (
                (common.desired(self.name, _runtime_class(stack)),)
                if _operands_need_runtime_class(config, stack)
                else ()
            )
        if config.owner != "gpuplan":
            return ()
        rules = [
            common.rule(["apps"], ["daemonsets"], ["get", "list", "watch"]),
            common.rule([""], ["pods"], ["get", "list", "watch"]),
        ]
        manifests = [
            common.service_account(stack, self.name, ACCOUNT),
            *common.role_and_binding(stack, self.name, ACCOUNT, rules, cluster=False),
        ]
        return (
            *(common.desired(self.name, m) for m in manifests),
            _daemonset(config, stack),
            common.desired(self.name, _runtime_class(stack)),
        )

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, ToolkitConfig)
        handler = HealthCheck(
            "runtime-handler",
            {
                "handler": RUNTIME_CLASS,
                "runtimeClass": RUNTIME_CLASS,
                "timeoutSeconds": config.health_timeout_seconds,
            },
        )
        if config.owner == "gpuplan":
            return HealthCheck("rollout", common.rollout_check(stack, config, NAME)), handler
        return (handler,) if config.owner == "external" else ()
