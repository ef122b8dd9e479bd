"""The containerised NVIDIA driver (``nvidia-driver-daemonset``, facts §3.1, §7).

Renders ServiceAccount, ClusterRole/Binding and Role/Binding for k8s-driver-manager (it labels its node,
evicts or drains GPU pods cluster-wide and reads the operand DaemonSets in the namespace) and the DaemonSet:
init container ``k8s-driver-manager`` (``uninstall_driver``: pre-installed detection, operand pausing,
eviction, module unload), main container ``nvidia-driver-ctr``. The update strategy is always ``OnDelete``
(every pod-template change means a driver reload on the node; apply restarts pods node by node following
``upgradePolicy``). One driver pod per node is enforced with the operator's pod anti-affinity on
``app.kubernetes.io/component=nvidia-driver``.

The image tag is ``<version>-<osTag>`` (``nvcr.io/nvidia/driver:595.91.07-ubuntu24.04``); a digest is used
verbatim. The startup probe runs the operator's ``startup-probe.sh`` from its ConfigMap
``nvidia-driver-startup-probe`` (module loaded, ``nvidia-smi`` works); it writes ``.driver-ctr-ready``, which
the validator waits for.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

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
from gpuplan.modules.values import IntOrPercent, Model, check_version

NAME = "nvidia-driver-daemonset"
DRIVER_CONTAINER = "nvidia-driver-ctr"
DIGEST_ENV = "DRIVER_CONFIG_DIGEST"
_RELEASE = re.compile(r"^(\d+\.\d+(?:\.\d+)?)-")
ACCOUNT = "nvidia-driver"
READY_MARKERS = (
    "/run/nvidia/validations/.driver-ctr-ready",
    "/run/nvidia/validations/.driver-daemons-status",
)


class PodDeletion(Model):
    """How GPU pods are deleted from a node before its driver is replaced."""

    force: bool = False
    """Delete pods that are not managed by a controller too."""
    timeout_seconds: int = Field(default=300, ge=0)
    """How long to wait for the pods to go; 0 waits forever."""
    delete_empty_dir: bool = False
    """Delete pods that use emptyDir volumes (their data is lost)."""


class Drain(Model):
    """Whether and how a node is drained before its driver is replaced."""

    enable: bool = False
    """Drain the node (not just delete GPU pods)."""
    force: bool = False
    """Drain pods that are not managed by a controller too."""
    pod_selector: str = ""
    """Label selector of the pods to drain; empty: all."""
    timeout_seconds: int = Field(default=300, ge=0)
    """How long to wait for the drain; 0 waits forever."""
    delete_empty_dir: bool = False
    """Drain pods that use emptyDir volumes (their data is lost)."""


class UpgradePolicy(Model):
    """How apply rolls a driver change over the nodes (the operator's upgradePolicy, facts §7)."""

    max_parallel_upgrades: int = Field(default=1, ge=0)
    """Nodes upgraded at the same time; 0 means no limit."""
    max_unavailable: IntOrPercent = "25%"
    """Nodes that may be unavailable at once, a number or a percentage (rounded up)."""
    pod_deletion: PodDeletion = Field(default_factory=PodDeletion)
    """GPU pod deletion before the driver restarts."""
    drain: Drain = Field(default_factory=Drain)
    """Node drain before the driver restarts."""


class DriverManager(Model):
    """The k8s-driver-manager init container image."""

    repository: str = "nvcr.io/nvidia/cloud-native"
    """Image registry and path."""
    image: str = "k8s-driver-manager"
    """Image name."""
    version: str = "v0.12.0"
    """Image tag or digest."""

    @field_validator("version")
    @classmethod
    def _real_looking_version(cls, value: str) -> str:
        return check_version(value)

    def image_ref(self) -> str:
        separator = "@" if self.version.startswith("sha256:") else ":"
        return f"{self.repository}/{self.image}{separator}{self.version}"


class OperatorDigest(Model):
    """The GPU Operator's DRIVER_CONFIG_DIGEST of the driver it ran, and gpuplan's own digest of that same
    configuration (``gpuplan init --from-clusterpolicy`` reads both from the operator's driver DaemonSet)."""

    value: str = Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z]+$")
    """The operator's value (a decimal FNV-32a of its Go structs)."""
    config: str = Field(min_length=1, max_length=64, pattern=r"^[0-9a-f]+$")
    """gpuplan's digest of the configuration that value was computed for."""


