"""The operator validator (``nvidia-operator-validator``, facts §3.3 and §8).

Its init containers run in order driver → toolkit → cuda → plugin validation and write the marker files in
``/run/nvidia/validations`` that hold the other operands back (facts §2.3); the main container only sleeps.
``plugin-validation`` is dropped when the device plugin's owner is ``none`` (nothing would ever advertise
GPUs). Renders ServiceAccount, Role/Binding (the cuda and plugin checks create and delete their workload pods
and look up the validator DaemonSet that owns them), ClusterRole/Binding (nodes, for GPU capacity), the
DaemonSet, and the GPUStack CRD the stack's status is written to (:mod:`gpuplan.modules.stack_status`). The
image is the operator's own (``nvcr.io/nvidia/gpu-operator``), since v25.10.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from gpuplan.modules import common, stack_status
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

NAME = "nvidia-operator-validator"
ACCOUNT = "nvidia-operator-validator"
ROOT: Json = {"privileged": True, "runAsUser": 0}


class ValidatorConfig(ComponentConfig):
    """The validator: checks driver, toolkit, CUDA and device plugin on every GPU node."""

    version: str = Field(default="v26.7.0", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia", description=REPOSITORY_DOC)
    image: str = Field(default="gpu-operator", description=IMAGE_DOC)


# Source of every field below: gpu-operator v26.7.0 assets/state-operator-validation/0500_daemonset.yaml and
# controllers/object_controls.go (TransformValidator, TransformValidatorComponent: every init container gets
# the validator image and runAsUser 0; cuda and plugin also VALIDATOR_IMAGE, its pull policy and runtime
# class).
_DRIVER_MOUNTS = (
    mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
    mount("driver-install-dir", "/run/nvidia/driver", propagation="HostToContainer"),
    mount("run-nvidia-validations", common.VALIDATIONS_DIR, propagation="Bidirectional"),
    mount("host-dev-char", "/host-dev-char"),
)
_MARKER_MOUNTS = (mount("run-nvidia-validations", common.VALIDATIONS_DIR, propagation="Bidirectional"),)
_DOWNWARD = (env_field("NODE_NAME", "spec.nodeName"), env_field("OPERATOR_NAMESPACE", "metadata.namespace"))


def _check(
    name: str, variables: list[Json], stack: StackContext, *, mounts: tuple[Json, ...], security: Json
) -> Json:
    return {
        "name": name,
        "image": stack.validator_image,
        "imagePullPolicy": stack.validator_image_pull_policy,
        "command": ["sh", "-c"],
        "args": ["nvidia-validator"],
        "env": variables,
        "securityContext": {**security, "runAsUser": 0},
        "volumeMounts": [dict(item) for item in mounts],
    }


def _workload_env(stack: StackContext) -> list[Json]:
    """What the cuda and plugin checks need to start their workload pod."""
    variables = [
        env("VALIDATOR_IMAGE", stack.validator_image),
        env("VALIDATOR_IMAGE_PULL_POLICY", stack.validator_image_pull_policy),
    ]
    if (runtime_class := common.runtime_class(stack)) is not None:
        variables.append(env("VALIDATOR_RUNTIME_CLASS", runtime_class))
    return variables


def _checks(stack: StackContext) -> list[Json]:
    selinux: Json = {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    checks = [
        _check(
            "driver-validation",
            [env("WITH_WAIT", "true"), env("COMPONENT", "driver"), _DOWNWARD[1]],
            stack,
            mounts=_DRIVER_MOUNTS,
            security=selinux,
        ),
        _check(
            "toolkit-validation",
            [env("NVIDIA_VISIBLE_DEVICES", "all"), env("WITH_WAIT", "false"), env("COMPONENT", "toolkit")],
            stack,
            mounts=_MARKER_MOUNTS,
            security=common.PRIVILEGED,
        ),
        _check(
            "cuda-validation",
            [env("WITH_WAIT", "false"), env("COMPONENT", "cuda"), *_DOWNWARD, *_workload_env(stack)],
            stack,
            mounts=_MARKER_MOUNTS,
            security=common.PRIVILEGED,
        ),
    ]
    if stack.owners.get("devicePlugin", "gpuplan") != "none":
        plugin_env = [
            env("COMPONENT", "plugin"),
            env("WITH_WAIT", "false"),
            env("WITH_WORKLOAD", "false"),
            env("MIG_STRATEGY", stack.mig_strategy),
            *_DOWNWARD,
            *_workload_env(stack),
        ]
        checks.append(
            _check("plugin-validation", plugin_env, stack, mounts=_MARKER_MOUNTS, security=common.PRIVILEGED)
        )
    return checks


def _daemonset(config: ValidatorConfig, stack: StackContext) -> DesiredObject:
    main = common.main_container(
        config,
        {
            "name": "nvidia-operator-validator",
            "image": config.image_ref(),
            "command": ["sh", "-c"],
            "args": ["echo all validations are successful; while true; do sleep 86400; done"],
            "securityContext": dict(ROOT),
            "lifecycle": {
                "preStop": {"exec": {"command": ["sh", "-c", f"rm -f {common.VALIDATIONS_DIR}/*-ready"]}}
            },
            "volumeMounts": [dict(item) for item in _MARKER_MOUNTS],
        },
    )
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "initContainers": _checks(stack),
        "containers": [main],
        "volumes": [
            host_path("run-nvidia-validations", common.VALIDATIONS_DIR, "DirectoryOrCreate"),
            host_path("driver-install-dir", "/run/nvidia/driver"),
            host_path("host-root", "/"),
            host_path("host-dev-char", "/dev/char"),
        ],
    }
    if (runtime_class := common.runtime_class(stack)) is not None:
        pod["runtimeClassName"] = runtime_class
    labels = {"app": NAME, "app.kubernetes.io/part-of": "gpu-operator"}
    return common.daemonset(
        stack, "validator", config, name=NAME, labels=labels, deploy_label="operator-validator", pod=pod
    )


class Validator:
    """Module of the validator component."""

    name: ClassVar[ComponentName] = "validator"
    depends_on: ClassVar[tuple[ComponentName, ...]] = ("driver", "toolkit", "devicePlugin")
    writes_first: ClassVar[bool] = False
    config_model: ClassVar[type[BaseModel]] = ValidatorConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, ValidatorConfig)
        if config.owner != "gpuplan":
            return ()
        ns_rules = [
            common.rule([""], ["pods"], ["get", "list", "watch", "create", "delete"]),
            common.rule(["apps"], ["daemonsets"], ["get", "list", "watch"]),
        ]
        cluster_rules = [common.rule([""], ["nodes"], ["get", "list", "watch"])]
        manifests = [
            common.service_account(stack, self.name, ACCOUNT),
            *common.role_and_binding(stack, self.name, ACCOUNT, ns_rules, cluster=False),
            *common.role_and_binding(stack, self.name, ACCOUNT, cluster_rules, cluster=True),
        ]
        return (
            *(common.desired(self.name, m) for m in manifests),
            _daemonset(config, stack),
            stack_status.crd(stack, self.name),
        )

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, ValidatorConfig)
        ready = HealthCheck(
            "validator-ready",
            {
                "selector": f"app={NAME}",
                "namespace": stack.namespace,
                "timeoutSeconds": config.health_timeout_seconds,
            },
        )
        if config.owner == "gpuplan":
            return HealthCheck("rollout", common.rollout_check(stack, config, NAME)), ready
        return (
            (
                HealthCheck(
                    "validator-ready",
                    {"selector": f"app={NAME}", "timeoutSeconds": config.health_timeout_seconds},
                ),
            )
            if config.owner == "external"
            else ()
        )
