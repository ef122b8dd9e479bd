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


ENTRYPOINT = "nvidia-container-toolkit-entrypoint"
# runtime -> (top-level config file, drop-in config file, socket): gpu-operator v26.7.0
# controllers/object_controls.go getRuntimeConfigFiles / getRuntimeSocketFile (CRI-O: no socket)
RUNTIME_FILES: dict[Runtime, tuple[str, str | None, str | None]] = {
    "containerd": (
        "/etc/containerd/config.toml",
        "/etc/containerd/conf.d/99-nvidia.toml",
        "/run/containerd/containerd.sock",
    ),
    "docker": ("/etc/docker/daemon.json", None, "/var/run/docker.sock"),
    "crio": ("/etc/crio/config.toml", "/etc/crio/crio.conf.d/99-nvidia.conf", None),
}
CONFIG_ENV: dict[Runtime, str] = {
    "containerd": "CONTAINERD_CONFIG",
    "docker": "DOCKER_CONFIG",
    "crio": "CRIO_CONFIG",
}
SOCKET_ENV: dict[Runtime, str] = {"containerd": "CONTAINERD_SOCKET", "docker": "DOCKER_SOCKET"}


def _runtime_parts(runtime: Runtime) -> tuple[list[Json], list[Json], list[Json]]:
    """(env, mounts, volumes) of transformForRuntime / transformRuntimeConfigAndSocketMounts, in its order."""
    config, drop_in, socket = RUNTIME_FILES[runtime]
    variables = [env("RUNTIME", runtime)]
    if runtime == "containerd":
        variables.append(env("CONTAINERD_RUNTIME_CLASS", RUNTIME_CLASS))
    config_path = f"/runtime/config-dir/{config.rsplit('/', 1)[1]}"
    variables += [env("RUNTIME_CONFIG", config_path), env(CONFIG_ENV[runtime], config_path)]
    mounts = [mount(f"{runtime}-config", "/runtime/config-dir/")]
    volumes = [host_path(f"{runtime}-config", config.rsplit("/", 1)[0], "DirectoryOrCreate")]
    if drop_in is not None:
        variables += [
            env("RUNTIME_DROP_IN_CONFIG", f"/runtime/config-dir.d/{drop_in.rsplit('/', 1)[1]}"),
            env("RUNTIME_DROP_IN_CONFIG_HOST_PATH", drop_in),
        ]
        mounts.append(mount(f"{runtime}-drop-in-config", "/runtime/config-dir.d/"))
        volumes.append(host_path(f"{runtime}-drop-in-config", drop_in.rsplit("/", 1)[0], "DirectoryOrCreate"))
    if socket is not None:
        socket_path = f"/runtime/sock-dir/{socket.rsplit('/', 1)[1]}"
        variables += [env("RUNTIME_SOCKET", socket_path), env(SOCKET_ENV[runtime], socket_path)]
        mounts.append(mount(f"{runtime}-socket", "/runtime/sock-dir/"))
        volumes.append(host_path(f"{runtime}-socket", socket.rsplit("/", 1)[0]))
    return variables, mounts, volumes


def uses_entrypoint(stack: StackContext) -> bool:
    """The operator's entrypoint waits for driver-ready, which only the validator writes (see the device
    plugin's): without gpuplan's validator the toolkit starts directly, told the driver root (deliberate)."""
    return stack.owned("validator")


def _toolkit_env(stack: StackContext, runtime: Runtime) -> list[Json]:
    """TransformToolkit's env (controllers/object_controls.go, v26.7.0): the asset's, the CDI env, then the
    runtime's. The install folder is ROOT, as the operator's toolkit.installDir sets it."""
    variables = [
        env("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu"),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("TOOLKIT_PID_FILE", "/run/nvidia/toolkit/toolkit.pid"),
        env_field("NRI_NAMESPACE", "metadata.namespace"),
    ]
    if not uses_entrypoint(stack):
        variables.append(env("NVIDIA_DRIVER_ROOT", stack.driver_root()))
    if stack.cdi_enabled:
        variables += [
            env("CDI_ENABLED", "true"),
            env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false"),
            env("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"),
            env("CRIO_CONFIG_MODE", "config"),
        ]
    elif runtime == "crio":
        variables.append(env("CRIO_CONFIG_MODE", "hook"))
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
            env_field("OPERATOR_NAMESPACE", "metadata.namespace"),
        ],
        # transformValidationInitContainer adds runAsUser 0 to every validation init container
        "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}, "runAsUser": 0},
        "volumeMounts": [
            mount("driver-install-dir", "/run/nvidia/driver", propagation="HostToContainer"),
            mount("run-nvidia-validations", common.VALIDATIONS_DIR, propagation="Bidirectional"),
            mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
            mount("host-dev-char", "/host-dev-char"),
        ],
    }


def _daemonset(config: ToolkitConfig, stack: StackContext) -> DesiredObject:
    """gpu-operator v26.7.0 assets/state-container-toolkit/0500_daemonset.yaml after TransformToolkit."""
    runtime: Runtime = config.runtime or stack.container_runtime
    runtime_env, runtime_mounts, runtime_volumes = _runtime_parts(runtime)
    hooks = "/run/containers/oci/hooks.d" if runtime != "crio" else "/usr/share/containers/oci/hooks.d"
    entrypoint = uses_entrypoint(stack)
    command: Json = (
        {"command": ["/bin/sh", "-c"], "args": ["/bin/entrypoint.sh"]}
        if entrypoint
        else {"command": ["nvidia-toolkit"]}
    )
    main = common.main_container(
        config,
        {
            "name": "nvidia-container-toolkit-ctr",
            "image": config.image_ref(),
            **command,
            "env": [env("ROOT", config.install_dir), *_toolkit_env(stack, runtime), *runtime_env],
            "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
            "volumeMounts": [
                *(
                    [mount(ENTRYPOINT, "/bin/entrypoint.sh", read_only=True, sub_path="entrypoint.sh")]
                    if entrypoint
                    else []
                ),
                mount("toolkit-root", "/run/nvidia/toolkit"),
                mount("run-nvidia-validations", common.VALIDATIONS_DIR),
                mount("toolkit-install-dir", config.install_dir),
                mount("crio-hooks", "/usr/share/containers/oci/hooks.d"),
                mount("driver-install-dir", "/driver-root", propagation="HostToContainer"),
                mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
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
            *([common.script_volume(ENTRYPOINT)] if entrypoint else []),
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
    writes_first: ClassVar[bool] = True
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
        if uses_entrypoint(stack):
            manifests.append(
                common.script_config_map(stack, self.name, ENTRYPOINT, "entrypoint.sh", {"app": NAME})
            )
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