class DriverConfig(ComponentConfig):
    """The NVIDIA GPU driver, installed by a privileged container on every GPU node."""

    DRIVER_STYLE_VERSION: ClassVar[bool] = True

    version: str = Field(default="595.91.07", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia", description=REPOSITORY_DOC)
    image: str = Field(default="driver", description=IMAGE_DOC)
    kernel_module_type: Literal["auto", "open", "proprietary"] = "auto"
    """Kernel modules: open (Turing and newer; required on Blackwell), proprietary (required before Turing) or
    auto (chosen per GPU and driver branch)."""
    upgrade_policy: UpgradePolicy = Field(default_factory=UpgradePolicy)
    """How a driver change is rolled over the nodes."""
    os_tag: str | None = Field(default=None, pattern=values.OS_TAG.pattern)
    """Driver image OS suffix, e.g. ubuntu24.04 or rhel9; default: the stack's (from the nodes' OS)."""
    manager: DriverManager = Field(default_factory=DriverManager)
    """The k8s-driver-manager image."""
    operator_digest: OperatorDigest | None = None
    """An adopted GPU Operator driver's DRIVER_CONFIG_DIGEST, rendered while gpuplan's own digest of the
    driver is still `config` (its pods then neither restart nor reinstall the driver); any change of the
    driver's configuration renders gpuplan's own digest instead."""

    def host_as_is(self) -> bool:
        """An external driver without a version in the spec: each node's host driver is taken as it is (a
        fleet grown over time runs several), never held to gpuplan's own default version."""
        return self.owner == "external" and self.explicit_version() is None

    def image_for(self, stack: StackContext) -> str:
        return self.image_ref(suffix=f"-{self.os_tag or stack.os_tag}")


# the drain settings of k8s-driver-manager's env in assets/state-driver/0500_daemonset.yaml (v26.7.0): the
# operator leaves them so and drains from its upgrade controller
_ASSET_DRAIN = Drain(timeout_seconds=0)


def _manager_env(config: DriverConfig, stack: StackContext) -> list[Json]:
    """In gpuplan's shape the manager drains by the spec's upgradePolicy; in the operator's it has the asset's
    settings, as under the operator: gpuplan's rollout drains by the upgradePolicy itself (drain.enable), as
    the operator's upgrade controller does, so the adopted template keeps its values."""
    drain = _ASSET_DRAIN if common.operator_shaped(stack) else config.upgrade_policy.drain
    return [
        env_field("NODE_NAME", "spec.nodeName"),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("ENABLE_GPU_POD_EVICTION", "true"),
        env("ENABLE_AUTO_DRAIN", str(drain.enable).lower()),
        env("DRAIN_USE_FORCE", str(drain.force).lower()),
        env("DRAIN_POD_SELECTOR_LABEL", drain.pod_selector),
        env("DRAIN_TIMEOUT_SECONDS", f"{drain.timeout_seconds}s"),
        env("DRAIN_DELETE_EMPTYDIR_DATA", str(drain.delete_empty_dir).lower()),
        env_field("OPERATOR_NAMESPACE", "metadata.namespace"),
    ]


def _driver_env(config: DriverConfig) -> list[Json]:
    variables = [
        env_field("NODE_NAME", "spec.nodeName"),
        env_field("NODE_IP", "status.hostIP"),
        env("KERNEL_MODULE_TYPE", config.kernel_module_type),
    ]
    if config.kernel_module_type == "open":
        variables.append(env("OPEN_KERNEL_MODULES_ENABLED", "true"))  # read by older driver images
    return variables


STARTUP_PROBE = "nvidia-driver-startup-probe"
STARTUP_PROBE_PATH = "/usr/local/bin/startup-probe.sh"


def _startup_probe() -> Json:
    """The operator's probe: its ``startup-probe.sh`` (module loaded, daemons Ready, ``nvidia-smi`` works)
    writes ``.driver-ctr-ready``, which the validator waits for."""
    return {
        "exec": {"command": ["sh", STARTUP_PROBE_PATH]},
        "initialDelaySeconds": 60,
        "failureThreshold": 120,
        "successThreshold": 1,
        "periodSeconds": 10,
        "timeoutSeconds": 60,
    }


# gpu-operator v26.7.0 assets/state-driver/0500_daemonset.yaml, in its order:
# (volume, host path, hostPath type)
VOLUMES: tuple[tuple[str, str, str | None], ...] = (
    ("run-nvidia", "/run/nvidia", "DirectoryOrCreate"),
    ("var-log", "/var/log", None),
    ("dev-log", "/dev/log", None),
    ("host-os-release", "/etc/os-release", None),
    ("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager", "DirectoryOrCreate"),
    ("run-nvidia-topologyd", "/run/nvidia-topologyd", "DirectoryOrCreate"),
    ("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", "DirectoryOrCreate"),
    ("run-mellanox-drivers", "/run/mellanox/drivers", "DirectoryOrCreate"),
    ("run-nvidia-validations", "/run/nvidia/validations", "DirectoryOrCreate"),
    ("host-root", "/", None),
    ("host-sys", "/sys", "Directory"),
    ("firmware-search-path", "/sys/module/firmware_class/parameters/path", None),
    ("host-sys-devices-system", "/sys/devices/system", "Directory"),
    ("nv-firmware", "/run/nvidia/driver/lib/firmware", "DirectoryOrCreate"),
)
DRIVER_MOUNTS: tuple[Json, ...] = (
    mount("run-nvidia", "/run/nvidia", propagation="Bidirectional"),
    mount("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager"),
    mount("run-nvidia-topologyd", "/run/nvidia-topologyd"),
    mount("var-log", "/var/log"),
    mount("dev-log", "/dev/log"),
    mount("host-os-release", "/host-etc/os-release", read_only=True),
    mount("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", propagation="HostToContainer"),
    mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation="HostToContainer"),
    mount("host-sys-devices-system", "/sys/devices/system"),
    mount("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
    mount("nv-firmware", "/lib/firmware"),
    mount("driver-startup-probe-script", STARTUP_PROBE_PATH, sub_path="startup-probe.sh"),
)
MANAGER_MOUNTS: tuple[Json, ...] = (
    mount("run-nvidia", "/run/nvidia", propagation="Bidirectional"),
    mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
    mount("host-sys", "/sys"),
    mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation="HostToContainer"),
)


