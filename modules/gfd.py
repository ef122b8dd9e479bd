"""GPU Feature Discovery (``gpu-feature-discovery``, facts §3.5): labels each GPU node (facts §4).

Renders ServiceAccount, ClusterRole/Binding (GFD updates its node's labels; config-manager reads them),
Role/Binding for NFD ``NodeFeature`` objects in the stack namespace (GFD's default output path), and the
DaemonSet. GFD shares the device plugin's config (facts §5.3), so with a device plugin config it gets the
same config-manager containers, pointed at the device plugin's ConfigMap.
"""

from __future__ import annotations

from typing import ClassVar

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
from gpuplan.modules.device_plugin import config_manager_containers
from gpuplan.modules.values import SharingConfig

NAME = "gpu-feature-discovery"
ACCOUNT = "nvidia-gpu-feature-discovery"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
# The labels apply waits for: GFD has run on the node and read the GPU and the driver.
HEALTH_LABELS = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.family",
    "nvidia.com/cuda.driver-version.full",
)


class GfdConfig(ComponentConfig):
    """GPU Feature Discovery: writes nvidia.com/gpu.* and nvidia.com/cuda.* node labels."""

    version: str = Field(default="v0.20.1", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia", description=REPOSITORY_DOC)
    image: str = Field(default="k8s-device-plugin", description=IMAGE_DOC)
    sleep_interval: str = Field(default="60s", pattern=values.DURATION.pattern)
    """Time between two labelling passes (GFD_SLEEP_INTERVAL)."""


def render_gfd(
    config: GfdConfig, stack: StackContext, sharing: SharingConfig | None
) -> tuple[DesiredObject, ...]:
    """GFD's objects; ``sharing`` is the device plugin's config (GFD labels replicas and sharing strategy)."""
    if config.owner != "gpuplan":
        return ()
    component = "gfd"
    objects = [common.desired(component, common.service_account(stack, component, ACCOUNT))]
    cluster_rules = [common.rule([""], ["nodes"], ["get", "list", "watch", "update", "patch"])]
    ns_rules = [
        common.rule(
            ["nfd.k8s-sigs.io"],
            ["nodefeatures"],
            ["get", "list", "watch", "create", "update", "patch", "delete"],
        )
    ]
    objects += [
        common.desired(component, m)
        for m in (
            *common.role_and_binding(stack, component, ACCOUNT, cluster_rules, cluster=True),
            *common.role_and_binding(stack, component, ACCOUNT, ns_rules, cluster=False),
        )
    ]
    objects.append(_daemonset(config, stack, sharing))
    return tuple(objects)


def _daemonset(config: GfdConfig, stack: StackContext, sharing: SharingConfig | None) -> DesiredObject:
    image = config.image_ref()
    init, sidecars, config_volumes = config_manager_containers(sharing, image, config.image_pull_policy, NAME)
    variables = [
        env("GFD_SLEEP_INTERVAL", config.sleep_interval),
        env("GFD_FAIL_ON_INIT_ERROR", "true"),
        env_field("NAMESPACE", "metadata.namespace"),
        env_field("NODE_NAME", "spec.nodeName"),
        env_field("POD_NAME", "metadata.name"),
    ]
    # gpu-operator v26.7.0 assets/gpu-feature-discovery/0500_daemonset.yaml: the main container mounts no
    # /run/nvidia (only toolkit-validation reads the marker through it); TransformGPUDiscoveryPlugin appends
    # the config file (handleDevicePluginConfig) before the MIG env (applyMIGConfiguration).
    mounts = [mount("output-dir", FEATURES_DIR), mount("host-sys", "/sys", read_only=True)]
    if sharing is not None:
        variables.append(env("CONFIG_FILE", "/config/config.yaml"))
        mounts.append(mount("config", "/config"))
    variables += common.mig_env(stack)
    main = common.main_container(
        config,
        {
            "name": "gpu-feature-discovery",
            "image": image,
            "command": ["gpu-feature-discovery"],
            "env": variables,
            "securityContext": dict(common.PRIVILEGED),
            "volumeMounts": mounts,
        },
    )
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "initContainers": common.toolkit_validation_init(stack, via_run_nvidia=True) + init,
        "containers": [main, *sidecars],
        "volumes": [
            host_path("output-dir", FEATURES_DIR),
            host_path("host-sys", "/sys"),
            host_path("run-nvidia", "/run/nvidia", "Directory"),
            *config_volumes,
        ],
    }
    if sidecars:
        pod["shareProcessNamespace"] = True
    if (runtime_class := common.runtime_class(stack)) is not None:
        pod["runtimeClassName"] = runtime_class
    if not pod["initContainers"]:
        del pod["initContainers"]
    labels = {"app": NAME, "app.kubernetes.io/part-of": "nvidia-gpu"}
    return common.daemonset(
        stack, "gfd", config, name=NAME, labels=labels, deploy_label="gpu-feature-discovery", pod=pod
    )


class Gfd:
    """Module of the GPU Feature Discovery component."""

    name: ClassVar[ComponentName] = "gfd"
    depends_on: ClassVar[tuple[ComponentName, ...]] = ("devicePlugin",)
    writes_first: ClassVar[bool] = False
    config_model: ClassVar[type[BaseModel]] = GfdConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, GfdConfig)
        return render_gfd(config, stack, stack.sharing)

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, GfdConfig)
        labels = HealthCheck(
            "gfd-labels", {"labels": list(HEALTH_LABELS), "timeoutSeconds": config.health_timeout_seconds}
        )
        if config.owner == "gpuplan":
            return HealthCheck("rollout", common.rollout_check(stack, config, NAME)), labels
        return (labels,) if config.owner == "external" else ()