def config_digest(manager: Json, driver: Json) -> str:
    """DRIVER_CONFIG_DIGEST: k8s-driver-manager and the driver container skip a reinstall when it matches the
    running install (the operator's fast path, internal/config/driver_config_digest.go, v26.7.0). The operator
    hashes its DriverInstallState with its own Go hash; gpuplan hashes the same inputs (images, command, args,
    plain env values) as canonical JSON (deliberate: the value differs, the meaning is the same)."""

    def plain_env(container: Json) -> list[list[str]]:
        # a variable without a value is "" (the server stores `value: ""` as no value): the digest of a
        # stored template is the digest of what was written
        return [
            [item["name"], item.get("value", "")]
            for item in container.get("env") or ()
            if "valueFrom" not in item
        ]

    state = {
        "driverImage": driver["image"],
        "driverManagerImage": manager["image"],
        "driverCommand": driver.get("command"),
        "driverArgs": driver.get("args"),
        "driverEnv": plain_env(driver),
        "managerEnv": plain_env(manager),
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def rendered_digest(config: DriverConfig, own: str) -> str:
    """The operator's digest while the configuration is the one it was taken with, else gpuplan's ``own``:
    the driver's fast path (skip the reinstall on a matching digest) stays right either way."""
    adopted = config.operator_digest
    return adopted.value if adopted is not None and adopted.config == own else own


def adopted_digest(daemonset: Mapping[str, Any]) -> OperatorDigest | None:
    """The :class:`OperatorDigest` of a live driver DaemonSet (the operator's): its DRIVER_CONFIG_DIGEST and
    gpuplan's digest of its containers without it; None without both containers or the variable."""
    pod = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = {
        c.get("name"): c for c in [*(pod.get("initContainers") or ()), *(pod.get("containers") or ())]
    }
    manager, driver = containers.get("k8s-driver-manager"), containers.get(DRIVER_CONTAINER)
    if manager is None or driver is None:
        return None
    value = next((e.get("value") for e in driver.get("env") or () if e.get("name") == DIGEST_ENV), None)
    if not value:
        return None

    def without_digest(container: Mapping[str, Any]) -> Json:
        return {**container, "env": [e for e in container.get("env") or () if e.get("name") != DIGEST_ENV]}

    own = config_digest(without_digest(manager), without_digest(driver))
    return OperatorDigest(value=str(value), config=own)


def _daemonset(config: DriverConfig, stack: StackContext) -> DesiredObject:
    manager = {
        "name": "k8s-driver-manager",
        "image": config.manager.image_ref(),
        "imagePullPolicy": config.image_pull_policy,
        "command": ["driver-manager"],
        "args": ["uninstall_driver"],
        "env": _manager_env(config, stack),
        "securityContext": dict(common.PRIVILEGED),
        "volumeMounts": [dict(item) for item in MANAGER_MOUNTS],
    }
    driver = common.main_container(
        config,
        {
            "name": DRIVER_CONTAINER,
            "image": config.image_for(stack),
            "command": ["nvidia-driver"],
            "args": ["init"],
            "env": _driver_env(config),
            "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
            "volumeMounts": [dict(item) for item in DRIVER_MOUNTS],
            "startupProbe": _startup_probe(),
            "lifecycle": {
                "preStop": {"exec": {"command": ["/bin/sh", "-c", "rm -f " + " ".join(READY_MARKERS)]}}
            },
        },
    )
    digest = env(DIGEST_ENV, rendered_digest(config, config_digest(manager, driver)))
    manager["env"] = [*manager["env"], digest]
    driver["env"] = [*driver["env"], digest]
    anti_affinity = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {
                                "key": "app.kubernetes.io/component",
                                "operator": "In",
                                "values": ["nvidia-driver"],
                            }
                        ]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    probe_volume = {
        **common.script_volume("driver-startup-probe-script"),
        "configMap": {"name": STARTUP_PROBE, "defaultMode": 0o755},
    }
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "hostPID": True,
        "affinity": anti_affinity,
        "initContainers": [manager],
        "containers": [driver],
        "volumes": [*(host_path(name, path, kind) for name, path, kind in VOLUMES), probe_volume],
    }
    labels = {"app": NAME, "app.kubernetes.io/component": "nvidia-driver", "nvidia.com/precompiled": "false"}
    return common.daemonset(
        stack,
        "driver",
        config,
        name=NAME,
        labels=labels,
        deploy_label="driver",
        pod=pod,
        on_delete=True,
        template_annotations={"kubectl.kubernetes.io/default-container": DRIVER_CONTAINER},
    )


def _startup_probe_config_map(stack: StackContext) -> Json:
    labels = {"app": NAME, "app.kubernetes.io/component": "nvidia-driver"}
    return common.script_config_map(stack, "driver", STARTUP_PROBE, "startup-probe.sh", labels)


def _rbac(stack: StackContext) -> list[Json]:
    cluster_rules = [
        common.rule([""], ["nodes"], ["get", "list", "watch", "patch", "update"]),
        common.rule([""], ["pods"], ["get", "list", "watch", "delete"]),
        common.rule([""], ["pods/eviction"], ["create"]),
        common.rule(["apps"], ["daemonsets"], ["get", "list", "watch"]),
    ]
    ns_rules = [
        common.rule([""], ["pods"], ["get", "list", "watch", "delete"]),
        common.rule(["apps"], ["daemonsets", "controllerrevisions"], ["get", "list", "watch"]),
    ]
    return [
        *common.role_and_binding(stack, "driver", ACCOUNT, cluster_rules, cluster=True),
        *common.role_and_binding(stack, "driver", ACCOUNT, ns_rules, cluster=False),
    ]


class Driver:
    """Module of the driver component."""

    name: ClassVar[ComponentName] = "driver"
    depends_on: ClassVar[tuple[ComponentName, ...]] = ()
    writes_first: ClassVar[bool] = True
    config_model: ClassVar[type[BaseModel]] = DriverConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, DriverConfig)
        if config.owner != "gpuplan":
            return ()
        manifests = [
            common.service_account(stack, self.name, ACCOUNT),
            *_rbac(stack),
            _startup_probe_config_map(stack),
        ]
        return (*(common.desired(self.name, m) for m in manifests), _daemonset(config, stack))

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, DriverConfig)
        timeout = config.health_timeout_seconds
        if config.owner == "gpuplan":
            return (
                HealthCheck("rollout", {**common.rollout_check(stack, config, NAME), "strategy": "OnDelete"}),
                HealthCheck("driver-version", {"version": config.version, "timeoutSeconds": timeout}),
            )
        if config.owner == "external":
            # an external driver without a version in the spec only has to be present
            return (
                HealthCheck(
                    "driver-version", {"version": config.explicit_version(), "timeoutSeconds": timeout}
                ),
            )
        return ()


def driver_release(manifest: Mapping[str, Any]) -> str | None:
    """The driver release a driver DaemonSet installs: ``595.91.07`` of ``nvcr.io/nvidia/driver:595.91.07-
    ubuntu24.04``; None for a digest or a precompiled image (it names only the branch)."""
    spec = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    container = next((c for c in spec.get("containers") or () if c.get("name") == DRIVER_CONTAINER), None)
    image = str((container or {}).get("image") or "")
    if "@" in image or ":" not in image.rsplit("/", 1)[-1]:
        return None
    match = _RELEASE.match(image.rsplit(":", 1)[1])
    return match.group(1) if match and match.group(1).count(".") == 2 else None
